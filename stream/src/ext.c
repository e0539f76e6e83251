/* Protocol extensions: negotiation header, extension payloads, stream states (stream/ext.h). */
#include <stream/err.h>
#include <stream/ext.h>

#include <string.h>

static const struct {
	const char *name;
	uint32_t bit;
} cap_names[] = {
        {"flow", ST_CAP_FLOW},
        {"half-close", ST_CAP_HALF_CLOSE},
        {"error", ST_CAP_ERROR},
        {"binary", ST_CAP_BINARY},
        {"tcp", ST_CAP_TCP},
        {"raw-response", ST_CAP_RAW_RESPONSE},
        {"opened", ST_CAP_OPENED},
        {"peer", ST_CAP_PEER},
        {"reconnect", ST_CAP_RECONNECT},
};

/* The smallest window worth announcing: below it, WINDOW messages would outnumber DATA. */
#define EXT_MIN_WINDOW_BYTES 1024u

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

static bool replica_byte(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

/* [s, e) trimmed of spaces. */
static void trim(const char **s, const char **e)
{
	while (*s < *e && is_space(**s))
		(*s)++;
	while (*e > *s && is_space((*e)[-1]))
		(*e)--;
}

static bool eq(const char *s, const char *e, const char *lit)
{
	size_t n = strlen(lit);
	return (size_t)(e - s) == n && memcmp(s, lit, n) == 0;
}

static int parse_u32(const char *s, const char *e, uint32_t *out)
{
	if (s == e)
		return -EBADMSG;
	uint64_t v = 0;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -EBADMSG;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > UINT32_MAX)
			return -EBADMSG;
	}
	*out = (uint32_t)v;
	return 0;
}

static uint32_t parse_caps(const char *s, const char *e)
{
	uint32_t caps = 0;
	while (s < e) {
		const char *c = memchr(s, ',', (size_t)(e - s));
		const char *ie = c ? c : e;
		const char *is = s;
		trim(&is, &ie);
		for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
			if (eq(is, ie, cap_names[i].name))
				caps |= cap_names[i].bit;
		s = c ? c + 1 : e;
	}
	return caps;
}

int st_ext_offer_parse(const char *value, size_t len, struct st_ext_offer *out)
{
	if (len > ST_EXT_HEADER_MAX_BYTES)
		return -EMSGSIZE;
	struct st_ext_offer o = {0};
	const char *s = value, *end = value + len;
	while (s < end) {
		const char *semi = memchr(s, ';', (size_t)(end - s));
		const char *pe = semi ? semi : end;
		const char *ps = s;
		s = semi ? semi + 1 : end;
		trim(&ps, &pe);
		if (ps == pe)
			continue;
		const char *eqs = memchr(ps, '=', (size_t)(pe - ps));
		if (eqs == NULL)
			return -EBADMSG;
		const char *ks = ps, *ke = eqs, *vs = eqs + 1, *ve = pe;
		trim(&ks, &ke);
		trim(&vs, &ve);
		if (ks == ke)
			return -EBADMSG;
		if (eq(ks, ke, "v")) {
			if (parse_u32(vs, ve, &o.version) < 0 || o.version == 0)
				return -EBADMSG;
		} else if (eq(ks, ke, "caps")) {
			o.caps = parse_caps(vs, ve);
		} else if (eq(ks, ke, "window")) {
			if (parse_u32(vs, ve, &o.window_bytes) < 0 ||
			    o.window_bytes > ST_MAX_STREAM_WINDOW_BYTES ||
			    o.window_bytes < EXT_MIN_WINDOW_BYTES)
				return -EBADMSG;
		} else if (eq(ks, ke, "replica")) {
			size_t n = (size_t)(ve - vs);
			if (n > ST_MAX_REPLICA_ID_BYTES)
				return -EBADMSG;
			for (size_t i = 0; i < n; i++)
				if (!replica_byte(vs[i]))
					return -EBADMSG;
			/* a repeated key replaces the whole value, stale tail included */
			memset(o.replica_id, 0, sizeof o.replica_id);
			memcpy(o.replica_id, vs, n);
		} else if (eq(ks, ke, "pong-within")) {
			if (parse_u32(vs, ve, &o.pong_within_ms) < 0 ||
			    o.pong_within_ms < ST_EXT_PONG_WITHIN_MIN_MS ||
			    o.pong_within_ms > ST_EXT_PONG_WITHIN_MAX_MS)
				return -EBADMSG;
		}
		/* other keys: ignored, for newer peers */
	}
	if (o.version == 0)
		return -EBADMSG;
	*out = o;
	return 0;
}

/* Appends @s to out[*len..cap); false when it does not fit. */
static bool append(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
	if (n > cap - *len)
		return false;
	memcpy(out + *len, s, n);
	*len += n;
	return true;
}

static bool append_u32(char *out, size_t cap, size_t *len, uint32_t v)
{
	char d[10];
	size_t n = sizeof d;
	do {
		d[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return append(out, cap, len, d + n, sizeof d - n);
}

ssize_t st_ext_offer_format(char *out, size_t cap, const struct st_ext_offer *offer)
{
	size_t len = 0;
	bool ok = append(out, cap, &len, "v=", 2) && append_u32(out, cap, &len, offer->version);
	if (ok && (offer->caps & ST_CAP_KNOWN))
		ok = append(out, cap, &len, "; caps=", 7);
	bool first = true;
	for (size_t i = 0; ok && i < sizeof cap_names / sizeof cap_names[0]; i++) {
		if (!(offer->caps & cap_names[i].bit))
			continue;
		ok = (first || append(out, cap, &len, ",", 1)) &&
		     append(out, cap, &len, cap_names[i].name, strlen(cap_names[i].name));
		first = false;
	}
	if (ok && offer->window_bytes)
		ok = append(out, cap, &len, "; window=", 9) &&
		     append_u32(out, cap, &len, offer->window_bytes);
	if (ok && offer->replica_id[0])
		ok = append(out, cap, &len, "; replica=", 10) &&
		     append(out, cap, &len, offer->replica_id, strlen(offer->replica_id));
	if (ok && offer->pong_within_ms)
		ok = append(out, cap, &len, "; pong-within=", 14) &&
		     append_u32(out, cap, &len, offer->pong_within_ms);
	return ok ? (ssize_t)len : -EMSGSIZE;
}

int st_ext_negotiate(const struct st_ext_offer *ours, const struct st_ext_offer *theirs,
                     struct st_ext_offer *agreed)
{
	*agreed = *ours;
	agreed->version = ours->version < theirs->version ? ours->version : theirs->version;
	agreed->caps = ours->caps & theirs->caps;
	return 0;
}

int st_ext_check_echo(const struct st_ext_offer *ours, const struct st_ext_offer *echo)
{
	if (echo->version > ours->version || (echo->caps & ~ours->caps) != 0)
		return -EPROTO;
	return 0;
}

/* ---- payloads -------------------------------------------------------------------------------- */

struct wr {
	uint8_t *p;
	size_t cap, len;
	bool overflow;
};

static void wr_uvarint(struct wr *w, uint64_t v)
{
	uint8_t tmp[ST_MAX_UVARINT_BYTES];
	size_t n = st_uvarint_encode(tmp, v);
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = true;
		return;
	}
	memcpy(w->p + w->len, tmp, n);
	w->len += n;
}

static void wr_bytes(struct wr *w, const void *s, size_t n)
{
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = true;
		return;
	}
	if (n)
		memcpy(w->p + w->len, s, n);
	w->len += n;
}

static ssize_t wr_done(const struct wr *w)
{
	return w->overflow || w->len > ST_MAX_EXT_PAYLOAD_BYTES ? -EMSGSIZE : (ssize_t)w->len;
}

/* A decoded message's payload is NULL when empty; decoders read from here instead, so no
 * arithmetic is ever done on a null pointer. */
static const uint8_t no_payload[1];

/* Reads a uvarint; a payload cut inside one is malformed (payloads arrive whole). */
static int rd_uvarint(const uint8_t *p, size_t len, size_t *pos, uint64_t *v)
{
	ssize_t n = st_uvarint_decode(p + *pos, len - *pos, v);
	if (n <= 0)
		return -EBADMSG;
	*pos += (size_t)n;
	return 0;
}

ssize_t st_ext_hello_encode(uint8_t *out, size_t cap, const struct st_ext_hello *h)
{
	if (h->replica_id_len > ST_MAX_REPLICA_ID_BYTES)
		return -EMSGSIZE;
	struct wr w = {.p = out, .cap = cap};
	wr_uvarint(&w, h->version);
	wr_uvarint(&w, h->caps);
	wr_uvarint(&w, h->window_bytes);
	wr_uvarint(&w, h->replica_id_len);
	wr_bytes(&w, h->replica_id, h->replica_id_len);
	return wr_done(&w);
}

int st_ext_hello_decode(const uint8_t *p, size_t len, struct st_ext_hello *out)
{
	if (p == NULL)
		p = no_payload;
	if (len > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	size_t pos = 0;
	uint64_t version, caps, window, rlen;
	if (rd_uvarint(p, len, &pos, &version) < 0 || rd_uvarint(p, len, &pos, &caps) < 0 ||
	    rd_uvarint(p, len, &pos, &window) < 0 || rd_uvarint(p, len, &pos, &rlen) < 0)
		return -EBADMSG;
	if (version == 0 || window > ST_MAX_STREAM_WINDOW_BYTES)
		return -EBADMSG;
	if (rlen > ST_MAX_REPLICA_ID_BYTES)
		return -EMSGSIZE;
	if (rlen != len - pos)
		return -EBADMSG; /* cut short, or trailing bytes */
	out->version = version;
	out->caps = caps;
	out->window_bytes = window;
	out->replica_id = (const char *)p + pos;
	out->replica_id_len = (size_t)rlen;
	return 0;
}

ssize_t st_ext_window_encode(uint8_t *out, size_t cap, uint64_t increment)
{
	if (increment == 0 || increment > ST_MAX_STREAM_WINDOW_BYTES)
		return -EINVAL;
	struct wr w = {.p = out, .cap = cap};
	wr_uvarint(&w, increment);
	return wr_done(&w);
}

int st_ext_window_decode(const uint8_t *p, size_t len, uint64_t *increment)
{
	if (p == NULL)
		p = no_payload;
	size_t pos = 0;
	uint64_t v;
	if (rd_uvarint(p, len, &pos, &v) < 0 || pos != len || v == 0 ||
	    v > ST_MAX_STREAM_WINDOW_BYTES)
		return -EBADMSG;
	*increment = v;
	return 0;
}

ssize_t st_ext_error_encode(uint8_t *out, size_t cap, const struct st_ext_error *e)
{
	if (e->reason_len > ST_MAX_ERROR_REASON_BYTES)
		return -EMSGSIZE;
	struct wr w = {.p = out, .cap = cap};
	wr_uvarint(&w, e->code);
	wr_bytes(&w, e->reason, e->reason_len);
	return wr_done(&w);
}

int st_ext_error_decode(const uint8_t *p, size_t len, struct st_ext_error *out)
{
	if (p == NULL)
		p = no_payload;
	if (len > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	size_t pos = 0;
	uint64_t code;
	if (rd_uvarint(p, len, &pos, &code) < 0)
		return -EBADMSG;
	if (len - pos > ST_MAX_ERROR_REASON_BYTES)
		return -EMSGSIZE;
	out->code = code;
	out->reason = (const char *)p + pos;
	out->reason_len = len - pos;
	return 0;
}

/* Target names: an allow-list entry name, [a-z0-9.-] like a DNS name, at most 253 bytes. */
#define TCP_TARGET_MAX_BYTES 253u

static bool target_ok(const char *s, size_t n)
{
	if (n > TCP_TARGET_MAX_BYTES)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
		      s[i] == '-'))
			return false;
	return true;
}

ssize_t st_ext_tcp_connect_encode(uint8_t *out, size_t cap, const struct st_ext_tcp_connect *t)
{
	if (t->port == 0 || t->port > 65535 || !target_ok(t->target, t->target_len))
		return -EINVAL;
	struct wr w = {.p = out, .cap = cap};
	wr_uvarint(&w, t->port);
	wr_bytes(&w, t->target, t->target_len);
	return wr_done(&w);
}

int st_ext_tcp_connect_decode(const uint8_t *p, size_t len, struct st_ext_tcp_connect *out)
{
	if (p == NULL)
		p = no_payload;
	if (len > ST_MAX_EXT_PAYLOAD_BYTES)
		return -EMSGSIZE;
	size_t pos = 0;
	uint64_t port;
	if (rd_uvarint(p, len, &pos, &port) < 0 || port == 0 || port > 65535)
		return -EBADMSG;
	if (!target_ok((const char *)p + pos, len - pos))
		return -EBADMSG;
	out->port = port;
	out->target = (const char *)p + pos;
	out->target_len = len - pos;
	return 0;
}

static const struct {
	const char *name;
	int http;
} error_codes[] = {
        [ST_EXT_ERR_INTERNAL] = {"internal", 500},
        [ST_EXT_ERR_REFUSED] = {"refused", 403},
        [ST_EXT_ERR_UNREACHABLE] = {"unreachable", 502},
        [ST_EXT_ERR_TIMEOUT] = {"timeout", 504},
        [ST_EXT_ERR_NOT_FOUND] = {"not found", 404},
        [ST_EXT_ERR_LIMIT] = {"limit", 503},
        [ST_EXT_ERR_PROTOCOL] = {"protocol", 502},
        [ST_EXT_ERR_BAD_REQUEST] = {"bad request", 400},
};

int st_ext_error_http_status(uint64_t code)
{
	if (code >= 1 && code < sizeof error_codes / sizeof error_codes[0])
		return error_codes[code].http;
	return 502;
}

const char *st_ext_error_name(uint64_t code)
{
	if (code >= 1 && code < sizeof error_codes / sizeof error_codes[0])
		return error_codes[code].name;
	return "unknown";
}

/* ---- stream states ---------------------------------------------------------------------------- */

/* Table cell: the next state, or X (a received message not allowed: -EPROTO) or B (our own send
 * not allowed: -EINVAL). Rows are states, columns events in enum order. */
#define X -1
#define B -2
#define O ST_STREAM_S_OPEN
#define L ST_STREAM_S_HALF_CLOSED_LOCAL
#define R ST_STREAM_S_HALF_CLOSED_REMOTE
#define C ST_STREAM_S_CLOSED
static const signed char transitions[5][ST_STREAM_E_COUNT] = {
        /*           s_conn r_conn s_data r_data s_half r_half s_rm r_rm s_err r_err */
        /* IDLE   */ {O, O, B, X, B, X, B, X, B, X},
        /* OPEN   */ {B, X, O, O, L, R, C, C, C, C},
        /* H_LOC  */ {B, X, B, L, B, C, C, C, C, C},
        /* H_REM  */ {B, X, R, X, C, X, C, C, C, C},
        /* CLOSED */ {B, X, B, C, B, C, B, C, B, C},
};
#undef X
#undef B
#undef O
#undef L
#undef R
#undef C

int st_stream_next(enum st_stream_state state, enum st_stream_event event,
                   enum st_stream_state *next)
{
	if ((unsigned)state > ST_STREAM_S_CLOSED || (unsigned)event >= ST_STREAM_E_COUNT)
		return -EINVAL;
	int to = transitions[state][event];
	if (to == -1)
		return -EPROTO;
	if (to == -2)
		return -EINVAL;
	*next = (enum st_stream_state)to;
	return 0;
}

const char *st_stream_state_name(enum st_stream_state state)
{
	static const char *const names[] = {"idle", "open", "half-closed-local",
	                                    "half-closed-remote", "closed"};
	return (unsigned)state <= ST_STREAM_S_CLOSED ? names[state] : "invalid";
}

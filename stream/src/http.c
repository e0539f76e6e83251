/*
 * HTTP/1.x head parsing (stream/http.h).
 *
 * The parser works line by line: each complete line is validated as soon as it is there, so a
 * malformed head is refused early instead of after ST_MAX_HTTP_HEAD_BYTES of buffering, while
 * every proper prefix of a valid head still returns 0.
 */
#include <stream/err.h>
#include <stream/http.h>

#include <string.h>

/* RFC 9110 tchar. */
static bool is_tchar(uint8_t c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	switch (c) {
	case '!':
	case '#':
	case '$':
	case '%':
	case '&':
	case '\'':
	case '*':
	case '+':
	case '-':
	case '.':
	case '^':
	case '_':
	case '`':
	case '|':
	case '~':
		return true;
	default:
		return false;
	}
}

/* Field-value bytes: visible ASCII, space, tab and obs-text (0x80-0xff). */
static bool is_value_byte(uint8_t c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

bool st_http_field_name_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((uint8_t)s[i]))
			return false;
	return n > 0;
}

bool st_http_field_value_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!is_value_byte((uint8_t)s[i]))
			return false;
	return true;
}

static uint8_t ascii_lower(uint8_t c)
{
	return (c >= 'A' && c <= 'Z') ? (uint8_t)(c - 'A' + 'a') : c;
}

static bool ieq(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (ascii_lower((uint8_t)a[i]) != ascii_lower((uint8_t)b[i]))
			return false;
	return true;
}

/*
 * Next line starting at @pos. Returns 1 and sets *content_len (without the line ending) and
 * *next (start of the following line); 0 when no line ending is there yet; -EBADMSG for a CR
 * that is not followed by LF.
 */
static int next_line(const uint8_t *buf, size_t len, size_t pos, size_t *content_len, size_t *next)
{
	for (size_t i = pos; i < len; i++) {
		if (buf[i] == '\n') {
			*content_len = i - pos;
			*next = i + 1;
			return 1;
		}
		if (buf[i] == '\r') {
			if (i + 1 == len)
				return 0;
			if (buf[i + 1] != '\n')
				return -EBADMSG;
			*content_len = i - pos;
			*next = i + 2;
			return 1;
		}
	}
	return 0;
}

/* "HTTP/1.0" or "HTTP/1.1" -> minor version; -EBADMSG otherwise. */
static int parse_version(const uint8_t *p, size_t len)
{
	if (len != 8 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1'))
		return -EBADMSG;
	return p[7] - '0';
}

/*
 * Header lines from @pos up to and including the empty line. Returns the head length (>0), 0
 * when incomplete, or a negative errno.
 */
static ssize_t parse_headers(const uint8_t *buf, size_t len, size_t pos,
                             struct st_http_header *headers, size_t *num_headers)
{
	size_t n = 0;
	for (;;) {
		size_t line_len, next;
		int rc = next_line(buf, len, pos, &line_len, &next);
		if (rc < 0)
			return rc;
		if (rc == 0)
			return 0;
		if (next > ST_MAX_HTTP_HEAD_BYTES)
			return -EMSGSIZE;
		const uint8_t *line = buf + pos;
		if (line_len == 0) {
			*num_headers = n;
			return (ssize_t)next;
		}
		if (n == ST_MAX_HTTP_HEADERS)
			return -EMSGSIZE;
		/* name: one or more tchars, then ':' at once (no obs-fold, no space before it) */
		size_t i = 0;
		while (i < line_len && is_tchar(line[i]))
			i++;
		if (i == 0 || i == line_len || line[i] != ':')
			return -EBADMSG;
		size_t name_len = i++;
		while (i < line_len && (line[i] == ' ' || line[i] == '\t'))
			i++;
		size_t vstart = i, vend = i;
		for (; i < line_len; i++) {
			if (!is_value_byte(line[i]))
				return -EBADMSG;
			if (line[i] != ' ' && line[i] != '\t')
				vend = i + 1;
		}
		headers[n].name = (const char *)line;
		headers[n].name_len = name_len;
		headers[n].value = (const char *)line + vstart;
		headers[n].value_len = vend - vstart;
		n++;
		pos = next;
	}
}

ssize_t st_http_parse_request(const uint8_t *buf, size_t len, struct st_http_request *out)
{
	size_t line_len, next;
	/* Tolerate (RFC 9112 §2.2) at most one empty line before the request line. */
	size_t start = 0;
	if (len >= 1 && buf[0] == '\n')
		start = 1;
	else if (len >= 2 && buf[0] == '\r' && buf[1] == '\n')
		start = 2;
	int rc = next_line(buf, len, start, &line_len, &next);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return len >= ST_MAX_HTTP_HEAD_BYTES ? -EMSGSIZE : 0;
	if (next > ST_MAX_HTTP_HEAD_BYTES)
		return -EMSGSIZE;
	const uint8_t *line = buf + start;
	size_t i = 0;
	while (i < line_len && is_tchar(line[i]))
		i++;
	if (i == 0 || i == line_len || line[i] != ' ')
		return -EBADMSG;
	out->method = (const char *)line;
	out->method_len = i++;
	size_t tstart = i;
	while (i < line_len && line[i] > 0x20 && line[i] < 0x7f)
		i++;
	if (i == tstart || i == line_len || line[i] != ' ')
		return -EBADMSG;
	out->target = (const char *)line + tstart;
	out->target_len = i - tstart;
	rc = parse_version(line + i + 1, line_len - i - 1);
	if (rc < 0)
		return rc;
	out->minor_version = rc;
	const char *q = memchr(out->target, '?', out->target_len);
	out->path = out->target;
	if (q != NULL) {
		out->path_len = (size_t)(q - out->target);
		out->query = q + 1;
		out->query_len = out->target_len - out->path_len - 1;
	} else {
		out->path_len = out->target_len;
		out->query = NULL;
		out->query_len = 0;
	}
	ssize_t n = parse_headers(buf, len, next, out->headers, &out->num_headers);
	if (n == 0 && len >= ST_MAX_HTTP_HEAD_BYTES)
		return -EMSGSIZE;
	return n;
}

ssize_t st_http_parse_response(const uint8_t *buf, size_t len, struct st_http_response *out)
{
	size_t line_len, next;
	int rc = next_line(buf, len, 0, &line_len, &next);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return len >= ST_MAX_HTTP_HEAD_BYTES ? -EMSGSIZE : 0;
	if (next > ST_MAX_HTTP_HEAD_BYTES)
		return -EMSGSIZE;
	/* "HTTP/1.1 200" [" " reason] */
	if (line_len < 12 || buf[8] != ' ')
		return -EBADMSG;
	rc = parse_version(buf, 8);
	if (rc < 0)
		return rc;
	out->minor_version = rc;
	int status = 0;
	for (size_t i = 9; i < 12; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -EBADMSG;
		status = status * 10 + (buf[i] - '0');
	}
	if (status < 100)
		return -EBADMSG;
	out->status = status;
	if (line_len == 12) {
		out->reason = (const char *)buf + 12;
		out->reason_len = 0;
	} else {
		if (buf[12] != ' ')
			return -EBADMSG;
		for (size_t i = 13; i < line_len; i++)
			if (!is_value_byte(buf[i]))
				return -EBADMSG;
		out->reason = (const char *)buf + 13;
		out->reason_len = line_len - 13;
	}
	ssize_t n = parse_headers(buf, len, next, out->headers, &out->num_headers);
	if (n == 0 && len >= ST_MAX_HTTP_HEAD_BYTES)
		return -EMSGSIZE;
	return n;
}

ssize_t st_http_header_find(const struct st_http_header *headers, size_t n, const char *name,
                            size_t from)
{
	for (size_t i = from; i < n; i++)
		if (ieq(headers[i].name, headers[i].name_len, name))
			return (ssize_t)i;
	return -1;
}

/* The next comma-separated element of a header value (trimmed, empty ones skipped): false at
 * the end. @pos carries the position between calls. */
static bool next_element(const char *v, size_t len, size_t *pos, const char **elem,
                         size_t *elem_len)
{
	size_t i = *pos;
	for (;;) {
		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		if (i == len) {
			*pos = i;
			return false;
		}
		size_t s = i;
		while (i < len && v[i] != ',')
			i++;
		size_t e = i;
		while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
			e--;
		if (e > s) {
			*pos = i;
			*elem = v + s;
			*elem_len = e - s;
			return true;
		}
	}
}

/* Does any element of @value equal @token (case-insensitive)? */
static bool list_has(const char *value, size_t len, const char *token)
{
	size_t pos = 0, n;
	const char *e;
	while (next_element(value, len, &pos, &e, &n))
		if (ieq(e, n, token))
			return true;
	return false;
}

bool st_http_header_has_token(const struct st_http_header *headers, size_t n, const char *name,
                              const char *token)
{
	for (ssize_t i = st_http_header_find(headers, n, name, 0); i >= 0;
	     i = st_http_header_find(headers, n, name, (size_t)i + 1))
		if (list_has(headers[i].value, headers[i].value_len, token))
			return true;
	return false;
}

/* Content-Length: every field and every list element must be the same decimal number. */
static int content_length(const struct st_http_header *headers, size_t n, bool *present,
                          uint64_t *length)
{
	*present = false;
	for (ssize_t i = st_http_header_find(headers, n, "content-length", 0); i >= 0;
	     i = st_http_header_find(headers, n, "content-length", (size_t)i + 1)) {
		const char *v = headers[i].value;
		size_t len = headers[i].value_len, p = 0;
		do {
			while (p < len && (v[p] == ' ' || v[p] == '\t'))
				p++;
			size_t digits = 0;
			uint64_t val = 0;
			while (p < len && v[p] >= '0' && v[p] <= '9') {
				if (val > (UINT64_MAX >> 1) / 10)
					return -EBADMSG; /* absurdly large */
				val = val * 10 + (uint64_t)(v[p] - '0');
				p++;
				digits++;
			}
			while (p < len && (v[p] == ' ' || v[p] == '\t'))
				p++;
			if (digits == 0 || (p < len && v[p] != ','))
				return -EBADMSG;
			if (*present && val != *length)
				return -EBADMSG;
			*present = true;
			*length = val;
		} while (p++ < len);
	}
	return 0;
}

/* Transfer-Encoding: 0 none; 1 ends in chunked (and chunked only once, last); 2 anything else. */
static int transfer_coding(const struct st_http_header *headers, size_t n)
{
	int state = 0; /* 0 none seen, 1 last was chunked, 2 other last, 3 chunked not last */
	for (ssize_t i = st_http_header_find(headers, n, "transfer-encoding", 0); i >= 0;
	     i = st_http_header_find(headers, n, "transfer-encoding", (size_t)i + 1)) {
		size_t pos = 0, elen;
		const char *e;
		while (next_element(headers[i].value, headers[i].value_len, &pos, &e, &elen)) {
			if (state == 1)
				state = 3; /* chunked was not the final coding */
			if (ieq(e, elen, "chunked"))
				state = state == 3 ? 3 : 1;
			else if (state != 3)
				state = 2;
		}
		if (state == 0)
			state = 2; /* an empty Transfer-Encoding is not a framing we know */
	}
	if (state == 0)
		return 0;
	return state == 1 ? 1 : 2;
}

int st_http_request_body(const struct st_http_request *req, enum st_http_body_kind *kind,
                         uint64_t *length)
{
	bool has_cl;
	uint64_t cl = 0;
	if (content_length(req->headers, req->num_headers, &has_cl, &cl) < 0)
		return -EBADMSG;
	int te = transfer_coding(req->headers, req->num_headers);
	if (te != 0 && has_cl)
		return -EBADMSG;
	if (te == 2)
		return -EBADMSG; /* a request body must end in chunked to be delimited */
	*length = has_cl ? cl : 0;
	if (st_http_header_find(req->headers, req->num_headers, "upgrade", 0) >= 0 &&
	    st_http_header_has_token(req->headers, req->num_headers, "connection", "upgrade")) {
		*kind = ST_HTTP_BODY_UPGRADE;
		return 0;
	}
	if (te == 1)
		*kind = ST_HTTP_BODY_CHUNKED;
	else if (has_cl && cl > 0)
		*kind = ST_HTTP_BODY_LENGTH;
	else
		*kind = ST_HTTP_BODY_NONE;
	return 0;
}

int st_http_response_body(const struct st_http_response *resp, bool request_was_head,
                          enum st_http_body_kind *kind, uint64_t *length)
{
	*length = 0;
	if (resp->status == 101) {
		*kind = ST_HTTP_BODY_UPGRADE;
		return 0;
	}
	if (request_was_head || resp->status < 200 || resp->status == 204 || resp->status == 304) {
		*kind = ST_HTTP_BODY_NONE;
		return 0;
	}
	bool has_cl;
	uint64_t cl = 0;
	int te = transfer_coding(resp->headers, resp->num_headers);
	if (te == 1) {
		/* RFC 9112 §6.3: chunked wins over Content-Length; a relay must not trust both. */
		if (st_http_header_find(resp->headers, resp->num_headers, "content-length", 0) >= 0)
			return -EBADMSG;
		*kind = ST_HTTP_BODY_CHUNKED;
		return 0;
	}
	if (te == 2) {
		*kind = ST_HTTP_BODY_UNTIL_CLOSE;
		return 0;
	}
	if (content_length(resp->headers, resp->num_headers, &has_cl, &cl) < 0)
		return -EBADMSG;
	if (has_cl) {
		*kind = cl > 0 ? ST_HTTP_BODY_LENGTH : ST_HTTP_BODY_NONE;
		*length = cl;
	} else {
		*kind = ST_HTTP_BODY_UNTIL_CLOSE;
	}
	return 0;
}

bool st_http_keep_alive(int minor_version, const struct st_http_header *headers, size_t n)
{
	if (st_http_header_has_token(headers, n, "connection", "close"))
		return false;
	if (minor_version >= 1)
		return true;
	return st_http_header_has_token(headers, n, "connection", "keep-alive");
}

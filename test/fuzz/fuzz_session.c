/* Fuzz target: a tunnel session fed hostile messages (stream/session.h), in both roles and in
 * the base or the extended protocol. Input: one config byte, then messages each prefixed by a
 * 2-byte length. Callbacks write, consume, shut down and close streams as a daemon would, and
 * every packed message must decode. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/err.h>
#include <stream/ext.h>
#include <stream/frame.h>
#include <stream/session.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned action;

static int on_open(struct st_session *s, uint64_t id, uint64_t type, const uint8_t *p, size_t len,
                   void *user)
{
	(void)p;
	(void)user;
	if (type == ST_MSG_TCP_CONNECT && action % 3 == 0) {
		/* An edge whose dial went through at once: OPENED, maybe bytes behind it. */
		st_session_write(s, id, (const uint8_t *)"SSH-2.0-x\r\n", 11);
		if (st_session_opened(s, id) != 0)
			abort(); /* a fresh TCP_CONNECT stream with OPENED negotiated */
	}
	switch (action++ % 4) {
	case 0:
		return -EACCES;
	case 1:
		st_session_write(s, id, (const uint8_t *)"HTTP/1.1 101 OK\r\n\r\n", 19);
		return 0;
	case 2:
		st_session_close(s, id, ST_EXT_ERR_UNREACHABLE, "backend down");
		return 0;
	default:
		return (int)(len % 2) - 1; /* 0 or -1 */
	}
}

static int on_data(struct st_session *s, uint64_t id, const uint8_t *p, size_t len, void *user)
{
	(void)user;
	st_session_consumed(s, id, len);
	if (len > 0 && p[0] == 'e')
		st_session_write(s, id, p, len); /* echo */
	if (len > 0 && p[0] == 's')
		st_session_shutdown(s, id);
	if (len > 0 && p[0] == 'x')
		return -ECONNRESET;
	if (len > 0 && p[0] == 'o')
		st_session_opened(s, id); /* late, twice, or for the wrong stream: refused or not */
	return 0;
}

static void on_close(struct st_session *s, uint64_t id, void *stream_user, uint64_t code,
                     const char *r, size_t len, void *user)
{
	(void)s;
	(void)stream_user;
	(void)id;
	(void)code;
	(void)r;
	(void)len;
	(void)user;
}

static void on_opened(struct st_session *s, uint64_t id, void *user)
{
	(void)user;
	st_session_write(s, id, (const uint8_t *)"\x16\x03\x01", 3); /* the ClientHello */
}

/* A peer link (ST_CAP_PEER): every directory message is echoed back through the bounded
 * queue, which fills and refuses (-EAGAIN) as the input decides. */
static int on_peer(struct st_session *s, uint64_t type, const uint8_t *p, size_t len, void *user)
{
	(void)user;
	int rc = st_session_send_peer(s, type, p, len);
	if (rc != 0 && rc != -EAGAIN)
		abort(); /* the session handed over only peer types within the payload limit */
	return len == 1 && p[0] == 0xff ? -EBADMSG : 0; /* a directory that refuses: fatal */
}

static const struct st_session_callbacks cb = {
        .on_peer = on_peer,
        .on_opened = on_opened,
        .on_open = on_open,
        .on_data = on_data,
        .on_close = on_close,
};

static uint8_t out[ST_MAX_MESSAGE_HEADER_BYTES + 4096];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* Budgets small enough that refusals, growth and shrinking all happen. */
	struct st_budget proc;
	st_budget_init(&proc, 40000);
	struct st_session_config cfg = {
	        .role = (data[0] & 1) ? ST_SESSION_EDGE : ST_SESSION_CLOUD,
	        .caps = (data[0] & 2) ? ST_CAP_ALL | ((data[0] & 4) ? ST_CAP_PEER : 0) : 0,
	        .send_window_bytes = 8192,
	        .recv_window_bytes = 8192,
	        /* an edge's quiet first window for logs and metrics, uploads growing at open */
	        .recv_window_quiet_bytes = (data[0] & 8) ? 2048 : 0,
	        .max_streams = 8,
	        .stream_out_bytes = 16384,
	        .max_data_payload = 4096,
	        .recv_window_max_bytes = 32768,
	        .node_budget_bytes = 30000,
	        .process_budget = &proc,
	};
	struct st_session *s;
	if (st_session_new(&s, &cfg, &cb, NULL) != 0)
		return 0;
	action = data[0] >> 2;
	if (cfg.role == ST_SESSION_CLOUD)
		for (uint64_t id = 1; id <= 3; id++)
			st_session_open(s, id, ST_MSG_EXEC_CONNECT, (const uint8_t *)"{}", 2);
	if (cfg.role == ST_SESSION_CLOUD && cfg.caps)
		st_session_open(s, 4, ST_MSG_TCP_CONNECT, (const uint8_t *)"\x80\x50", 2);
	size_t pos = 1;
	while (pos + 2 <= size) {
		size_t len = (size_t)data[pos] << 8 | data[pos + 1];
		pos += 2;
		if (len > size - pos)
			len = size - pos;
		int rc = st_session_recv(s, data + pos, len);
		pos += len;
		if (rc < 0) {
			if (!st_err_is_fatal(rc))
				abort(); /* recv only returns errors that end the tunnel */
			break;
		}
		for (int i = 0; i < 4; i++) {
			bool binary;
			ssize_t n = st_session_pack(s, out, sizeof out, &binary);
			if (n < 0)
				abort();
			if (n == 0)
				break;
			struct st_msg m;
			if (st_msg_decode(out, (size_t)n, &m) != 0)
				abort();
			if (cfg.caps == 0 && (!st_msg_type_is_base(m.type) || binary))
				abort(); /* never an extension toward a base peer */
		}
	}
	st_session_free(s);
	if (proc.used_bytes != 0)
		abort(); /* every window charged is credited back */
	return 0;
}

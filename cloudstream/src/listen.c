/*
 * cloudstream/src/listen.c — the tunnel and stream ports' listening sockets (listen.h):
 * deferred accept, the handshake gate, EMFILE pauses, and the lws log budget.
 */
#include "cs.h"
#include "hsgate.h"
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter_ipv4.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>

#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80 /* linux/netfilter_ipv6/ip6_tables.h */
#endif

#define EMFILE_PAUSE_MS      250
#define ACCEPTS_PER_WAKEUP   64
#define LOG_WINDOW_MS        10000
#define LOG_LINES_PER_WINDOW 20

struct cs_listener {
	int fd;
	int port;
	struct lws *wsi; /* the listening socket, adopted as a raw file on vh_aux */
	struct cs_hsgate gate;
	int adopting; /* the gate slot of the socket lws is adopting now, or -1 once its wsi died */
	bool reading; /* POLLIN wanted on the listening socket */
	bool emfile;  /* out of fds: paused until sul_resume */
	lws_sorted_usec_list_t sul_resume;
	struct cs_logbudget logb;
	uint64_t accepted, emfile_pauses;
	struct cs_server *srv;
	struct lws_vhost *vh; /* where accepted sockets go */
	const char *prot;    /* NULL: lws's http role (the tunnel's upgrade); else a raw protocol */
	const char *name;    /* "tunnel" or "stream", for log lines */
	uint64_t timeout_ms; /* the handshake deadline */
	/* Accepted while the gate was shut, waiting for a slot (stream port only: a burst from
	 * the apiserver would overflow the kernel's queue, and each one waiting costs an fd and
	 * no TLS state): a ring of pending_cap fds, [pending_head, +pending_len). */
	int *pending;
	size_t pending_cap, pending_head, pending_len;
	lws_sorted_usec_list_t sul_pending; /* hands waiting sockets to lws from the loop */
};

/* ---- the socket ------------------------------------------------------------------------ */

static int open_listener(struct cs_listener *l, const char *addr)
{
	struct lws_context_creation_info tmp;
	char host[64];
	memset(&tmp, 0, sizeof tmp);
	int src = st_loop_set_listen(&tmp, addr, host, sizeof host);
	if (src == -EINVAL)
		st_err("--%s-listen %s: expected ADDR:PORT, [IPv6]:PORT or :PORT", l->name, addr);
	else if (src < 0) /* an address the host lacks, a port in use (checked by binding) */
		st_err("--%s-listen %s: cannot listen there: %s", l->name, addr, strerror(-src));
	if (src < 0)
		return src;
	char port[8];
	snprintf(port, sizeof port, "%d", tmp.port);
	struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
	                         .ai_family = host[0] ? AF_UNSPEC : AF_INET6,
	                         .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	int e = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
	if (e != 0) {
		st_err("--%s-listen %s: %s", l->name, addr, gai_strerror(e));
		return -EINVAL;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1, zero = 0;
	/* The kernel holds a connection until its first bytes, or drops it after the deadline. */
	int defer = (int)((l->timeout_ms + 999) / 1000);
	int rc = fd < 0 ? -errno : 0;
	if (rc == 0 && ai->ai_family == AF_INET6 && !host[0])
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* every address */
	if (rc == 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	                setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof defer) != 0 ||
	                bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0))
		rc = -errno;
	freeaddrinfo(ai);
	if (rc < 0) {
		st_err("cannot listen on %s for the %s port: %s", addr, l->name, st_strerror(rc));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                         : ((struct sockaddr_in *)&ss)->sin_port);
	l->fd = fd;
	return 0;
}

/* ---- accepting --------------------------------------------------------------------------- */

static void log_limited(struct cs_listener *l, const char *what, int err)
{
	uint32_t dropped;
	if (cs_logbudget_take(&l->logb, st_now_ms(), LOG_LINES_PER_WINDOW, LOG_WINDOW_MS,
	                      &dropped)) {
		if (dropped)
			st_warn("%s listener: %u similar lines dropped", l->name, dropped);
		st_warn("%s listener: %s: %s", l->name, what, strerror(err));
	}
}

/* Wants POLLIN only while accepting makes sense. */
static void set_reading(struct cs_listener *l)
{
	bool want = !l->emfile && (cs_hsgate_open(&l->gate) || l->pending_len < l->pending_cap);
	if (want != l->reading && l->wsi) {
		lws_rx_flow_control(l->wsi, want);
		l->reading = want;
	}
}

static void on_resume(lws_sorted_usec_list_t *sul)
{
	struct cs_listener *l = lws_container_of(sul, struct cs_listener, sul_resume);
	l->emfile = false;
	set_reading(l);
}

static void addr16(const struct sockaddr_storage *ss, uint8_t a[16])
{
	memset(a, 0, 16);
	if (ss->ss_family == AF_INET6) {
		memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
		return;
	}
	a[10] = a[11] = 0xff;
	memcpy(a + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
}

/* Hands accepted socket @fd (peer @a) to lws through the gate; closes it when its source has
 * its share in flight. */
static void adopt_fd(struct cs_listener *l, int fd, const uint8_t a[16])
{
	int slot = cs_hsgate_enter(&l->gate, a);
	if (slot < 0) { /* its source has its share in flight */
		close(fd);
		return;
	}
	/* No Nagle: a small tunnel message (a connect, a WINDOW, a front door's TCP_CONNECT)
	 * written while an earlier segment waits for the edge's delayed ACK would wait ~40 ms
	 * (lws sets it on the sockets it accepts itself, not on these). */
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	/* The wsi carries its slot from birth (before its TLS starts): a connection that dies
	 * inside the adoption leaves the gate in WSI_DESTROY (cs_listener_note). The stream
	 * port's sockets go to its raw protocol, the tunnel's to lws's http role. */
	l->adopting = slot;
	lws_adopt_desc_t ad = {.vh = l->vh,
	                       .type = LWS_ADOPT_SOCKET | LWS_ADOPT_ALLOW_SSL |
	                               (l->prot ? 0 : LWS_ADOPT_HTTP),
	                       .vh_prot_name = l->prot,
	                       .fd.sockfd = fd,
	                       .opaque = (void *)(intptr_t)(slot + 1)};
	struct lws *wsi = lws_adopt_descriptor_vhost_via_info(&ad);
	if (wsi == NULL && l->adopting >= 0) /* died before it was a wsi: lws closed fd */
		cs_hsgate_leave(&l->gate, slot);
	l->adopting = -1;
	if (wsi != NULL && lws_get_opaque_user_data(wsi) != NULL)
		lws_set_timeout(wsi, PENDING_TIMEOUT_SSL_ACCEPT,
		                (int)((l->timeout_ms + 999) / 1000));
}

/* Sockets that waited for a slot go to lws, oldest first, while the gate has room. */
static void adopt_pending(struct cs_listener *l)
{
	while (l->pending_len > 0 && cs_hsgate_open(&l->gate)) {
		int fd = l->pending[l->pending_head];
		l->pending_head = (l->pending_head + 1) % l->pending_cap;
		l->pending_len--;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		uint8_t a[16] = {0};
		if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
			addr16(&ss, a);
		adopt_fd(l, fd, a);
	}
}

static void on_pending(lws_sorted_usec_list_t *sul)
{
	struct cs_listener *l = lws_container_of(sul, struct cs_listener, sul_pending);
	adopt_pending(l);
	set_reading(l);
}

static void accept_some(struct cs_listener *l)
{
	struct cs_server *srv = l->srv;
	adopt_pending(l);
	for (int i = 0; i < ACCEPTS_PER_WAKEUP &&
	                (cs_hsgate_open(&l->gate) || l->pending_len < l->pending_cap);
	     i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			if (e == EINTR || e == ECONNABORTED || e == EPROTO)
				continue;
			if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
				l->emfile = true;
				l->emfile_pauses++;
				lws_sul_schedule(srv->ctx, 0, &l->sul_resume, on_resume,
				                 EMFILE_PAUSE_MS * LWS_US_PER_MS);
				log_limited(l, "not accepting for 250 ms", e);
			} else if (e != EAGAIN && e != EWOULDBLOCK) {
				log_limited(l, "accept", e);
			}
			break;
		}
		l->accepted++;
		if (!cs_hsgate_open(&l->gate)) { /* room in the ring: the loop's condition */
			l->pending[(l->pending_head + l->pending_len) % l->pending_cap] = fd;
			l->pending_len++;
			continue;
		}
		uint8_t a[16];
		addr16(&ss, a);
		adopt_fd(l, fd, a);
	}
	set_reading(l);
}

/* ---- lws hooks ----------------------------------------------------------------------------- */

int cs_listener_aux(struct cs_server *srv, struct lws *wsi, int reason)
{
	struct cs_listener *l = NULL;
	if (srv && wsi && srv->lis && wsi == srv->lis->wsi)
		l = srv->lis;
	else if (srv && wsi && srv->lis_stream && wsi == srv->lis_stream->wsi)
		l = srv->lis_stream;
	if (l == NULL)
		return 0;
	if (reason == LWS_CALLBACK_RAW_RX_FILE)
		accept_some(l);
	else if (reason == LWS_CALLBACK_RAW_CLOSE_FILE) {
		l->wsi = NULL; /* lws closes the fd with the wsi (context destroy) */
		l->fd = -1;
	}
	return 1;
}

/* @wsi's handshake is over (done or failed): its slot goes back to @l's gate. */
static void handshake_over(struct cs_listener *l, struct lws *wsi)
{
	intptr_t v = (intptr_t)lws_get_opaque_user_data(wsi);
	if (v <= 0)
		return;
	lws_set_opaque_user_data(wsi, NULL);
	if (l->adopting == (int)(v - 1))
		l->adopting = -1; /* died inside lws_adopt_descriptor_vhost_via_info() */
	cs_hsgate_leave(&l->gate, (int)(v - 1));
	set_reading(l);
	/* Not from inside this wsi's callback: the loop hands the next one over. */
	if (l->pending_len > 0)
		lws_sul_schedule(l->srv->ctx, 0, &l->sul_pending, on_pending, 1);
}

void cs_listener_note(struct cs_server *srv, struct lws *wsi, int reason)
{
	struct cs_listener *l = srv ? srv->lis : NULL;
	if (l == NULL)
		return;
	switch (reason) {
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: /* TLS done, the request head read */
	case LWS_CALLBACK_HTTP:
	case LWS_CALLBACK_WSI_DESTROY:
		handshake_over(l, wsi);
		return;
	default:
		return;
	}
}

void cs_stream_listener_note(struct cs_server *srv, struct lws *wsi)
{
	if (srv && srv->lis_stream)
		handshake_over(srv->lis_stream, wsi);
}

static int listener_new(struct cs_server *srv, struct cs_listener **out, const char *name,
                        const char *addr, struct lws_vhost *vh, const char *prot, uint64_t max,
                        uint64_t per_source, uint64_t timeout_ms, size_t pending_cap)
{
	struct cs_listener *l = calloc(1, sizeof *l);
	if (l == NULL)
		return -ENOMEM;
	if (pending_cap > 0) {
		l->pending = calloc(pending_cap, sizeof *l->pending);
		if (l->pending == NULL) {
			free(l);
			return -ENOMEM;
		}
		l->pending_cap = pending_cap;
	}
	l->srv = srv;
	l->fd = -1;
	l->adopting = -1;
	l->name = name;
	l->vh = vh;
	l->prot = prot;
	l->timeout_ms = timeout_ms;
	int rc = cs_hsgate_init(&l->gate, (uint32_t)max, (uint32_t)per_source);
	if (rc == 0)
		rc = open_listener(l, addr);
	if (rc < 0) {
		cs_hsgate_free(&l->gate);
		free(l->pending);
		free(l);
		return rc;
	}
	lws_sock_file_fd_type u;
	u.filefd = l->fd;
	l->wsi =
	        lws_adopt_descriptor_vhost(srv->vh_aux, LWS_ADOPT_RAW_FILE_DESC, u, "cs-aux", NULL);
	if (l->wsi == NULL) {
		close(l->fd);
		cs_hsgate_free(&l->gate);
		free(l->pending);
		free(l);
		return -ENOMEM;
	}
	l->reading = true;
	*out = l;
	return 0;
}

int cs_listener_new(struct cs_server *srv)
{
	return listener_new(srv, &srv->lis, "tunnel", srv->cfg.tunnel_listen, srv->vh_tunnel, NULL,
	                    srv->cfg.tunnel_handshakes_max, srv->cfg.tunnel_handshakes_per_source,
	                    srv->cfg.tunnel_handshake_timeout_ms, 0);
}

int cs_stream_listener_new(struct cs_server *srv)
{
	/* One source (the apiserver) opens every connection: no per-source share. */
	return listener_new(srv, &srv->lis_stream, "stream", srv->cfg.stream_listen, srv->vh_stream,
	                    "cs-stream", CS_STREAM_HANDSHAKES_MAX, CS_STREAM_HANDSHAKES_MAX,
	                    CS_STREAM_HANDSHAKE_TIMEOUT_MS, CS_STREAM_ACCEPTED_WAITING_MAX);
}

int cs_listener_port(const struct cs_server *srv)
{
	return srv->lis ? srv->lis->port : -ENOENT;
}

int cs_stream_listener_port(const struct cs_server *srv)
{
	return srv->lis_stream ? srv->lis_stream->port : -ENOENT;
}

void cs_listener_stats(const struct cs_server *srv, struct cs_listener_stats *out)
{
	memset(out, 0, sizeof *out);
	const struct cs_listener *l = srv->lis;
	if (l == NULL)
		return;
	out->accepted = l->accepted;
	out->refused_per_source = l->gate.refused_per_source;
	out->emfile_pauses = l->emfile_pauses;
	out->handshakes_inflight = l->gate.inflight;
}

static void listener_free(struct cs_listener **lp)
{
	struct cs_listener *l = *lp;
	if (l == NULL)
		return;
	/* Before lws_context_destroy(): the timer lives on its list, and the listening socket's
	 * wsi closes the fd with the context. */
	lws_sul_cancel(&l->sul_resume);
	lws_sul_cancel(&l->sul_pending);
	for (size_t i = 0; i < l->pending_len; i++)
		close(l->pending[(l->pending_head + i) % l->pending_cap]);
	free(l->pending);
	cs_hsgate_free(&l->gate);
	free(l);
	*lp = NULL;
}

void cs_listener_free(struct cs_server *srv)
{
	listener_free(&srv->lis);
	listener_free(&srv->lis_stream);
}

int cs_lws_log_allowed(uint32_t *dropped)
{
	static struct cs_logbudget b; /* lws logs from the loop thread only */
	return cs_logbudget_take(&b, st_now_ms(), LOG_LINES_PER_WINDOW, LOG_WINDOW_MS, dropped);
}

void cs_socket_orig_dst(int fd, char *out, size_t cap)
{
	struct sockaddr_storage orig, local;
	socklen_t olen = sizeof orig, llen = sizeof local;
	out[0] = '\0';
	if (fd < 0)
		return;
	memset(&orig, 0, sizeof orig);
	bool got = getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &orig, &olen) == 0;
	if (!got) {
		olen = sizeof orig;
		got = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &orig, &olen) == 0;
	}
	if (!got || getsockname(fd, (struct sockaddr *)&local, &llen) != 0)
		return; /* no conntrack entry: not DNAT'd (or no netfilter) */
	char o[INET6_ADDRSTRLEN] = "", l[INET6_ADDRSTRLEN] = "";
	if (orig.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&orig)->sin_addr, o, sizeof o);
	else if (orig.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&orig)->sin6_addr, o, sizeof o);
	if (local.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&local)->sin_addr, l, sizeof l);
	else if (local.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&local)->sin6_addr, l, sizeof l);
	/* An IPv4 peer on a dual-stack socket shows up as ::ffff:a.b.c.d. */
	const char *lp = strncmp(l, "::ffff:", 7) == 0 ? l + 7 : l;
	if (o[0] && strcmp(o, lp) != 0)
		snprintf(out, cap, "%s", o);
}

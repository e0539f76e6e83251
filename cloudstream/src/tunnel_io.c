/*
 * cloudstream/src/tunnel_io.c — a tunnel's bytes: websocket fragments reassembled into whole
 * messages and fed to its st_session, whatever the session packs written back in batches per
 * WRITEABLE (the PONG or PING owed first, stream/wsctl.h), and the liveness sweep that serves
 * every tunnel (any frame received counts as life). Split from tunnel.c, which calls these from
 * its protocol callback, so the hot path reads on its own. Loop thread only.
 */
#include "tunnel_int.h"

#include "hsgate.h" /* cs_logbudget */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/reasm.h>
#include <stream/tunnelread.h>

/* Feeds one whole message to the session. Returns 0, or -1 to drop the tunnel. */
static int tunnel_message(struct cs_tunnel *t, const uint8_t *msg, size_t len)
{
	int rc = st_session_recv(t->sess, msg, len);
	if (rc < 0) {
		st_log(ST_LOG_WARN, t->node, 0, "tunnel dropped: %s from the edge",
		       st_strerror(rc));
		return -1;
	}
	cs__tunnel_kick(t);
	return 0;
}

int cs__tunnel_receive(struct cs_tunnel *t, const uint8_t *in, size_t len, bool first, bool final)
{
	const uint8_t *msg;
	size_t msg_len;
	int rc = st_reasm_feed(&t->rx, in, len, first, final, &msg, &msg_len);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		st_log(ST_LOG_WARN, t->node, 0, "tunnel dropped: %s",
		       rc == -EMSGSIZE ? "a message over 1 MiB" : "out of memory");
		return -1;
	}
	return tunnel_message(t, msg, msg_len);
}

/* ---- our own reading (stream/tunnelread.h) --------------------------------------------- */

static int own_message(void *user, const uint8_t *msg, size_t len)
{
	struct cs_tunnel *t = user;
	st_liveness_rx(&t->live, st_now_ms());
	t->bytes_in += len;
	return tunnel_message(t, msg, len); /* -1: logged there; own_end closes */
}

/*
 * An edge that offered pong-within hears from us at least that often, whatever it pings: its
 * PING's PONG is held (stream/wsctl.h) until that time since our last frame is near (less the
 * sweep's lateness), and goes by the next PING's round or by the sweep, with the latest PING's
 * payload. An edge pinging every 5 s with a 30 s dead-peer timeout (it offers 20 s) gets about
 * one PONG in four: at 19,000 idle tunnels the PONG writes were most of the cloud's idle CPU
 * (their loopback receive work is charged to the writer). Returns the hold; 0: at once.
 */
static uint64_t pong_hold_ms(const struct cs_tunnel *t)
{
	uint64_t late = st_liveness_sweep_interval_ms(t->srv->cfg.ping_interval_ms);
	return t->pong_within_ms > late ? t->pong_within_ms - late : 0;
}

/* The edge's PING, PONG or CLOSE: what it calls for is stream/wsctl.h's. */
static void own_control(void *user, enum st_ws_opcode op, const uint8_t *payload, size_t len)
{
	struct cs_tunnel *t = user;
	switch (st_wsctl_recv(&t->ctl, &t->live, op, payload, len, st_now_ms(), pong_hold_ms(t))) {
	case ST_WSCTL_WRITE:
		if (t->wsi)
			lws_callback_on_writable(t->wsi);
		break;
	case ST_WSCTL_LATER:
		cs__tunnel_live_due(t, t->ctl.pong_due_ms); /* the sweep sends it then */
		break;
	case ST_WSCTL_NONE:
		break;
	}
}

/* An edge that goes away is fleet life (a node rebooted, a load tool stopped: 19,000 at once):
 * it is counted (cloudstream_tunnels_closed_total{reason}) and logged at debug. The WARN lines
 * left about single tunnels (a TLS error, malformed frames, a dead peer, a replaced tunnel)
 * share one budget, so a fleet failing at once (a partition: every tunnel dead together)
 * writes a few lines and a count of the rest, not a line per edge. */
#define DROP_WARN_LINES_PER_WINDOW 20
#define DROP_WARN_WINDOW_MS        10000

bool cs__tunnel_warn_allowed(void)
{
	static struct cs_logbudget budget; /* loop thread only */
	uint32_t dropped;
	if (!cs_logbudget_take(&budget, st_now_ms(), DROP_WARN_LINES_PER_WINDOW,
	                       DROP_WARN_WINDOW_MS, &dropped))
		return false;
	if (dropped)
		st_warn("%u more tunnel warnings not logged (counted: "
		        "cloudstream_tunnels_closed_total, cloudstream_sessions_replaced_total)",
		        dropped);
	return true;
}

static void own_end(void *user, const char *why)
{
	struct cs_tunnel *t = user;
	struct cs_metrics *m = &t->srv->m;
	bool closed = t->ctl.closed || strcmp(why, "close_notify") == 0;
	bool gone = strcmp(why, "the connection closed") == 0;
	uint64_t *count = closed ? &m->tunnels_closed_edge_closed
	                  : gone ? &m->tunnels_closed_edge_gone
	                         : &m->tunnels_closed_edge_error;
	if (!t->kill) /* else we closed it (cs_tunnel_close), counted by its reason */
		(*count)++;
	if (closed || gone || strcmp(why, "refused") == 0) /* refused: logged as it was refused */
		st_dbg_ns(t->node, 0, "tunnel dropped: %s", why);
	else if (cs__tunnel_warn_allowed())
		st_log(ST_LOG_WARN, t->node, 0, "tunnel dropped: %s", why);
	t->kill = true;
	if (t->wsi == NULL)
		return;
	lws_callback_on_writable(t->wsi);
	/* A socket that cannot take our close any more never gets a WRITEABLE: a deadline too. */
	lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, 2);
}

static const struct st_tunnel_reader_cbs own_cbs = {
        .on_message = own_message,
        .on_control = own_control,
        .on_end = own_end,
};

void cs__tunnel_read_own(struct cs_tunnel *t)
{
	/* -ENOTSUP (lws's poll loop) or -ENOMEM: lws reads, as before. */
	if (st_tunnel_reader_new(&t->reader, t->srv->loop, t->wsi, true, &own_cbs, t) < 0)
		t->reader = NULL;
}

int cs__tunnel_writeable(struct cs_tunnel *t)
{
	struct cs_server *srv = t->srv;
	if (t->kill) {
		if (t->ctl.closed) /* the edge's CLOSE, echoed; best effort */
			st_tunnel_write_close(&srv->tunnel_writer, t->wsi, &t->ctl);
		return -1;
	}
	if (st_lws_write_pending(t->wsi))
		return 0; /* the last batch is still going out (stream/tunnelwrite.h) */
	if (!st_session_want_write(t->sess) && !st_wsctl_want_write(&t->ctl))
		return 0; /* lws's own frame went out (a PONG), or the loop's second feed (evloop.c) */
	/* A PING the sweep asked for goes too: its PONG, like any frame, counts as life. */
	ssize_t n = st_tunnel_write(&srv->tunnel_writer, t->wsi, t->sess, &t->ctl, st_now_ms());
	if (n == -EIO)
		return -1;
	if (n < 0) {
		st_log(ST_LOG_ERROR, t->node, 0, "tunnel dropped: %s packing a message",
		       st_strerror((int)n));
		return -1;
	}
	t->bytes_out += (uint64_t)n;
	if (st_session_want_write(t->sess)) /* more than a batch: the socket's next POLLOUT */
		lws_callback_on_writable(t->wsi);
	return 0;
}

/* ---- liveness ------------------------------------------------------------------------- */

/*
 * lws 4.1.6 answers an edge's PING itself and tells us nothing, so a tunnel whose edge only
 * pings looks quiet. Before pinging it, ask TCP when the peer last sent anything (TCP_INFO,
 * one getsockopt per quiet tunnel per ping interval): an edge that pings gets no redundant PING
 * from us, which at 19,000 tunnels was a third of the idle loop's writes. Returns true when the
 * peer did speak since our last sign of life, which is then recorded.
 */
static bool peer_spoke(struct cs_tunnel *t, uint64_t now)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;
	int fd = lws_get_socket_fd(t->wsi);
	if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
	    len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof ti.tcpi_last_data_recv)
		return false;
	uint64_t ago = ti.tcpi_last_data_recv; /* ms */
	if (ago >= now - t->live.last_rx_ms)
		return false;
	st_liveness_rx(&t->live, now - ago);
	return true;
}

int cs__tunnel_live_add(struct cs_tunnel *t)
{
	struct cs_tunnel_set *set = &t->srv->tun;
	if (set->live_n == set->live_cap) {
		size_t cap = set->live_cap ? 2 * set->live_cap : 256;
		struct cs_live_slot *a = realloc(set->live, cap * sizeof *a);
		if (a == NULL)
			return -ENOMEM;
		set->live = a;
		set->live_cap = cap;
	}
	t->live_slot = set->live_n++;
	set->live[t->live_slot] = (struct cs_live_slot){.due_ms = 0, .t = t}; /* next sweep */
	return 0;
}

void cs__tunnel_live_due(struct cs_tunnel *t, uint64_t due_ms)
{
	struct cs_tunnel_set *set = &t->srv->tun;
	size_t i = t->live_slot;
	if (i < set->live_n && set->live[i].t == t && due_ms < set->live[i].due_ms)
		set->live[i].due_ms = due_ms;
}

void cs__tunnel_live_remove(struct cs_tunnel *t)
{
	struct cs_tunnel_set *set = &t->srv->tun;
	size_t i = t->live_slot;
	if (i >= set->live_n || set->live[i].t != t)
		return;                          /* never added */
	set->live[i] = set->live[--set->live_n]; /* the last slot fills the hole */
	set->live[i].t->live_slot = i;
}

/*
 * One pass over every tunnel's slot: ping the quiet ones, close the dead ones. A tunnel is
 * read only when its slot's time has come (st_liveness_next_check_ms): an edge that pings
 * every 5 s is looked at once per --ping-interval (its PINGs are answered by lws unseen, so
 * TCP_INFO is asked then), not once a second.
 */
static void on_liveness_sweep(lws_sorted_usec_list_t *sul)
{
	struct cs_server *srv = lws_container_of(sul, struct cs_server, tun.sul_liveness);
	struct cs_tunnel_set *set = &srv->tun;
	uint64_t now = st_now_ms(), ping = srv->cfg.ping_interval_ms,
	         dead = srv->cfg.dead_peer_timeout_ms;
	if (set->live_ping_ms != ping || set->live_dead_ms != dead) {
		for (size_t i = 0; i < set->live_n; i++)
			set->live[i].due_ms = 0; /* times computed for other settings */
		set->live_ping_ms = ping;
		set->live_dead_ms = dead;
	}
	for (size_t i = 0; i < set->live_n; i++) {
		struct cs_live_slot *slot = &set->live[i];
		if (slot->due_ms > now)
			continue;
		struct cs_tunnel *t = slot->t;
		if (t->wsi == NULL)
			continue;
		if (st_wsctl_due(&t->ctl, now)) /* a held PONG no PING came to take along */
			st_loop_write_soon(srv->loop, t->wsi);
		switch (st_liveness_check(&t->live, now, ping, dead)) {
		case ST_LIVENESS_PING:
			if (peer_spoke(t, now))
				break;
			t->ctl.want_ping = true;
			st_loop_write_soon(srv->loop, t->wsi);
			break;
		case ST_LIVENESS_DEAD:
			if (peer_spoke(t, now))
				break;
			srv->m.tunnels_closed_dead++;
			if (cs__tunnel_warn_allowed())
				st_log(ST_LOG_WARN, t->node, 0,
				       "tunnel dropped: nothing received for %llu ms "
				       "(--dead-peer-timeout)",
				       (unsigned long long)(now - t->live.last_rx_ms));
			lws_set_timeout(t->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
			break;
		case ST_LIVENESS_OK:
			break;
		}
		slot->due_ms = st_liveness_next_check_ms(&t->live, now, ping, dead);
		if (t->ctl.pong_held && t->ctl.pong_due_ms < slot->due_ms)
			slot->due_ms = t->ctl.pong_due_ms;
	}
	lws_sul_schedule(srv->ctx, 0, &srv->tun.sul_liveness, on_liveness_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(srv->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

void cs_tunnels_stop(struct cs_server *srv)
{
	lws_sul_cancel(&srv->tun.sul_liveness);
}

void cs_tunnel_liveness_start(struct cs_server *srv)
{
	lws_sul_schedule(srv->ctx, 0, &srv->tun.sul_liveness, on_liveness_sweep,
	                 (lws_usec_t)st_liveness_sweep_interval_ms(srv->cfg.ping_interval_ms) *
	                         LWS_US_PER_MS);
}

/* Per-stream credit accounting (stream/window.h). */
#include <stream/err.h>
#include <stream/window.h>

void st_window_init(struct st_window *w, uint64_t send_window, uint64_t recv_window)
{
	w->send_credit = send_window;
	w->recv_window = recv_window;
	w->recv_outstanding = recv_window;
	w->recv_unacked = 0;
}

size_t st_window_sendable(const struct st_window *w, size_t want)
{
	return w->send_credit < want ? (size_t)w->send_credit : want;
}

int st_window_on_sent(struct st_window *w, size_t n)
{
	if (n > w->send_credit)
		return -EINVAL;
	w->send_credit -= n;
	return 0;
}

int st_window_on_grant(struct st_window *w, uint64_t increment)
{
	if (increment == 0 || increment > ST_MAX_STREAM_WINDOW_BYTES ||
	    w->send_credit + increment > ST_MAX_STREAM_WINDOW_BYTES)
		return -EPROTO;
	w->send_credit += increment;
	return 0;
}

int st_window_on_received(struct st_window *w, size_t n)
{
	if (n > w->recv_outstanding)
		return -EPROTO;
	w->recv_outstanding -= n;
	return 0;
}

uint64_t st_window_grow(struct st_window *w, uint64_t inc, uint64_t n)
{
	if (w->recv_window >= ST_MAX_STREAM_WINDOW_BYTES)
		return inc;
	if (n > ST_MAX_STREAM_WINDOW_BYTES - w->recv_window)
		n = ST_MAX_STREAM_WINDOW_BYTES - w->recv_window;
	w->recv_window += n;
	w->recv_outstanding += n;
	return inc + n;
}

uint64_t st_window_shrink(struct st_window *w, uint64_t inc, uint64_t n)
{
	/* The bytes given back are part of the grant not yet sent: the peer never had them. */
	if (n > inc)
		n = inc;
	if (n >= w->recv_window)
		n = w->recv_window - 1;
	w->recv_window -= n;
	w->recv_outstanding -= n;
	return inc - n;
}

uint64_t st_window_on_consumed(struct st_window *w, size_t n)
{
	w->recv_unacked += n;
	/* Never grant more than was taken from the window (a consumer bug must not inflate it). */
	if (w->recv_outstanding + w->recv_unacked > w->recv_window)
		w->recv_unacked = w->recv_window - w->recv_outstanding;
	if (w->recv_unacked == 0 || w->recv_unacked < w->recv_window / 2)
		return 0;
	uint64_t inc = w->recv_unacked;
	w->recv_unacked = 0;
	w->recv_outstanding += inc;
	return inc;
}

/*
 * edgestream/src/h2int.h — what h2conn.c (the connections: socket, TLS, ALPN, their ends) and
 * h2stream.c (the streams: nghttp2's callbacks, the answer to the cloud, the ops) share. Private
 * to the two. Loop thread only.
 */
#ifndef EDGESTREAM_H2INT_H
#define EDGESTREAM_H2INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>
#include <nghttp2/nghttp2.h>

#include <stream/connect.h>

#include "h2msg.h"
#include "resolve.h"
#include "tls.h"

struct edgestream;
struct es_stream;

#define PENDING_STREAMS 100u /* streams a connection takes before its SETTINGS came */

enum h2c_state { H2C_DIALING = 0, H2C_HANDSHAKE, H2C_OPEN };

struct h2s;

struct h2c {
	struct edgestream *es;
	struct lws *wsi;
	enum h2c_state state;
	struct es_tls tls;
	nghttp2_session *sess; /* once open */
	struct h2s *streams;   /* riding it, or waiting for it to open */
	unsigned nstreams;
	bool settled;  /* the kubelet's first SETTINGS came: requests may go */
	bool goaway;   /* no new streams (GOAWAY either way, or an error) */
	bool was_idle; /* it had no stream at some point: a close may have raced a request */
	bool resume_retried;
	/* Flow control: the windows its streams grew past ES_H2_STREAM_WINDOW (summed), and the
	 * connection's window, kept at least every stream's window together (none waits for
	 * another). */
	uint64_t grown, conn_window;
	struct es_name_wait name_wait; /* attached while the dial waits for the kubelet's address */
	uint32_t name_gen;             /* the answer dialled (resolve.h es_name_dial_failed) */
	lws_sorted_usec_list_t sul;    /* connect / handshake deadline; idle deadline once open */
	lws_sorted_usec_list_t sul_flow; /* every ES_H2_FLOW_PERIOD_MS while a window is grown */
	bool flow_armed;
	struct h2c *next, *prev; /* es->h2conns */
};

struct h2s {
	struct es_stream *st;
	struct h2c *c; /* NULL once detached */
	int32_t id;    /* the HTTP/2 stream id; 0 until submitted */
	struct h2s *next, *prev;
	struct st_connect_req req; /* kept until the answer's head came (resend, HTTP/1.1) */
	const char *path;          /* into req */
	size_t path_len;
	bool have_req;
	bool body_only, no_body, chunked;
	bool head_done, ended, retried;
	struct es_h2_head head;
	struct es_h2_flow flow;
	uint64_t reserved; /* of st->to_cloud_grown_charged, counted in h2_window_reserved_now */
};

/* h2conn.c */
void es__h2_arm(struct h2c *c, uint64_t ms); /* the connection's deadline (by its state) */
void es__h2_kick(struct h2c *c);             /* ask for WRITEABLE: nghttp2 has frames */
void es__h2_flow_arm(struct h2c *c);         /* h2stream.c: the grown windows' period */
/* Where a stream can ride (an open or opening connection with room, else a new one); sent at
 * once on an open one. 0, or -1 when the stream was failed (@s freed). */
int es__h2_place(struct h2s *s);
/* How many streams @c may carry: the kubelet's SETTINGS_MAX_CONCURRENT_STREAMS once it said,
 * PENDING_STREAMS before. */
uint32_t es__h2_max_streams(const struct h2c *c);

/* h2stream.c */
void es__h2_attach(struct h2s *s, struct h2c *c);
/* Off its connection (which arms its idle deadline when it was the last). */
void es__h2_detach(struct h2s *s);
void es__h2_stream_free(struct h2s *s);
/* Sends @s's request on its (open) connection. 0, or -1 when @s's stream was failed. */
int es__h2_submit(struct h2s *s);
/* @c's nghttp2 client session with our settings (push off, the stream window). 0 or -ENOMEM. */
int es__h2_new_session(struct h2c *c);

#endif /* EDGESTREAM_H2INT_H */

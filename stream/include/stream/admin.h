/*
 * stream/admin.h — the admin listener both daemons share (loopback by default): Prometheus
 * /metrics, /healthz (the process serves) and /readyz (ready for work). Plain HTTP/1.1, one
 * request per connection, answers built in memory and bounded (ST_ADMIN_BODY_MAX).
 *
 * The daemon supplies what differs: the metrics text and its readiness. The vhost that serves
 * st_admin_protocols must be created with info.user = a struct st_admin_ops that outlives it.
 *
 * Loop thread only.
 */
#ifndef STREAM_ADMIN_H
#define STREAM_ADMIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lws_protocols;

#define ST_ADMIN_BODY_MAX (64u * 1024u)

/* A bounded text buffer the metrics are written into; overflow makes /metrics a 500. */
struct st_text {
	char *p;
	size_t len, cap;
	bool overflow;
};

/* Append printf-style text (nothing once it overflowed). */
void st_text_put(struct st_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append the # HELP and # TYPE lines of one metric family. */
void st_text_metric(struct st_text *t, const char *name, const char *type, const char *help);

/* Append a whole family that has one sample and no labels: st_text_metric()'s lines, then
 * "@name @value". A family with labels is st_text_metric() followed by its samples. */
void st_text_counter(struct st_text *t, const char *name, const char *help, uint64_t value);
void st_text_gauge(struct st_text *t, const char *name, const char *help, uint64_t value);

/* One sample of a family whose samples differ by one label: the label's value (needing no
 * escapes) and the sample's. */
struct st_text_sample {
	const char *label_value; /* NULL ends a list */
	uint64_t value;
};

/* Append a whole family whose samples differ by one label: st_text_metric()'s lines, then
 * "@name{@label="<label_value>"} <value>" for each of @samples, up to the one whose
 * label_value is NULL (borrowed). */
void st_text_labelled(struct st_text *t, const char *name, const char *type, const char *help,
                      const char *label, const struct st_text_sample *samples);

/* Append <@daemon>_build_info{version,libwebsockets,openssl} 1: what this process runs, the
 * same family in both daemons (Prometheus' build_info convention). */
void st_text_build_info(struct st_text *t, const char *daemon, const char *version);

struct st_session_totals;
/* Append <@daemon>_tunnel_removes_total{kind=answered|crossed|repeated}: the base-protocol
 * REMOVE bookkeeping of every session (session.h), the same family in both daemons. */
void st_text_session_totals(struct st_text *t, const char *daemon,
                            const struct st_session_totals *tot);

struct st_hist;
/* Append the sample lines of histogram @h as family @name with @labels ("" or pairs without
 * braces, already escaped); the family's # HELP/# TYPE come from st_text_metric(.., "histogram",
 * ..) once before its first label set (stream/hist.h st_hist_render). */
void st_text_hist(struct st_text *t, const char *name, const char *labels, const struct st_hist *h);

/* Append the process_* families of Prometheus' client libraries: process_cpu_seconds_total,
 * process_resident_memory_bytes, process_open_fds, process_max_fds, process_start_time_seconds,
 * read from /proc now (a family whose source cannot be read is left out). Loop thread. */
void st_text_process(struct st_text *t);

struct st_admin_ops {
	/* Write every metric family into @t. */
	void (*render_metrics)(struct st_text *t, void *user);
	/* Ready for work? When not, *@why is a short reason ("draining", "not connected"). */
	bool (*ready)(void *user, const char **why);
	/* Optional (NULL: none): a daemon's own admin action for a request that is not /metrics,
	 * /healthz or /readyz: @method, @path and @query (views of @mlen/@plen/@qlen bytes; the
	 * query without its '?', NULL when there is none). Returns 0 when the path is not one of
	 * its actions (404 follows), else the HTTP status to answer with and the text body written
	 * into @out (@cap bytes, ST_ADMIN_BODY_MAX), its length in *@out_len. The admin port has
	 * no authentication of its own: it listens on loopback unless told otherwise. */
	int (*action)(void *user, const char *method, size_t mlen, const char *path, size_t plen,
	              const char *query, size_t qlen, char *out, size_t cap, size_t *out_len);
	void *user;
};

/* The raw-skt protocol of the admin vhost (name "st-admin"), with terminator. */
extern const struct lws_protocols st_admin_protocols[2];

#endif /* STREAM_ADMIN_H */

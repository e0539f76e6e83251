/*
 * stream/heaptrim.h — hand the heap's free pages back to the kernel after a burst.
 *
 * glibc returns memory to the kernel only from the top of a heap. A burst of connections
 * (each TLS handshake holds ~50 KB for a moment) leaves free chunks between the ones still in
 * use, resident for ever: measured on the edge, about 1 KiB of RSS per quiet stream. Once in a
 * while, when the free bytes the allocator keeps are large beside what is in use, malloc_trim()
 * gives their pages back (MADV_DONTNEED on every free page, in every arena).
 *
 * Cost: mallinfo2() walks the bins (a few hundred entries, not the chunks in use); malloc_trim()
 * one madvise per free region, only when the check says so. Both run on the loop thread, at
 * most once per interval (daemons: every 5 s).
 *
 * Thread rules: st_heap_trim_tick() and the trimmer from one thread (the loop); malloc's own
 * locks do the rest.
 */
#ifndef STREAM_HEAPTRIM_H
#define STREAM_HEAPTRIM_H

#include <libwebsockets.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Trim only when the allocator keeps at least this much free... */
#define ST_HEAP_TRIM_MIN_FREE_BYTES (1024u * 1024u)
/* ...and at least this share (percent) of what is in use... */
#define ST_HEAP_TRIM_FREE_PERCENT 10u
/* ...and the free bytes grew by ST_HEAP_TRIM_MIN_FREE_BYTES above their lowest since the last
 * trim: free pages are touched again only when reused, so free bytes that stayed put since the
 * last trim are already handed back, and trimming them again would be wasted work. */

/* glibc's own trim at free() (M_TRIM_THRESHOLD) once a trimmer runs: only for a top chunk this
 * large, never for the buffers a transfer frees and takes again every round. */
#define ST_HEAP_TRIM_AUTO_BYTES (32 * 1024 * 1024)

/* How often the daemons look. */
#define ST_HEAP_TRIM_INTERVAL_MS 5000u

/*
 * st_heap_trim_wanted() - the decision alone (pure): @free_bytes kept free now, @used_bytes in
 * use, @low_free_bytes the lowest free count seen since the last trim (0 before the first).
 */
bool st_heap_trim_wanted(size_t free_bytes, size_t used_bytes, size_t low_free_bytes);

/*
 * st_heap_trim_step() - one look (pure): updates @low_free_bytes with what is free now and
 * returns whether to trim; when it says yes, the caller trims and the low mark moves up to now.
 */
bool st_heap_trim_step(size_t *low_free_bytes, size_t free_bytes, size_t used_bytes);

/* What one tick saw and did, for a debug log line and the tests. */
struct st_heap_trim_result {
	size_t free_bytes; /* kept free by malloc */
	size_t used_bytes; /* in use */
	bool trimmed;      /* malloc_trim() ran */
	double elapsed_ms; /* the trim's own time */
};

/*
 * st_heap_trim_tick() - look at the heap and trim when st_heap_trim_wanted() says so, keeping
 * @low_free_bytes (the caller's, 0 at first) up to date. Returns whether it trimmed; @res (may
 * be NULL) says what it saw.
 */
bool st_heap_trim_tick(size_t *low_free_bytes, struct st_heap_trim_result *res);

/* The timer each daemon runs on its loop: a tick every interval, a debug line per trim. */
struct st_heap_trimmer {
	lws_sorted_usec_list_t sul; /* first: the timer's callback finds us from it */
	struct lws_context *ctx;
	unsigned interval_ms;
	size_t low_free_bytes; /* see st_heap_trim_wanted() */
	uint64_t trims;        /* malloc_trim() calls so far */
};

/* st_heap_trimmer_start() - tick every @interval_ms (0: never) on @ctx's loop thread. */
void st_heap_trimmer_start(struct st_heap_trimmer *t, struct lws_context *ctx,
                           unsigned interval_ms);

/* st_heap_trimmer_stop() - no more ticks; safe when never started. */
void st_heap_trimmer_stop(struct st_heap_trimmer *t);

#endif /* STREAM_HEAPTRIM_H */

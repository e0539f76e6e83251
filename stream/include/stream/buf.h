/*
 * stream/buf.h — a bounded byte queue for relaying (curl's dynbuf spirit, shaped as a queue).
 *
 * Bytes live in a chain of blocks, allocated on demand and freed as soon as they are drained,
 * so an empty queue holds no memory (haproxy h1_release_buf). An append sizes its block to what
 * is queued (256 bytes up to ST_BUF_BLOCK_BYTES, doubling): a quiet stream's log line in flight
 * holds a few hundred bytes, not a whole block, and a busy queue holds under twice its bytes
 * plus one block. The number of queued bytes is capped at
 * creation: an append that does not fit is refused whole with -EMSGSIZE; nothing ever grows
 * past the cap.
 *
 * Producers either append a copy, or reserve space and commit what they wrote, so a read() or
 * SSL_read() can land straight in the queue. Consumers peek a contiguous view of the front and
 * consume what they used (one lws_write per WRITEABLE), or read a copy out.
 *
 * Flow control: pause the source once st_buf_above_high() (len > high), resume it once
 * st_buf_below_low() (len <= low): the hysteresis of the lws raw-proxy example, with
 * ST_RELAY_HIGH_WATER_BYTES / ST_RELAY_LOW_WATER_BYTES. Size the cap as the high mark plus the
 * largest chunk that can still arrive after the pause (lws delivers the chunk in hand), so
 * -EMSGSIZE only ever means a peer that ignored flow control.
 *
 * Thread rules: none inside; one owner at a time (normally the loop thread). Pure code: the only
 * side effects are malloc() and free().
 */
#ifndef STREAM_BUF_H
#define STREAM_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The largest block: one TLS record's worth, the unit OpenSSL and lws hand us bytes in; a
 * reservation (a read into the queue) always gets one. */
#define ST_BUF_BLOCK_BYTES (16u * 1024u)

struct st_buf_block;

/*
 * The queue, embedded by its owner. Every field is read-only outside buf.c; use the functions.
 * Invariants: len <= cap; low <= high <= cap; len == 0 implies head == tail == NULL (outside a
 * reserve/commit pair); only the tail block may be empty.
 */
struct st_buf {
	struct st_buf_block *head; /* oldest block, read side (internal) */
	struct st_buf_block *tail; /* newest block, write side (internal) */
	size_t len;                /* bytes queued (read-only) */
	size_t cap;                /* most bytes queued at once (read-only) */
	size_t high;               /* pause mark (read-only) */
	size_t low;                /* resume mark (read-only) */
};

/*
 * st_buf_init() - an empty queue that holds at most @cap_bytes (0 is allowed: nothing fits).
 * Allocates nothing. Watermarks start at high = cap / 2, low = cap / 4.
 */
void st_buf_init(struct st_buf *b, size_t cap_bytes);

/*
 * st_buf_cleanup() - free every block. The queue is empty afterwards and may be used again with
 * the same cap and watermarks. Safe to call twice.
 */
void st_buf_cleanup(struct st_buf *b);

/*
 * st_buf_set_watermarks() - pause above @high bytes, resume at or below @low bytes (low == 0:
 * only once empty). Returns 0, or -EINVAL unless low <= high <= cap.
 */
int st_buf_set_watermarks(struct st_buf *b, size_t high, size_t low);

/* st_buf_raise_cap() - let the queue hold @cap_bytes from now on (a cap at or below the
 * current one changes nothing); the watermarks stay. For a holder whose reservation grew. */
void st_buf_raise_cap(struct st_buf *b, size_t cap_bytes);

/* st_buf_lower_cap() - let the queue hold only @cap_bytes from now on: 0, or -EBUSY when it
 * holds more, or its high watermark is above it (nothing changed). */
int st_buf_lower_cap(struct st_buf *b, size_t cap_bytes);

/* st_buf_len() - bytes queued. */
static inline size_t st_buf_len(const struct st_buf *b)
{
	return b->len;
}

/* st_buf_space() - bytes that may still be queued (cap - len). */
static inline size_t st_buf_space(const struct st_buf *b)
{
	return b->cap - b->len;
}

/* st_buf_above_high() - more than the high mark is queued: pause the source. */
static inline bool st_buf_above_high(const struct st_buf *b)
{
	return b->len > b->high;
}

/* st_buf_below_low() - no more than the low mark is queued: a paused source may resume. */
static inline bool st_buf_below_low(const struct st_buf *b)
{
	return b->len <= b->low;
}

/*
 * st_buf_append() - queue a copy of all @n bytes at @p (borrowed; may be NULL when n is 0).
 * Returns 0; -EMSGSIZE when they do not fit under the cap; -ENOMEM when a block cannot be
 * allocated. On error nothing was queued and the queue is unchanged (all or nothing).
 */
int st_buf_append(struct st_buf *b, const void *p, size_t n);

/*
 * st_buf_reserve() - contiguous writable space at the end of the queue, for read() into it.
 * @p: set to where the bytes go; valid until st_buf_commit() and no other call may come between.
 *
 * Returns the writable size (> 0, never more than st_buf_space()), 0 when the queue is full,
 * or -ENOMEM. After a return > 0, call st_buf_commit() with what was really written (0 is fine).
 */
ssize_t st_buf_reserve(struct st_buf *b, uint8_t **p);

/*
 * st_buf_commit() - @n bytes were written at the last reservation; n is at most what
 * st_buf_reserve() returned. A commit of 0 on an empty queue frees the reserved block.
 */
void st_buf_commit(struct st_buf *b, size_t n);

/*
 * st_buf_peek() - the contiguous readable bytes at the front.
 * @p: set to them (NULL when empty); valid until the next call that changes the queue.
 * Returns their count: 0 when empty, else 1..ST_BUF_BLOCK_BYTES (one block, not all of len).
 */
size_t st_buf_peek(const struct st_buf *b, const uint8_t **p);

/* st_buf_consume() - drop @n bytes from the front (n <= st_buf_len()); drained blocks are freed. */
void st_buf_consume(struct st_buf *b, size_t n);

/*
 * st_buf_read() - copy up to @n bytes from the front into @dst (caller memory of @n bytes) and
 * consume them, across blocks. Returns how many were copied: min(n, st_buf_len()).
 */
size_t st_buf_read(struct st_buf *b, void *dst, size_t n);

#endif /* STREAM_BUF_H */

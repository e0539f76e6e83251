/*
 * stream/buf.h — a bounded byte queue for relaying (curl's dynbuf spirit, shaped as a queue).
 *
 * Bytes live in a chain of fixed-size blocks allocated on demand and freed as soon as they are
 * drained, so an idle stream holds no buffer memory, and the total is capped at creation: going
 * over is -EMSGSIZE, never an unbounded realloc. Producers may reserve space and commit, so a
 * read() or SSL_read() can land directly in the queue; consumers peek a contiguous view and
 * consume. Watermark helpers drive rx flow control (pause the source above the high mark, resume
 * below the low mark).
 *
 * Not thread-safe: one owner (the loop thread).
 */
#ifndef STREAM_BUF_H
#define STREAM_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Block size: one TLS record's worth, the unit lws and OpenSSL read in. */
#define ST_BUF_BLOCK_BYTES (16u * 1024u)

struct st_buf_block;

struct st_buf {
	struct st_buf_block *head; /* read side (internal) */
	struct st_buf_block *tail; /* write side (internal) */
	size_t len;                /* bytes queued (read-only) */
	size_t cap;                /* most bytes ever queued at once (read-only) */
};

/* st_buf_init() - an empty queue holding at most @cap_bytes. Allocates nothing. */
void st_buf_init(struct st_buf *b, size_t cap_bytes);

/* st_buf_cleanup() - free every block; the queue is empty and reusable afterwards. */
void st_buf_cleanup(struct st_buf *b);

static inline size_t st_buf_len(const struct st_buf *b)
{
	return b->len;
}

/* st_buf_space() - bytes that may still be appended. */
static inline size_t st_buf_space(const struct st_buf *b)
{
	return b->cap - b->len;
}

/* st_buf_append() - queue all of @n bytes, or nothing: -EMSGSIZE when they do not fit,
 * -ENOMEM when a block cannot be allocated. 0 on success. */
int st_buf_append(struct st_buf *b, const void *p, size_t n);

/*
 * st_buf_reserve() - contiguous writable space at the end of the queue.
 * @p: set to where the bytes go.
 *
 * Returns how many bytes may be written there (> 0), 0 when the queue is full, or -ENOMEM.
 * Follow with st_buf_commit() of what was really written (possibly 0).
 */
ssize_t st_buf_reserve(struct st_buf *b, uint8_t **p);

/* st_buf_commit() - @n bytes were written into the last reservation (n <= what it returned). */
void st_buf_commit(struct st_buf *b, size_t n);

/* st_buf_peek() - contiguous readable bytes at the front; returns their count (0 when empty). */
size_t st_buf_peek(const struct st_buf *b, const uint8_t **p);

/* st_buf_consume() - drop @n bytes from the front (n <= st_buf_len()); drained blocks are freed. */
void st_buf_consume(struct st_buf *b, size_t n);

/* Flow-control watermarks: above @high pause the source; resume once at or below @low. */
static inline bool st_buf_above(const struct st_buf *b, size_t high)
{
	return b->len > high;
}

static inline bool st_buf_at_or_below(const struct st_buf *b, size_t low)
{
	return b->len <= low;
}

#endif /* STREAM_BUF_H */

/* Bounded block-chain byte queue (stream/buf.h). */
#include <stream/buf.h>
#include <stream/err.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct st_buf_block {
	struct st_buf_block *next;
	size_t start; /* first unread byte; start <= end */
	size_t end;   /* one past the last written byte; end <= size */
	size_t size;  /* bytes data[] holds: ST_BUF_MIN_BLOCK_BYTES..ST_BUF_BLOCK_BYTES */
	uint8_t data[];
};

/* The smallest block: a log line or a small answer in flight costs this, not a whole block. */
#define ST_BUF_MIN_BLOCK_BYTES 256u

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static struct st_buf_block *block_new(size_t size)
{
	struct st_buf_block *blk = malloc(sizeof *blk + size);
	if (blk != NULL) {
		blk->next = NULL;
		blk->start = blk->end = 0;
		blk->size = size;
	}
	return blk;
}

/*
 * The size of the next block when @want more bytes must fit and @queued are already queued:
 * the next power of two of both together, from ST_BUF_MIN_BLOCK_BYTES up to a full block. A
 * quiet stream's line gets a small block; a queue that keeps filling gets blocks as large as
 * what it holds, so the count of blocks (and their headers) stays logarithmic, and memory
 * stays under twice the bytes queued plus one block.
 */
static size_t block_size_for(size_t want, size_t queued)
{
	size_t need = want + queued;
	if (need >= ST_BUF_BLOCK_BYTES)
		return ST_BUF_BLOCK_BYTES;
	size_t size = ST_BUF_MIN_BLOCK_BYTES;
	while (size < need)
		size *= 2;
	return size;
}

static void chain_free(struct st_buf_block *blk)
{
	while (blk != NULL) {
		struct st_buf_block *next = blk->next;
		free(blk);
		blk = next;
	}
}

void st_buf_init(struct st_buf *b, size_t cap_bytes)
{
	b->head = b->tail = NULL;
	b->len = 0;
	b->cap = cap_bytes;
	b->high = cap_bytes / 2;
	b->low = cap_bytes / 4;
}

void st_buf_cleanup(struct st_buf *b)
{
	chain_free(b->head);
	b->head = b->tail = NULL;
	b->len = 0;
}

int st_buf_set_watermarks(struct st_buf *b, size_t high, size_t low)
{
	if (low > high || high > b->cap)
		return -EINVAL;
	b->high = high;
	b->low = low;
	return 0;
}

void st_buf_raise_cap(struct st_buf *b, size_t cap_bytes)
{
	if (cap_bytes > b->cap)
		b->cap = cap_bytes;
}

int st_buf_lower_cap(struct st_buf *b, size_t cap_bytes)
{
	if (b->len > cap_bytes || b->high > cap_bytes)
		return -EBUSY;
	if (cap_bytes < b->cap)
		b->cap = cap_bytes;
	return 0;
}

int st_buf_append(struct st_buf *b, const void *p, size_t n)
{
	if (n > st_buf_space(b))
		return -EMSGSIZE;
	if (n == 0)
		return 0;
	/* Allocate every block needed before touching the queue, so a failure leaves it as it
	 * was and the caller can retry or reset the stream without losing bytes. */
	size_t room = b->tail != NULL ? b->tail->size - b->tail->end : 0;
	struct st_buf_block *first = NULL, *last = NULL;
	while (room < n) {
		struct st_buf_block *blk = block_new(block_size_for(n - room, b->len + room));
		if (blk == NULL) {
			chain_free(first);
			return -ENOMEM;
		}
		if (last != NULL)
			last->next = blk;
		else
			first = blk;
		last = blk;
		room += blk->size;
	}

	const uint8_t *src = p;
	size_t left = n;
	if (b->tail != NULL) {
		size_t take = min_size(b->tail->size - b->tail->end, left);
		memcpy(b->tail->data + b->tail->end, src, take);
		b->tail->end += take;
		src += take;
		left -= take;
	}
	for (struct st_buf_block *blk = first; blk != NULL; blk = blk->next) {
		size_t take = min_size(blk->size, left);
		memcpy(blk->data, src, take);
		blk->end = take;
		src += take;
		left -= take;
	}
	if (first != NULL) {
		if (b->tail != NULL)
			b->tail->next = first;
		else
			b->head = first;
		b->tail = last;
	}
	b->len += n;
	return 0;
}

ssize_t st_buf_reserve(struct st_buf *b, uint8_t **p)
{
	size_t space = st_buf_space(b);
	if (space == 0)
		return 0;
	/* Fill the tail before starting a new block: at most two blocks are ever partly used,
	 * so memory stays within len + 2 blocks however the producer splits its writes. */
	if (b->tail == NULL || b->tail->end == b->tail->size) {
		/* A read into the queue has no size yet: a whole block, what one read can bring. */
		struct st_buf_block *blk = block_new(ST_BUF_BLOCK_BYTES);
		if (blk == NULL)
			return -ENOMEM;
		if (b->tail != NULL)
			b->tail->next = blk;
		else
			b->head = blk;
		b->tail = blk;
	}
	*p = b->tail->data + b->tail->end;
	return (ssize_t)min_size(b->tail->size - b->tail->end, space);
}

void st_buf_commit(struct st_buf *b, size_t n)
{
	assert(b->tail != NULL);
	assert(n <= b->tail->size - b->tail->end && n <= st_buf_space(b));
	b->tail->end += n;
	b->len += n;
	/* A read that produced nothing must not leave an idle queue holding a block. */
	if (b->len == 0)
		st_buf_cleanup(b);
}

size_t st_buf_peek(const struct st_buf *b, const uint8_t **p)
{
	if (b->len == 0) {
		*p = NULL;
		return 0;
	}
	/* Only the tail may be empty, and a non-empty queue's head holds unread bytes. */
	assert(b->head != NULL && b->head->start < b->head->end);
	*p = b->head->data + b->head->start;
	return b->head->end - b->head->start;
}

void st_buf_consume(struct st_buf *b, size_t n)
{
	assert(n <= b->len);
	b->len -= n;
	while (n > 0) {
		struct st_buf_block *blk = b->head;
		size_t take = min_size(n, blk->end - blk->start);
		blk->start += take;
		n -= take;
		if (blk->start == blk->end) {
			b->head = blk->next;
			free(blk);
		}
	}
	/* Drained: also free an empty tail a reserve/commit(0) may have left behind. */
	if (b->len == 0)
		st_buf_cleanup(b);
}

size_t st_buf_read(struct st_buf *b, void *dst, size_t n)
{
	size_t total = min_size(n, b->len);
	uint8_t *out = dst;
	size_t done = 0;
	while (done < total) {
		const uint8_t *p;
		size_t k = min_size(st_buf_peek(b, &p), total - done);
		memcpy(out + done, p, k);
		st_buf_consume(b, k);
		done += k;
	}
	return total;
}

/* Bounded block-chain byte queue (stream/buf.h). */
#include <stream/buf.h>
#include <stream/err.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct st_buf_block {
	struct st_buf_block *next;
	size_t start; /* first unread byte; start <= end */
	size_t end;   /* one past the last written byte; end <= ST_BUF_BLOCK_BYTES */
	uint8_t data[ST_BUF_BLOCK_BYTES];
};

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

static struct st_buf_block *block_new(void)
{
	struct st_buf_block *blk = malloc(sizeof *blk);
	if (blk != NULL) {
		blk->next = NULL;
		blk->start = blk->end = 0;
	}
	return blk;
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

int st_buf_append(struct st_buf *b, const void *p, size_t n)
{
	if (n > st_buf_space(b))
		return -EMSGSIZE;
	if (n == 0)
		return 0;
	/* Allocate every block needed before touching the queue, so a failure leaves it as it
	 * was and the caller can retry or reset the stream without losing bytes. */
	size_t room = b->tail != NULL ? ST_BUF_BLOCK_BYTES - b->tail->end : 0;
	struct st_buf_block *first = NULL, *last = NULL;
	while (room < n) {
		struct st_buf_block *blk = block_new();
		if (blk == NULL) {
			chain_free(first);
			return -ENOMEM;
		}
		if (last != NULL)
			last->next = blk;
		else
			first = blk;
		last = blk;
		room += ST_BUF_BLOCK_BYTES;
	}

	const uint8_t *src = p;
	size_t left = n;
	if (b->tail != NULL) {
		size_t take = min_size(ST_BUF_BLOCK_BYTES - b->tail->end, left);
		memcpy(b->tail->data + b->tail->end, src, take);
		b->tail->end += take;
		src += take;
		left -= take;
	}
	for (struct st_buf_block *blk = first; blk != NULL; blk = blk->next) {
		size_t take = min_size(ST_BUF_BLOCK_BYTES, left);
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
	if (b->tail == NULL || b->tail->end == ST_BUF_BLOCK_BYTES) {
		struct st_buf_block *blk = block_new();
		if (blk == NULL)
			return -ENOMEM;
		if (b->tail != NULL)
			b->tail->next = blk;
		else
			b->head = blk;
		b->tail = blk;
	}
	*p = b->tail->data + b->tail->end;
	return (ssize_t)min_size(ST_BUF_BLOCK_BYTES - b->tail->end, space);
}

void st_buf_commit(struct st_buf *b, size_t n)
{
	assert(b->tail != NULL);
	assert(n <= ST_BUF_BLOCK_BYTES - b->tail->end && n <= st_buf_space(b));
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

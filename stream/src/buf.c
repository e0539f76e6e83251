/* Bounded block-chain byte queue (stream/buf.h). */
#include <stream/buf.h>
#include <stream/err.h>

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct st_buf_block {
	struct st_buf_block *next;
	size_t start; /* first unread byte */
	size_t end;   /* one past the last written byte */
	uint8_t data[ST_BUF_BLOCK_BYTES];
};

void st_buf_init(struct st_buf *b, size_t cap_bytes)
{
	b->head = b->tail = NULL;
	b->len = 0;
	b->cap = cap_bytes;
}

void st_buf_cleanup(struct st_buf *b)
{
	struct st_buf_block *blk = b->head;
	while (blk != NULL) {
		struct st_buf_block *next = blk->next;
		free(blk);
		blk = next;
	}
	b->head = b->tail = NULL;
	b->len = 0;
}

/* The tail block if it has room, else a new one linked at the end; NULL when out of memory. */
static struct st_buf_block *writable_block(struct st_buf *b)
{
	if (b->tail != NULL && b->tail->end < ST_BUF_BLOCK_BYTES)
		return b->tail;
	struct st_buf_block *blk = malloc(sizeof *blk);
	if (blk == NULL)
		return NULL;
	blk->next = NULL;
	blk->start = blk->end = 0;
	if (b->tail != NULL)
		b->tail->next = blk;
	else
		b->head = blk;
	b->tail = blk;
	return blk;
}

int st_buf_append(struct st_buf *b, const void *p, size_t n)
{
	if (n > st_buf_space(b))
		return -EMSGSIZE;
	/* Allocate every block needed first, so a failure leaves the queue as it was. */
	size_t room = b->tail ? ST_BUF_BLOCK_BYTES - b->tail->end : 0;
	struct st_buf_block *old_tail = b->tail;
	while (room < n) {
		struct st_buf_block *blk = malloc(sizeof *blk);
		if (blk == NULL) {
			/* unlink and free what this call added */
			struct st_buf_block *extra = old_tail ? old_tail->next : b->head;
			while (extra != NULL) {
				struct st_buf_block *next = extra->next;
				free(extra);
				extra = next;
			}
			if (old_tail)
				old_tail->next = NULL;
			else
				b->head = NULL;
			b->tail = old_tail;
			return -ENOMEM;
		}
		blk->next = NULL;
		blk->start = blk->end = 0;
		if (b->tail)
			b->tail->next = blk;
		else
			b->head = blk;
		b->tail = blk;
		room += ST_BUF_BLOCK_BYTES;
	}
	const uint8_t *src = p;
	struct st_buf_block *blk = old_tail && old_tail->end < ST_BUF_BLOCK_BYTES ? old_tail
	                           : old_tail                                     ? old_tail->next
	                                                                          : b->head;
	size_t left = n;
	while (left > 0) {
		size_t take = ST_BUF_BLOCK_BYTES - blk->end;
		if (take > left)
			take = left;
		memcpy(blk->data + blk->end, src, take);
		blk->end += take;
		src += take;
		left -= take;
		blk = blk->next;
	}
	b->len += n;
	return 0;
}

ssize_t st_buf_reserve(struct st_buf *b, uint8_t **p)
{
	size_t space = st_buf_space(b);
	if (space == 0)
		return 0;
	struct st_buf_block *blk = writable_block(b);
	if (blk == NULL)
		return -ENOMEM;
	size_t n = ST_BUF_BLOCK_BYTES - blk->end;
	*p = blk->data + blk->end;
	return (ssize_t)(n < space ? n : space);
}

void st_buf_commit(struct st_buf *b, size_t n)
{
	assert(b->tail != NULL && n <= ST_BUF_BLOCK_BYTES - b->tail->end && n <= st_buf_space(b));
	b->tail->end += n;
	b->len += n;
}

size_t st_buf_peek(const struct st_buf *b, const uint8_t **p)
{
	struct st_buf_block *blk = b->head;
	/* An empty head block can remain after a reservation committed nothing. */
	while (blk != NULL && blk->start == blk->end)
		blk = blk->next;
	if (blk == NULL) {
		*p = NULL;
		return 0;
	}
	*p = blk->data + blk->start;
	return blk->end - blk->start;
}

void st_buf_consume(struct st_buf *b, size_t n)
{
	assert(n <= b->len);
	b->len -= n;
	while (b->head != NULL) {
		struct st_buf_block *blk = b->head;
		size_t avail = blk->end - blk->start;
		size_t take = n < avail ? n : avail;
		blk->start += take;
		n -= take;
		if (blk->start < blk->end)
			break;
		/* Fully read: free it, the tail too, so an idle queue holds no memory. */
		b->head = blk->next;
		if (b->tail == blk)
			b->tail = NULL;
		free(blk);
	}
}

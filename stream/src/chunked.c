/* Chunked transfer coding (stream/chunked.h): a byte-driven state machine, so any split of the
 * input gives the same result, with a fast path that hands out runs of data bytes whole. */
#include <stream/chunked.h>
#include <stream/err.h>
#include <stream/hex.h>

enum {
	CH_SIZE = 0,    /* reading hex digits */
	CH_SIZE_BWS,    /* whitespace after the size: only more of it, ';' or the line end */
	CH_EXT,         /* after ';': chunk extensions, ignored */
	CH_SIZE_LF,     /* CR seen at the end of the size line */
	CH_DATA,        /* remaining data bytes */
	CH_DATA_CR,     /* data done: expect CR (or a bare LF) */
	CH_DATA_LF,     /* expect LF */
	CH_TRAILER_BOL, /* start of a trailer line, or of the final empty line */
	CH_TRAILER,     /* inside a trailer field line */
	CH_TRAILER_LF,  /* CR at the end of a trailer line */
	CH_FINAL_LF,    /* CR of the final empty line */
	CH_DONE,        /* message complete */
};

/* Chunk sizes above this are refused: no response of ours is that large, and it keeps
 * remaining * 16 far from overflow. */
#define CHUNK_SIZE_MAX ((uint64_t)1 << 62)

void st_chunked_init(struct st_chunked_decoder *d)
{
	d->state = CH_SIZE;
	d->remaining = 0;
	d->line_bytes = 0;
	d->trailer_bytes = 0;
	d->digits = 0;
	d->body_bytes = 0;
}

bool st_chunked_done(const struct st_chunked_decoder *d)
{
	return d->state == CH_DONE;
}

/* The size line ended: start the data, or the trailer section after the last chunk. */
static void size_line_done(struct st_chunked_decoder *d)
{
	d->line_bytes = 0;
	d->digits = 0;
	d->state = d->remaining == 0 ? CH_TRAILER_BOL : CH_DATA;
}

ssize_t st_chunked_decode(struct st_chunked_decoder *d, const uint8_t *in, size_t len,
                          const uint8_t **data, size_t *data_len)
{
	*data = NULL;
	*data_len = 0;
	size_t i = 0;
	while (i < len && d->state != CH_DONE) {
		uint8_t c = in[i];
		switch (d->state) {
		case CH_DATA: {
			size_t avail = len - i;
			size_t n = d->remaining < avail ? (size_t)d->remaining : avail;
			*data = in + i;
			*data_len = n;
			d->remaining -= n;
			d->body_bytes += n;
			if (d->remaining == 0)
				d->state = CH_DATA_CR;
			return (ssize_t)(i + n);
		}
		case CH_SIZE:
		case CH_SIZE_BWS:
		case CH_EXT:
			if (++d->line_bytes > ST_MAX_CHUNK_LINE_BYTES)
				return -EMSGSIZE;
			if (c == '\r') {
				if (d->digits == 0)
					return -EBADMSG;
				d->state = CH_SIZE_LF;
			} else if (c == '\n') {
				if (d->digits == 0)
					return -EBADMSG;
				size_line_done(d);
			} else if (d->state == CH_SIZE && st_hex_value(c) >= 0) {
				if (d->remaining >= CHUNK_SIZE_MAX >> 4)
					return -EMSGSIZE;
				d->remaining = d->remaining << 4 | (uint64_t)st_hex_value(c);
				d->digits++;
			} else if (d->state != CH_EXT && (c == ';' || c == ' ' || c == '\t')) {
				if (d->digits == 0)
					return -EBADMSG;
				d->state = c == ';' ? CH_EXT : CH_SIZE_BWS;
			} else if (d->state == CH_EXT && (c == '\t' || (c >= 0x20 && c != 0x7f))) {
				/* extension bytes: ignored */
			} else {
				return -EBADMSG;
			}
			break;
		case CH_SIZE_LF:
			if (++d->line_bytes > ST_MAX_CHUNK_LINE_BYTES)
				return -EMSGSIZE;
			if (c != '\n')
				return -EBADMSG;
			size_line_done(d);
			break;
		case CH_DATA_CR:
			if (c == '\r')
				d->state = CH_DATA_LF;
			else if (c == '\n')
				d->state = CH_SIZE;
			else
				return -EBADMSG;
			break;
		case CH_DATA_LF:
			if (c != '\n')
				return -EBADMSG;
			d->state = CH_SIZE;
			break;
		case CH_TRAILER_BOL:
			if (c == '\r') {
				d->state = CH_FINAL_LF;
				break;
			}
			if (c == '\n') {
				d->state = CH_DONE;
				break;
			}
			d->state = CH_TRAILER;
			__attribute__((fallthrough)); /* this byte starts a trailer line */
		case CH_TRAILER:
			if (++d->trailer_bytes > ST_MAX_CHUNK_TRAILER_BYTES)
				return -EMSGSIZE;
			if (c == '\r')
				d->state = CH_TRAILER_LF;
			else if (c == '\n')
				d->state = CH_TRAILER_BOL;
			else if (c != '\t' && (c < 0x20 || c == 0x7f))
				return -EBADMSG;
			break;
		case CH_TRAILER_LF:
			if (++d->trailer_bytes > ST_MAX_CHUNK_TRAILER_BYTES)
				return -EMSGSIZE;
			if (c != '\n')
				return -EBADMSG;
			d->state = CH_TRAILER_BOL;
			break;
		case CH_FINAL_LF:
			if (c != '\n')
				return -EBADMSG;
			d->state = CH_DONE;
			break;
		default:
			return -EINVAL;
		}
		i++;
	}
	return (ssize_t)i;
}

ssize_t st_chunked_encode_header(char *out, size_t cap, size_t data_len)
{
	static const char hex[] = "0123456789abcdef";
	if (data_len == 0)
		return -EINVAL;
	char digits[16];
	size_t n = 0;
	for (size_t v = data_len; v != 0; v >>= 4)
		digits[n++] = hex[v & 0xf];
	if (n + 2 > cap)
		return -EMSGSIZE;
	for (size_t i = 0; i < n; i++)
		out[i] = digits[n - 1 - i];
	out[n] = '\r';
	out[n + 1] = '\n';
	return (ssize_t)(n + 2);
}

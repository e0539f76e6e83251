/*
 * stream/chunked.h — HTTP/1.1 chunked transfer coding: an incremental decoder that doubles as a
 * framing tracker, and encoder helpers.
 *
 * A relay needs to know where a chunked response ends while passing its bytes through unchanged
 * (so the apiserver's connection can carry the next request); a consumer needs the body bytes.
 * The decoder serves both: it never copies or modifies its input, it reports how much input it
 * consumed and the body bytes found, and st_chunked_done() says when the message ended. Input may
 * be split anywhere, down to one byte at a time.
 *
 * Pure code; one decoder per message, owned by one thread.
 */
#ifndef STREAM_CHUNKED_H
#define STREAM_CHUNKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <stream/limits.h>

/* Decoder state; treat as opaque, set up with st_chunked_init(). */
struct st_chunked_decoder {
	int state;            /* internal */
	uint64_t remaining;   /* chunk-size being read, then data bytes left in the chunk */
	size_t line_bytes;    /* bytes of the current chunk-size line */
	size_t trailer_bytes; /* bytes of the trailer section so far */
	unsigned digits;      /* hex digits of the current chunk-size */
	uint64_t body_bytes;  /* body bytes decoded so far (read-only) */
};

/* st_chunked_init() - start a new message. */
void st_chunked_init(struct st_chunked_decoder *d);

/*
 * st_chunked_decode() - advance over the next bytes of a chunked message.
 * @in, @len: input; never modified.
 * @data, @data_len: set to the body bytes found inside the consumed input (a view into @in), or
 *                   NULL/0. The decoder stops right after a run of body bytes, so one call
 *                   yields at most one run.
 *
 * Returns the input bytes consumed (>0); 0 when @len is 0 or the message already ended (bytes
 * after the end belong to the next message); -EBADMSG for malformed coding (bad hex, missing
 * CRLF after data, control bytes); -EMSGSIZE for a chunk-size line over ST_MAX_CHUNK_LINE_BYTES,
 * trailers over ST_MAX_CHUNK_TRAILER_BYTES, or a chunk size over 2^62.
 */
ssize_t st_chunked_decode(struct st_chunked_decoder *d, const uint8_t *in, size_t len,
                          const uint8_t **data, size_t *data_len);

/* st_chunked_done() - has the last chunk and its trailer section been consumed? */
bool st_chunked_done(const struct st_chunked_decoder *d);

/* Largest chunk header st_chunked_encode_header() writes: 16 hex digits + CRLF. */
#define ST_CHUNK_HEADER_MAX_BYTES 18u
/* What follows each chunk's data. */
#define ST_CHUNK_TRAILER "\r\n"
/* The last chunk with an empty trailer section: ends a chunked message. */
#define ST_CHUNK_LAST "0\r\n\r\n"

/*
 * st_chunked_encode_header() - write "<hex size>\r\n" for a chunk of @data_len bytes.
 * Returns the bytes written, or -EMSGSIZE when @cap is too small; -EINVAL for @data_len 0 (that
 * is the last chunk: use ST_CHUNK_LAST).
 */
ssize_t st_chunked_encode_header(char *out, size_t cap, size_t data_len);

#endif /* STREAM_CHUNKED_H */

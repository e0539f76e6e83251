/*
 * cri/pb.h — the protobuf wire format, just what the CRI messages need (pure, bounded).
 *
 * Why not protobuf-c: the CRI client sends eight request types and reads five response types,
 * a few fields each; a 200-line codec with a fuzz target is smaller to audit than generated code
 * plus a runtime, and it bounds every string it copies. Unknown fields are skipped, as proto3
 * requires; `repeated int32` is read packed and unpacked.
 *
 * Writer: appends fields to a caller's buffer; an append that does not fit sets `overflow` and
 * the encoder's caller reports -EMSGSIZE. Reader: iterates over the fields of one message.
 */
#ifndef CRI_PB_H
#define CRI_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum cri_pb_wire {
	CRI_PB_VARINT = 0,
	CRI_PB_I64 = 1,
	CRI_PB_LEN = 2,
	CRI_PB_I32 = 5,
};

struct cri_pb_writer {
	uint8_t *p;
	size_t len, cap;
	bool overflow;
};

/* A bare varint, no key (the elements of a packed repeated field). */
void cri_pb_put_uvarint(struct cri_pb_writer *w, uint64_t v);
void cri_pb_put_varint(struct cri_pb_writer *w, uint32_t field, uint64_t v);
/* A varint field only when @v is not 0 (proto3 omits defaults). */
void cri_pb_put_uint(struct cri_pb_writer *w, uint32_t field, uint64_t v);
void cri_pb_put_bool(struct cri_pb_writer *w, uint32_t field, bool v);
/* A length-delimited field (string, bytes, or an embedded message already encoded). */
void cri_pb_put_bytes(struct cri_pb_writer *w, uint32_t field, const void *p, size_t len);
/* A string field, omitted when empty (NULL counts as empty). */
void cri_pb_put_string(struct cri_pb_writer *w, uint32_t field, const char *s);

/* One field read from a message. */
struct cri_pb_field {
	uint32_t number;
	enum cri_pb_wire wire;
	uint64_t varint;      /* CRI_PB_VARINT, and the value of I32/I64 */
	const uint8_t *bytes; /* CRI_PB_LEN: a view into the message */
	size_t len;
};

struct cri_pb_reader {
	const uint8_t *p;
	size_t len, off;
};

void cri_pb_reader_init(struct cri_pb_reader *r, const uint8_t *p, size_t len);
/* The next field: 1, 0 at the end, -EBADMSG when malformed (truncated, bad wire type, field 0,
 * a varint over 10 bytes, groups). */
int cri_pb_next(struct cri_pb_reader *r, struct cri_pb_field *f);

/* Copy a string field into @out (@cap bytes, NUL-terminated). -EMSGSIZE when it does not fit,
 * -EBADMSG when it holds a NUL or the field is not length-delimited. */
int cri_pb_copy_string(const struct cri_pb_field *f, char *out, size_t cap);

#endif /* CRI_PB_H */

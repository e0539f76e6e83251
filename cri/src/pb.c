/*
 * cri/src/pb.c — protobuf wire format (pb.h). Pure.
 */
#include <cri/pb.h>

#include <errno.h>
#include <string.h>

static void put_raw(struct cri_pb_writer *w, const void *p, size_t n)
{
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = true;
		return;
	}
	if (n)
		memcpy(w->p + w->len, p, n);
	w->len += n;
}

void cri_pb_put_uvarint(struct cri_pb_writer *w, uint64_t v)
{
	uint8_t b[10];
	size_t n = 0;
	do {
		b[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			b[n] |= 0x80;
		n++;
	} while (v);
	put_raw(w, b, n);
}

static void put_key(struct cri_pb_writer *w, uint32_t field, enum cri_pb_wire wire)
{
	cri_pb_put_uvarint(w, ((uint64_t)field << 3) | (uint64_t)wire);
}

void cri_pb_put_varint(struct cri_pb_writer *w, uint32_t field, uint64_t v)
{
	put_key(w, field, CRI_PB_VARINT);
	cri_pb_put_uvarint(w, v);
}

void cri_pb_put_uint(struct cri_pb_writer *w, uint32_t field, uint64_t v)
{
	if (v)
		cri_pb_put_varint(w, field, v);
}

void cri_pb_put_bool(struct cri_pb_writer *w, uint32_t field, bool v)
{
	if (v)
		cri_pb_put_varint(w, field, 1);
}

void cri_pb_put_bytes(struct cri_pb_writer *w, uint32_t field, const void *p, size_t len)
{
	put_key(w, field, CRI_PB_LEN);
	cri_pb_put_uvarint(w, len);
	put_raw(w, p, len);
}

void cri_pb_put_string(struct cri_pb_writer *w, uint32_t field, const char *s)
{
	if (s && s[0])
		cri_pb_put_bytes(w, field, s, strlen(s));
}

void cri_pb_reader_init(struct cri_pb_reader *r, const uint8_t *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->off = 0;
}

static int get_uvarint(struct cri_pb_reader *r, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < 10; i++) {
		if (r->off >= r->len)
			return -EBADMSG;
		uint8_t b = r->p[r->off++];
		if (i == 9 && b > 1)
			return -EBADMSG; /* over 64 bits */
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -EBADMSG;
}

int cri_pb_next(struct cri_pb_reader *r, struct cri_pb_field *f)
{
	if (r->off >= r->len)
		return 0;
	uint64_t key;
	if (get_uvarint(r, &key) < 0)
		return -EBADMSG;
	uint64_t number = key >> 3;
	if (number == 0 || number > 0x1fffffff)
		return -EBADMSG;
	memset(f, 0, sizeof *f);
	f->number = (uint32_t)number;
	f->wire = (enum cri_pb_wire)(key & 7);
	switch (f->wire) {
	case CRI_PB_VARINT:
		return get_uvarint(r, &f->varint) < 0 ? -EBADMSG : 1;
	case CRI_PB_I64:
	case CRI_PB_I32: {
		size_t n = f->wire == CRI_PB_I64 ? 8 : 4;
		if (r->len - r->off < n)
			return -EBADMSG;
		for (size_t i = 0; i < n; i++)
			f->varint |= (uint64_t)r->p[r->off + i] << (8 * i);
		r->off += n;
		return 1;
	}
	case CRI_PB_LEN: {
		uint64_t n;
		if (get_uvarint(r, &n) < 0 || n > r->len - r->off)
			return -EBADMSG;
		f->bytes = r->p + r->off;
		f->len = (size_t)n;
		r->off += (size_t)n;
		return 1;
	}
	default:
		return -EBADMSG; /* groups (3, 4) and 6, 7 */
	}
}

int cri_pb_copy_string(const struct cri_pb_field *f, char *out, size_t cap)
{
	if (f->wire != CRI_PB_LEN)
		return -EBADMSG;
	if (f->len >= cap)
		return -EMSGSIZE;
	if (f->len && memchr(f->bytes, 0, f->len))
		return -EBADMSG;
	if (f->len)
		memcpy(out, f->bytes, f->len);
	out[f->len] = '\0';
	return 0;
}

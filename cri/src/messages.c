/*
 * cri/src/messages.c — CRI requests and responses (messages.h). Pure.
 */
#include <cri/messages.h>
#include <cri/pb.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct cri_pb_writer writer(uint8_t *p, size_t cap)
{
	return (struct cri_pb_writer){.p = p, .cap = cap};
}

static ssize_t done(const struct cri_pb_writer *w)
{
	return w->overflow ? -EMSGSIZE : (ssize_t)w->len;
}

ssize_t cri_encode_version_request(uint8_t *out, size_t cap, const char *version)
{
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, version);
	return done(&w);
}

ssize_t cri_encode_exec_request(uint8_t *out, size_t cap, const char *container_id,
                                const char *const *cmd, size_t ncmd, bool tty, bool in, bool out_,
                                bool err)
{
	if (ncmd > CRI_MAX_CMD_ARGS)
		return -EMSGSIZE;
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, container_id);
	for (size_t i = 0; i < ncmd; i++) /* repeated: empty arguments are kept */
		cri_pb_put_bytes(&w, 2, cmd[i], strlen(cmd[i]));
	cri_pb_put_bool(&w, 3, tty);
	cri_pb_put_bool(&w, 4, in);
	cri_pb_put_bool(&w, 5, out_);
	cri_pb_put_bool(&w, 6, err);
	return done(&w);
}

ssize_t cri_encode_attach_request(uint8_t *out, size_t cap, const char *container_id, bool in,
                                  bool tty, bool out_, bool err)
{
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, container_id);
	cri_pb_put_bool(&w, 2, in);
	cri_pb_put_bool(&w, 3, tty);
	cri_pb_put_bool(&w, 4, out_);
	cri_pb_put_bool(&w, 5, err);
	return done(&w);
}

ssize_t cri_encode_port_forward_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                        const int32_t *ports, size_t nports)
{
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, sandbox_id);
	if (nports) { /* packed, as protoc writes it */
		uint8_t packed[1024];
		struct cri_pb_writer pw = writer(packed, sizeof packed);
		for (size_t i = 0; i < nports; i++) /* int32: negatives sign-extend to 64 bits */
			cri_pb_put_uvarint(&pw, (uint64_t)(int64_t)ports[i]);
		if (pw.overflow)
			return -EMSGSIZE;
		cri_pb_put_bytes(&w, 2, packed, pw.len);
	}
	return done(&w);
}

/* map<string,string>: one embedded {1: key, 2: value} per entry. */
static void put_labels(struct cri_pb_writer *w, uint32_t field, const struct cri_label *labels,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t entry[1024];
		struct cri_pb_writer e = writer(entry, sizeof entry);
		cri_pb_put_bytes(&e, 1, labels[i].key, strlen(labels[i].key));
		cri_pb_put_bytes(&e, 2, labels[i].value, strlen(labels[i].value));
		if (e.overflow) {
			w->overflow = true;
			return;
		}
		cri_pb_put_bytes(w, field, entry, e.len);
	}
}

/* A state filter is a wrapper message { state = 1 }; an absent wrapper means "any". A zero
 * state must still be sent inside it (spec §7.3), so the wrapper carries the key even then. */
static void put_state_filter(struct cri_pb_writer *w, uint32_t field, int state)
{
	if (state < 0)
		return;
	uint8_t wrap[16];
	struct cri_pb_writer s = writer(wrap, sizeof wrap);
	cri_pb_put_uint(&s, 1, (uint64_t)state);
	cri_pb_put_bytes(w, field, wrap, s.len);
}

/* A list request: filter = 1 { state = 2 (wrapped), pod_sandbox_id = 3 (ContainerFilter only;
 * NULL or "" writes nothing), label_selector = @labels_field }. PodSandboxFilter and
 * ContainerFilter differ only there. */
static ssize_t list_request(uint8_t *out, size_t cap, const char *sandbox_id, uint32_t labels_field,
                            const struct cri_label *labels, size_t nlabels, int state)
{
	if (nlabels > CRI_MAX_LABELS)
		return -EMSGSIZE;
	uint8_t filter[4096];
	struct cri_pb_writer f = writer(filter, sizeof filter);
	put_state_filter(&f, 2, state);
	cri_pb_put_string(&f, 3, sandbox_id);
	put_labels(&f, labels_field, labels, nlabels);
	if (f.overflow)
		return -EMSGSIZE;
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_bytes(&w, 1, filter, f.len);
	return done(&w);
}

ssize_t cri_encode_list_pod_sandbox_request(uint8_t *out, size_t cap,
                                            const struct cri_label *labels, size_t nlabels,
                                            int state)
{
	return list_request(out, cap, NULL, 3, labels, nlabels, state);
}

ssize_t cri_encode_list_containers_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                           const struct cri_label *labels, size_t nlabels,
                                           int state)
{
	return list_request(out, cap, sandbox_id, 4, labels, nlabels, state);
}

ssize_t cri_encode_container_status_request(uint8_t *out, size_t cap, const char *container_id)
{
	return cri_encode_id_request(out, cap, container_id);
}

ssize_t cri_encode_id_request(uint8_t *out, size_t cap, const char *id)
{
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, id);
	return done(&w);
}

ssize_t cri_encode_stop_container_request(uint8_t *out, size_t cap, const char *container_id,
                                          int64_t timeout_s)
{
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_string(&w, 1, container_id);
	cri_pb_put_uint(&w, 2, (uint64_t)timeout_s);
	return done(&w);
}

/* linux = @linux_field { security_context = 2 { namespace_options = @ns_field { network = NODE } } }:
 * sandbox 42 06 12 04 0a 02 08 02, container 7a 06 12 04 1a 02 08 02 (the lab's bytes). */
static void put_host_network(struct cri_pb_writer *w, uint32_t linux_field, uint32_t ns_field)
{
	static const uint8_t network_node[] = {0x08, 0x02}; /* network = 1: NODE (2) */
	uint8_t ns[8], sc[16];
	struct cri_pb_writer n = writer(ns, sizeof ns);
	cri_pb_put_bytes(&n, ns_field, network_node, sizeof network_node);
	struct cri_pb_writer c = writer(sc, sizeof sc);
	cri_pb_put_bytes(&c, 2, ns, n.len);
	cri_pb_put_bytes(w, linux_field, sc, c.len);
}

static void put_pod_labels(struct cri_pb_writer *w, uint32_t field, const struct cri_pod_spec *pod,
                           const char *container)
{
	struct cri_label l[4] = {{CRI_LABEL_POD_NAME, pod->name},
	                         {CRI_LABEL_POD_NAMESPACE, pod->namespace_},
	                         {CRI_LABEL_POD_UID, pod->uid},
	                         {CRI_LABEL_CONTAINER_NAME, container}};
	put_labels(w, field, l, container ? 4 : 3);
}

/* PodSandboxConfig: metadata = 1, hostname = 2 (empty: host network), log_directory = 3,
 * labels = 6, linux = 8. */
static ssize_t pod_config(uint8_t *out, size_t cap, const struct cri_pod_spec *pod)
{
	uint8_t meta[1024];
	struct cri_pb_writer m = writer(meta, sizeof meta);
	cri_pb_put_string(&m, 1, pod->name);
	cri_pb_put_string(&m, 2, pod->uid);
	cri_pb_put_string(&m, 3, pod->namespace_);
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_bytes(&w, 1, meta, m.len);
	cri_pb_put_string(&w, 3, pod->log_directory);
	put_pod_labels(&w, 6, pod, NULL);
	put_host_network(&w, 8, 1);
	return m.overflow ? -EMSGSIZE : done(&w);
}

ssize_t cri_encode_run_pod_sandbox_request(uint8_t *out, size_t cap, const struct cri_pod_spec *pod)
{
	uint8_t cfg[8192];
	ssize_t n = pod_config(cfg, sizeof cfg, pod);
	if (n < 0)
		return n;
	struct cri_pb_writer w = writer(out, cap);
	cri_pb_put_bytes(&w, 1, cfg, (size_t)n);
	return done(&w);
}

ssize_t cri_encode_create_container_request(uint8_t *out, size_t cap, const char *sandbox_id,
                                            const struct cri_pod_spec *pod,
                                            const struct cri_container_spec *c)
{
	uint8_t pod_cfg[8192], meta[512], image[512];
	ssize_t pn = pod_config(pod_cfg, sizeof pod_cfg, pod);
	if (pn < 0)
		return pn;
	struct cri_pb_writer m = writer(meta, sizeof meta);
	cri_pb_put_string(&m, 1, c->name);
	cri_pb_put_uint(&m, 2, c->attempt);
	struct cri_pb_writer im = writer(image, sizeof image);
	cri_pb_put_string(&im, 1, c->image);
	if (m.overflow || im.overflow)
		return -EMSGSIZE;
	/* ContainerConfig: metadata 1, image 2, command 3, args 4, labels 9, log_path 11, stdin 12,
	 * stdin_once 13, tty 14, linux 15. Built in @out after the fixed fields, then framed. */
	size_t cfg_cap = 64u * 1024u;
	uint8_t *cfg = malloc(cfg_cap);
	if (cfg == NULL)
		return -ENOMEM;
	struct cri_pb_writer w = writer(cfg, cfg_cap);
	cri_pb_put_bytes(&w, 1, meta, m.len);
	cri_pb_put_bytes(&w, 2, image, im.len);
	for (size_t i = 0; i < c->ncommand; i++)
		cri_pb_put_bytes(&w, 3, c->command[i], strlen(c->command[i]));
	for (size_t i = 0; i < c->nargs; i++)
		cri_pb_put_bytes(&w, 4, c->args[i], strlen(c->args[i]));
	put_pod_labels(&w, 9, pod, c->name);
	cri_pb_put_string(&w, 11, c->log_path);
	cri_pb_put_bool(&w, 12, c->stdin_);
	cri_pb_put_bool(&w, 13, c->stdin_once);
	cri_pb_put_bool(&w, 14, c->tty);
	put_host_network(&w, 15, 3);
	struct cri_pb_writer r = writer(out, cap);
	cri_pb_put_string(&r, 1, sandbox_id);
	cri_pb_put_bytes(&r, 2, cfg, w.len);
	cri_pb_put_bytes(&r, 3, pod_cfg, (size_t)pn); /* containerd takes the log dir from it */
	free(cfg);
	return w.overflow ? -EMSGSIZE : done(&r);
}

/* ---- decoding ---------------------------------------------------------------------------- */

#define COPY(f, field) cri_pb_copy_string((f), (field), sizeof(field))

/* A message whose only field we read is string 1; -ENODATA when it is empty or absent. */
static int decode_string1(const uint8_t *p, size_t len, char *out, size_t cap)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	if (cap == 0)
		return -EMSGSIZE;
	out[0] = '\0';
	cri_pb_reader_init(&r, p, len);
	while ((rc = cri_pb_next(&r, &f)) > 0)
		if (f.number == 1 && (rc = cri_pb_copy_string(&f, out, cap)) < 0)
			return rc;
	if (rc < 0)
		return rc;
	return out[0] ? 0 : -ENODATA;
}

int cri_decode_url_response(const uint8_t *p, size_t len, char *url, size_t cap)
{
	return decode_string1(p, len, url, cap);
}

int cri_decode_id_response(const uint8_t *p, size_t len, char *id, size_t cap)
{
	return decode_string1(p, len, id, cap);
}

int cri_decode_version_response(const uint8_t *p, size_t len, struct cri_version *out)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	memset(out, 0, sizeof *out);
	cri_pb_reader_init(&r, p, len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		int c = 0;
		if (f.number == 1)
			c = COPY(&f, out->version);
		else if (f.number == 2)
			c = COPY(&f, out->runtime_name);
		else if (f.number == 3)
			c = COPY(&f, out->runtime_version);
		else if (f.number == 4)
			c = COPY(&f, out->runtime_api_version);
		if (c < 0)
			return c;
	}
	return rc;
}

/* Metadata: {1 name, 2 uid (sandbox) | 2 attempt (container), 3 namespace, 4 attempt}. */
static int sandbox_metadata(const struct cri_pb_field *m, struct cri_sandbox *sb)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	cri_pb_reader_init(&r, m->bytes, m->len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		int c = 0;
		if (f.number == 1)
			c = COPY(&f, sb->name);
		else if (f.number == 2)
			c = COPY(&f, sb->uid);
		else if (f.number == 3)
			c = COPY(&f, sb->namespace_);
		else if (f.number == 4 && f.wire == CRI_PB_VARINT)
			sb->attempt = (uint32_t)f.varint;
		if (c < 0)
			return c;
	}
	return rc;
}

static int container_metadata(const struct cri_pb_field *m, char *name, size_t cap,
                              uint32_t *attempt)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	cri_pb_reader_init(&r, m->bytes, m->len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		if (f.number == 1 && (rc = cri_pb_copy_string(&f, name, cap)) < 0)
			return rc;
		if (f.number == 2 && f.wire == CRI_PB_VARINT)
			*attempt = (uint32_t)f.varint;
	}
	return rc;
}

static int decode_sandbox(const struct cri_pb_field *item, struct cri_sandbox *sb)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	memset(sb, 0, sizeof *sb);
	cri_pb_reader_init(&r, item->bytes, item->len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		int c = 0;
		if (f.number == 1)
			c = COPY(&f, sb->id);
		else if (f.number == 2 && f.wire == CRI_PB_LEN)
			c = sandbox_metadata(&f, sb);
		else if (f.number == 3 && f.wire == CRI_PB_VARINT)
			sb->state = (int)(f.varint & 0x7fffffff);
		else if (f.number == 4 && f.wire == CRI_PB_VARINT)
			sb->created_at = (int64_t)f.varint;
		if (c < 0)
			return c;
	}
	return rc;
}

static int decode_container(const struct cri_pb_field *item, struct cri_container *c)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	memset(c, 0, sizeof *c);
	cri_pb_reader_init(&r, item->bytes, item->len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		int e = 0;
		if (f.number == 1)
			e = COPY(&f, c->id);
		else if (f.number == 2)
			e = COPY(&f, c->sandbox_id);
		else if (f.number == 3 && f.wire == CRI_PB_LEN)
			e = container_metadata(&f, c->name, sizeof c->name, &c->attempt);
		else if (f.number == 6 && f.wire == CRI_PB_VARINT)
			c->state = (int)(f.varint & 0x7fffffff);
		else if (f.number == 7 && f.wire == CRI_PB_VARINT)
			c->created_at = (int64_t)f.varint;
		if (e < 0)
			return e;
	}
	return rc;
}

/* The repeated field 1 of a list response, each item decoded by @item into @out[i] (items of
 * @size bytes); items past @max are counted, not stored. */
static int decode_list(const uint8_t *p, size_t len,
                       int (*item)(const struct cri_pb_field *, void *), void *out, size_t size,
                       size_t max, size_t *n, size_t *total)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	*n = *total = 0;
	cri_pb_reader_init(&r, p, len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		if (f.number != 1 || f.wire != CRI_PB_LEN)
			continue;
		(*total)++;
		if (*n < max) {
			int c = item(&f, (char *)out + *n * size);
			if (c < 0)
				return c;
			(*n)++;
		}
	}
	return rc;
}

static int sandbox_item(const struct cri_pb_field *f, void *out)
{
	return decode_sandbox(f, out);
}

static int container_item(const struct cri_pb_field *f, void *out)
{
	return decode_container(f, out);
}

int cri_decode_list_pod_sandbox_response(const uint8_t *p, size_t len, struct cri_sandbox *out,
                                         size_t max, size_t *n, size_t *total)
{
	return decode_list(p, len, sandbox_item, out, sizeof *out, max, n, total);
}

int cri_decode_list_containers_response(const uint8_t *p, size_t len, struct cri_container *out,
                                        size_t max, size_t *n, size_t *total)
{
	return decode_list(p, len, container_item, out, sizeof *out, max, n, total);
}

static int decode_status(const struct cri_pb_field *m, struct cri_container_status *s)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	cri_pb_reader_init(&r, m->bytes, m->len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		int c = 0;
		bool v = f.wire == CRI_PB_VARINT;
		switch (f.number) {
		case 1:
			c = COPY(&f, s->id);
			break;
		case 2:
			if (f.wire == CRI_PB_LEN)
				c = container_metadata(&f, s->name, sizeof s->name, &s->attempt);
			break;
		case 3:
			if (v)
				s->state = (int)(f.varint & 0x7fffffff);
			break;
		case 4:
			if (v)
				s->created_at = (int64_t)f.varint;
			break;
		case 5:
			if (v)
				s->started_at = (int64_t)f.varint;
			break;
		case 6:
			if (v)
				s->finished_at = (int64_t)f.varint;
			break;
		case 7:
			if (v)
				s->exit_code = (int32_t)(uint32_t)f.varint;
			break;
		case 10:
			c = COPY(&f, s->reason);
			break;
		case 15:
			c = COPY(&f, s->log_path);
			break;
		default:
			break;
		}
		if (c < 0)
			return c;
	}
	return rc;
}

int cri_decode_container_status_response(const uint8_t *p, size_t len,
                                         struct cri_container_status *out)
{
	struct cri_pb_reader r;
	struct cri_pb_field f;
	int rc;
	bool found = false;
	memset(out, 0, sizeof *out);
	cri_pb_reader_init(&r, p, len);
	while ((rc = cri_pb_next(&r, &f)) > 0) {
		if (f.number == 1 && f.wire == CRI_PB_LEN) {
			int c = decode_status(&f, out);
			if (c < 0)
				return c;
			found = true;
		}
	}
	if (rc < 0)
		return rc;
	return found ? 0 : -ENODATA;
}

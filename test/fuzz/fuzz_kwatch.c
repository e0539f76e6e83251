/* Fuzz target: a watch stream (cloudstream/src/kwatch.h). The first byte sets the piece size
 * the stream is fed in (1..256), the rest is the stream. The lines must be the same whatever
 * the split (compared with the stream fed whole), none may hold a '\n' or be empty, and every
 * line that parses as an event must agree with itself (type and its name, an ERROR's code). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "kwatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 4096u

struct digest {
	uint64_t hash;
	size_t n;
	bool parse;
};

static void on_line(void *user, const char *line, size_t len)
{
	struct digest *d = user;
	if (len == 0 || len > CAP || memchr(line, '\n', len))
		abort();
	d->hash ^= 0xff; /* a line boundary */
	d->hash *= 1099511628211ull;
	for (size_t i = 0; i < len; i++) {
		d->hash ^= (uint8_t)line[i];
		d->hash *= 1099511628211ull;
	}
	d->n++;
	if (!d->parse)
		return;
	struct cs_kwatch_event ev;
	struct json_object *root = cs_kwatch_event_parse(line, len, &ev);
	if (root == NULL)
		return;
	if (ev.object == NULL || ev.type_name == NULL ||
	    cs_kwatch_type_of(ev.type_name) != ev.type ||
	    (ev.type != CS_KWATCH_ERROR && ev.code != 0))
		abort();
	if (ev.rv)
		(void)strlen(ev.rv);
	json_object_put(root);
}

static void run(const uint8_t *p, size_t n, size_t piece, struct digest *d, size_t *over)
{
	static char buf[CAP];
	struct cs_kwatch_lines l;
	cs_kwatch_lines_init(&l, buf, CAP);
	for (size_t i = 0; i < n;) {
		size_t k = piece < n - i ? piece : n - i;
		cs_kwatch_lines_feed(&l, (const char *)p + i, k, on_line, d);
		i += k;
	}
	cs_kwatch_lines_end(&l, on_line, d);
	*over = l.over;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	size_t piece = (size_t)data[0] + 1;
	struct digest whole = {.hash = 14695981039346656037ull, .parse = true};
	struct digest split = {.hash = 14695981039346656037ull};
	size_t over_whole, over_split;
	run(data + 1, size - 1, size, &whole, &over_whole);
	run(data + 1, size - 1, piece, &split, &over_split);
	if (whole.hash != split.hash || whole.n != split.n || over_whole != over_split)
		abort();
	return 0;
}

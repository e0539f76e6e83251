/* Fuzz target: the YAML config file parser (stream/config.h, config_yaml.c) over a table with
 * every option type and a kind. Whatever the input, cleanup must free everything
 * (LeakSanitizer), values that were accepted must be within their ranges, and an accepted file
 * must have named its apiVersion and kind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stream/config.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct cfg {
	char *s;
	uint64_t n, ms, bytes;
	bool b;
	int e;
	struct st_strlist l;
};

static const char *const names[] = {"a", "b", "c", NULL};
#define OFF(f) offsetof(struct cfg, f)
static const struct st_opt opts[] = {
        {.name = "s", .type = ST_OPT_STRING, .offset = OFF(s), .default_value = "x", .help = ""},
        {.name = "n",
         .type = ST_OPT_U64,
         .offset = OFF(n),
         .default_value = "1",
         .min = 1,
         .max = 1000,
         .help = ""},
        {.name = "ms",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(ms),
         .default_value = "1s",
         .min = 1,
         .max = 86400000,
         .help = ""},
        {.name = "bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(bytes),
         .default_value = "1KiB",
         .min = 1,
         .max = 1ull << 40,
         .help = ""},
        {.name = "b", .type = ST_OPT_BOOL, .offset = OFF(b), .help = ""},
        {.name = "e",
         .type = ST_OPT_ENUM,
         .offset = OFF(e),
         .default_value = "a",
         .enum_names = names,
         .help = ""},
        {.name = "l",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(l),
         .default_value = "p,q",
         .help = ""},
};
static const struct st_config_spec spec = {.prog = "f",
                                           .summary = "",
                                           .version = "",
                                           .kind = "FuzzConfig",
                                           .opts = opts,
                                           .num_opts = 7};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg c = {0};
	char err[256];
	if (st_config_defaults(&spec, &c, err, sizeof err) < 0)
		abort();
	if (st_config_parse_yaml(&spec, &c, (const char *)data, size, "fuzz", err, sizeof err) ==
	    0) {
		if (memmem(data, size, "FuzzConfig", 10) == NULL ||
		    memmem(data, size, "v1alpha1", 8) == NULL)
			abort(); /* accepted without the header */
		if (c.n < 1 || c.n > 1000 || c.ms < 1 || c.ms > 86400000 || c.e < 0 || c.e > 2 ||
		    c.l.n > ST_CONFIG_MAX_LIST)
			abort();
	}
	st_config_cleanup(&spec, &c);
	return 0;
}

/* What the JSON and YAML config file fuzz targets share (stream/config.h): a table with every
 * option type and a kind, and one run of a parser over it: whatever the input, cleanup must free
 * everything (LeakSanitizer) and the values of an accepted file must lie in their ranges. */
#ifndef FUZZ_CONFIG_TABLE_H
#define FUZZ_CONFIG_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <stream/config.h>

struct fuzz_cfg {
	char *s;
	uint64_t n, ms, bytes;
	bool b;
	int e;
	struct st_strlist l;
};

static const char *const fuzz_config_enum_names[] = {"a", "b", "c", NULL};

#define FUZZ_CFG_OFF(f) offsetof(struct fuzz_cfg, f)
static const struct st_opt fuzz_config_opts[] = {
        {.name = "s",
         .type = ST_OPT_STRING,
         .offset = FUZZ_CFG_OFF(s),
         .default_value = "x",
         .help = ""},
        {.name = "n",
         .type = ST_OPT_U64,
         .offset = FUZZ_CFG_OFF(n),
         .default_value = "1",
         .min = 1,
         .max = 1000,
         .help = ""},
        {.name = "ms",
         .type = ST_OPT_DURATION_MS,
         .offset = FUZZ_CFG_OFF(ms),
         .default_value = "1s",
         .min = 1,
         .max = 86400000,
         .help = ""},
        {.name = "bytes",
         .type = ST_OPT_BYTES,
         .offset = FUZZ_CFG_OFF(bytes),
         .default_value = "1KiB",
         .min = 1,
         .max = 1ull << 40,
         .help = ""},
        {.name = "b", .type = ST_OPT_BOOL, .offset = FUZZ_CFG_OFF(b), .help = ""},
        {.name = "e",
         .type = ST_OPT_ENUM,
         .offset = FUZZ_CFG_OFF(e),
         .default_value = "a",
         .enum_names = fuzz_config_enum_names,
         .help = ""},
        {.name = "l",
         .type = ST_OPT_STRING_LIST,
         .offset = FUZZ_CFG_OFF(l),
         .default_value = "p,q",
         .help = ""},
};

static const struct st_config_spec fuzz_config_spec = {
        .prog = "f",
        .summary = "",
        .version = "",
        .kind = "FuzzConfig",
        .opts = fuzz_config_opts,
        .num_opts = sizeof fuzz_config_opts / sizeof fuzz_config_opts[0],
};

/* st_config_parse_json or st_config_parse_yaml. */
typedef int (*fuzz_config_parse_cb)(const struct st_config_spec *spec, void *cfg, const char *text,
                                    size_t len, const char *source, char *err, size_t err_len);

/* Defaults, then @parse over the input with @spec (fuzz_config_spec, or a copy of it): aborts
 * when an accepted file left a value out of its range. Frees everything. Returns whether the
 * input was accepted. */
static inline bool fuzz_config_run(const struct st_config_spec *spec, fuzz_config_parse_cb parse,
                                   const uint8_t *data, size_t size)
{
	struct fuzz_cfg c = {0};
	char err[256];
	if (st_config_defaults(spec, &c, err, sizeof err) < 0)
		abort();
	int rc = parse(spec, &c, (const char *)data, size, "fuzz", err, sizeof err);
	if (rc == 0 &&
	    !(c.n >= 1 && c.n <= 1000 && c.ms >= 1 && c.ms <= 86400000 && c.bytes >= 1 &&
	      c.bytes <= 1ull << 40 && c.e >= 0 && c.e <= 2 && c.l.n <= ST_CONFIG_MAX_LIST))
		abort();
	st_config_cleanup(spec, &c);
	return rc == 0;
}

#endif

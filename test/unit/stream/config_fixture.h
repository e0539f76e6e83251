/* What test_config.c and test_config_yaml.c share: the option table both drive stream/config.h
 * with (one option of every type, a kind, a reloaded list with a default, a live duration and a
 * secret) and the fail-the-Nth-allocation run of a parser over it. Included by each test file
 * after cmocka.h. */
#ifndef TEST_UNIT_STREAM_CONFIG_FIXTURE_H
#define TEST_UNIT_STREAM_CONFIG_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <stream/config.h>

#include "failmalloc.h"

struct cfg {
	char *listen;
	uint64_t n, timeout_ms, bytes;
	bool on;
	int mode;
	struct st_strlist subjects;
	char *token;
};

static const char *const modes[] = {"cert", "trust-header", "ignore", NULL};

#define OFF(f) offsetof(struct cfg, f)
static const struct st_opt opts[] = {
        {.name = "listen",
         .type = ST_OPT_STRING,
         .offset = OFF(listen),
         .default_value = "0.0.0.0:10004",
         .value_name = "ADDR:PORT",
         .help = "Where."},
        {.name = "n",
         .type = ST_OPT_U64,
         .offset = OFF(n),
         .default_value = "5",
         .min = 1,
         .max = 100,
         .help = "How many."},
        {.name = "timeout",
         .type = ST_OPT_DURATION_MS,
         .offset = OFF(timeout_ms),
         .default_value = "30s",
         .min = 100,
         .max = 3600000,
         .help = "How long.",
         .flags = ST_OPT_F_LIVE},
        {.name = "bytes",
         .type = ST_OPT_BYTES,
         .offset = OFF(bytes),
         .default_value = "1MiB",
         .min = 1024,
         .max = 1ull << 30,
         .help = "How much."},
        {.name = "on", .type = ST_OPT_BOOL, .offset = OFF(on), .help = "Whether."},
        {.name = "mode",
         .type = ST_OPT_ENUM,
         .offset = OFF(mode),
         .default_value = "cert",
         .enum_names = modes,
         .help = "Which."},
        {.name = "subjects",
         .type = ST_OPT_STRING_LIST,
         .offset = OFF(subjects),
         .default_value = "dflt",
         .help = "Who.",
         .flags = ST_OPT_F_RELOAD},
        {.name = "token",
         .type = ST_OPT_STRING,
         .offset = OFF(token),
         .help = "Secret.",
         .flags = ST_OPT_F_SECRET},
};
static const struct st_config_spec spec = {.prog = "t",
                                           .summary = "A test.",
                                           .version = "1",
                                           .kind = "TestConfig",
                                           .opts = opts,
                                           .num_opts = sizeof opts / sizeof opts[0]};

/* st_config_parse_json or st_config_parse_yaml. */
typedef int (*fixture_parse_cb)(const struct st_config_spec *spec, void *cfg, const char *text,
                                size_t len, const char *source, char *err, size_t err_len);

/* @parse over @text with the Nth allocation failing, for N from 0 until a run succeeds (at most
 * @tries runs): every failing run returns -ENOMEM and leaks nothing after cleanup (LSan). */
static inline void fixture_parse_alloc_failures(fixture_parse_cb parse, const char *text, int tries)
{
	char err[512];
	int rc = -ENOMEM;
	for (int n = 0; n < tries && rc != 0; n++) {
		struct cfg c = {0};
		failmalloc_fail_after(n);
		rc = parse(&spec, &c, text, strlen(text), "f", err, sizeof err);
		failmalloc_off();
		assert_true(rc == 0 || rc == -ENOMEM);
		st_config_cleanup(&spec, &c); /* no leak whatever failed */
	}
	assert_int_equal(rc, 0); /* every allocation of the parse was made to fail once */
}

#endif

/* test/bench/benchutil.c — see benchutil.h. */
#include "benchutil.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BENCH_MAX_OPTS 32
#define BENCH_OPT_VAL  1000 /* getopt_long's value for opts[i] is BENCH_OPT_VAL + i */

volatile sig_atomic_t bench_stop;

uint64_t bench_now_ms(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void bench_usage(const struct bench_cli *cli)
{
	fprintf(stderr, "usage: %s", cli->tool);
	for (int pass = 1; pass >= 0; pass--) { /* the required options first */
		for (size_t i = 0; i < cli->n; i++) {
			const struct bench_opt *opt = &cli->opts[i];
			if (opt->required != (pass == 1))
				continue;
			fprintf(stderr, opt->required ? " --%s" : " [--%s", opt->name);
			if (opt->metavar)
				fprintf(stderr, " %s", opt->metavar);
			if (!opt->required)
				fputc(']', stderr);
		}
	}
	fputc('\n', stderr);
	exit(2);
}

/* A whole non-negative decimal number no larger than @max, or the usage error it is. */
static uint64_t number(const char *tool, const char *s, uint64_t max)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end != '\0' || *s == '-' || v > max) {
		fprintf(stderr, "%s: \"%s\" is not a number\n", tool, s);
		exit(2);
	}
	return (uint64_t)v;
}

void bench_parse_args(const struct bench_cli *cli, int argc, char **argv)
{
	struct option lo[BENCH_MAX_OPTS + 1] = {{0}};
	bool seen[BENCH_MAX_OPTS] = {false};
	if (cli->n > BENCH_MAX_OPTS)
		bench_usage(cli);
	for (size_t i = 0; i < cli->n; i++) {
		lo[i].name = cli->opts[i].name;
		lo[i].has_arg = cli->opts[i].kind == BENCH_FLAG ? no_argument : required_argument;
		lo[i].val = BENCH_OPT_VAL + (int)i;
	}
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (ch < BENCH_OPT_VAL || ch >= BENCH_OPT_VAL + (int)cli->n)
			bench_usage(cli);
		const struct bench_opt *opt = &cli->opts[ch - BENCH_OPT_VAL];
		seen[ch - BENCH_OPT_VAL] = true;
		switch (opt->kind) {
		case BENCH_STR:
			*(const char **)opt->dst = optarg;
			break;
		case BENCH_INT:
			*(int *)opt->dst = (int)number(cli->tool, optarg, INT_MAX);
			break;
		case BENCH_U64:
			*(uint64_t *)opt->dst = number(cli->tool, optarg, UINT64_MAX);
			break;
		case BENCH_FLAG:
			*(bool *)opt->dst = true;
			break;
		}
	}
	if (optind < argc)
		bench_usage(cli);
	for (size_t i = 0; i < cli->n; i++)
		if (cli->opts[i].required && !seen[i])
			bench_usage(cli);
}

static void on_stop_signal(int sig)
{
	(void)sig;
	bench_stop = 1;
}

void bench_catch_stop(void)
{
	struct sigaction sa = {.sa_handler = on_stop_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
}

rlim_t bench_raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	getrlimit(RLIMIT_NOFILE, &rl);
	return rl.rlim_cur;
}

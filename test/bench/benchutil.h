/*
 * test/bench/benchutil.h — what the C bench clients (follow_burst, tunnel_load) share: their
 * command line read from a table of long options, the monotonic clock, SIGTERM/SIGINT as a
 * stop flag, and the open-file limit raised to its hard maximum. Bench tools, not tests.
 */
#ifndef BENCH_BENCHUTIL_H
#define BENCH_BENCHUTIL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

/* What an option's value is, so where bench_parse_args stores it. */
enum bench_opt_kind {
	BENCH_STR,  /* const char **: argv's string (borrowed) */
	BENCH_INT,  /* int *: a whole decimal number in [0, INT_MAX] */
	BENCH_U64,  /* uint64_t *: a whole non-negative decimal number */
	BENCH_FLAG, /* bool *: set to true, the option takes no value */
};

/* One long option: --name. */
struct bench_opt {
	const char *name;         /* without the leading "--" */
	enum bench_opt_kind kind; /* how dst is written */
	void *dst;                /* where the value goes, of the type kind says */
	const char *metavar;      /* the value in the usage line ("P", "MS"); NULL for a flag */
	bool required;            /* leaving it out is a usage error */
};

/* Set to 1 by SIGTERM and SIGINT once bench_catch_stop() ran. */
extern volatile sig_atomic_t bench_stop;

/* The options of one tool: its name and its table (both borrowed, for the process's life). */
struct bench_cli {
	const char *tool;
	const struct bench_opt *opts;
	size_t n;
};

/* Prints the usage line @cli's table makes ("usage: TOOL --req V [--opt V] ...") to stderr
 * and exits 2. */
void bench_usage(const struct bench_cli *cli) __attribute__((noreturn));

/*
 * Reads argv[1..] as @cli's long options, storing each value at its dst. An unknown option, a
 * missing value, a stray argument or a required option left out is bench_usage(); a value that
 * is not a number where one is wanted prints "TOOL: "X" is not a number" and exits 2.
 */
void bench_parse_args(const struct bench_cli *cli, int argc, char **argv);

/* CLOCK_MONOTONIC in milliseconds. */
uint64_t bench_now_ms(void);

/* SIGTERM and SIGINT set bench_stop (no SA_RESTART: a blocking wait returns EINTR). */
void bench_catch_stop(void);

/* Raises RLIMIT_NOFILE's soft limit to its hard one; returns the soft limit now in force. */
rlim_t bench_raise_nofile(void);

#endif

/*
 * edgestream/src/main.c — the daemon: a thin wrapper over the library (edgestream.h).
 *
 * Order (STYLE B7): configuration → the instance (certificate files checked, loop and admin
 * listener set up) → its loop thread → seccomp (TSYNC covers that thread) → wait for signals
 * on the main thread: SIGHUP re-reads the certificate files, SIGTERM/SIGINT stop.
 */
#include "es.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>
#include <stream/sandbox.h>

int main(int argc, char **argv)
{
	char err[512];
	if (st_loop_block_signals() < 0) {
		perror("edgestream: blocking signals");
		return 1;
	}
	struct edgestream_config *cfg;
	if (edgestream_config_new(&cfg) < 0) {
		fprintf(stderr, "edgestream: out of memory\n");
		return 1;
	}
	enum st_config_action action;
	st_config_cleanup(&es_config_spec, &cfg->c); /* st_config_load starts from defaults */
	if (st_config_load(&es_config_spec, &cfg->c, argc, argv, &action, err, sizeof err) < 0) {
		fprintf(stderr, "edgestream: %s\n", err);
		edgestream_config_free(cfg);
		return 2;
	}
	if (action != ST_CONFIG_RUN) {
		int rc = st_config_act(&es_config_spec, &cfg->c, action, stdout);
		edgestream_config_free(cfg);
		return rc < 0 ? 1 : 0;
	}
	st_log_set_level((enum st_log_level)cfg->c.log_level);
	struct edgestream *es;
	int rc = edgestream_new(&es, cfg, NULL, NULL, err, sizeof err);
	int sandbox = cfg->c.sandbox;
	edgestream_config_free(cfg);
	if (rc < 0) {
		st_err("%s", err);
		return 2;
	}
	if ((rc = edgestream_start(es)) < 0) {
		st_err("cannot start the loop thread: %s", st_strerror(rc));
		edgestream_free(es);
		return 1;
	}
	struct st_sandbox_opts sb = {.mode = (enum st_sandbox_mode)sandbox};
	if ((rc = st_sandbox_apply(&sb)) < 0) {
		st_err("cannot install the seccomp filter: %s", st_strerror(rc));
		edgestream_free(es);
		return 1;
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	/* SIGTERM/SIGINT: the first drains (edgestream_stop), a second stops at once; the loop
	 * thread's end is polled between signals. */
	bool stopping = false;
	for (;;) {
		const struct timespec tick = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
		int sig = sigtimedwait(&set, NULL, stopping ? &tick : NULL);
		if (sig < 0) {
			if (stopping && edgestream_stopped(es))
				break;
			continue;
		}
		if (sig == SIGHUP) {
			st_info("SIGHUP: checking the certificate files");
			edgestream_reload(es);
			continue;
		}
		st_info("%s: %s", strsignal(sig),
		        stopping ? "stopping at once" : "draining, then closing the tunnel");
		stopping = true;
		edgestream_stop(es);
	}
	edgestream_free(es);
	st_info("stopped");
	return 0;
}

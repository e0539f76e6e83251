/*
 * edgestream/src/main.c — the daemon: a thin wrapper over the library (edgestream.h).
 *
 * Order (STYLE B7): configuration → the instance (certificate files checked, loop and admin
 * listener set up) → its loop thread → seccomp (TSYNC covers that thread) → wait for signals
 * on the main thread: SIGHUP re-reads the configuration (file and flags, as at start: what may
 * change is applied by the loop thread, the rest is logged as needing a restart) and the
 * certificate files, SIGTERM/SIGINT stop.
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

/* SIGHUP: the configuration as at start; a file that does not load changes nothing. */
static void reload_config(struct edgestream *es, int argc, char **argv)
{
	char err[512];
	struct edgestream_config *cfg;
	enum st_config_action action;
	if (edgestream_config_new(&cfg) < 0) {
		st_err("configuration not reloaded: out of memory");
		return;
	}
	st_config_cleanup(&es_config_spec, &cfg->c); /* st_config_load starts from defaults */
	if (st_config_load(&es_config_spec, &cfg->c, argc, argv, &action, err, sizeof err) < 0) {
		st_err("configuration not reloaded, the running one stays: %s", err);
	} else if (edgestream_reconfigure(es, cfg) < 0) {
		st_err("configuration not reloaded: out of memory");
	} else {
		/* Process-wide, so the daemon's to set; the library logs them as applied. */
		st_log_set_level((enum st_log_level)cfg->c.log_level);
		st_log_set_format((enum st_log_format)cfg->c.log_format);
	}
	edgestream_config_free(cfg);
}

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
	if (action == ST_CONFIG_CHECK) {
		st_log_set_format((enum st_log_format)cfg->c.log_format);
		int rc = edgestream_config_check(cfg, err, sizeof err);
		edgestream_config_free(cfg);
		if (rc < 0) {
			st_err("%s", err);
			fprintf(stderr, "edgestream: the configuration has problems (above)\n");
			return 2;
		}
		printf("edgestream: the configuration is good\n");
		return 0;
	}
	if (action != ST_CONFIG_RUN) {
		int rc = st_config_act(&es_config_spec, &cfg->c, action, stdout);
		edgestream_config_free(cfg);
		return rc < 0 ? 1 : 0;
	}
	st_log_set_level((enum st_log_level)cfg->c.log_level);
	st_log_set_format((enum st_log_format)cfg->c.log_format);
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
			st_info("SIGHUP: reloading the configuration and the certificate files");
			reload_config(es, argc, argv);
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

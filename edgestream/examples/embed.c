/*
 * edgestream/examples/embed.c — how an edge agent embeds edgestream.
 *
 *   edgestream-embed-example [--drive thread|host] NAME=VALUE...
 *
 * Every NAME=VALUE is an edgestream option (the daemon's flags without "--", see FLAGS.md). The
 * program runs the tunnel either on edgestream's own thread (thread) or by calling
 * edgestream_service() from its own loop (host), prints each connect and disconnect, and on
 * SIGTERM or SIGINT stops and prints the final counters. Built with the project and tested by
 * test/integration/edgestream_test.py; outside the tree build it with
 *   cc embed.c $(pkg-config --cflags --libs edgestream)
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <edgestream/edgestream.h>

static atomic_int stop_signal;

static void on_signal(int sig)
{
	atomic_store(&stop_signal, sig);
}

static void connected(struct edgestream *es, const char *node, bool extended, void *user)
{
	(void)es;
	(void)user;
	printf("connected node=%s protocol=%s\n", node, extended ? "extended" : "base");
	fflush(stdout);
}

static void disconnected(struct edgestream *es, int err, const char *reason, uint64_t retry_ms,
                         void *user)
{
	(void)es;
	(void)user;
	printf("disconnected err=%d retry_ms=%llu reason=%s\n", err, (unsigned long long)retry_ms,
	       reason);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *drive = "thread";
	struct edgestream_config *cfg;
	char err[512];
	if (edgestream_config_new(&cfg) < 0)
		return 1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--drive") == 0 && i + 1 < argc) {
			drive = argv[++i];
			continue;
		}
		char *eq = strchr(argv[i], '=');
		if (eq == NULL) {
			fprintf(stderr, "usage: %s [--drive thread|host] NAME=VALUE...\n", argv[0]);
			edgestream_config_free(cfg);
			return 2;
		}
		*eq = '\0';
		if (edgestream_config_set(cfg, argv[i], eq + 1, err, sizeof err) < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], err[0] ? err : "no such option");
			edgestream_config_free(cfg);
			return 2;
		}
	}
	struct edgestream_callbacks cb = {.connected = connected, .disconnected = disconnected};
	struct edgestream *es;
	int rc = edgestream_new(&es, cfg, &cb, NULL, err, sizeof err);
	edgestream_config_free(cfg); /* the instance keeps its own copy */
	if (rc < 0) {
		fprintf(stderr, "edgestream_new: %s\n", err);
		return 1;
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (strcmp(drive, "host") == 0) {
		/* The host's own loop: other work would go here between calls. */
		while (atomic_load(&stop_signal) == 0 && edgestream_service(es, 200) == 0)
			;
	} else {
		if (edgestream_start(es) < 0) {
			edgestream_free(es);
			return 1;
		}
		while (atomic_load(&stop_signal) == 0) {
			struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
	edgestream_stop(es);
	struct edgestream_stats st;
	edgestream_get_stats(es, &st);
	edgestream_free(es);
	printf("stopped connects=%llu streams=%llu bytes_to_cloud=%llu\n",
	       (unsigned long long)st.connects_total, (unsigned long long)st.streams_total,
	       (unsigned long long)st.bytes_to_cloud);
	return 0;
}

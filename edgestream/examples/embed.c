/*
 * edgestream/examples/embed.c — how an edge agent embeds edgestream.
 *
 *   edgestream-embed-example [--drive thread|host] [--provoke-sigpipe] NAME=VALUE...
 *
 * Every NAME=VALUE is an edgestream option (the daemon's flags without "--", see FLAGS.md). The
 * program runs the tunnel either on edgestream's own thread (thread) or by calling
 * edgestream_service() from its own loop (host), prints each connect and disconnect and each
 * certificate event (the certificate hook), sends the library's log lines to its own stderr
 * (the log hook, prefixed "edgestream: "), and on SIGTERM or SIGINT stops and prints the final
 * counters and what the hooks saw. SIGHUP asks the library to re-read the certificate files
 * (edgestream_reload), as an agent does after rotating them.
 *
 * Like a host that relies on SIGPIPE, it installs a SIGPIPE handler of its own and checks that
 * the library left it in place; --provoke-sigpipe writes into a closed socket from the connected
 * callback (a library thread) to show such a SIGPIPE never reaches the host: the final line
 * counts the handler's calls. Built with the project and tested by
 * test/integration/edgestream_test.py; outside the tree build it with
 *   cc embed.c $(pkg-config --cflags --libs edgestream)
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <edgestream/edgestream.h>

static atomic_int stop_signal;

static atomic_int sigpipes;    /* the host's SIGPIPE handler ran */
static atomic_int log_lines;   /* the log hook's calls */
static atomic_int cert_events; /* the certificate hook's calls */
static bool provoke_sigpipe;

static atomic_int reload_signal;

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		atomic_store(&reload_signal, 1);
	else
		atomic_store(&stop_signal, sig);
}

/* SIGHUP: the agent rotated the certificate files; the library re-reads them (any thread). */
static void maybe_reload(struct edgestream *es)
{
	if (atomic_exchange(&reload_signal, 0))
		edgestream_reload(es);
}

static void on_sigpipe(int sig)
{
	(void)sig;
	atomic_fetch_add(&sigpipes, 1);
}

/* The log hook: the agent's own log (here stderr, with a prefix). Any thread. */
static void log_line(enum edgestream_log_level level, const char *line, void *user)
{
	(void)user;
	atomic_fetch_add(&log_lines, 1);
	fprintf(stderr, "edgestream: %s%s\n", level == EDGESTREAM_LOG_ERROR ? "ERROR " : "", line);
}

/* The certificate hook: the agent learns what its edge presents, and whether files it rotated
 * were taken. Loop thread. */
static void cert_event(struct edgestream *es, const struct edgestream_cert_event *ev, void *user)
{
	(void)es;
	(void)user;
	atomic_fetch_add(&cert_events, 1);
	printf("certificate result=%d not_before=%lld not_after=%lld path=%s%s%s\n", ev->result,
	       (long long)ev->not_before, (long long)ev->not_after, ev->path,
	       ev->reason ? " reason=" : "", ev->reason ? ev->reason : "");
	fflush(stdout);
}

/* A write into a socket whose peer is gone: SIGPIPE, raised on the calling thread. */
static void write_to_closed_socket(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return;
	close(sv[1]);
	ssize_t n = write(sv[0], "x", 1);
	printf("provoked sigpipe write=%zd errno=%s\n", n, n < 0 ? strerror(errno) : "-");
	close(sv[0]);
}

static void connected(struct edgestream *es, const char *node, bool extended, void *user)
{
	(void)es;
	(void)user;
	printf("connected node=%s protocol=%s\n", node, extended ? "extended" : "base");
	if (provoke_sigpipe)
		write_to_closed_socket();
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
		if (strcmp(argv[i], "--provoke-sigpipe") == 0) {
			provoke_sigpipe = true;
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
	/* The hooks: the log hook is process-wide (set before any instance), the certificate
	 * hook belongs to the configuration. */
	edgestream_set_log_hook(log_line, NULL);
	edgestream_config_set_cert_hook(cfg, cert_event, NULL);
	struct sigaction pipe_sa = {.sa_handler = on_sigpipe};
	sigaction(SIGPIPE, &pipe_sa, NULL);
	struct edgestream_callbacks cb = {.connected = connected, .disconnected = disconnected};
	struct edgestream *es;
	int rc = edgestream_new(&es, cfg, &cb, NULL, err, sizeof err);
	edgestream_config_free(cfg); /* the instance keeps its own copy */
	if (rc < 0) {
		fprintf(stderr, "edgestream_new: %s\n", err);
		return 1;
	}
	struct sigaction now;
	sigaction(SIGPIPE, NULL, &now);
	printf("sigpipe disposition=%s\n", now.sa_handler == on_sigpipe ? "kept" : "changed");
	fflush(stdout);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (strcmp(drive, "host") == 0) {
		/* The host's own loop: other work would go here between calls. */
		while (atomic_load(&stop_signal) == 0 && edgestream_service(es, 200) == 0)
			maybe_reload(es);
	} else {
		if (edgestream_start(es) < 0) {
			edgestream_free(es);
			return 1;
		}
		while (atomic_load(&stop_signal) == 0) {
			struct timespec ts = {.tv_nsec = 100 * 1000 * 1000};
			nanosleep(&ts, NULL);
			maybe_reload(es);
		}
	}
	edgestream_stop(es);
	struct edgestream_stats st;
	edgestream_get_stats(es, &st);
	edgestream_free(es);
	printf("stopped connects=%llu streams=%llu bytes_to_cloud=%llu\n",
	       (unsigned long long)st.connects_total, (unsigned long long)st.streams_total,
	       (unsigned long long)st.bytes_to_cloud);
	printf("hooks log_lines=%d cert_events=%d sigpipe_handler_calls=%d\n",
	       atomic_load(&log_lines), atomic_load(&cert_events), atomic_load(&sigpipes));
	edgestream_set_log_hook(NULL, NULL);
	return 0;
}

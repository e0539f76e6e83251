/*
 * Two edgestream instances in one process (an agent that serves two nodes, or a test harness),
 * each with its own configuration file, log level and log hook. Used by
 * integration.edgestream_ops `two_instances`: every line of an instance reaches its own hook
 * only; each runs its own thread; both stop and free cleanly (the ASan build's leak check runs
 * at exit).
 *
 *     edgestream-two-instances A.yaml B.yaml
 *
 * Prints "A connected NODE", "B connected NODE" once each tunnel is up, then every log line as
 * "A <line>" or "B <line>"; stops both on SIGTERM or SIGINT and prints "stopped".
 */
#include <edgestream/edgestream.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *tag, const char *what, const char *text)
{
	pthread_mutex_lock(&out_lock);
	printf("%s %s%s\n", tag, what, text);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

static void log_line(enum edgestream_log_level level, const char *line, void *user)
{
	(void)level;
	say(user, "", line);
}

static void connected(struct edgestream *es, const char *node, bool extended, void *user)
{
	(void)es, (void)extended;
	say(user, "connected ", node);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s A.yaml B.yaml\n", argv[0]);
		return 2;
	}
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL); /* the instances' threads inherit the mask */
	static char tag_a[] = "A", tag_b[] = "B";
	char *const tags[2] = {tag_a, tag_b};
	struct edgestream_callbacks cb = {.connected = connected};
	struct edgestream *es[2] = {NULL, NULL};
	int rc = 0;
	for (int i = 0; i < 2 && rc == 0; i++) {
		char err[512] = "";
		struct edgestream_config *cfg;
		if (edgestream_config_new(&cfg) < 0)
			return 1;
		if (edgestream_config_load_file(cfg, argv[1 + i], err, sizeof err) < 0 ||
		    edgestream_config_set_log_hook(cfg, log_line, tags[i]) < 0 ||
		    edgestream_new(&es[i], cfg, &cb, tags[i], err, sizeof err) < 0 ||
		    edgestream_start(es[i]) < 0) {
			fprintf(stderr, "%s: %s\n", argv[1 + i], err);
			rc = 2;
		}
		edgestream_config_free(cfg);
	}
	if (rc == 0) {
		int sig;
		sigwait(&stop, &sig);
	}
	for (int i = 0; i < 2; i++)
		edgestream_free(es[i]);
	printf("stopped\n");
	return rc;
}

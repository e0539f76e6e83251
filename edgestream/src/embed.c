/*
 * edgestream/src/embed.c — what the library owes a host that embeds it (edgestream.h,
 * "Process-wide state"): SIGPIPE kept off the host's signal disposition, the log hook and
 * settings, the certificate hook's events, the counters copied by the caller's struct size.
 */
#include "es.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include <stream/certreload.h>
#include <stream/log.h>

/* ---- SIGPIPE ----------------------------------------------------------------------------- */

/*
 * libwebsockets sets SIGPIPE to SIG_IGN for the whole process when it creates a context,
 * because OpenSSL writes TLS records with write(2), which raises SIGPIPE on a connection the
 * peer reset. A host may rely on SIGPIPE (the default kills a program writing into a closed
 * pipe, Go's runtime has its own rules), so edgestream_new() puts the disposition back, and
 * SIGPIPE is blocked on every thread running library code instead: a thread-directed signal
 * that is blocked stays pending on that thread and the write returns EPIPE. Before such a
 * thread gives the mask back, the pending SIGPIPE is taken with sigtimedwait() so it is never
 * delivered to the host.
 */
bool es_sigpipe_block(void)
{
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	if (pthread_sigmask(SIG_BLOCK, &set, &old) != 0)
		return true; /* nothing changed: nothing to restore */
	return sigismember(&old, SIGPIPE) == 1;
}

void es_sigpipe_restore(bool was_blocked)
{
	if (was_blocked)
		return;
	sigset_t set, pending;
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	const struct timespec now = {0, 0};
	/* One pending instance at most; the loop guards against an EINTR. */
	for (int i = 0; i < 4 && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
	     i++)
		if (sigtimedwait(&set, NULL, &now) < 0 && errno != EINTR)
			break;
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* ---- the log hook ---------------------------------------------------------------------- */

static struct {
	edgestream_log_cb cb;
	void *user;
} log_hook;

/* A line without its newline, to @cb. */
static void hand_over(edgestream_log_cb cb, void *user, enum st_log_level level, const char *line)
{
	char copy[1100];
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	if (n >= sizeof copy)
		n = sizeof copy - 1;
	memcpy(copy, line, n);
	copy[n] = '\0';
	if (cb)
		cb((enum edgestream_log_level)level, copy, user);
}

static void log_trampoline(enum st_log_level level, const char *line, void *user)
{
	(void)user;
	hand_over(log_hook.cb, log_hook.user, level, line);
}

/* An instance's lines, to its own hook. */
static void instance_line(enum st_log_level level, const char *line, void *user)
{
	const struct edgestream *es = user;
	hand_over(es->log_cb, es->log_user, level, line);
}

void es_log_scope_init(struct edgestream *es, const struct edgestream_config *cfg)
{
	es->log_cb = cfg->log_cb;
	es->log_user = cfg->log_user;
	es->log_scope.sink = cfg->log_cb ? instance_line : NULL;
	es->log_scope.user = es;
	st_log_scope_set(&es->log_scope, (enum st_log_level)cfg->c.log_level,
	                 (enum st_log_format)cfg->c.log_format);
}

int edgestream_config_set_log_hook(struct edgestream_config *cfg, edgestream_log_cb cb, void *user)
{
	if (cfg == NULL)
		return -EINVAL;
	cfg->log_cb = cb;
	cfg->log_user = cb ? user : NULL;
	return 0;
}

void edgestream_set_log_hook(edgestream_log_cb cb, void *user)
{
	log_hook.cb = cb;
	log_hook.user = user;
	st_log_set_sink(cb ? log_trampoline : NULL, NULL);
}

void edgestream_set_log_level(enum edgestream_log_level level)
{
	if ((unsigned)level <= EDGESTREAM_LOG_DEBUG)
		st_log_set_level((enum st_log_level)level);
}

void edgestream_set_log_json(bool json)
{
	st_log_set_format(json ? ST_LOG_FORMAT_JSON : ST_LOG_FORMAT_TEXT);
}

/* ---- the certificate hook ---------------------------------------------------------------- */

int edgestream_config_set_cert_hook(struct edgestream_config *cfg, edgestream_cert_cb cb,
                                    void *user)
{
	if (cfg == NULL)
		return -EINVAL;
	cfg->cert_cb = cb;
	cfg->cert_user = cb ? user : NULL;
	return 0;
}

void es_cert_event(struct edgestream *es, int result, const char *reason)
{
	if (es->cert_cb == NULL)
		return;
	struct edgestream_cert_event ev = {
	        .result = result,
	        .reason = result < 0 ? (reason ? reason : "") : NULL,
	        .path = es->cfg.tunnel_cert,
	};
	int64_t nb, na;
	if (es->certs && st_certreload_validity(es->certs, 0, &nb, &na) == 0) {
		ev.not_before = nb;
		ev.not_after = na;
	}
	es->cert_cb(es, &ev, es->cert_user);
}

/* ---- versioned counters ------------------------------------------------------------------ */

size_t edgestream_get_stats_sized(struct edgestream *es, struct edgestream_stats *out,
                                  size_t out_size)
{
	struct edgestream_stats s;
	pthread_mutex_lock(&es->stats_lock);
	s = es->stats;
	pthread_mutex_unlock(&es->stats_lock);
	size_t n = out_size < sizeof s ? out_size : sizeof s;
	memcpy(out, &s, n);
	if (out_size > n)
		memset((char *)out + n, 0, out_size - n);
	return n;
}

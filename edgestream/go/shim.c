/*
 * edgestream/go/shim.c — libedgestream's callbacks for the Go binding. They run on the loop
 * thread (the instance's locked OS thread, inside edgestream_run) and only forward: the Go side
 * queues the event and returns, so the loop never waits for Go code.
 */
#include "shim.h"

#include <signal.h>

#include "_cgo_export.h"

static void on_connected(struct edgestream *es, const char *node, bool extended, void *user)
{
	(void)es;
	/* cgo's exported signatures take char *; the trampoline copies and never writes */
	goEdgestreamConnected((uintptr_t)user, (char *)node, extended ? 1 : 0);
}

static void on_disconnected(struct edgestream *es, int err, const char *reason,
                            uint64_t retry_in_ms, void *user)
{
	(void)es;
	goEdgestreamDisconnected((uintptr_t)user, err, (char *)reason, retry_in_ms);
}

static void on_cert(struct edgestream *es, const struct edgestream_cert_event *ev, void *user)
{
	(void)es;
	goEdgestreamCert((uintptr_t)user, ev->result, (char *)(ev->reason ? ev->reason : ""),
	                 (char *)ev->path, ev->not_before, ev->not_after);
}

/* Any thread (the loop's, a worker's): the Go side copies the line and queues it. */
static void on_log(enum edgestream_log_level level, const char *line, void *user)
{
	(void)user;
	goEdgestreamLog((int)level, (char *)line);
}

int es_go_sigpipe_disposition(void)
{
	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) != 0)
		return -1;
	return sa.sa_handler == SIG_DFL ? 0 : sa.sa_handler == SIG_IGN ? 1 : 2;
}

void es_go_set_log_hook(int on)
{
	edgestream_set_log_hook(on ? on_log : NULL, NULL);
}

/* Static: libedgestream keeps the pointer for the instance's lifetime. */
static const struct edgestream_callbacks go_callbacks = {
        .connected = on_connected,
        .disconnected = on_disconnected,
};

int es_go_new(struct edgestream **out, struct edgestream_config *cfg, uintptr_t handle, char *err,
              size_t errlen)
{
	edgestream_config_set_cert_hook(cfg, on_cert, (void *)handle);
	int rc = edgestream_new(out, cfg, &go_callbacks, (void *)handle, err, errlen);
	edgestream_config_set_cert_hook(cfg, NULL, NULL); /* the instance took its copy */
	return rc;
}

/*
 * edgestream/go/shim.c — libedgestream's callbacks for the Go binding. They run on the loop
 * thread (the instance's locked OS thread, inside edgestream_run) and only forward: the Go side
 * queues the event and returns, so the loop never waits for Go code.
 */
#include "shim.h"

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

/* Static: libedgestream keeps the pointer for the instance's lifetime. */
static const struct edgestream_callbacks go_callbacks = {
        .connected = on_connected,
        .disconnected = on_disconnected,
};

int es_go_new(struct edgestream **out, const struct edgestream_config *cfg, uintptr_t handle,
              char *err, size_t errlen)
{
	return edgestream_new(out, cfg, &go_callbacks, (void *)handle, err, errlen);
}

/*
 * edgestream/go/shim.h — the C side of the Go binding: the callbacks every instance gets, which
 * forward to the exported Go trampolines (callbacks.go) with the instance's handle.
 *
 * No Go pointer is ever handed to C: @handle is a number from the Go package's handle map,
 * carried through libedgestream's `void *user` and looked up again in the trampoline.
 */
#ifndef EDGESTREAM_GO_SHIM_H
#define EDGESTREAM_GO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include <edgestream/edgestream.h>

/*
 * es_go_new() - edgestream_new() with the Go trampolines as callbacks (the certificate hook
 * included, set on @cfg for this call: the caller holds the Config's lock) and @handle as the
 * user pointer. Same returns as edgestream_new(). Called on the instance's own (locked) OS
 * thread.
 */
int es_go_new(struct edgestream **out, struct edgestream_config *cfg, uintptr_t handle, char *err,
              size_t errlen);

/* es_go_set_log_hook() - the process-wide log hook to the Go trampoline (@on) or stderr. */
void es_go_set_log_hook(int on);

/* es_go_sigpipe_disposition() - for the tests: SIGPIPE's disposition now, 0 SIG_DFL, 1 SIG_IGN,
 * 2 a handler (the Go runtime's). */
int es_go_sigpipe_disposition(void);

#endif /* EDGESTREAM_GO_SHIM_H */

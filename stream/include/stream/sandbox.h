/*
 * stream/sandbox.h — a seccomp allow-list (libseccomp) installed once start-up is done.
 *
 * After a daemon has read its configuration, loaded certificates and opened its listeners, it
 * needs only a small set of system calls: socket I/O, polling, memory, time, threads, reading
 * files (certificate reload, CRI log files, inotify). Everything else (execve, ptrace, mount,
 * module loading, ...) is refused, so a memory-safety bug cannot be turned into much.
 *
 * Called once, from the main thread, before worker threads start (the filter applies to the
 * calling thread and, with TSYNC, to all threads of the process).
 */
#ifndef STREAM_SANDBOX_H
#define STREAM_SANDBOX_H

#include <stddef.h>

enum st_sandbox_mode {
	ST_SANDBOX_OFF = 0,   /* no filter */
	ST_SANDBOX_LOG = 1,   /* allow everything, log calls outside the list (kernel audit log) */
	ST_SANDBOX_ERRNO = 2, /* calls outside the list fail with EPERM (default) */
	ST_SANDBOX_KILL = 3,  /* calls outside the list kill the process (SIGSYS) */
};

struct st_sandbox_opts {
	enum st_sandbox_mode mode;
	const char *const
	        *extra_syscalls; /* names to allow as well, NULL-terminated; may be NULL */
};

/* st_sandbox_mode_parse() - "off", "log", "errno" or "kill". 0 or -EINVAL. */
int st_sandbox_mode_parse(const char *name, enum st_sandbox_mode *out);

/*
 * st_sandbox_apply() - set no_new_privs and install the filter.
 * Returns 0; -EINVAL for an unknown name in extra_syscalls; -ENOMEM; -errno from the kernel.
 * Under AddressSanitizer/ThreadSanitizer the sanitizer runtime's extra calls are allowed too.
 */
int st_sandbox_apply(const struct st_sandbox_opts *opts);

#endif /* STREAM_SANDBOX_H */

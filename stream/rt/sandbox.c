/* seccomp allow-list (stream/sandbox.h). */
#include <stream/err.h>
#include <stream/sandbox.h>

#include <seccomp.h>
#include <string.h>
#include <sys/prctl.h>

/* What a daemon built on libwebsockets, OpenSSL, libcurl, json-c and pthreads calls once it is
 * running. Names unknown to this kernel/architecture are skipped. */
static const char *const allowed[] = {
        /* I/O and sockets */
        "read",
        "write",
        "readv",
        "writev",
        "pread64",
        "pwrite64",
        "close",
        "close_range",
        "socket",
        "socketpair",
        "connect",
        "accept",
        "accept4",
        "bind",
        "listen",
        "shutdown",
        "sendto",
        "recvfrom",
        "sendmsg",
        "recvmsg",
        "sendmmsg",
        "recvmmsg",
        "getsockopt",
        "setsockopt",
        "getsockname",
        "getpeername",
        "pipe",
        "pipe2",
        "eventfd2",
        "dup",
        "dup3",
        "fcntl",
        "ioctl",
        "splice",
        /* polling and timers */
        "poll",
        "ppoll",
        "select",
        "pselect6",
        "epoll_create1",
        "epoll_ctl",
        "epoll_wait",
        "epoll_pwait",
        "timerfd_create",
        "timerfd_settime",
        "clock_gettime",
        "clock_getres",
        "clock_nanosleep",
        "nanosleep",
        "gettimeofday",
        "time",
        /* files: certificate reload, CRI logs, ready files */
        "openat",
        "open",
        "newfstatat",
        "fstat",
        "stat",
        "lstat",
        "statx",
        "lseek",
        "getdents64",
        "readlink",
        "readlinkat",
        "access",
        "faccessat",
        "faccessat2",
        "rename",
        "renameat",
        "renameat2",
        "unlink",
        "unlinkat",
        "fsync",
        "fdatasync",
        "inotify_init1",
        "inotify_add_watch",
        "inotify_rm_watch",
        "umask",
        "getcwd",
        "mkdir",
        "mkdirat",
        "fchmod",
        /* memory */
        "mmap",
        "munmap",
        "mprotect",
        "mremap",
        "brk",
        "madvise",
        /* threads and signals */
        "futex",
        "clone",
        "clone3",
        "set_robust_list",
        "rseq",
        "sched_yield",
        "sched_getaffinity",
        "rt_sigtimedwait", /* edgestream: the main thread waits for signals */
        "gettid",
        "getpid",
        "getppid",
        "tgkill",
        "rt_sigaction",
        "rt_sigprocmask",
        "rt_sigreturn",
        "sigaltstack",
        "signalfd4",
        "restart_syscall",
        "exit",
        "exit_group",
        "prlimit64",
        "getrlimit",
        "getrusage",
        "sysinfo",
        "uname",
        /* identity and randomness (OpenSSL, curl) */
        "getrandom",
        "getuid",
        "geteuid",
        "getgid",
        "getegid",
        NULL,
};

/* Extra calls the sanitizer runtimes make (reports, stack unwinding, shadow memory). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ST_SANITIZED 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ST_SANITIZED 1
#endif
#endif
#ifdef ST_SANITIZED
static const char *const sanitizer_extra[] = {
        "getdents", /* LeakSanitizer lists threads with the old call on x86_64 */
        "sched_getparam",
        "sched_getscheduler",
        "process_vm_readv",
        "prctl",
        "ptrace",
        "wait4",
        "personality",
        "msync",
        "mincore",
        "getpgid",
        "setpgid",
        "kill",
        NULL,
};
#endif

int st_sandbox_mode_parse(const char *name, enum st_sandbox_mode *out)
{
	static const char *const names[] = {"off", "log", "errno", "kill"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(name, names[i]) == 0) {
			*out = (enum st_sandbox_mode)i;
			return 0;
		}
	return -EINVAL;
}

static int allow_list(scmp_filter_ctx ctx, const char *const *names, bool strict)
{
	for (size_t i = 0; names && names[i]; i++) {
		int nr = seccomp_syscall_resolve_name(names[i]);
		if (nr == __NR_SCMP_ERROR) {
			if (strict)
				return -EINVAL;
			continue;
		}
		int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int st_sandbox_apply(const struct st_sandbox_opts *opts)
{
	if (opts->mode == ST_SANDBOX_OFF)
		return 0;
	uint32_t def = opts->mode == ST_SANDBOX_LOG    ? SCMP_ACT_LOG
	               : opts->mode == ST_SANDBOX_KILL ? SCMP_ACT_KILL_PROCESS
	                                               : SCMP_ACT_ERRNO(EPERM);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -errno;
	scmp_filter_ctx ctx = seccomp_init(def);
	if (ctx == NULL)
		return -ENOMEM;
	int rc = allow_list(ctx, allowed, false);
	if (rc == 0)
		rc = allow_list(ctx, opts->extra_syscalls, true);
#ifdef ST_SANITIZED
	if (rc == 0)
		rc = allow_list(ctx, sanitizer_extra, false);
#endif
	/* Apply to every thread already running, too. */
	if (rc == 0)
		rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

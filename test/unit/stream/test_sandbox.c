/* Unit tests for the seccomp allow-list (stream/sandbox.h). Each case runs in a forked child,
 * since a filter cannot be removed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stream/err.h>
#include <stream/sandbox.h>

/* Runs @fn in a child; returns its wait status. The child leaves with _exit (no LSan pass:
 * the leak checker itself needs calls the filter refuses). */
static int in_child(int (*fn)(void))
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn());
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static int child_errno_mode(void)
{
	struct st_sandbox_opts o = {.mode = ST_SANDBOX_ERRNO};
	if (st_sandbox_apply(&o) != 0)
		return 10;
	if (getpid() <= 0)
		return 11;
	/* Refused: mount (ptrace stays allowed in sanitizer builds, for LeakSanitizer), execve. */
	errno = 0;
	if (syscall(SYS_mount, NULL, NULL, NULL, 0, NULL) != -1 || errno != EPERM)
		return 12;
	char *const argv[] = {(char *)"/bin/true", NULL};
	execv("/bin/true", argv);
	if (errno != EPERM)
		return 13;
	/* Allowed: a TCP listener and a loopback connection to it, with data both ways. */
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &al) != 0)
		return 14;
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) != 0)
		return 15;
	int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	char buf[4];
	if (s < 0 || write(c, "ping", 4) != 4 || read(s, buf, 4) != 4 || memcmp(buf, "ping", 4))
		return 16;
	close(s);
	close(c);
	close(ls);
	return 0;
}

static int child_kill_mode(void)
{
	struct st_sandbox_opts o = {.mode = ST_SANDBOX_KILL};
	if (st_sandbox_apply(&o) != 0)
		return 10;
	syscall(SYS_mount, NULL, NULL, NULL, 0, NULL);
	return 20; /* not reached: killed */
}

static int child_extra(void)
{
	const char *const extra[] = {"mount", NULL};
	struct st_sandbox_opts o = {.mode = ST_SANDBOX_ERRNO, .extra_syscalls = extra};
	if (st_sandbox_apply(&o) != 0)
		return 10;
	errno = 0;
	syscall(SYS_mount, NULL, NULL, NULL, 0, NULL);
	return errno == EPERM ? 11 : 0; /* EFAULT from the kernel, not the filter's EPERM */
}

static int child_bad_extra(void)
{
	const char *const extra[] = {"no_such_syscall", NULL};
	struct st_sandbox_opts o = {.mode = ST_SANDBOX_ERRNO, .extra_syscalls = extra};
	return st_sandbox_apply(&o) == -EINVAL ? 0 : 10;
}

static void test_errno_mode(void **state)
{
	(void)state;
	int st = in_child(child_errno_mode);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_kill_mode(void **state)
{
	(void)state;
	int st = in_child(child_kill_mode);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);
}

static void test_extra_and_names(void **state)
{
	(void)state;
	int st = in_child(child_extra);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	st = in_child(child_bad_extra);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	enum st_sandbox_mode m;
	assert_int_equal(st_sandbox_mode_parse("kill", &m), 0);
	assert_int_equal(m, ST_SANDBOX_KILL);
	assert_int_equal(st_sandbox_mode_parse("off", &m), 0);
	assert_int_equal(m, ST_SANDBOX_OFF);
	assert_int_equal(st_sandbox_mode_parse("strict", &m), -EINVAL);
	struct st_sandbox_opts off = {.mode = ST_SANDBOX_OFF};
	assert_int_equal(st_sandbox_apply(&off), 0); /* no filter in this process */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_errno_mode),
	        cmocka_unit_test(test_kill_mode),
	        cmocka_unit_test(test_extra_and_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests for the event-loop helpers (stream/loop.h) on a real lws context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libwebsockets.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <stream/err.h>
#include <stream/loop.h>

#include "testutil.h"

static int got_signal[65];

static void on_signal(int signo, void *user)
{
	(void)user;
	if (signo > 0 && signo < 65)
		got_signal[signo]++;
}

static int cb_signals(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
	(void)user;
	(void)in;
	(void)len;
	return st_loop_signals_dispatch(wsi, (int)reason);
}

static int cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
        {"http", cb_http, 0, 0, 0, NULL, 0},
        {"signals", cb_signals, 0, 0, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void test_signals_and_port(void **state)
{
	(void)state;
	lws_set_log_level(LLL_ERR, NULL);
	assert_int_equal(st_loop_block_signals(), 0);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DISABLE_IPV6;
	struct lws_context *ctx = lws_create_context(&info);
	assert_non_null(ctx);
	info.port = 0; /* any free port */
	info.iface = "127.0.0.1";
	info.protocols = protocols;
	info.vhost_name = "test";
	struct lws_vhost *vh = lws_create_vhost(ctx, &info);
	assert_non_null(vh);
	int port = st_loop_listen_port(vh);
	assert_true(port > 0 && port < 65536);

	struct st_loop_signals *sig;
	assert_int_equal(st_loop_signals_new(&sig, vh, "signals", on_signal, NULL), 0);
	memset(got_signal, 0, sizeof got_signal);
	/* Blocked, so it stays pending until the signalfd reads it on the loop. */
	raise(SIGHUP);
	raise(SIGTERM);
	for (int i = 0; (got_signal[SIGHUP] == 0 || got_signal[SIGTERM] == 0) && i < 200; i++)
		lws_service(ctx, 0);
	assert_int_equal(got_signal[SIGHUP], 1);
	assert_int_equal(got_signal[SIGTERM], 1);
	assert_int_equal(got_signal[SIGINT], 0);
	lws_context_destroy(ctx);
	st_loop_signals_free(sig);
	st_loop_signals_free(NULL);
}

static void test_ready_file(void **state)
{
	(void)state;
	char dir[256], path[300];
	assert_int_equal(test_mkdtemp(dir, sizeof dir, "loop"), 0);
	snprintf(path, sizeof path, "%s/ready", dir);
	const char content[] = "{\"stream_port\":10350,\"tunnel_port\":10004}\n";
	assert_int_equal(st_loop_write_ready_file(path, content, sizeof content - 1), 0);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char buf[128] = {0};
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	assert_int_equal(n, sizeof content - 1);
	assert_string_equal(buf, content);
	/* Rewriting replaces it whole; no temporary file is left behind. */
	assert_int_equal(st_loop_write_ready_file(path, "x", 1), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 1);
	char tmp[320];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	assert_int_not_equal(stat(tmp, &st), 0);
	/* A directory that does not exist: an error, not a crash. */
	assert_int_equal(st_loop_write_ready_file("/nonexistent-dir/x/ready", "x", 1), -ENOENT);
	assert_int_equal(rmtree(dir), 0);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t fired_at[2];

static void on_late(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	fired_at[0] = mono_ms();
}

static void on_soon(lws_sorted_usec_list_t *sul)
{
	(void)sul;
	fired_at[1] = mono_ms();
}

/* The epoll loop: lws timers fire on time even when a sooner one is scheduled after a later one
 * was armed (the libev plugin's flaw the tick covers), st_loop_run() honours its bound, and the
 * poll loop behaves the same. */
static void run_loop_kind(enum st_loop_kind kind)
{
	lws_set_log_level(LLL_ERR, NULL);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
	struct st_loop *loop;
	struct lws_context *ctx;
	enum st_loop_kind used;
	assert_int_equal(st_loop_context_new(&loop, &ctx, &info, kind, &used), 0);
	assert_int_equal(used, kind); /* the plugin is installed where the tests run */
	assert_non_null(st_loop_kind_name(used));

	/* A bounded round returns by its bound at the latest (on epoll the 20 ms tick of
	 * stream/rt/evloop.c may end it sooner); a round that must not wait does not. */
	uint64_t t0 = mono_ms();
	assert_int_equal(st_loop_run(loop, 150), 0);
	assert_true(mono_ms() - t0 < 1000);
	t0 = mono_ms();
	assert_int_equal(st_loop_run(loop, 0), 0);
	assert_true(mono_ms() - t0 < 100);

	/* A far timer is armed first; a near one scheduled after it must not wait for it. */
	lws_sorted_usec_list_t late, soon;
	memset(&late, 0, sizeof late);
	memset(&soon, 0, sizeof soon);
	memset(fired_at, 0, sizeof fired_at);
	lws_sul_schedule(ctx, 0, &late, on_late, 3000 * LWS_US_PER_MS);
	for (int i = 0; i < 5; i++) /* lws arms its timer for "late" (idle work, then timer) */
		assert_int_equal(st_loop_run(loop, 0), 0);
	t0 = mono_ms();
	lws_sul_schedule(ctx, 0, &soon, on_soon, 100 * LWS_US_PER_MS);
	while (fired_at[1] == 0 && mono_ms() - t0 < 2500)
		assert_int_equal(st_loop_run(loop, -1), 0);
	assert_true(fired_at[1] != 0);
	assert_true(fired_at[1] - t0 >= 90 && fired_at[1] - t0 < 1000);
	assert_int_equal(fired_at[0], 0);
	lws_sul_cancel(&late);
	st_loop_destroy(loop);
	st_loop_destroy(NULL);
}

/* --check-config's listen check: the host's address with its port free, the same with the port
 * taken (no error: the running daemon holds it), an address the host lacks, not an address. */
static void test_st_loop_check_listen__cases(void **state)
{
	(void)state;
	bool port_free = false;
	assert_int_equal(st_loop_check_listen("127.0.0.1:0", &port_free), 0);
	assert_true(port_free);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 1), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	char addr[32];
	snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
	assert_int_equal(st_loop_check_listen(addr, &port_free), 0);
	assert_false(port_free);
	close(fd);
	assert_int_equal(st_loop_check_listen("192.0.2.1:10350", &port_free), -EADDRNOTAVAIL);
	assert_int_equal(st_loop_check_listen("nonsense", &port_free), -EINVAL);
	assert_int_equal(st_loop_check_listen("127.0.0.1:70000", &port_free), -EINVAL);
}

static void test_epoll_loop_timers_and_bound(void **state)
{
	(void)state;
	run_loop_kind(ST_LOOP_EPOLL);
}

static void test_poll_loop_timers_and_bound(void **state)
{
	(void)state;
	run_loop_kind(ST_LOOP_POLL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_signals_and_port),
	        cmocka_unit_test(test_ready_file),
	        cmocka_unit_test(test_st_loop_check_listen__cases),
	        cmocka_unit_test(test_epoll_loop_timers_and_bound),
	        cmocka_unit_test(test_poll_loop_timers_and_bound),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

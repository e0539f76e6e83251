/* The stream-certs CLI, checked with the real openssl command: certificates verify and carry
 * exactly the subjects and SANs asked for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static char dir[256];
static char tool[512];

/* Runs argv (argv[0] is a path, or "openssl" looked up in PATH), capturing stdout+stderr into
 * @out. Returns the exit status, or -1 when it did not exit normally. */
static int run(const char *const argv[], char *out, size_t cap)
{
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(pipefd[1], 1);
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		close(pipefd[1]);
		execvp(argv[0], (char *const *)argv); /* exec does not modify them */
		_exit(127);
	}
	close(pipefd[1]);
	size_t len = 0;
	ssize_t n;
	while ((n = read(pipefd[0], out + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	out[len] = '\0';
	close(pipefd[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static const char *p(const char *name)
{
	static char bufs[8][512];
	static int i;
	char *b = bufs[i++ % 8];
	snprintf(b, 512, "%s/%s", dir, name);
	return b;
}

static int setup(void **state)
{
	(void)state;
	const char *bin = getenv("ST_BIN_DIR");
	if (bin == NULL)
		return -1;
	snprintf(tool, sizeof tool, "%s/certs/stream-certs", bin);
	return test_mkdtemp(dir, sizeof dir, "certs-cli");
}

static int teardown(void **state)
{
	(void)state;
	return rmtree(dir);
}

static void test_quick_set_verifies(void **state)
{
	(void)state;
	char out[8192], pki[512];
	snprintf(pki, sizeof pki, "%s", p("pki")); /* p() reuses its buffers */
	const char *quick[] = {tool,     "quick",  "--out",  pki, "--node",
	                       "edge-1", "--node", "edge-2", NULL};
	assert_int_equal(run(quick, out, sizeof out), 0);
	/* Each leaf against its CA, with the purpose it was made for. */
	const struct {
		const char *ca, *leaf, *purpose;
	} pairs[] = {
	        {"pki/tunnel-ca.crt", "pki/cloudstream-tunnel.crt", "sslserver"},
	        {"pki/tunnel-ca.crt", "pki/node-edge-1.crt", "sslclient"},
	        {"pki/tunnel-ca.crt", "pki/node-edge-2.crt", "sslclient"},
	        {"pki/stream-ca.crt", "pki/cloudstream-stream.crt", "sslserver"},
	        {"pki/stream-ca.crt", "pki/apiserver-kubelet-client.crt", "sslclient"},
	        {"pki/kubelet-ca.crt", "pki/kubelet.crt", "sslserver"},
	        {"pki/kubelet-ca.crt", "pki/edgestream-kubelet-client.crt", "sslclient"},
	};
	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		const char *verify[] = {"openssl",        "verify",   "-CAfile",
		                        p(pairs[i].ca),   "-purpose", pairs[i].purpose,
		                        p(pairs[i].leaf), NULL};
		if (run(verify, out, sizeof out) != 0)
			fail_msg("openssl verify %s: %s", pairs[i].leaf, out);
		assert_non_null(strstr(out, ": OK"));
	}
	/* Across trust domains it must fail: a node certificate is no stream-server client. */
	const char *cross[] = {
	        "openssl", "verify", "-CAfile", p("pki/stream-ca.crt"), p("pki/node-edge-1.crt"),
	        NULL};
	assert_int_not_equal(run(cross, out, sizeof out), 0);

	const char *subj[] = {"openssl",  "x509",    "-noout", "-subject",
	                      "-nameopt", "RFC2253", "-in",    p("pki/node-edge-1.crt"),
	                      NULL};
	assert_int_equal(run(subj, out, sizeof out), 0);
	assert_string_equal(out, "subject=CN=system:node:edge-1,O=system:nodes\n");
	const char *api[] = {"openssl",  "x509",    "-noout", "-subject",
	                     "-nameopt", "RFC2253", "-in",    p("pki/apiserver-kubelet-client.crt"),
	                     NULL};
	assert_int_equal(run(api, out, sizeof out), 0);
	assert_string_equal(out, "subject=CN=kube-apiserver-kubelet-client,O=system:masters\n");

	/* Keys are 0600. */
	struct stat st;
	assert_int_equal(stat(p("pki/node-edge-1.key"), &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* A second quick without --force refuses to overwrite and says why. */
	assert_int_equal(run(quick, out, sizeof out), 1);
	assert_non_null(strstr(out, "exists"));
}

static void test_server_exact_sans(void **state)
{
	(void)state;
	char out[8192];
	const char *ca[] = {tool, "ca", "--out", p("ca"), "--cn", "my CA", NULL};
	assert_int_equal(run(ca, out, sizeof out), 0);
	const char *srv[] = {
	        tool,     "server",         "--ca",   p("ca"), "--out",
	        p("srv"), "--cn",           "cloud",  "--dns", "cloud.example,localhost",
	        "--ip",   "192.0.2.10,::1", "--days", "30",    NULL};
	assert_int_equal(run(srv, out, sizeof out), 0);
	const char *san[] = {"openssl",        "x509", "-noout",     "-ext",
	                     "subjectAltName", "-in",  p("srv.crt"), NULL};
	assert_int_equal(run(san, out, sizeof out), 0);
	assert_string_equal(out, "X509v3 Subject Alternative Name: \n"
	                         "    DNS:cloud.example, DNS:localhost, IP Address:192.0.2.10, IP "
	                         "Address:0:0:0:0:0:0:0:1\n");
	const char *sv[] = {"openssl",    "verify",    "-CAfile",          p("ca.crt"),
	                    "-purpose",   "sslserver", "-verify_hostname", "cloud.example",
	                    p("srv.crt"), NULL};
	assert_int_equal(run(sv, out, sizeof out), 0);
	const char *wrong[] = {"openssl",          "verify",        "-CAfile",    p("ca.crt"),
	                       "-verify_hostname", "other.example", p("srv.crt"), NULL};
	assert_int_not_equal(run(wrong, out, sizeof out), 0);
	/* The tool's own verify and show. */
	const char *v[] = {tool,         "verify",    "--ca",   p("ca.crt"),  "--name",
	                   "192.0.2.10", "--purpose", "server", p("srv.crt"), NULL};
	assert_int_equal(run(v, out, sizeof out), 0);
	const char *v2[] = {tool,        "verify", "--ca",       p("ca.crt"),
	                    "--purpose", "client", p("srv.crt"), NULL};
	assert_int_equal(run(v2, out, sizeof out), 1);
	const char *show[] = {tool, "show", p("srv.crt"), NULL};
	assert_int_equal(run(show, out, sizeof out), 0);
	assert_non_null(strstr(out, "DNS:       cloud.example\n"));
	assert_non_null(strstr(out, "IP:        192.0.2.10\n"));
	assert_non_null(strstr(out, "key:       EC 256 bits\n"));
	/* RSA on request. */
	const char *rsa[] = {tool,    "client",  "--ca",       p("ca"),  "--out", p("rsa"),
	                     "--cn",  "someone", "--org",      "team-a", "--org", "team-b",
	                     "--key", "rsa",     "--rsa-bits", "3072",   NULL};
	assert_int_equal(run(rsa, out, sizeof out), 0);
	const char *subj[] = {"openssl", "x509", "-noout",     "-subject", "-nameopt",
	                      "RFC2253", "-in",  p("rsa.crt"), NULL};
	assert_int_equal(run(subj, out, sizeof out), 0);
	assert_string_equal(out, "subject=CN=someone,O=team-b,O=team-a\n");
}

static void test_usage_errors(void **state)
{
	(void)state;
	char out[8192];
	const char *none[] = {tool, NULL};
	assert_int_equal(run(none, out, sizeof out), 2);
	const char *help[] = {tool, "--help", NULL};
	assert_int_equal(run(help, out, sizeof out), 0);
	assert_non_null(strstr(out, "usage: stream-certs"));
	const char *bad[] = {tool, "frobnicate", NULL};
	assert_int_equal(run(bad, out, sizeof out), 2);
	const char *missing[] = {tool, "server", "--cn", "x", NULL};
	assert_int_equal(run(missing, out, sizeof out), 2);
	const char *badnode[] = {tool,   "client", "--ca",     p("ca"), "--out",
	                         p("n"), "--node", "Bad_Name", NULL};
	assert_int_equal(run(badnode, out, sizeof out), 2);
	assert_non_null(strstr(out, "not a valid node name"));
	const char *badbits[] = {tool,  "ca",         "--out", p("x"), "--key",
	                         "rsa", "--rsa-bits", "1024",  NULL};
	assert_int_equal(run(badbits, out, sizeof out), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_quick_set_verifies),
	        cmocka_unit_test(test_server_exact_sans),
	        cmocka_unit_test(test_usage_errors),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

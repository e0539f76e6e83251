/*
 * test/bench/egress_splice.c — kube-apiserver's EgressSelector `HTTPConnect` dialer as a TCP
 * shim, for nginx playing kube-apiserver in the benches (nginx cannot dial through a CONNECT
 * proxy itself): test/integration/peers/egress_shim.py's job at the kernel's speed, so the shim
 * is not what bounds a bench.
 *
 *   egress_splice --uds PATH --target HOST:PORT [--listen-port 0] [--ready-file F]
 *
 * Every connection accepted on 127.0.0.1:--listen-port is one dial: a new connection to the
 * front door's unix socket, then what egress_selector.go's tunnelHTTPConnect writes,
 *
 *   CONNECT <target> HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n
 *
 * one answer read byte by byte up to its blank line (a status other than 200 fails the dial: the
 * accepted connection is closed), and from then on both directions are moved with splice(2)
 * through a pipe each (no copy through this process), one thread per direction. A half close
 * is passed on (shutdown SHUT_WR). The bound port is written to --ready-file (or stdout). Exits
 * on SIGTERM/SIGINT. A bench tool, not a test.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "benchutil.h"

static struct {
	const char *uds, *target, *ready_file;
	int listen_port;
} o;

struct pipe_job {
	int from, to;
};

/* Moves @j->from's bytes to @j->to until EOF or an error, then half-closes @j->to. */
static void *pump(void *arg)
{
	struct pipe_job *j = arg;
	int p[2];
	if (pipe2(p, O_CLOEXEC) == 0) {
		fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
		for (;;) {
			ssize_t n = splice(j->from, NULL, p[1], NULL, 1 << 20, SPLICE_F_MOVE);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			while (n > 0) {
				ssize_t w =
				        splice(p[0], NULL, j->to, NULL, (size_t)n, SPLICE_F_MOVE);
				if (w < 0 && errno == EINTR)
					continue;
				if (w <= 0)
					goto out;
				n -= w;
			}
		}
	out:
		close(p[0]);
		close(p[1]);
	}
	shutdown(j->to, SHUT_WR);
	return NULL;
}

/* The dialer's CONNECT on a new unix connection: its fd once the answer was 200, else -1. */
static int dial(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", o.uds);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		fprintf(stderr, "egress_splice: %s: %s\n", o.uds, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char req[512], head[4096];
	int n = snprintf(req, sizeof req, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	                 o.target);
	if (n < 0 || (size_t)n >= sizeof req || write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	size_t got = 0; /* byte by byte: nothing after the head may be taken from the tunnel */
	while (got + 1 < sizeof head) {
		ssize_t r = read(fd, head + got, 1);
		if (r <= 0)
			break;
		got++;
		head[got] = '\0';
		if (got >= 4 && memcmp(head + got - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	head[got] = '\0';
	if (strncmp(head, "HTTP/1.1 200", 12) != 0) {
		fprintf(stderr, "egress_splice: dial failed: %.*s\n", (int)strcspn(head, "\r\n"),
		        head);
		close(fd);
		return -1;
	}
	return fd;
}

struct conn_job {
	int client;
};

static void *serve(void *arg)
{
	struct conn_job *c = arg;
	int up = dial();
	if (up >= 0) {
		struct pipe_job a = {c->client, up}, b = {up, c->client};
		pthread_t t;
		if (pthread_create(&t, NULL, pump, &a) == 0) {
			pump(&b);
			pthread_join(t, NULL);
		}
		close(up);
	}
	close(c->client);
	free(c);
	return NULL;
}

static const struct bench_opt opts[] = {
        {"uds", BENCH_STR, &o.uds, "PATH", true},
        {"target", BENCH_STR, &o.target, "HOST:PORT", true},
        {"listen-port", BENCH_INT, &o.listen_port, "P", false},
        {"ready-file", BENCH_STR, &o.ready_file, "F", false},
};
static const struct bench_cli cli = {"egress_splice", opts, sizeof opts / sizeof opts[0]};

int main(int argc, char **argv)
{
	bench_parse_args(&cli, argc, argv);
	signal(SIGPIPE, SIG_IGN);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)o.listen_port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 64) < 0 ||
	    getsockname(ls, (struct sockaddr *)&sa, &sl) < 0) {
		fprintf(stderr, "egress_splice: listen: %s\n", strerror(errno));
		return 1;
	}
	FILE *rf = o.ready_file ? fopen(o.ready_file, "w") : stdout;
	if (rf == NULL) {
		fprintf(stderr, "egress_splice: %s: %s\n", o.ready_file, strerror(errno));
		return 1;
	}
	fprintf(rf, "%d\n", ntohs(sa.sin_port));
	if (rf != stdout)
		fclose(rf);
	else
		fflush(stdout);
	/* The default dispositions end the process on SIGTERM/SIGINT: no state to save. */
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "egress_splice: accept: %s\n", strerror(errno));
			return 1;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct conn_job *c = malloc(sizeof *c);
		pthread_t t;
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->client = fd;
		if (pthread_create(&t, NULL, serve, c) != 0) {
			close(fd);
			free(c);
			continue;
		}
		pthread_detach(t);
	}
}

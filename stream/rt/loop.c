/* Event-loop helpers (stream/loop.h). */
#include <stream/err.h>
#include <stream/log.h>
#include <stream/loop.h>

#include <fcntl.h>
#include <libwebsockets.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/signalfd.h>
#include <unistd.h>

struct st_loop_signals {
	int fd;
	struct lws *wsi;
	st_loop_signal_cb cb;
	void *user;
};

static void handled_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
}

int st_loop_block_signals(void)
{
	sigset_t set;
	handled_set(&set);
	int e = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (e != 0)
		return -e;
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		return -errno;
	return 0;
}

int st_loop_signals_new(struct st_loop_signals **out, struct lws_vhost *vhost,
                        const char *protocol_name, st_loop_signal_cb cb, void *user)
{
	struct st_loop_signals *s = calloc(1, sizeof *s);
	if (s == NULL)
		return -ENOMEM;
	sigset_t set;
	handled_set(&set);
	s->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->fd < 0) {
		int rc = -errno;
		free(s);
		return rc;
	}
	s->cb = cb;
	s->user = user;
	lws_sock_file_fd_type u;
	u.filefd = s->fd;
	s->wsi = lws_adopt_descriptor_vhost(vhost, LWS_ADOPT_RAW_FILE_DESC, u, protocol_name, NULL);
	if (s->wsi == NULL) {
		close(s->fd);
		free(s);
		return -ENOMEM;
	}
	lws_set_opaque_user_data(s->wsi, s);
	*out = s;
	return 0;
}

int st_loop_signals_dispatch(struct lws *wsi, int reason)
{
	struct st_loop_signals *s = wsi ? lws_get_opaque_user_data(wsi) : NULL;
	if (s == NULL || wsi != s->wsi)
		return 0;
	if (reason == LWS_CALLBACK_RAW_CLOSE_FILE) {
		lws_set_opaque_user_data(wsi, NULL);
		s->wsi = NULL; /* lws closes the fd with the wsi */
		s->fd = -1;
		return 0;
	}
	if (reason != LWS_CALLBACK_RAW_RX_FILE)
		return 0;
	struct signalfd_siginfo si;
	while (read(s->fd, &si, sizeof si) == (ssize_t)sizeof si)
		s->cb((int)si.ssi_signo, s->user);
	return 0;
}

void st_loop_signals_free(struct st_loop_signals *s)
{
	if (s == NULL)
		return;
	if (s->wsi != NULL)
		lws_set_opaque_user_data(s->wsi, NULL);
	free(s);
}

int st_loop_write_ready_file(const char *path, const char *content, size_t len)
{
	char tmp[PATH_MAX];
	int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof tmp)
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	size_t off = 0;
	while (off < len) {
		ssize_t w = write(fd, content + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			int rc = -errno;
			close(fd);
			unlink(tmp);
			return rc;
		}
		off += (size_t)w;
	}
	/* The descriptor is closed whatever fsync says (a failed fsync used to leak it). */
	int rc = fsync(fd) != 0 ? -errno : 0;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	if (rename(tmp, path) != 0) {
		rc = -errno;
		unlink(tmp);
		return rc;
	}
	return 0;
}

int st_loop_listen_port(struct lws_vhost *vhost)
{
	int port = lws_get_vhost_listen_port(vhost);
	return port > 0 ? port : -ENOENT;
}

/*
 * Binds a throw-away socket to @host:@port (an IP literal, or "" for every address): lws logs
 * a bind failure and goes on without the listener, so a daemon would run, and say it is
 * ready, on a port nobody can reach. 0, or the bind's -errno; a name (an interface) is left
 * to lws.
 */
static int probe_listen(const char *host, int port)
{
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof ss);
	socklen_t len;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	if (host[0] == '\0' || inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		len = sizeof *v4;
	} else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		len = sizeof *v6;
	} else {
		return 0;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as lws does */
	int rc = bind(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
	close(fd);
	return rc;
}

int st_loop_set_listen(struct lws_context_creation_info *info, const char *addr, char *host,
                       size_t cap)
{
	const char *colon, *h = addr;
	size_t hlen;
	if (addr == NULL)
		return -EINVAL;
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');
		if (end == NULL || end[1] != ':')
			return -EINVAL;
		h = addr + 1;
		hlen = (size_t)(end - h);
		colon = end + 1;
	} else {
		colon = strrchr(addr, ':');
		if (colon == NULL)
			return -EINVAL;
		hlen = (size_t)(colon - addr);
	}
	if (hlen >= cap)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	char *end;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || p > 65535)
		return -EINVAL;
	info->port = (int)p;
	if (host[0] && strchr(host, ':') == NULL)
		info->options |=
		        LWS_SERVER_OPTION_DISABLE_IPV6; /* an IPv4 address: AF_INET socket */
	info->iface = host[0] ? host : NULL;
	return probe_listen(host, info->port);
}

int st_loop_check_listen(const char *addr, bool *port_free)
{
	struct lws_context_creation_info info;
	char host[128];
	memset(&info, 0, sizeof info);
	*port_free = true;
	int rc = st_loop_set_listen(&info, addr, host, sizeof host);
	if (rc == -EINVAL)
		return rc;
	/* set_listen probed the real port: a failure there may only be a port in use. */
	if ((rc = probe_listen(host, 0)) < 0)
		return rc;
	*port_free = probe_listen(host, info.port) == 0;
	return 0;
}

/*
 * edgestream/src/kubelet_url.h — what --kubelet-url names (pure): the kubelet over HTTPS, or
 * plain HTTP to a loopback address only (KubeEdge edged's read-only port,
 * http://127.0.0.1:10350, which serves /metrics, /stats, /healthz without TLS).
 */
#ifndef EDGESTREAM_KUBELET_URL_H
#define EDGESTREAM_KUBELET_URL_H

#include <stdbool.h>
#include <stddef.h>

/* A parsed --kubelet-url. */
struct es_kubelet_url {
	bool plain;     /* http:// (loopback only): no TLS, no client certificate */
	char host[256]; /* without brackets */
	int port;       /* default 10250 for https, 10350 for http (edged's read-only port) */
};

/*
 * es_kubelet_url_parse() - @url is https://HOST[:PORT][/] or http://LOOPBACK-IP[:PORT][/].
 * Plain HTTP carries the kubelet API (exec, logs, ...) unencrypted and unauthenticated, so it is
 * allowed only where nothing leaves the host: a loopback IP literal (127.0.0.0/8, ::1,
 * ::ffff:127.x.y.z); a name such as "localhost" is refused too (it resolves at run time).
 * Returns 0 with *@out, or -EINVAL with a static reason in *@why.
 */
int es_kubelet_url_parse(const char *url, struct es_kubelet_url *out, const char **why);

#endif /* EDGESTREAM_KUBELET_URL_H */

/*
 * cloudstream/src/door_parse.c — the front door's pure part (door.h): the CONNECT head, our
 * answers, the status for an edge's ERROR, the TCP_CONNECT payload. No I/O, no lws.
 */
#include "door.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include <stream/ext.h>
#include <stream/ipv4.h>
#include <stream/http.h>

/* A DNS-1123-ish host byte: what a node name or a hostname address can hold. */
static bool name_byte(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '-';
}

/* "host:port", "[v6]:port": the authority form of a CONNECT target (RFC 9110 §9.3.6). */
static int parse_target(const char *t, size_t len, struct cs_door_req *out)
{
	const char *colon;
	if (len > 0 && t[0] == '[') {
		const char *rb = memchr(t, ']', len);
		if (rb == NULL || rb == t + 1 || (size_t)(rb - t) + 1 >= len || rb[1] != ':')
			return -EBADMSG;
		out->host = t + 1;
		out->host_len = (size_t)(rb - t) - 1;
		for (size_t i = 0; i < out->host_len; i++) {
			char c = out->host[i];
			if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
			      (c >= 'A' && c <= 'F') || c == ':' || c == '.'))
				return -EBADMSG;
		}
		if (out->host_len > 45)
			return -EBADMSG;
		out->host_is_ip = true;
		colon = rb + 1;
	} else {
		colon = NULL;
		for (size_t i = len; i > 0; i--)
			if (t[i - 1] == ':') {
				colon = t + i - 1;
				break;
			}
		if (colon == NULL || colon == t)
			return -EBADMSG;
		out->host = t;
		out->host_len = (size_t)(colon - t);
		if (out->host_len > CS_DOOR_MAX_HOST_BYTES)
			return -EBADMSG;
		for (size_t i = 0; i < out->host_len; i++)
			if (!name_byte(t[i]))
				return -EBADMSG;
		out->host_is_ip = st_ipv4_parse(out->host, out->host_len, NULL);
	}
	const char *ps = colon + 1;
	size_t plen = len - (size_t)(ps - t);
	if (plen == 0 || plen > 5)
		return -EBADMSG;
	unsigned long port = 0;
	for (size_t i = 0; i < plen; i++) {
		if (ps[i] < '0' || ps[i] > '9')
			return -EBADMSG;
		port = port * 10 + (unsigned long)(ps[i] - '0');
	}
	if (port < 1 || port > 65535)
		return -EBADMSG;
	out->port = (uint16_t)port;
	return 0;
}

ssize_t cs_door_parse(const uint8_t *p, size_t len, struct cs_door_req *out, int *status,
                      const char **why)
{
	memset(out, 0, sizeof *out);
	struct st_http_request req;
	size_t look = len < CS_DOOR_MAX_HEAD_BYTES ? len : CS_DOOR_MAX_HEAD_BYTES;
	ssize_t n = st_http_parse_request(p, look, &req);
	if (n == 0 && len >= CS_DOOR_MAX_HEAD_BYTES)
		n = -EMSGSIZE;
	if (n == 0)
		return 0;
	if (n == -EMSGSIZE) {
		*status = 431;
		*why = "CONNECT head too large";
		return n;
	}
	if (n < 0) {
		*status = 400;
		*why = "malformed request head";
		return -EBADMSG;
	}
	if (req.method_len != 7 || memcmp(req.method, "CONNECT", 7) != 0) {
		*status = 405;
		*why = "this port only tunnels: CONNECT host:port";
		return -ENOTSUP;
	}
	if (parse_target(req.target, req.target_len, out) < 0) {
		*status = 400;
		*why = "malformed CONNECT target: expected host:port";
		return -EBADMSG;
	}
	out->minor_version = req.minor_version;
	return n;
}

ssize_t cs_door_answer(char *out, size_t cap, int status, const char *reason)
{
	int n;
	if (status == 200) {
		n = snprintf(out, cap, "HTTP/1.1 200 Connection established\r\n\r\n");
		return n < 0 || (size_t)n >= cap ? -EMSGSIZE : n;
	}
	char phrase[CS_DOOR_MAX_REASON_BYTES + 1];
	size_t k = 0;
	for (const char *r = reason ? reason : ""; *r && k < CS_DOOR_MAX_REASON_BYTES; r++) {
		unsigned char c = (unsigned char)*r;
		phrase[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	phrase[k] = '\0';
	if (status < 100 || status > 999)
		status = 502;
	n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
	             status, k ? phrase : "error");
	return n < 0 || (size_t)n >= cap ? -EMSGSIZE : n;
}

int cs_door_error_status(uint64_t code)
{
	switch (code) {
	case ST_EXT_ERR_TIMEOUT:
		return 504;
	case ST_EXT_ERR_LIMIT:
		return 503;
	default:
		return 502;
	}
}

ssize_t cs_door_payload(uint8_t *out, size_t cap, enum cs_door_target target, uint16_t port,
                        const char *pod_ip)
{
	struct st_ext_tcp_connect tc = {.port = port};
	if (target == CS_DOOR_TARGET_KUBELET) {
		tc.target = "kubelet";
		tc.target_len = 7;
	} else if (target == CS_DOOR_TARGET_POD) {
		if (pod_ip == NULL || !st_ipv4_parse(pod_ip, strlen(pod_ip), NULL))
			return -EINVAL; /* the edge takes dotted IPv4 targets only */
		tc.target = pod_ip;
		tc.target_len = strlen(pod_ip);
	}
	return st_ext_tcp_connect_encode(out, cap, &tc);
}

/* @o's member @key as a string, or NULL. */
static const char *member_string(struct json_object *o, const char *key)
{
	struct json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

int cs_door_pod_node(const char *json, size_t len, const char *ip, char *node, size_t cap)
{
	if (len > INT32_MAX)
		return -EBADMSG;
	struct json_tokener *tok = json_tokener_new_ex(16);
	if (tok == NULL)
		return -EBADMSG;
	struct json_object *list = json_tokener_parse_ex(tok, json, (int)len);
	bool complete = json_tokener_get_error(tok) == json_tokener_success;
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	while (complete && end < len &&
	       (json[end] == ' ' || json[end] == '\n' || json[end] == '\r' || json[end] == '\t'))
		end++;
	complete = complete && end == len; /* nothing after the object */
	struct json_object *items;
	int rc = -EBADMSG;
	if (list == NULL || !complete || !json_object_is_type(list, json_type_object) ||
	    !json_object_object_get_ex(list, "items", &items) ||
	    !json_object_is_type(items, json_type_array))
		goto out;
	rc = 0;
	for (size_t i = 0; i < json_object_array_length(items); i++) {
		struct json_object *pod = json_object_array_get_idx(items, i), *spec, *st, *hn;
		if (!json_object_is_type(pod, json_type_object) ||
		    !json_object_object_get_ex(pod, "spec", &spec) ||
		    !json_object_object_get_ex(pod, "status", &st))
			continue;
		const char *pip = member_string(st, "podIP");
		const char *phase = member_string(st, "phase");
		const char *name = member_string(spec, "nodeName");
		if (pip == NULL || strcmp(pip, ip) != 0 || name == NULL || name[0] == '\0')
			continue;
		if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
			continue;
		if (json_object_object_get_ex(spec, "hostNetwork", &hn) &&
		    json_object_get_boolean(hn))
			continue;
		if (strlen(name) >= cap) {
			rc = -EMSGSIZE;
			goto out;
		}
		memcpy(node, name, strlen(name) + 1);
		rc = 1;
		break;
	}
out:
	json_object_put(list);
	return rc;
}

int cs_door_port_parse(const char *s, uint16_t *port)
{
	unsigned long v = 0;
	size_t i = 0;
	for (; s[i] >= '0' && s[i] <= '9' && i < 6; i++)
		v = v * 10 + (unsigned long)(s[i] - '0');
	if (i == 0 || s[i] != '\0' || v < 1 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

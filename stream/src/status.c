/* Kubernetes Status bodies and HTTP error responses (stream/status.h). */
#include <stream/err.h>
#include <stream/status.h>

#include <stdio.h>
#include <string.h>

#include "jsonw.h"

static const struct {
	int code;
	const char *phrase;
	const char *reason; /* metav1.StatusReason, "" when apimachinery has none */
} codes[] = {
        {400, "Bad Request", "BadRequest"},
        {401, "Unauthorized", "Unauthorized"},
        {403, "Forbidden", "Forbidden"},
        {404, "Not Found", "NotFound"},
        {405, "Method Not Allowed", "MethodNotAllowed"},
        {408, "Request Timeout", "Timeout"},
        {409, "Conflict", "Conflict"},
        {410, "Gone", "Gone"},
        {413, "Request Entity Too Large", "RequestEntityTooLarge"},
        {415, "Unsupported Media Type", "UnsupportedMediaType"},
        {422, "Unprocessable Entity", "Invalid"},
        {429, "Too Many Requests", "TooManyRequests"},
        {431, "Request Header Fields Too Large", ""},
        {500, "Internal Server Error", "InternalError"},
        {501, "Not Implemented", ""},
        {502, "Bad Gateway", ""},
        {503, "Service Unavailable", "ServiceUnavailable"},
        {504, "Gateway Timeout", "Timeout"},
};

const char *st_http_reason_phrase(int code)
{
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (codes[i].code == code)
			return codes[i].phrase;
	return "Unknown";
}

const char *st_status_reason(int code)
{
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (codes[i].code == code)
			return codes[i].reason;
	return "";
}

ssize_t st_status_json(char *out, size_t cap, int code, const char *message)
{
	if (cap > ST_MAX_STATUS_JSON_BYTES)
		cap = ST_MAX_STATUS_JSON_BYTES;
	struct st__jw o = {.p = out, .cap = cap};
	st__jw_puts(&o, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
	                "\"status\":\"Failure\",\"message\":");
	st__jw_string(&o, message ? message : "");
	const char *reason = st_status_reason(code);
	if (*reason) {
		st__jw_puts(&o, ",\"reason\":");
		st__jw_string(&o, reason);
	}
	st__jw_puts(&o, ",\"code\":");
	st__jw_u64(&o, code < 0 ? 0 : (uint64_t)code);
	st__jw_put(&o, "}", 1);
	return o.overflow ? -EMSGSIZE : (ssize_t)o.len;
}

ssize_t st_http_error_response(char *out, size_t cap, int code, const char *message)
{
	char body[ST_MAX_STATUS_JSON_BYTES];
	ssize_t blen = st_status_json(body, sizeof body, code, message);
	if (blen < 0)
		return blen;
	int n = snprintf(out, cap,
	                 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
	                 "Content-Length: %zd\r\nConnection: close\r\n\r\n",
	                 code, st_http_reason_phrase(code), blen);
	if (n < 0 || (size_t)n >= cap || (size_t)blen > cap - (size_t)n)
		return -EMSGSIZE;
	memcpy(out + n, body, (size_t)blen);
	return n + blen;
}

enum st_error_form st_error_form_for(bool container_logs, bool has_forwarded_uri)
{
	return container_logs && !has_forwarded_uri ? ST_ERROR_FORM_POD_LOG : ST_ERROR_FORM_STATUS;
}

bool st_status_apiserver_shows_body(int code)
{
	switch (code) {
	case 400: /* NewBadRequest(body) */
	case 403: /* Forbidden: "the server message has details ... Keep its message." */
	case 406: /* NotAcceptable: the body unless empty or "unknown" */
	case 415: /* UnsupportedMediaType: the body */
	case 500: /* NewInternalError(body) */
		return true;
	case 503: /* "the server is currently unable to handle the request" */
	case 504: /* "the server was unable to return a response in the time allotted, ..." */
		return false;
	default: /* 5xx: "an error on the server (%q) ..."; 4xx: generic text */
		return code >= 500 && code <= 599;
	}
}

int st_status_for_form(enum st_error_form form, int code)
{
	if (form != ST_ERROR_FORM_POD_LOG || st_status_apiserver_shows_body(code))
		return code;
	return code >= 400 && code < 500 ? 400 : 502;
}

ssize_t st_http_error_answer(char *out, size_t cap, enum st_error_form form, int code,
                             const char *message)
{
	if (form != ST_ERROR_FORM_POD_LOG)
		return st_http_error_response(out, cap, code, message);
	code = st_status_for_form(form, code);
	if (message == NULL)
		message = "";
	size_t mlen = strnlen(message, ST_MAX_STATUS_JSON_BYTES);
	int n = snprintf(out, cap,
	                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
	                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
	                 code, st_http_reason_phrase(code), mlen);
	if (n < 0 || (size_t)n >= cap || mlen > cap - (size_t)n)
		return -EMSGSIZE;
	memcpy(out + n, message, mlen);
	return n + (ssize_t)mlen;
}

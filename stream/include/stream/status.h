/*
 * stream/status.h — Kubernetes Status JSON bodies and the HTTP error responses that carry them.
 *
 * When cloudstream or edgestream must answer for a backend (no session for the node, the edge
 * refused, the backend is unreachable, a timeout, a bad request), the answer is what
 * kube-apiserver and kubectl understand: a metav1.Status object
 *
 *   {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
 *    "message":"...","reason":"ServiceUnavailable","code":503}
 *
 * in a response with a Content-Length and "Connection: close", so the apiserver never waits for
 * more. Pure code, any thread.
 */
#ifndef STREAM_STATUS_H
#define STREAM_STATUS_H

#include <stddef.h>
#include <sys/types.h>

#include <stream/limits.h>

/* st_http_reason_phrase() - "Service Unavailable" for 503, ...; "Unknown" for codes we never
 * send. Never NULL. */
const char *st_http_reason_phrase(int code);

/*
 * st_status_reason() - the metav1.StatusReason for an HTTP code, as apimachinery's errors
 * package maps them (400 BadRequest, 401 Unauthorized, 403 Forbidden, 404 NotFound,
 * 405 MethodNotAllowed, 409 Conflict, 410 Gone, 413 RequestEntityTooLarge, 415
 * UnsupportedMediaType, 422 Invalid, 429 TooManyRequests, 500 InternalError, 503
 * ServiceUnavailable, 504 Timeout); "" (reason omitted) for others such as 502, exactly as
 * apimachinery's NewGenericServerResponse leaves StatusReasonUnknown.
 */
const char *st_status_reason(int code);

/*
 * st_status_json() - write a Status body for @code with @message (JSON-escaped; invalid UTF-8
 * becomes U+FFFD). Not NUL-terminated.
 * Returns the length, or -EMSGSIZE when it does not fit @cap or ST_MAX_STATUS_JSON_BYTES.
 */
ssize_t st_status_json(char *out, size_t cap, int code, const char *message);

/*
 * st_http_error_response() - a whole HTTP/1.1 response: status line, Content-Type:
 * application/json, Content-Length, Connection: close, then the Status body.
 * Returns the length, or -EMSGSIZE when @cap is too small.
 */
ssize_t st_http_error_response(char *out, size_t cap, int code, const char *message);

#endif /* STREAM_STATUS_H */

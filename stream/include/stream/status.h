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

#include <stdbool.h>
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

/*
 * What the user sees of an error depends on the path it takes through kube-apiserver
 * (cloudstream/README.md, "What kubectl shows"):
 *   - upgrades (exec, attach, port-forward): the apiserver's upgrade-aware proxy writes any
 *     answer >= 400 back as it came (apimachinery util/proxy/upgradeaware.go, tryUpgrade), and
 *     kubectl decodes a Status body (spdy/roundtripper.go NewConnection);
 *   - the node proxy (nodes/N/proxy/...): passed through (httputil.ReverseProxy); kubectl's
 *     REST client decodes a Status body (client-go rest/request.go, Result.Error);
 *   - pods/log: kube-apiserver's own client reads the body as text and makes it the message of
 *     its own Status, for some statuses only (apiserver registry/generic/rest/
 *     response_checker.go, GenericHttpResponseChecker.Check; apimachinery api/errors/errors.go,
 *     NewGenericServerResponse): 400 keeps it as the message, 500 as "Internal error occurred:
 *     <body>", 403/406/415 as "<body> ( pods/log P)", the other 5xx as "an error on the server
 *     (<body quoted>) has prevented the request from succeeding ( pods/log P)"; 404, 503, 504,
 *     422, 429 and the other 4xx become generic text ("the server could not find the requested
 *     resource ( pods/log P)") and the body is lost. A Status JSON body would become the
 *     message as JSON text, so on that path the body is the message alone, as the kubelet
 *     writes it (go-restful's WriteError).
 */
enum st_error_form {
	ST_ERROR_FORM_STATUS = 0,  /* a Status JSON body, the status as chosen */
	ST_ERROR_FORM_POD_LOG = 1, /* kube-apiserver's pods/log client: text body, a status whose
	                            * body it shows (st_status_for_form) */
};

/* st_error_form_for() - POD_LOG for a containerLogs request that did not come through the node
 * proxy (kube-apiserver's pods/log client sends no X-Forwarded-Uri; its node proxy does), else
 * STATUS. */
enum st_error_form st_error_form_for(bool container_logs, bool has_forwarded_uri);

/* st_status_apiserver_shows_body() - whether kube-apiserver's pods/log path (above) shows the
 * body of a @code answer to the user: 400, 403, 406, 415, 500 and the 5xx other than 503 and
 * 504. */
bool st_status_apiserver_shows_body(int code);

/* st_status_for_form() - the status to answer with: @code for ST_ERROR_FORM_STATUS; for
 * ST_ERROR_FORM_POD_LOG @code when the apiserver shows its body, else 400 for a 4xx (a client
 * error stays one) and 502 for the rest (503 no tunnel or over a limit, 504 timeout). */
int st_status_for_form(enum st_error_form form, int code);

/*
 * st_http_error_answer() - the error response for @form: st_http_error_response() for
 * ST_ERROR_FORM_STATUS; for ST_ERROR_FORM_POD_LOG the status st_status_for_form() gives,
 * Content-Type: text/plain; charset=utf-8, Content-Length, Connection: close and @message
 * alone as the body (at most ST_MAX_STATUS_JSON_BYTES of it).
 * Returns the length, or -EMSGSIZE when @cap is too small.
 */
ssize_t st_http_error_answer(char *out, size_t cap, enum st_error_form form, int code,
                             const char *message);

#endif /* STREAM_STATUS_H */

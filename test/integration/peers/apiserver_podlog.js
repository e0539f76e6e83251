/*
 * kube-apiserver's pods/log error path, for the nginx stand-in (apiserver.py): njs header and
 * body filters on the .../pods/POD/log location. Read from kube-apiserver v1.26.0 and v1.33.0
 * (the same code in both):
 *
 *   pkg/registry/core/pod/rest/log.go, LogREST.Get: the answer is a LocationStreamer with
 *     ResponseChecker = NewGenericHttpResponseChecker(api.Resource("pods/log"), name)
 *   staging/src/k8s.io/apiserver/pkg/registry/generic/rest/streamer.go, InputStream: the
 *     kubelet's answer goes through ResponseChecker.Check before a byte is streamed
 *   staging/src/k8s.io/apiserver/pkg/registry/generic/rest/response_checker.go, Check: a status
 *     outside 200..206 is an error; at most maxReadLength (50000) bytes of the body are read as
 *     text; 500 -> errors.NewInternalError(body), 400 -> errors.NewBadRequest(body), anything
 *     else (404 included) -> errors.NewGenericServerResponse(code, "", pods/log, name, body, 0,
 *     false)
 *   staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go, NewGenericServerResponse: a
 *     reason and a generic message per code; only 403, 406, 415 and the 5xx other than 503 and
 *     504 keep the body in the message; then " ( pods/log NAME)" (verb "" lower-cased)
 *   staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go,
 *     StreamObject -> ErrorNegotiated: that Status, as JSON, with its code
 *
 * So the client never sees the kubelet's body itself, only this Status; its message is the
 * kubelet's text for some statuses and generic text for the others. Not modelled: a redirect
 * from the kubelet (PreventRedirects: a 500 "Get ...: redirects forbidden"); a body that is not
 * UTF-8 (Go writes U+FFFD); Unicode characters Go's %q escapes (all of ours are ASCII).
 */

var MAX_READ = 50000; /* response_checker.go maxReadLength */

/* response_checker.go Check: resp.StatusCode < http.StatusOK || > http.StatusPartialContent */
function is_error(code) {
    return code < 200 || code > 206;
}

/* A string as Go's encoding/json writes it (HTMLEscape on: <, >, & as \u00XX). */
function json_string(s) {
    var out = '"';
    for (var i = 0; i < s.length; i++) {
        var c = s.charCodeAt(i);
        var ch = s.charAt(i);
        if (ch == '"' || ch == '\\') {
            out += '\\' + ch;
        } else if (ch == '\n') {
            out += '\\n';
        } else if (ch == '\r') {
            out += '\\r';
        } else if (ch == '\t') {
            out += '\\t';
        } else if (c < 0x20 || ch == '<' || ch == '>' || ch == '&' || c == 0x2028 ||
                   c == 0x2029) {
            out += '\\u' + ('000' + c.toString(16)).slice(-4);
        } else {
            out += ch;
        }
    }
    return out + '"';
}

/* fmt's %q (strconv.Quote) for ASCII text. */
function go_quote(s) {
    var esc = {7: '\\a', 8: '\\b', 9: '\\t', 10: '\\n', 11: '\\v', 12: '\\f', 13: '\\r'};
    var out = '"';
    for (var i = 0; i < s.length; i++) {
        var c = s.charCodeAt(i);
        var ch = s.charAt(i);
        if (ch == '"' || ch == '\\') {
            out += '\\' + ch;
        } else if (esc[c]) {
            out += esc[c];
        } else if (c < 0x20 || c == 0x7f) {
            out += '\\x' + ('0' + c.toString(16)).slice(-2);
        } else {
            out += ch;
        }
    }
    return out + '"';
}

/* errors.go NewGenericServerResponse(code, "", {Resource: "pods/log"}, name, body, 0, false) */
function generic(code, body, name) {
    var reason = '';  /* StatusReasonUnknown: omitted */
    var message = 'the server responded with the status code ' + code +
                  ' but did not return more information';
    switch (code) {
    case 409:  /* verb is "", not POST */
        reason = 'Conflict';
        message = 'the server reported a conflict';
        break;
    case 404:
        reason = 'NotFound';
        message = 'the server could not find the requested resource';
        break;
    case 400:  /* not reached: Check makes 400 a NewBadRequest */
        reason = 'BadRequest';
        message = 'the server rejected our request for an unknown reason';
        break;
    case 401:
        reason = 'Unauthorized';
        message = 'the server has asked for the client to provide credentials';
        break;
    case 403:
        reason = 'Forbidden';
        message = body;
        break;
    case 406:
        reason = 'NotAcceptable';
        message = body.length == 0 || body == 'unknown'
                      ? 'the server was unable to respond with a content type that the client supports'
                      : body;
        break;
    case 415:
        reason = 'UnsupportedMediaType';
        message = body;
        break;
    case 405:
        reason = 'MethodNotAllowed';
        message = 'the server does not allow this method on the requested resource';
        break;
    case 422:
        reason = 'Invalid';
        message = 'the server rejected our request due to an error in our request';
        break;
    case 503:
        reason = 'ServiceUnavailable';
        message = 'the server is currently unable to handle the request';
        break;
    case 504:
        reason = 'Timeout';
        message = 'the server was unable to return a response in the time allotted, but may ' +
                  'still be processing the request';
        break;
    case 429:
        reason = 'TooManyRequests';
        message = 'the server has received too many requests and has asked us to try again later';
        break;
    default:
        if (code >= 500) {
            reason = 'InternalError';
            message = 'an error on the server (' + go_quote(body) +
                      ') has prevented the request from succeeding';
        }
    }
    /* "%s (%s %s %s)" with verb strings.ToLower("") */
    message += ' ( pods/log ' + name + ')';
    return {message: message, reason: reason,
            details: '{"name":' + json_string(name) + ',"kind":"pods/log"}', code: code};
}

/* The Status kube-apiserver answers with for a kubelet answer @code with body text @body. */
function status_for(code, body, name) {
    var st;
    if (code == 500) {  /* errors.NewInternalError(fmt.Errorf("%s", bodyText)) */
        st = {message: 'Internal error occurred: ' + body, reason: 'InternalError',
              details: '{"causes":[{"message":' + json_string(body) + '}]}', code: 500};
    } else if (code == 400) {  /* errors.NewBadRequest(bodyText) */
        st = {message: body, reason: 'BadRequest', details: '', code: 400};
    } else {
        st = generic(code, body, name);
    }
    /* metav1.Status field order; omitempty drops an empty reason and absent details */
    return '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":' +
           json_string(st.message) + (st.reason ? ',"reason":' + json_string(st.reason) : '') +
           (st.details ? ',"details":' + st.details : '') + ',"code":' + st.code + '}\n';
}

/* One VM per request: these hold this request's error body. */
var parts = [];
var got = 0;

function header_filter(r) {
    if (!is_error(r.status))
        return;
    r.headersOut['Content-Type'] = 'application/json';
    delete r.headersOut['Content-Length'];
}

function body_filter(r, data, flags) {
    if (!is_error(r.status)) {
        r.sendBuffer(data, flags);
        return;
    }
    if (got < MAX_READ && data.length > 0) {
        var part = data.slice(0, MAX_READ - got);
        parts.push(part);
        got += part.length;
    }
    if (flags.last)
        r.sendBuffer(status_for(r.status, Buffer.concat(parts).toString(), r.variables.pod),
                     flags);
}

export default {header_filter, body_filter, status_for};

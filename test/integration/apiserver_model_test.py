#!/usr/bin/python3
"""The apiserver stand-in (peers/apiserver.py) against kube-apiserver's own rules for a kubelet's
error answer (v1.26.0 = v1.33.0; the sources are cited in apiserver.py and
apiserver_podlog.js), with a kubelet side that answers what each test asks for:

  - pods/log: the exact Status kube-apiserver writes for each status (GenericHttpResponseChecker
    and apimachinery's NewGenericServerResponse, NewBadRequest, NewInternalError), byte for byte;
    a 200 streams through untouched;
  - exec (an upgrade) and the node proxy: the kubelet's answer comes back as it was;
  - and what kubectl 1.32 prints for them, when it is installed.

No containerd, no cloudstream: this checks the stand-in the e2e tests stand on."""
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(HERE, "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from apiserver import Apiserver, NGINX, NJS_MODULE  # noqa: E402

KUBECTL = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32"
BODY = 'kubelet says "no" <&> \\ to c'  # quotes, HTML characters, a backslash


def status(message, reason, code, details=None):
    """metav1.Status as Go's encoding/json writes it (field order, omitempty, HTML escaping)."""
    s = '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%s' % \
        gojson(message)
    if reason:
        s += ',"reason":%s' % gojson(reason)
    if details:
        s += ',"details":%s' % details
    return (s + ',"code":%d}\n' % code).encode()


def gojson(s):
    return json.dumps(s).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def generic(message, reason, code):
    return status(message + " ( pods/log p)", reason, code, '{"name":"p","kind":"pods/log"}')


# kubelet answer status -> kube-apiserver's Status (response_checker.go Check, errors.go)
Q = '"kubelet says \\"no\\" <&> \\\\ to c"'  # Go's %q of BODY
WANT = {
    400: status(BODY, "BadRequest", 400),
    500: status("Internal error occurred: " + BODY, "InternalError", 500,
                '{"causes":[{"message":%s}]}' % gojson(BODY)),
    403: generic(BODY, "Forbidden", 403),
    404: generic("the server could not find the requested resource", "NotFound", 404),
    422: generic("the server rejected our request due to an error in our request", "Invalid",
                 422),
    429: generic("the server has received too many requests and has asked us to try again "
                 "later", "TooManyRequests", 429),
    431: generic("the server responded with the status code 431 but did not return more "
                 "information", "", 431),
    502: generic("an error on the server (%s) has prevented the request from succeeding" % Q,
                 "InternalError", 502),
    503: generic("the server is currently unable to handle the request", "ServiceUnavailable",
                 503),
    504: generic("the server was unable to return a response in the time allotted, but may "
                 "still be processing the request", "Timeout", 504),
}


class Kubelet(http.server.BaseHTTPRequestHandler):
    """/containerLogs/NS/POD/cCODE and /exec/NS/POD/cCODE answer CODE with BODY (text/plain, as
    go-restful's WriteError); c200 answers lines; anything else (the node proxy) CODE from
    /status/CODE."""
    protocol_version = "HTTP/1.1"

    def answer(self):
        last = self.path.split("?")[0].rstrip("/").split("/")[-1]
        code = int(last.lstrip("c"))
        body = b"line 1\nline 2\n" if code == 200 else BODY.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *a):
        pass


def start_kubelet(env):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Kubelet)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(env.path("kubelet.crt"), env.path("kubelet.key"))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def get(api, env, target, headers=()):
    ctx = ssl.create_default_context(cafile=env.path("apiserver-ca.crt"))
    ctx.load_cert_chain(env.path("admin.crt"), env.path("admin.key"))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", api.port), timeout=10),
                        server_hostname="localhost")
    method = "POST" if "/exec" in target else "GET"
    s.sendall(h.head(method, target, list(headers) + [("Host", "127.0.0.1")]))
    st, hdrs, rest = h.read_head(s)
    body = h.read_body(s, hdrs, rest)
    s.close()
    return st, hdrs, body


def pod_log(api, env):
    for code, want in sorted(WANT.items()):
        st, hdrs, body = get(api, env, "/api/v1/namespaces/default/pods/p/log?container=c%d" % code)
        # (nginx keeps the upstream's charset parameter: kube-apiserver writes none)
        check(st == code and body == want and
              hdrs.get("content-type", "").startswith("application/json"),
              "pods/log, kubelet %d: got %d %r %r\n want %r" % (code, st, hdrs.get(
                  "content-type"), body, want))
    st, _, body = get(api, env, "/api/v1/namespaces/default/pods/p/log?container=c200")
    check(st == 200 and body == b"line 1\nline 2\n", "pods/log 200: %d %r" % (st, body))


def passthrough(api, env):
    for code in (400, 403, 404, 500, 502, 503, 504):
        st, _, body = get(api, env, "/api/v1/namespaces/default/pods/p/exec?container=c%d&"
                          "command=true&stdout=true" % code,
                          [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"),
                           ("Content-Length", "0")])
        check(st == code and body == BODY.encode(), "exec, kubelet %d: %d %r" % (code, st, body))
        st, _, body = get(api, env, "/api/v1/nodes/lab-node/proxy/status/c%d" % code)
        check(st == code and body == BODY.encode(), "node proxy, kubelet %d: %d %r" %
              (code, st, body))


def kubectl_prints(api, env):
    """What kubectl shows of them: the Status message for pods/log."""
    if not os.access(KUBECTL, os.X_OK):
        print("kubectl 1.32 not installed: what it prints is not checked here")
        return
    home = os.path.join(env.dir, "home")
    os.makedirs(home, exist_ok=True)
    for code, want in sorted(WANT.items()):
        r = subprocess.run([KUBECTL, "--kubeconfig", api.kubeconfig, "logs", "p", "-c",
                            "c%d" % code], capture_output=True, timeout=30,
                           env=dict(os.environ, HOME=home))
        st = json.loads(want)
        text = "Error from server%s: %s\n" % (" (%s)" % st["reason"] if st.get("reason") else "",
                                             st["message"])
        if st.get("reason") == "Invalid":  # kubectl's CheckErr prints Invalid its own way
            text = 'The pods/log "p" is invalid\n'
        check(r.returncode == 1 and r.stderr.decode() == text,
              "kubectl logs -c c%d: rc %d, stderr %r, want %r" % (code, r.returncode, r.stderr,
                                                                  text))


def main():
    if not (os.access(NGINX, os.X_OK) and os.path.exists(NJS_MODULE)):
        print("skipped: needs nginx and libnginx-mod-http-js (deploy/install-deps.sh)")
        return 1 if os.environ.get("CI") == "true" else 77
    env = h.Env("apiserver-model", nodes=("lab-node",))
    env.mint("ca", "--out", env.path("apiserver-ca"), "--cn", "model apiserver CA")
    env.mint("server", "--ca", env.path("apiserver-ca"), "--out", env.path("apiserver"),
             "--cn", "kube-apiserver", "--dns", "localhost", "--ip", "127.0.0.1")
    env.mint("client", "--ca", env.path("apiserver-ca"), "--out", env.path("admin"),
             "--cn", "kubectl-admin", "--org", "system:masters")
    kubelet = start_kubelet(env)
    pki = {"cert": env.path("apiserver.crt"), "key": env.path("apiserver.key"),
           "ca": env.path("apiserver-ca.crt"), "client_ca": env.path("apiserver-ca.crt"),
           "admin_cert": env.path("admin.crt"), "admin_key": env.path("admin.key"),
           "kubelet_cert": env.path("apiserver-kubelet-client.crt"),
           "kubelet_key": env.path("apiserver-kubelet-client.key"),
           "kubelet_ca": env.path("kubelet-ca.crt")}
    api = Apiserver(env.dir, kubelet.server_address[1], pki, node="lab-node")
    api.add_pod("default", "p", ["c%d" % c for c in sorted(WANT)] + ["c200"])
    rc = 1
    try:
        api.start()
        tests = [lambda: pod_log(api, env), lambda: passthrough(api, env),
                 lambda: kubectl_prints(api, env)]
        for t, name in zip(tests, ("pod_log", "passthrough", "kubectl_prints")):
            t.__name__ = "apiserver_model." + name
        rc = h.run(tests)
    finally:
        api.stop()
        kubelet.shutdown()
        env.close(keep=rc != 0)
    return rc


if __name__ == "__main__":
    sys.exit(main())

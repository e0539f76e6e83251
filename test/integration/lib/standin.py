"""HTTP stand-ins a test runs inside its own process (http.server, served by a thread): what
kube-apiserver answers a daemon (pods, Nodes, CSRs), a plain backend on the edge. What they
share is here: the server on a loopback port, over TLS with the kubelet stand-in's certificate
when it plays the apiserver (kubelet-ca.crt verifies it: the daemons get it as --apiserver-ca),
the bearer token file and the daemons' flags, an answer with its length.

The stand-ins of their own process (kube_reviews.py, kube_csr.py, apiserver.py) are in peers/.
"""
import http.server
import os
import ssl
import threading


class Handler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing (the test prints what matters) and answers with
    reply()."""

    def reply(self, code, body, content_type="application/json"):
        """@code with @body (bytes) and its Content-Length."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def serve(handler_cls, env=None):
    """Serves @handler_cls on 127.0.0.1, on a port the system picks, from a daemon thread: over
    TLS with the kubelet stand-in's certificate when @env (the run's Env) is given, plain HTTP
    otherwise. Returns the server; its .url says where it answers, shutdown() stops it."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    scheme = "http"
    if env is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(env.path("kubelet.crt"), env.path("kubelet.key"))
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    httpd.url = "%s://127.0.0.1:%d" % (scheme, httpd.server_address[1])
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def write_token(env, token, name="token"):
    """@token in the file @name of the run's directory, as the daemons read a bearer token
    (--apiserver-token-file). Returns the file's path."""
    path = os.path.join(env.dir, name)
    with open(path, "w") as f:
        f.write(token + "\n")
    return path


def apiserver_flags(env, url, token_file):
    """A daemon's flags for an apiserver stand-in at @url (serve() with the Env, or a peer
    with the same certificate) that wants the token in @token_file."""
    return ["--apiserver-url", url, "--apiserver-ca", env.path("kubelet-ca.crt"),
            "--apiserver-token-file", token_file]

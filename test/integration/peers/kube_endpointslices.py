#!/usr/bin/python3
"""kube-apiserver's EndpointSlice API (discovery.k8s.io/v1) as cloudstream's --peer-service
reads it: list and watch, in-process for the tests (HTTPS on 127.0.0.1, a port chosen at run
time, the caller authenticated by a bearer token).

    GET /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices?labelSelector=kubernetes.io/service-name=NAME
        an EndpointSliceList: metadata.resourceVersion (the store's), items without kind and
        apiVersion (as a typed list is served)
    ... &watch=1&resourceVersion=RV&timeoutSeconds=T
        200, chunked, one JSON event a line ({"type": ADDED|MODIFIED|DELETED, "object": the
        slice with kind and apiVersion}) for every change after RV, as they happen, until T
        seconds passed (then the answer ends cleanly); an RV older than the events kept is an
        ERROR event with a 410 Expired Status ("too old resource version"), as the watch cache
        answers it, after which a client lists again

The store keeps the last 100 events; each change bumps the resourceVersion (a decimal string).
Every call is recorded ("list" or "watch") so tests can see the client list, then watch.
"""
import http.server
import json
import ssl
import threading
import time
import urllib.parse

GROUP = ["apis", "discovery.k8s.io", "v1", "namespaces"]
LABEL = "kubernetes.io/service-name"


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class EndpointSlices:
    def __init__(self, cert, key, caller_token, keep=100):
        self.caller_token = caller_token
        self.cond = threading.Condition()
        self.rv = 1
        self.slices = {}  # (ns, name) -> object (with kind/apiVersion)
        self.events = []  # (rv, type, object)
        self.keep = keep
        self.calls = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self, code, obj):
                body = json.dumps(obj, separators=(",", ":")).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.headers.get("Authorization") != "Bearer " + outer.caller_token:
                    self.answer(401, status(401, "Unauthorized", "Unauthorized"))
                    return
                u = urllib.parse.urlsplit(self.path)
                parts = u.path.strip("/").split("/")
                q = dict(urllib.parse.parse_qsl(u.query))
                if len(parts) != 6 or parts[:4] != GROUP or parts[5] != "endpointslices":
                    self.answer(404, status(404, "NotFound", "the server could not find the "
                                            "requested resource"))
                    return
                ns = parts[4]
                sel = q.get("labelSelector", "")
                want = sel[len(LABEL) + 1:] if sel.startswith(LABEL + "=") else None
                if q.get("watch") in ("1", "true"):
                    self.watch(ns, want, int(q.get("resourceVersion") or 0),
                               float(q.get("timeoutSeconds") or 30))
                    return
                with outer.cond:
                    outer.calls.append("list")
                    items = []
                    for (sns, _), o in sorted(outer.slices.items()):
                        if sns == ns and outer.matches(o, want):
                            o = dict(o)
                            o.pop("kind")
                            o.pop("apiVersion")
                            items.append(o)
                    rv = outer.rv
                self.answer(200, {"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                                  "metadata": {"resourceVersion": str(rv)}, "items": items})

            def watch(self, ns, want, since, timeout):
                with outer.cond:
                    outer.calls.append("watch")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def emit(ev):
                    line = (json.dumps(ev, separators=(",", ":")) + "\n").encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                deadline = time.monotonic() + timeout
                try:
                    with outer.cond:
                        oldest = outer.events[0][0] if outer.events else outer.rv
                        if since < oldest - 1 and since < outer.rv:
                            emit({"type": "ERROR", "object": status(
                                410, "Expired", "too old resource version: %d (%d)" % (
                                    since, oldest - 1))})
                            self.wfile.write(b"0\r\n\r\n")
                            return
                    while True:
                        with outer.cond:
                            evs = [e for e in outer.events if e[0] > since]
                            if not evs:
                                left = deadline - time.monotonic()
                                if left <= 0:
                                    break
                                outer.cond.wait(left)
                                continue
                        for rv, typ, obj in evs:
                            since = rv
                            if obj["metadata"]["namespace"] == ns and outer.matches(obj, want):
                                emit({"type": typ, "object": obj})
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = "https://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def matches(obj, want):
        return want is None or obj["metadata"].get("labels", {}).get(LABEL) == want

    def put(self, ns, name, service, addresses, port, port_name="tunnel"):
        """Creates or replaces slice @name of @service: one endpoint per address (ready)."""
        with self.cond:
            self.rv += 1
            typ = "MODIFIED" if (ns, name) in self.slices else "ADDED"
            obj = {"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                   "metadata": {"name": name, "namespace": ns,
                                "labels": {LABEL: service},
                                "resourceVersion": str(self.rv)},
                   "addressType": "IPv4",
                   "endpoints": [{"addresses": [a], "conditions": {"ready": True}}
                                 for a in addresses],
                   "ports": [{"name": port_name, "protocol": "TCP", "port": port}]}
            self.slices[(ns, name)] = obj
            self._event(typ, obj)

    def delete(self, ns, name):
        with self.cond:
            obj = self.slices.pop((ns, name))
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._event("DELETED", obj)

    def _event(self, typ, obj):
        self.events.append((self.rv, typ, obj))
        del self.events[:-self.keep]
        self.cond.notify_all()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

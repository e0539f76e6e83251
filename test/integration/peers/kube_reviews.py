#!/usr/bin/python3
"""kube-apiserver's review APIs and pod objects, as a kubelet (or cloudstream standing where the
kubelet stands) uses them: used in-process by the tests (HTTPS on 127.0.0.1, a port chosen at
run time, the caller authenticated by a bearer token).

    POST /apis/authentication.k8s.io/v1/tokenreviews       TokenReview (201)
    POST /apis/authorization.k8s.io/v1/subjectaccessreviews SubjectAccessReview (201)
    GET  /api/v1/namespaces/NS/pods/NAME                    a Pod with spec.nodeName (200/404)
    GET  /api/v1/pods?fieldSelector=status.podIP=IP         a PodList of the pods with that IP
    POST /api/v1/namespaces/NS/events                       a core/v1 Event (201)
    PATCH /api/v1/namespaces/NS/events/NAME                 a strategic-merge patch of it (200)
    GET  /api/v1/namespaces/NS/events                       an EventList

and, with csr=kube_csr.CsrApi(...), the CertificateSigningRequest API and Node objects (see
kube_csr.py); the caller is @caller_user, allowed to approve kubelet-serving CSRs when
@caller_can_approve.

Answers as kube-apiserver writes them (read in kubernetes v1.33: pkg/registry/authentication/
tokenreview/storage.go, pkg/registry/authorization/subjectaccessreview/rest.go and
pkg/apis/authorization/validation, staging apimachinery errors):
 - the review object is returned as it was sent (spec included) with its status filled in, 201
   Created, Content-Type application/json;
 - TokenReview: a token that authenticates gives status.authenticated true, status.user
   (username, uid, groups, extra) and status.audiences (the apiserver's audiences when the
   review names none); an unknown token gives status {"user": {}} (authenticated false is
   omitted, as Go's omitempty does); an empty spec.token is a 400 BadRequest Status "token is
   required for TokenReview in authentication";
 - SubjectAccessReview: status.allowed true with RBAC's reason, or {"allowed": false} when no
   rule allows (RBAC has no opinion; nothing denies); members of system:masters are allowed
   everything; a spec without resourceAttributes or nonResourceAttributes, or without user and
   groups, is a 422 Invalid Status;
 - the caller must present the bearer token it was given: else 401 Unauthorized (Status);
 - a body that is not JSON: 400 BadRequest; a kind or apiVersion other than the endpoint's:
   400 BadRequest.

Events as kube-apiserver v1.33 takes them on the core/v1 API (pkg/registry/core/event/
strategy.go, pkg/apis/core/validation/events.go legacyValidateEvent, staging apiserver
pkg/registry/rest/create.go BeforeCreate and pkg/endpoints/handlers/patch.go):
 - the body's metadata.namespace, when set, must be the URL's: else 400 BadRequest "the
   namespace of the provided object does not match the namespace sent on the request";
 - only existing namespaces (default, kube-system; the NamespaceLifecycle admission plugin):
   else 404 NotFound 'namespaces "NS" not found';
 - legacy validation (no eventTime): an involvedObject without a namespace (a Node) needs the
   Event in "" or "default", one with a namespace the same one: else 422 Invalid
   "involvedObject.namespace ... does not match event.namespace";
 - metadata.name (or generateName) is required: 422 Invalid "name or generateName is
   required"; an existing name is 409 AlreadyExists 'events "NAME" already exists';
 - the stored object gets uid, resourceVersion and creationTimestamp; 201 with it;
 - PATCH needs Content-Type application/strategic-merge-patch+json, merge-patch+json or
   json-patch+json (415 UnsupportedMediaType otherwise; we model the first two: maps merged,
   null deletes), 404 NotFound 'events "NAME" not found' for a missing Event (a patch never
   creates), and the result is validated again (422); 200 with it.
Every Event call is recorded (method, name) so tests can count creates and patches.

Policy: tokens → users ({"token": {"username":…, "uid":…, "groups": […], "extra": {…}}}) and
RBAC-like rules ({"user" or "group": NAME, "verbs": [...], "resources": ["nodes/proxy", ...]},
"*" matches any verb). Every review is recorded (kind, the key a kubelet's cache would use:
the token, or the spec) so tests can count calls per identity and attributes.
"""
import http.server
import json
import ssl
import threading
import urllib.parse
import time

AUDIENCES = ["https://kubernetes.default.svc.cluster.local"]


def status(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code}
    if details:
        s["details"] = details
    return code, s


class KubeReviews:
    def __init__(self, cert, key, caller_token, tokens=None, rules=None, pods=None, csr=None,
                 caller_user=None, caller_can_approve=False, listen="127.0.0.1",
                 pod_ips=None):
        self.caller_token = caller_token
        self.csr = csr
        self.caller_user = caller_user or {
            "username": "system:serviceaccount:kube-system:cloudstream", "uid": "cs-uid",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]}
        self.caller_can_approve = caller_can_approve
        self.tokens = dict(tokens or {})
        self.rules = list(rules or [])
        self.pods = dict(pods or {})
        # GET /api/v1/pods?fieldSelector=status.podIP=IP: IP -> [{"namespace", "name",
        # "nodeName", "phase", "hostNetwork"}] (more than one: a pod that ended and one that
        # got its IP since)
        self.pod_ips = dict(pod_ips or {})
        self.calls = []  # (kind, key) per review, in order
        self.user_agents = set()  # every User-Agent a request came with
        self.events = {}  # (namespace, name) -> Event
        self.event_calls = []  # ("POST" | "PATCH", name) per Event call, in order
        self.rv = 5000
        self.lock = threading.Lock()
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

            def caller_ok(self):
                with outer.lock:
                    outer.user_agents.add(self.headers.get("User-Agent", ""))
                if self.headers.get("Authorization") == "Bearer " + outer.caller_token:
                    return True
                self.answer(*status(401, "Unauthorized", "Unauthorized"))
                return False

            def watch(self, query, run=None):
                """A watch answer: chunked JSON lines, one event each, until timeoutSeconds."""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def emit(ev):
                    line = (json.dumps(ev, separators=(",", ":")) + "\n").encode()
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                        self.wfile.flush()
                        return True
                    except OSError:
                        return False
                sel = query.get("fieldSelector", "")
                name = sel[len("metadata.name="):] if sel.startswith("metadata.name=") else ""
                if run:
                    run(emit)
                else:
                    outer.csr.watch(int(query.get("resourceVersion") or 0), name,
                                    float(query.get("timeoutSeconds") or 30), emit)
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

            def csr_route(self, method, parts, query, body):
                """certificates.k8s.io and nodes; None when the path is not theirs."""
                if outer.csr is None:
                    return None
                if len(parts) == 4 and parts[:3] == ["api", "v1", "nodes"] and method == "GET":
                    return outer.csr.get_node(parts[3])
                if parts == ["api", "v1", "nodes"] and method == "GET":
                    with outer.lock:
                        outer.calls.append(("Nodes", "watch" if query.get("watch") else "list"))
                    sel = query.get("labelSelector", "")
                    if query.get("watch") in ("1", "true"):
                        self.watch(query, lambda emit: outer.csr.watch_nodes(
                            int(query.get("resourceVersion") or 0), sel,
                            float(query.get("timeoutSeconds") or 30), emit))
                        return ()
                    return outer.csr.list_nodes(sel)
                if len(parts) == 5 and parts[:3] == ["api", "v1", "nodes"] and \
                        parts[4] == "status" and method == "PATCH":
                    return outer.csr.patch_node_status(parts[3], body,
                                                       self.headers.get("Content-Type", ""))
                base = ["apis", "certificates.k8s.io", "v1", "certificatesigningrequests"]
                if parts[:4] != base:
                    return None
                with outer.lock:
                    outer.calls.append(("CSR", "%s %s" % (method, "/".join(parts[4:]))))
                if len(parts) == 4 and method == "POST":
                    return outer.csr.create(body, outer.caller_user)
                if len(parts) == 4 and method == "GET":
                    if query.get("watch") in ("1", "true"):
                        self.watch(query)
                        return ()
                    return outer.csr.list()
                if len(parts) == 5 and method == "GET":
                    return outer.csr.get(parts[4])
                if len(parts) == 6 and method == "PUT" and parts[5] == "approval":
                    return outer.csr.approve(parts[4], body, outer.caller_user["username"],
                                             outer.caller_can_approve)
                if len(parts) == 6 and method == "PUT" and parts[5] == "status":
                    return outer.csr.update_status(parts[4], body)
                return status(405, "MethodNotAllowed", "the server does not allow this method "
                              "on the requested resource")

            def do_GET(self):
                if not self.caller_ok():
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and \
                        parts[4] == "events":
                    with outer.lock:
                        items = [e for (ns, _), e in sorted(outer.events.items())
                                 if ns == parts[3]]
                    self.answer(200, {"kind": "EventList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(outer.rv)},
                                      "items": items})
                    return
                query = dict(kv.split("=", 1) for kv in self.path.partition("?")[2].split("&")
                             if "=" in kv)
                query = {k: urllib.parse.unquote(v) for k, v in query.items()}
                r = self.csr_route("GET", parts, query, None)
                if r is not None:
                    if r:
                        self.answer(*r)
                    return
                if parts == ["api", "v1", "pods"]:
                    sel = query.get("fieldSelector", "")
                    if not sel.startswith("status.podIP="):
                        self.answer(*status(400, "BadRequest", "unsupported field selector"))
                        return
                    with outer.lock:
                        outer.calls.append(("PodIP", sel))
                    items = [{"kind": "Pod", "apiVersion": "v1",
                              "metadata": {"name": p["name"], "namespace": p["namespace"]},
                              "spec": {"nodeName": p["nodeName"],
                                       "hostNetwork": p.get("hostNetwork", False)},
                              "status": {"phase": p.get("phase", "Running"),
                                         "podIP": sel[len("status.podIP="):]}}
                             for p in outer.pod_ips.get(sel[len("status.podIP="):], [])]
                    self.answer(200, {"kind": "PodList", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(outer.rv)},
                                      "items": items})
                    return
                if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and \
                        parts[4] == "pods" and (parts[3], parts[5]) in outer.pods:
                    self.answer(200, {"kind": "Pod", "apiVersion": "v1",
                                      "metadata": {"name": parts[5], "namespace": parts[3]},
                                      "spec": {"nodeName": outer.pods[(parts[3], parts[5])]}})
                    return
                name = parts[5] if len(parts) == 6 else ""
                self.answer(*status(404, "NotFound", 'pods "%s" not found' % name,
                                    {"name": name, "kind": "pods"}))

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                if not self.caller_ok():
                    return
                path = self.path.split("?")[0]
                try:
                    obj = json.loads(raw)
                    if not isinstance(obj, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    self.answer(*status(400, "BadRequest", "the body of the request was in an "
                                        "unknown format: %s" % e))
                    return
                parts = path.strip("/").split("/")
                r = self.csr_route("POST", parts, {}, obj)
                if r is not None:
                    self.answer(*r)
                elif len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and \
                        parts[4] == "events":
                    self.answer(*outer.create_event(parts[3], obj))
                elif path == "/apis/authentication.k8s.io/v1/tokenreviews":
                    self.answer(*outer.token_review(obj))
                elif path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
                    self.answer(*outer.subject_access_review(obj))
                else:
                    self.answer(*status(404, "NotFound", "the server could not find the "
                                        "requested resource"))

            def do_PUT(self, method="PUT"):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                if not self.caller_ok():
                    return
                try:
                    obj = json.loads(raw)
                    if not isinstance(obj, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    self.answer(*status(400, "BadRequest", "the body of the request was in an "
                                        "unknown format: %s" % e))
                    return
                r = self.csr_route(method, self.path.split("?")[0].strip("/").split("/"), {},
                                   obj)
                self.answer(*(r or status(404, "NotFound", "the server could not find the "
                                          "requested resource")))

            def do_PATCH(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                if not self.caller_ok():
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) == 5 and parts[:3] == ["api", "v1", "nodes"] and \
                        parts[4] == "status" and outer.csr is not None:
                    try:
                        patch = json.loads(raw)
                    except ValueError as e:
                        self.answer(*status(400, "BadRequest", "error decoding patch: %s" % e))
                        return
                    self.answer(*self.csr_route("PATCH", parts, {}, patch))
                    return
                if not (len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and
                        parts[4] == "events"):
                    self.answer(*status(405, "MethodNotAllowed", "the server does not allow "
                                        "this method on the requested resource"))
                    return
                ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
                if ctype not in ("application/strategic-merge-patch+json",
                                 "application/merge-patch+json"):
                    self.answer(*status(415, "UnsupportedMediaType", "the body of the "
                                        "request was in an unknown format - accepted media "
                                        "types include: application/json-patch+json, "
                                        "application/merge-patch+json, "
                                        "application/apply-patch+yaml"))
                    return
                try:
                    patch = json.loads(raw)
                    if not isinstance(patch, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    self.answer(*status(400, "BadRequest", "error decoding patch: %s" % e))
                    return
                self.answer(*outer.patch_event(parts[3], parts[5], patch))

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer((listen, 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = "https://%s:%d" % (listen, self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        if self.csr is not None:
            self.csr.close()
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- Events --------------------------------------------------------------------------

    NAMESPACES = ("default", "kube-system", "kube-public")

    @staticmethod
    def _invalid_event(obj, name, causes):
        return status(422, "Invalid", 'Event "%s" is invalid: %s' % (
            name, ", ".join("%s: %s" % (f, m) for f, m in causes)),
            {"name": name, "kind": "Event",
             "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f}
                        for f, m in causes]})

    def _validate_event(self, obj, ns):
        """legacyValidateEvent for an Event without eventTime (core/v1 clients)."""
        inv_ns = (obj.get("involvedObject") or {}).get("namespace", "")
        causes = []
        if not obj.get("eventTime"):
            if inv_ns == "" and ns not in ("", "default"):
                causes.append(("involvedObject.namespace",
                               'Invalid value: "": does not match event.namespace'))
            elif inv_ns != "" and inv_ns != ns:
                causes.append(("involvedObject.namespace",
                               'Invalid value: "%s": does not match event.namespace' % inv_ns))
        return causes

    def create_event(self, ns, obj):
        with self.lock:
            self.event_calls.append(("POST", (obj.get("metadata") or {}).get("name", "")))
        if obj.get("kind", "Event") != "Event" or obj.get("apiVersion", "v1") != "v1":
            return status(400, "BadRequest", "the API version in the data (%s) does not match "
                          "the expected API version (v1)" % obj.get("apiVersion"))
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace", ns) != ns:
            return status(400, "BadRequest", "the namespace of the provided object does not "
                          "match the namespace sent on the request")
        if ns not in self.NAMESPACES:
            return status(404, "NotFound", 'namespaces "%s" not found' % ns,
                          {"name": ns, "kind": "namespaces"})
        meta["namespace"] = ns
        name = meta.get("name", "")
        causes = self._validate_event(obj, ns)
        if not name and not meta.get("generateName"):
            causes.append(("metadata.name",
                           "Required value: name or generateName is required"))
        if causes:
            return self._invalid_event(obj, name, causes)
        with self.lock:
            if not name:
                name = meta["generateName"] + "%05x" % (self.rv & 0xfffff)
                meta["name"] = name
            if (ns, name) in self.events:
                return status(409, "AlreadyExists", 'events "%s" already exists' % name,
                              {"name": name, "kind": "events"})
            self.rv += 1
            meta["uid"] = "e0e0e0e0-0000-4000-8000-%012d" % self.rv
            meta["resourceVersion"] = str(self.rv)
            meta["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            obj["kind"], obj["apiVersion"] = "Event", "v1"
            self.events[(ns, name)] = obj
            return 201, json.loads(json.dumps(obj))

    @staticmethod
    def _merge(dst, patch):
        for k, v in patch.items():
            if v is None:
                dst.pop(k, None)
            elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                KubeReviews._merge(dst[k], v)
            else:
                dst[k] = v

    def patch_event(self, ns, name, patch):
        with self.lock:
            self.event_calls.append(("PATCH", name))
            old = self.events.get((ns, name))
            if old is None:
                return status(404, "NotFound", 'events "%s" not found' % name,
                              {"name": name, "kind": "events"})
            new = json.loads(json.dumps(old))
            self._merge(new, patch)
            new["metadata"]["name"], new["metadata"]["namespace"] = name, ns
            causes = self._validate_event(new, ns)
            if causes:
                return self._invalid_event(new, name, causes)
            self.rv += 1
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.events[(ns, name)] = new
            return 200, json.loads(json.dumps(new))

    def expire_events(self):
        """What --event-ttl does an hour later: every Event is gone."""
        with self.lock:
            self.events.clear()

    def events_about(self, node, source_host=None):
        with self.lock:
            return [json.loads(json.dumps(e)) for e in self.events.values()
                    if e.get("involvedObject", {}).get("name") == node and
                    (source_host is None or e.get("source", {}).get("host") == source_host)]

    # ---- the reviews ---------------------------------------------------------------------

    def _check_type(self, obj, kind, version):
        if obj.get("kind", kind) != kind or obj.get("apiVersion", version) != version:
            return status(400, "BadRequest", "the API version in the data (%s) does not match "
                          "the expected API version (%s)" % (obj.get("apiVersion"), version))
        return None

    def token_review(self, obj):
        bad = self._check_type(obj, "TokenReview", "authentication.k8s.io/v1")
        if bad:
            return bad
        spec = obj.get("spec") or {}
        token = spec.get("token", "")
        with self.lock:
            self.calls.append(("TokenReview", token))
        if not token:
            return status(400, "BadRequest", "token is required for TokenReview in "
                          "authentication")
        out = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "metadata": {"creationTimestamp": None}, "spec": spec}
        user = self.tokens.get(token)
        if user is None:
            out["status"] = {"user": {}}
        else:
            u = {"username": user["username"]}
            for k in ("uid", "groups", "extra"):
                if user.get(k):
                    u[k] = user[k]
            out["status"] = {"authenticated": True, "user": u,
                             "audiences": spec.get("audiences") or AUDIENCES}
        return 201, out

    def _allows(self, user, groups, verb, resource):
        if "system:masters" in groups:
            return True, ""
        for i, r in enumerate(self.rules):
            who = ("User", r["user"]) if "user" in r else ("Group", r.get("group"))
            if who[0] == "User" and who[1] != user:
                continue
            if who[0] == "Group" and who[1] not in groups:
                continue
            if resource in r["resources"] and (verb in r["verbs"] or "*" in r["verbs"]):
                return True, ('RBAC: allowed by ClusterRoleBinding "rule-%d" of ClusterRole '
                              '"rule-%d" to %s "%s"' % (i, i, who[0], who[1]))
        return False, ""

    def subject_access_review(self, obj):
        bad = self._check_type(obj, "SubjectAccessReview", "authorization.k8s.io/v1")
        if bad:
            return bad
        spec = obj.get("spec") or {}
        with self.lock:
            self.calls.append(("SubjectAccessReview", json.dumps(spec, sort_keys=True)))
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if (ra is None) == (nra is None):
            return status(422, "Invalid", 'SubjectAccessReview.authorization.k8s.io "" is '
                          'invalid: spec.resourceAttributes: Invalid value: "null": exactly '
                          'one of nonResourceAttributes or resourceAttributes must be specified',
                          {"group": "authorization.k8s.io", "kind": "SubjectAccessReview"})
        if not spec.get("user") and not spec.get("groups"):
            return status(422, "Invalid", 'SubjectAccessReview.authorization.k8s.io "" is '
                          'invalid: spec.user: Invalid value: "": at least one of user or '
                          'group must be specified',
                          {"group": "authorization.k8s.io", "kind": "SubjectAccessReview"})
        allowed, reason = False, ""
        if ra is not None:
            res = ra.get("resource", "")
            if ra.get("subresource"):
                res += "/" + ra["subresource"]
            allowed, reason = self._allows(spec.get("user", ""), spec.get("groups") or [],
                                           ra.get("verb", ""), res)
        st = {"allowed": allowed}
        if reason:
            st["reason"] = reason
        return 201, {"kind": "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                     "metadata": {"creationTimestamp": None}, "spec": spec, "status": st}

    # ---- what the tests read -------------------------------------------------------------

    def count(self, kind=None, key_part=None):
        with self.lock:
            return sum(1 for k, key in self.calls
                       if (kind is None or k == kind) and (key_part is None or key_part in key))

    def reviews(self):
        with self.lock:
            return list(self.calls)

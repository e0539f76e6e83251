#!/usr/bin/python3
"""kube-apiserver's CertificateSigningRequest API (certificates.k8s.io/v1), its Node objects as a
kubelet reads them, and the two controllers that act on CSRs in a cluster: an approver (as a
kubelet-serving approver would, optional) and kube-controller-manager's signer for
kubernetes.io/kubelet-serving. Used by kube_reviews.KubeReviews, which serves the HTTP side.

Modelled on kubernetes v1.33: pkg/apis/certificates/validation/validation.go (what a create or an
approval may carry), pkg/registry/certificates/certificates/strategy.go (create fills
spec.username/uid/groups/extra from the caller and clears status; the approval subresource takes
only status.conditions; the status subresource only status.certificate and conditions),
pkg/apis/certificates/helpers.go IsKubeletServingCSR (what the kubelet-serving signer accepts),
pkg/controller/certificates/signer/signer.go (a Failed condition "SignerValidationFailure" for a
request it refuses; the certificate's lifetime is the smaller of expirationSeconds and the
signer's maximum, at least 10 minutes; notBefore backdated) and the apimachinery Status errors.

    POST /apis/certificates.k8s.io/v1/certificatesigningrequests            201 / 409 / 422
    GET  .../certificatesigningrequests[?watch=1&fieldSelector=metadata.name=N&resourceVersion=R]
    GET  .../certificatesigningrequests/NAME                                 200 / 404
    PUT  .../certificatesigningrequests/NAME/approval                        200 / 403 / 404 / 409 / 422
    PUT  .../certificatesigningrequests/NAME/status                          200 / 404 / 409 / 422
    GET  /api/v1/nodes/NAME                                                   200 / 404
    GET  /api/v1/nodes?labelSelector=S[&watch=1&resourceVersion=R&timeoutSeconds=T]
         a NodeList, or watch events: ADDED/MODIFIED/DELETED as the selector sees them (an
         object that stops matching is DELETED for that watch, one that starts ADDED), a
         410 ERROR event for a resourceVersion older than the compaction point
    PATCH /api/v1/nodes/NAME/status   (merge or strategic merge patch)       200 / 404 / 415
"""
import base64
import copy
import datetime
import json
import random
import threading
import time
import uuid

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

GROUP = "certificates.k8s.io"
KIND = "CertificateSigningRequest"
KUBELET_SERVING = "kubernetes.io/kubelet-serving"
# certificates.KeyUsage values (pkg/apis/certificates/types.go)
USAGES = ["signing", "digital signature", "content commitment", "key encipherment",
          "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
          "decipher only", "any", "server auth", "client auth", "code signing", "email protection",
          "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping",
          "ocsp signing", "microsoft sgc", "netscape sgc"]
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery utilrand.String's alphabet


def status(code, reason, message, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code}
    if details is not None:
        s["details"] = details
    return code, s


def invalid(name, errs):
    """422 as apimachinery's NewInvalid writes it: one cause per field error."""
    msgs = ["%s: %s" % (f, m) for f, _, m in errs]
    text = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    return status(422, "Invalid", '%s.%s "%s" is invalid: %s' % (KIND, GROUP, name, text),
                  {"name": name, "group": GROUP, "kind": KIND,
                   "causes": [{"reason": r, "message": m, "field": f} for f, r, m in errs]})


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class CsrApi:
    """The CSR store and its controllers. @signer_ca: (cert PEM path, key PEM path) of the
    kubelet-serving signer; @auto_approve: the cluster approves kubelet-serving CSRs by itself
    after @approve_delay s; @signer_max_s: the signer's --cluster-signing-duration."""

    def __init__(self, signer_ca, auto_approve=False, approve_delay=0.5, sign_delay=0.2,
                 signer_max_s=365 * 86400, nodes=None):
        with open(signer_ca[0], "rb") as f:
            self.ca_cert = x509.load_pem_x509_certificate(f.read())
        with open(signer_ca[1], "rb") as f:
            self.ca_key = serialization.load_pem_private_key(f.read(), None)
        self.auto_approve = auto_approve
        self.approve_delay = approve_delay
        self.sign_delay = sign_delay
        self.signer_max_s = signer_max_s
        self.nodes = dict(nodes or {})  # name -> [{"type":..., "address":...}]
        self.node_labels = {n: {"node-role.kubernetes.io/edge": ""} for n in self.nodes}
        self.node_ports = {n: 10250 for n in self.nodes}  # kubeletEndpoint.Port
        self.node_status_patches = []   # (name, patch, content type) per PATCH .../status
        self.node_events = []           # (rv, type, old object or None, new object or None)
        self.node_compacted = 0         # watches from before this resourceVersion get 410
        self.csrs = {}                  # name -> object
        self.events = []                # (rv, type, object) for watches
        self.rv = 100
        self.cond = threading.Condition()
        self.approvals = []             # (name, who) per successful approval
        self.stopping = False
        threading.Thread(target=self._controllers, daemon=True).start()

    def close(self):
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # ---- Nodes -------------------------------------------------------------------------------

    def node_object(self, name):
        with self.cond:
            addrs = self.nodes.get(name)
            if addrs is None:
                return None
            return {"kind": "Node", "apiVersion": "v1",
                    "metadata": {"name": name, "uid": "node-uid-" + name,
                                 "resourceVersion": str(self.rv),
                                 "labels": dict(self.node_labels.get(
                                     name, {"node-role.kubernetes.io/edge": ""}))},
                    "status": {"addresses": copy.deepcopy(addrs),
                               "daemonEndpoints": {"kubeletEndpoint": {
                                   "Port": self.node_ports.get(name, 10250)}}}}

    def set_node(self, name, addresses, labels=None, port=None):
        """Creates or changes a Node (an ADDED or MODIFIED event)."""
        with self.cond:
            old = self.node_object(name)
            self.nodes[name] = copy.deepcopy(addresses)
            if labels is not None:
                self.node_labels[name] = dict(labels)
            else:
                self.node_labels.setdefault(name, {"node-role.kubernetes.io/edge": ""})
            if port is not None:
                self.node_ports[name] = port
            else:
                self.node_ports.setdefault(name, 10250)
            self.rv += 1
            self.node_events.append((self.rv, "MODIFIED" if old else "ADDED", old,
                                     self.node_object(name)))
            self.cond.notify_all()

    def delete_node(self, name):
        with self.cond:
            old = self.node_object(name)
            if old is None:
                return
            del self.nodes[name]
            self.rv += 1
            old["metadata"]["resourceVersion"] = str(self.rv)
            self.node_events.append((self.rv, "DELETED", old, None))
            self.cond.notify_all()

    def compact_nodes(self):
        """etcd compacted past every resourceVersion handed out so far (other objects were
        written meanwhile): a watch from any of them gets 410 Gone; a list gives a new one."""
        with self.cond:
            self.rv += 10
            self.node_compacted = self.rv

    @staticmethod
    def selector_matches(sel, labels):
        for term in [t.strip() for t in (sel or "").split(",") if t.strip()]:
            if term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif "!=" in term:
                k, v = term.split("!=", 1)
                if labels.get(k) == v:
                    return False
            elif "=" in term:
                k, v = term.split("=", 1)
                k = k.rstrip("=")
                if labels.get(k) != v.lstrip("="):
                    return False
            elif term not in labels:
                return False
        return True

    def list_nodes(self, sel):
        with self.cond:
            items = [self.node_object(n) for n in sorted(self.nodes)]
            items = [o for o in items if self.selector_matches(sel, o["metadata"]["labels"])]
            return 200, {"kind": "NodeList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def watch_nodes(self, since_rv, sel, timeout_s, emit):
        deadline = time.monotonic() + timeout_s
        with self.cond:
            if since_rv < self.node_compacted:
                emit({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "too old resource version: %d (%d)" % (since_rv,
                                                                       self.node_compacted),
                    "reason": "Expired", "code": 410}})
                return
        pos = since_rv
        while True:
            with self.cond:
                todo = [e for e in self.node_events if e[0] > pos]
                if not todo:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.stopping:
                        return
                    self.cond.wait(min(left, 0.5))
                    continue
            for rv, typ, old, new in todo:
                pos = rv
                om = old is not None and self.selector_matches(sel, old["metadata"]["labels"])
                nm = new is not None and self.selector_matches(sel, new["metadata"]["labels"])
                if typ == "DELETED":
                    ev = {"type": "DELETED", "object": old} if om else None
                elif om and nm:
                    ev = {"type": "MODIFIED", "object": new}
                elif nm:
                    ev = {"type": "ADDED", "object": new}
                elif om:  # stopped matching: gone for this watch
                    ev = {"type": "DELETED", "object": new}
                else:
                    ev = None
                if ev and not emit(ev):
                    return

    def patch_node_status(self, name, patch, content_type):
        """PATCH nodes/NAME/status: merge and strategic merge patches of
        status.daemonEndpoints (what cloudstream sends) and status.addresses."""
        if content_type not in ("application/merge-patch+json",
                                "application/strategic-merge-patch+json"):
            return status(415, "UnsupportedMediaType", "the body of the request was in an "
                          "unknown format - accepted media types include: application/json-"
                          "patch+json, application/merge-patch+json, application/apply-patch+"
                          "yaml, application/strategic-merge-patch+json")
        with self.cond:
            if name not in self.nodes:
                return status(404, "NotFound", 'nodes "%s" not found' % name,
                              {"name": name, "kind": "nodes"})
            self.node_status_patches.append((name, copy.deepcopy(patch), content_type))
            old = self.node_object(name)
            st = patch.get("status") or {}
            port = (((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {})
                    .get("Port"))
            if port is not None:
                self.node_ports[name] = port
            if "addresses" in st:
                self.nodes[name] = copy.deepcopy(st["addresses"])
            self.rv += 1
            new = self.node_object(name)
            if new != old:
                self.node_events.append((self.rv, "MODIFIED", old, new))
            self.cond.notify_all()
            return 200, new

    def get_node(self, name):
        o = self.node_object(name)
        if o is None:
            return status(404, "NotFound", 'nodes "%s" not found' % name,
                          {"name": name, "kind": "nodes"})
        return 200, o

    # ---- the store ---------------------------------------------------------------------------

    def _bump(self, typ, obj):
        """Holding cond: a new resourceVersion for @obj and a watch event."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, typ, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _validate_spec(self, name, spec):
        errs = []
        req = spec.get("request")
        if not req:
            errs.append(("spec.request", "FieldValueRequired", "Required value"))
        else:
            try:
                pem = base64.b64decode(req, validate=True)
                if not pem.lstrip().startswith(b"-----BEGIN CERTIFICATE REQUEST-----"):
                    raise ValueError("PEM block type must be CERTIFICATE REQUEST")
                x509.load_pem_x509_csr(pem)
            except Exception as e:  # noqa: BLE001
                errs.append(("spec.request", "FieldValueInvalid",
                             "Invalid value: []byte{...}: %s" % (
                                 e if "PEM block" in str(e) else
                                 "PEM block type must be CERTIFICATE REQUEST")))
        signer = spec.get("signerName")
        if not signer:
            errs.append(("spec.signerName", "FieldValueRequired", "Required value"))
        elif "/" not in signer:
            errs.append(("spec.signerName", "FieldValueInvalid",
                         'Invalid value: "%s": must be a fully qualified domain and path of '
                         'the form \'example.com/signer-name\'' % signer))
        usages = spec.get("usages")
        if not usages:
            errs.append(("spec.usages", "FieldValueRequired", "Required value"))
        else:
            seen = set()
            for i, u in enumerate(usages):
                if u not in USAGES:
                    errs.append(("spec.usages[%d]" % i, "FieldValueNotSupported",
                                 'Unsupported value: "%s": supported values: %s' % (
                                     u, ", ".join('"%s"' % x for x in USAGES))))
                elif u in seen:
                    errs.append(("spec.usages[%d]" % i, "FieldValueDuplicate",
                                 'Duplicate value: "%s"' % u))
                seen.add(u)
        exp = spec.get("expirationSeconds")
        if exp is not None and exp < 600:
            errs.append(("spec.expirationSeconds", "FieldValueInvalid",
                         "Invalid value: %d: may not specify a duration less than 600 seconds "
                         "(10 minutes)" % exp))
        return errs

    def create(self, obj, user):
        meta = obj.get("metadata") or {}
        spec = copy.deepcopy(obj.get("spec") or {})
        name = meta.get("name", "")
        with self.cond:
            if not name and meta.get("generateName"):
                while True:
                    name = meta["generateName"] + "".join(random.choice(NAME_CHARS)
                                                          for _ in range(5))
                    if name not in self.csrs:
                        break
            if not name:
                return invalid("", [("metadata.name", "FieldValueRequired",
                                     "Required value: name or generateName is required")])
            errs = self._validate_spec(name, spec)
            if errs:
                return invalid(name, errs)
            if name in self.csrs:
                return status(409, "AlreadyExists",
                              'certificatesigningrequests.%s "%s" already exists' % (GROUP, name),
                              {"name": name, "group": GROUP, "kind": "certificatesigningrequests"})
            # The strategy: who asked comes from the authenticated caller, never the body.
            for k in ("username", "uid", "groups", "extra"):
                spec.pop(k, None)
            spec["username"] = user["username"]
            if user.get("uid"):
                spec["uid"] = user["uid"]
            spec["groups"] = list(user.get("groups") or []) + ["system:authenticated"]
            if user.get("extra"):
                spec["extra"] = user["extra"]
            out = {"kind": KIND, "apiVersion": GROUP + "/v1",
                   "metadata": {"name": name, "uid": str(uuid.uuid4()),
                                "creationTimestamp": now_rfc3339()},
                   "spec": spec, "status": {}}
            if meta.get("generateName"):
                out["metadata"]["generateName"] = meta["generateName"]
            self.csrs[name] = out
            self._bump("ADDED", out)
            return 201, copy.deepcopy(out)

    def not_found(self, name):
        return status(404, "NotFound",
                      'certificatesigningrequests.%s "%s" not found' % (GROUP, name),
                      {"name": name, "group": GROUP, "kind": "certificatesigningrequests"})

    def get(self, name):
        with self.cond:
            o = self.csrs.get(name)
            return (200, copy.deepcopy(o)) if o else self.not_found(name)

    def list(self):
        with self.cond:
            return 200, {"kind": KIND + "List", "apiVersion": GROUP + "/v1",
                         "metadata": {"resourceVersion": str(self.rv)},
                         "items": [copy.deepcopy(o) for o in self.csrs.values()]}

    def watch(self, since_rv, name, timeout_s, emit):
        """Calls @emit(event dict) for each event after @since_rv (of CSR @name when set) until
        @timeout_s passes; @emit returning False ends it."""
        deadline = time.monotonic() + timeout_s
        pos = since_rv
        while True:
            with self.cond:
                todo = [(rv, t, o) for rv, t, o in self.events
                        if rv > pos and (not name or o["metadata"]["name"] == name)]
                if not todo:
                    left = deadline - time.monotonic()
                    if left <= 0 or self.stopping:
                        return
                    self.cond.wait(min(left, 0.5))
                    continue
            for rv, t, o in todo:
                pos = rv
                if not emit({"type": t, "object": o}):
                    return

    def _conflict(self, name):
        return status(409, "Conflict",
                      'Operation cannot be fulfilled on certificatesigningrequests.%s "%s": the '
                      'object has been modified; please apply your changes to the latest version '
                      'and try again' % (GROUP, name),
                      {"name": name, "group": GROUP, "kind": "certificatesigningrequests"})

    def _validate_conditions(self, name, old, conds):
        errs = []
        types = {}
        for i, c in enumerate(conds):
            t = c.get("type", "")
            f = "status.conditions[%d]" % i
            if not t:
                errs.append((f + ".type", "FieldValueRequired", "Required value"))
            if t in types:
                errs.append((f + ".type", "FieldValueDuplicate", 'Duplicate value: "%s"' % t))
            types[t] = c
            if t in ("Approved", "Denied") and c.get("status") != "True":
                errs.append((f + ".status", "FieldValueNotSupported",
                             'Unsupported value: "%s": supported values: "True"' %
                             c.get("status", "")))
        if "Approved" in types and "Denied" in types:
            errs.append(("status.conditions", "FieldValueInvalid",
                         'Invalid value: "Denied": Approved and Denied conditions are mutually '
                         'exclusive'))
        for c in (old.get("status") or {}).get("conditions") or []:
            if c["type"] in ("Approved", "Denied", "Failed") and c["type"] not in types:
                errs.append(("status.conditions", "FieldValueForbidden",
                             'Forbidden: updates may not remove a condition of type "%s"' %
                             c["type"]))
        return errs

    def approve(self, name, obj, who, allowed):
        """PUT NAME/approval: only status.conditions is taken (the approval strategy)."""
        with self.cond:
            old = self.csrs.get(name)
            if old is None:
                return self.not_found(name)
            # kube-apiserver's order: the strategy and validation (422), then the validating
            # admission plugin CertificateApproval (403), then the storage's resourceVersion
            # precondition (409).
            conds = copy.deepcopy((obj.get("status") or {}).get("conditions") or [])
            errs = self._validate_conditions(name, old, conds)
            if errs:
                return invalid(name, errs)
            if not allowed:
                return status(403, "Forbidden",
                              'certificatesigningrequests.%s "%s" is forbidden: user not '
                              'permitted to approve requests with signerName "%s"' % (
                                  GROUP, name, old["spec"].get("signerName", "")),
                              {"name": name, "group": GROUP, "kind": "certificatesigningrequests"})
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                return self._conflict(name)
            stamp = now_rfc3339()
            for c in conds:
                c.setdefault("lastUpdateTime", stamp)
                c.setdefault("lastTransitionTime", stamp)
            old.setdefault("status", {})["conditions"] = conds
            if any(c["type"] == "Approved" for c in conds):
                self.approvals.append((name, who))
            self._bump("MODIFIED", old)
            return 200, copy.deepcopy(old)

    def update_status(self, name, obj):
        """PUT NAME/status (what a signer calls): status.certificate and conditions."""
        with self.cond:
            old = self.csrs.get(name)
            if old is None:
                return self.not_found(name)
            st = obj.get("status") or {}
            conds = copy.deepcopy(st.get("conditions") or [])
            errs = self._validate_conditions(name, old, conds)
            cert = st.get("certificate", "")
            oldcert = (old.get("status") or {}).get("certificate", "")
            if cert:
                approved = any(c["type"] == "Approved" for c in conds)
                if not approved:
                    errs.append(("status.certificate", "FieldValueForbidden",
                                 "Forbidden: certificate can only be set if the Approved "
                                 "condition is present"))
                try:
                    pem = base64.b64decode(cert, validate=True)
                    x509.load_pem_x509_certificate(pem)
                except Exception:  # noqa: BLE001
                    errs.append(("status.certificate", "FieldValueInvalid",
                                 "Invalid value: \"<certificate data>\": must contain at least "
                                 "one CERTIFICATE PEM block"))
            if oldcert and cert != oldcert:
                errs.append(("status.certificate", "FieldValueForbidden",
                             "Forbidden: updates may not modify existing certificate content"))
            if errs:
                return invalid(name, errs)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                return self._conflict(name)
            old.setdefault("status", {})["conditions"] = conds
            if cert:
                old["status"]["certificate"] = cert
            self._bump("MODIFIED", old)
            return 200, copy.deepcopy(old)

    # ---- the controllers ---------------------------------------------------------------------

    def _is_kubelet_serving(self, csr_pem, usages):
        """IsKubeletServingCSR: an error text, or None."""
        req = x509.load_pem_x509_csr(csr_pem)
        orgs = [a.value for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        cns = [a.value for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if orgs != ["system:nodes"]:
            return "subject organization is not system:nodes"
        if len(cns) != 1 or not cns[0].startswith("system:node:"):
            return 'subject common name does not begin with "system:node:"'
        try:
            san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            san = x509.SubjectAlternativeName([])
        if san.get_values_for_type(x509.RFC822Name) or \
                san.get_values_for_type(x509.UniformResourceIdentifier):
            return "email and URI subjectAltNames are not allowed"
        if not san.get_values_for_type(x509.DNSName) and \
                not san.get_values_for_type(x509.IPAddress):
            return "DNS or IP subjectAltName is required"
        if "server auth" not in usages or \
                set(usages) - {"key encipherment", "digital signature", "server auth"}:
            return "usages did not match [digital signature key encipherment server auth]"
        return None

    def _sign(self, csr_pem, exp_s):
        req = x509.load_pem_x509_csr(csr_pem)
        try:
            san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            san = None
        life = min(exp_s or self.signer_max_s, self.signer_max_s)
        life = max(life, 600)
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (x509.CertificateBuilder().subject_name(req.subject)
             .issuer_name(self.ca_cert.subject).public_key(req.public_key())
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(minutes=5))
             .not_valid_after(now + datetime.timedelta(seconds=life))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                          False), critical=True)
             .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                            critical=False))
        if san is not None:
            b = b.add_extension(san, critical=False)
        cert = b.sign(self.ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM)

    def _controllers(self):
        seen_rv = 0
        scheduled = set()  # (name, "approve"|"sign"): one timer each
        while True:
            with self.cond:
                if self.stopping:
                    return
                if self.rv == seen_rv:
                    self.cond.wait(0.2)
                seen_rv = self.rv
                todo = [copy.deepcopy(o) for o in self.csrs.values()]
            for o in todo:
                name = o["metadata"]["name"]
                if o["spec"].get("signerName") != KUBELET_SERVING:
                    continue
                conds = (o.get("status") or {}).get("conditions") or []
                types = {c["type"] for c in conds}
                if types & {"Denied", "Failed"} or (o.get("status") or {}).get("certificate"):
                    continue
                if "Approved" not in types:
                    if self.auto_approve and (name, "approve") not in scheduled:
                        scheduled.add((name, "approve"))
                        threading.Timer(self.approve_delay, self._cluster_approve,
                                        (name,)).start()
                    continue
                if (name, "sign") not in scheduled:
                    scheduled.add((name, "sign"))
                    threading.Timer(self.sign_delay, self._signer, (name,)).start()

    def _cluster_approve(self, name):
        code, o = self.get(name)
        if code != 200 or any(c["type"] in ("Approved", "Denied")
                              for c in (o.get("status") or {}).get("conditions") or []):
            return
        o.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "Approved", "status": "True", "reason": "AutoApproved",
             "message": "approved by the cluster's kubelet-serving approver"})
        self.approve(name, o, "cluster-approver", True)

    def _signer(self, name):
        code, o = self.get(name)
        if code != 200 or (o.get("status") or {}).get("certificate"):
            return
        conds = o["status"].get("conditions") or []
        if any(c["type"] == "Failed" for c in conds):
            return
        pem = base64.b64decode(o["spec"]["request"])
        why = self._is_kubelet_serving(pem, o["spec"].get("usages") or [])
        if why:
            conds.append({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                          "message": "invalid certificate request: " + why})
            self.update_status(name, {"metadata": o["metadata"],
                                      "status": {"conditions": conds}})
            return
        cert = self._sign(pem, o["spec"].get("expirationSeconds"))
        self.update_status(name, {"metadata": o["metadata"],
                                  "status": {"conditions": conds,
                                             "certificate": base64.b64encode(cert).decode()}})

    # ---- what tests read ---------------------------------------------------------------------

    def all(self):
        with self.cond:
            return [copy.deepcopy(o) for o in self.csrs.values()]


def to_json(obj):
    return json.dumps(obj, separators=(",", ":"))

#!/usr/bin/python3
"""The CSR API stand-in (peers/kube_csr.py behind peers/kube_reviews.py) against kube-apiserver's
rules, so that what cloudstream's serving certificates are tested on behaves as the real one:
create 201 (generateName, spec.username from the caller, status empty), 409 AlreadyExists,
422 Invalid with one cause per field; get 404; the approval subresource 403 (not permitted for
the signer), 409 Conflict (stale resourceVersion), 422 (Approved and Denied together), 200; a
watch by metadata.name sees ADDED then MODIFIED; the kubelet-serving signer writes
status.certificate after approval (verifies against its CA, the CSR's SANs) and a Failed
SignerValidationFailure condition for a request that is not a kubelet serving one; the status
subresource refuses a certificate on an unapproved CSR (422). No cloudstream here.
"""
import base64
import http.client
import json
import os
import ssl
import sys
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(HERE, "peers"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
from kube_csr import CsrApi  # noqa: E402
from kube_reviews import KubeReviews  # noqa: E402

BASE = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def csr_pem(cn="system:node:n1", org="system:nodes", dns=("n1",), ips=("10.0.0.1",)):
    import ipaddress
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i))
                                              for i in ips]
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
        x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
    if names:
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return base64.b64encode(b.sign(key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM)).decode()


def body(name=None, gen=None, request=None, signer="kubernetes.io/kubelet-serving",
         usages=("digital signature", "server auth"), exp=None):
    meta = {}
    if name:
        meta["name"] = name
    if gen:
        meta["generateName"] = gen
    spec = {"request": request if request is not None else csr_pem(), "signerName": signer,
            "usages": list(usages), "username": "someone-else"}
    if exp is not None:
        spec["expirationSeconds"] = exp
    if signer is None:
        del spec["signerName"]
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": meta, "spec": spec}


class Client:
    def __init__(self, env, url, token):
        self.port = int(url.rsplit(":", 1)[1])
        self.ctx = ssl.create_default_context(cafile=env.path("kubelet-ca.crt"))
        self.token = token

    def call(self, method, path, obj=None):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=10)
        hdrs = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        data = None
        if obj is not None:
            data = json.dumps(obj).encode()
            hdrs["Content-Type"] = "application/json"
        c.request(method, path, data, hdrs)
        r = c.getresponse()
        if "watch=1" in path:
            return r.status, r, c
        out = r.read()
        c.close()
        return r.status, json.loads(out)


def is_status(obj, code, reason):
    check(obj.get("kind") == "Status" and obj.get("apiVersion") == "v1" and
          obj.get("status") == "Failure" and obj.get("code") == code and
          obj.get("reason") == reason, "Status %r, want %d %s" % (obj, code, reason))


def main():
    env = h.Env("kube-csr")
    env.mint("ca", "--out", env.path("kubelet-serving-ca"), "--cn", "kubelet-serving")
    failed = True
    csr = CsrApi((env.path("kubelet-serving-ca.crt"), env.path("kubelet-serving-ca.key")),
                 nodes={"n1": [{"type": "InternalIP", "address": "10.0.0.1"}]})
    kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"), "tok", csr=csr,
                       caller_can_approve=True)
    denied_kube = KubeReviews(env.path("kubelet.crt"), env.path("kubelet.key"), "tok", csr=csr,
                              caller_can_approve=False)
    c = Client(env, kube.url, "tok")
    cd = Client(env, denied_kube.url, "tok")
    results = []

    def step(name, fn):
        try:
            fn()
            results.append(True)
            print("ok   kube_csr.%s" % name, flush=True)
        except Exception as e:  # noqa: BLE001
            results.append(False)
            print("FAIL kube_csr.%s: %s" % (name, e), flush=True)

    made = {}

    def create_201():
        st, o = c.call("POST", BASE, body(gen="csr-"))
        check(st == 201, "status %d %r" % (st, o))
        check(o["metadata"]["name"].startswith("csr-") and len(o["metadata"]["name"]) == 9,
              "name %r" % o["metadata"])
        check(o["spec"]["username"] == "system:serviceaccount:kube-system:cloudstream" and
              "system:authenticated" in o["spec"]["groups"], "spec %r" % o["spec"])
        check(o["status"] == {} and o["metadata"].get("resourceVersion") and
              o["metadata"].get("uid"), "object %r" % o)
        made["a"] = o

    def create_409():
        st, _ = c.call("POST", BASE, body(name="fixed"))
        check(st == 201, "first %d" % st)
        st, o = c.call("POST", BASE, body(name="fixed"))
        check(st == 409, "second %d" % st)
        is_status(o, 409, "AlreadyExists")
        check(o["message"] == 'certificatesigningrequests.certificates.k8s.io "fixed" already '
              'exists' and o["details"] == {"name": "fixed", "group": "certificates.k8s.io",
                                            "kind": "certificatesigningrequests"}, "%r" % o)

    def create_422():
        cases = [
            (body(name="bad1", request=base64.b64encode(b"nonsense").decode()), "spec.request"),
            (body(name="bad2", signer=None), "spec.signerName"),
            (body(name="bad3", usages=()), "spec.usages"),
            (body(name="bad4", usages=("server auth", "flying")), "spec.usages[1]"),
            (body(name="bad5", usages=("server auth", "server auth")), "spec.usages[1]"),
            (body(name="bad6", exp=599), "spec.expirationSeconds"),
            (body(), "metadata.name"),
        ]
        for obj, field in cases:
            st, o = c.call("POST", BASE, obj)
            check(st == 422, "%s: %d %r" % (field, st, o))
            is_status(o, 422, "Invalid")
            causes = o["details"]["causes"]
            check([x["field"] for x in causes] == [field], "%s: causes %r" % (field, causes))
            check(o["details"]["kind"] == "CertificateSigningRequest" and
                  o["message"].startswith('CertificateSigningRequest.certificates.k8s.io "'),
                  "%r" % o)

    def get_404():
        st, o = c.call("GET", BASE + "/nope")
        check(st == 404, "%d" % st)
        is_status(o, 404, "NotFound")
        check(o["message"] == 'certificatesigningrequests.certificates.k8s.io "nope" not found',
              o["message"])

    def approval_rules():
        name = made["a"]["metadata"]["name"]
        st, o = c.call("GET", BASE + "/" + name)
        check(st == 200, "get %d" % st)
        approved = json.loads(json.dumps(o))
        approved["status"]["conditions"] = [{"type": "Approved", "status": "True",
                                             "reason": "Test", "message": "t"}]
        st, x = cd.call("PUT", BASE + "/%s/approval" % name, approved)
        check(st == 403, "not permitted: %d" % st)
        is_status(x, 403, "Forbidden")
        check('user not permitted to approve requests with signerName '
              '"kubernetes.io/kubelet-serving"' in x["message"], x["message"])
        both = json.loads(json.dumps(approved))
        both["status"]["conditions"].append({"type": "Denied", "status": "True"})
        st, x = c.call("PUT", BASE + "/%s/approval" % name, both)
        check(st == 422, "both: %d" % st)
        is_status(x, 422, "Invalid")
        stale = json.loads(json.dumps(approved))
        stale["metadata"]["resourceVersion"] = "1"
        st, x = c.call("PUT", BASE + "/%s/approval" % name, stale)
        check(st == 409, "stale: %d" % st)
        is_status(x, 409, "Conflict")
        # Watch from the current version, then approve: MODIFIED (approved), MODIFIED (signed).
        st, resp, conn = c.call("GET", BASE + "?watch=1&fieldSelector=metadata.name%%3D%s"
                                "&resourceVersion=%s&timeoutSeconds=5" %
                                (name, o["metadata"]["resourceVersion"]))
        check(st == 200, "watch %d" % st)
        st, x = c.call("PUT", BASE + "/%s/approval" % name, approved)
        check(st == 200 and x["status"]["conditions"][0]["type"] == "Approved" and
              x["status"]["conditions"][0].get("lastUpdateTime"), "approve: %d %r" % (st, x))
        events = []
        while len(events) < 2:
            line = resp.readline()
            if not line:
                break
            events.append(json.loads(line))
        conn.close()
        check([e["type"] for e in events] == ["MODIFIED", "MODIFIED"], "events %r" % [
            (e["type"], e["object"]["status"]) for e in events])
        cert = base64.b64decode(events[1]["object"]["status"]["certificate"])
        leaf = x509.load_pem_x509_certificate(cert)
        ca = x509.load_pem_x509_certificate(open(env.path("kubelet-serving-ca.crt"),
                                                 "rb").read())
        check(leaf.issuer == ca.subject, "issuer")
        ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes,
                               ec.ECDSA(leaf.signature_hash_algorithm))
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        check(san.get_values_for_type(x509.DNSName) == ["n1"], "SANs %r" % san)

    def signer_refuses():
        st, o = c.call("POST", BASE, body(name="notnode", request=csr_pem(cn="someone")))
        check(st == 201, "%d" % st)
        o["status"]["conditions"] = [{"type": "Approved", "status": "True"}]
        st, _ = c.call("PUT", BASE + "/notnode/approval", o)
        check(st == 200, "approve %d" % st)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            _, o = c.call("GET", BASE + "/notnode")
            conds = {x["type"]: x for x in o["status"].get("conditions", [])}
            if "Failed" in conds:
                check(conds["Failed"]["reason"] == "SignerValidationFailure" and
                      "certificate" not in o["status"], "%r" % o["status"])
                return
            time.sleep(0.1)
        raise h.Fail("no Failed condition: %r" % o["status"])

    def status_needs_approval():
        st, o = c.call("POST", BASE, body(name="unapproved"))
        check(st == 201, "%d" % st)
        o["status"]["certificate"] = base64.b64encode(
            open(env.path("kubelet.crt"), "rb").read()).decode()
        st, x = c.call("PUT", BASE + "/unapproved/status", o)
        check(st == 422, "%d %r" % (st, x))
        is_status(x, 422, "Invalid")
        check(x["details"]["causes"][0]["field"] == "status.certificate", "%r" % x)

    def node_get():
        st, o = c.call("GET", "/api/v1/nodes/n1")
        check(st == 200 and o["status"]["addresses"][0]["address"] == "10.0.0.1", "%r" % o)
        st, o = c.call("GET", "/api/v1/nodes/n2")
        check(st == 404, "%d" % st)
        is_status(o, 404, "NotFound")

    try:
        step("create_201", create_201)
        step("create_409", create_409)
        step("create_422", create_422)
        step("get_404", get_404)
        step("approval_rules_watch_signer", approval_rules)
        step("signer_refuses_non_kubelet_serving", signer_refuses)
        step("status_needs_approval", status_needs_approval)
        step("node_get", node_get)
        failed = not all(results)
        return 1 if failed else 0
    finally:
        kube.close()
        denied_kube.close()
        h.close_env(env, failed)


if __name__ == "__main__":
    sys.exit(main())

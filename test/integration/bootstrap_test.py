#!/usr/bin/python3
"""Integration tests of edge certificates whose keys are born on the node (issue 16):

    bootstrap_test.py GROUP [TEST...]     GROUP: join | rotation | kubelet

join      a fresh edgestream with only a join token and the CA hash joins through cloudstream
          (POST /v1/cloudstream/join on the tunnel port) and serves a request; everything it
          sends during the join is captured in plaintext by a TLS-terminating proxy and holds no
          private key; reused, expired, another node's and unknown tokens are refused with the
          reason; a cloud whose CA does not match the pin is refused; a renewal whose request
          names another node is refused.
rotation  --signed-cert-lifetime 15s (ST_ROTATION_LIFETIME) over 60 s (ST_ROTATION_SECONDS): the
          edge renews over and over (--rotate-certificate, two thirds of the lifetime) while an
          exec (SPDY echo) and a logs -f stream stay open: no stream dropped, no reconnect; then
          the tunnel CA is rotated through a bundle (old + new) during the run, the signer
          switched to the new CA and the cloud's server certificate too.
          ST_ROTATION_LONG=1 runs the issue's figures: 2-minute certificates over 10 minutes.
kubelet   --kubelet-rotating-cert: one PEM file with certificate and key behind a symlink that
          the test replaces as the kubelet does; the new certificate is used from the next
          handshake, and the tunnel stays up meanwhile.
"""
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as h  # noqa: E402
import standin  # noqa: E402
from harness import check  # noqa: E402
from identity_test import serial_of  # noqa: E402


def ca_hash(env, ca):
    return subprocess.run([env.certs, "ca-hash", ca], check=True, capture_output=True,
                          text=True).stdout.strip()


def new_token(env, path, *args):
    return subprocess.run([env.certs, "token", "--file", path] + list(args), check=True,
                          capture_output=True, text=True).stdout.strip()


def signing_flags(env, tokens, ca="tunnel-ca"):
    return ["--join-tokens", tokens, "--signer-cert", env.path(ca + ".crt"),
            "--signer-key", env.path(ca + ".key")]


class CaptureProxy:
    """A TLS-terminating proxy in front of cloudstream's tunnel port for the join: it serves
    the cloud's own tunnel certificate (so the edge's pin and name checks pass), dials the tunnel
    port over TLS without a client certificate, relays a request and its answer, and keeps every
    byte the edge sent, in plaintext."""

    def __init__(self, env, cloud_port):
        self.sent = bytearray()
        self.lock = threading.Lock()
        self.srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.srv.load_cert_chain(env.path("cloudstream-tunnel.crt"),
                                 env.path("cloudstream-tunnel.key"))
        self.cli = ssl.create_default_context(cafile=env.path("tunnel-ca.crt"))
        self.cli.check_hostname = False
        self.cloud_port = cloud_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self.relay, args=(c,), daemon=True).start()

    def relay(self, c):
        """One request, then the answer until the cloud closes (it answers joins with
        Connection: close), in this one thread: an SSL socket is never used by two threads."""
        try:
            edge = self.srv.wrap_socket(c, server_side=True)
            cloud = self.cli.wrap_socket(socket.create_connection(("127.0.0.1", self.cloud_port)))
            edge.settimeout(10)
            cloud.settimeout(10)
            req = h.recv_until(edge, lambda b: b"\r\n\r\n" in b)
            head = req.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
            m = re.search(r"content-length:\s*(\d+)", head)
            need = len(head) + 4 + (int(m.group(1)) if m else 0)
            req = h.recv_until(edge, lambda b: len(b) >= need, req)
            with self.lock:
                self.sent += req
            cloud.sendall(req)
            while True:
                d = cloud.recv(65536)
                if not d:
                    break
                edge.sendall(d)
        except (OSError, ssl.SSLError, h.Fail):
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        self.lsock.close()


def private_key_forms(key_path):
    """Every form the edge's private key could take on the wire: the PEM body lines, the DER
    (PKCS#8 and SEC1) and the raw private scalar."""
    der8 = subprocess.run(["openssl", "pkey", "-in", key_path, "-outform", "DER"], check=True,
                          capture_output=True).stdout
    sec1 = subprocess.run(["openssl", "ec", "-in", key_path, "-outform", "DER"], check=True,
                          capture_output=True).stdout
    text = subprocess.run(["openssl", "ec", "-in", key_path, "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout
    priv = re.search(r"priv:\s*((?:[0-9a-f]{2}:?\s*)+)pub:", text).group(1)
    scalar = bytes.fromhex(re.sub(r"[^0-9a-f]", "", priv))
    with open(key_path) as f:
        pem_lines = [ln.encode() for ln in f.read().splitlines() if ln and "-----" not in ln]
    return [der8, sec1, scalar[-32:]] + pem_lines


def spki_of_csr_in(data):
    m = re.search(rb"-----BEGIN CERTIFICATE REQUEST-----.*?-----END CERTIFICATE REQUEST-----",
                  data, re.S)
    check(m is not None, "no signing request in what the edge sent")
    out = subprocess.run(["openssl", "req", "-noout", "-pubkey"], input=m.group(0), check=True,
                         capture_output=True).stdout
    return out


def join_edge(env, cloud, kubelet, node, token, pin, d, name, extra=(), join_url=None,
              timeout=20.0):
    """edgestream with nothing but a token and the CA hash (its certificate files do not exist
    yet; they go to @d)."""
    os.makedirs(d, exist_ok=True)
    args = ["--tunnel-ca", os.path.join(d, "ca.crt"), "--node-name", node,
            "--join-token", token, "--cloud-ca-hash", pin] + list(extra)
    if join_url:
        args += ["--join-url", join_url]
    return h.start_edgestream(env, cloud, kubelet, node=node, name=name,
                              cert=os.path.join(d, "edge.crt"), extra=args, timeout=timeout)


def refused_join(env, cloud, kubelet, node, token, pin, d, name):
    try:
        join_edge(env, cloud, kubelet, node, token, pin, d, name, timeout=15)
    except h.Fail as e:
        check("exited with 2 " in str(e), "%s: not a clean start-up refusal (LSan?): %s"
              % (name, e))
        return str(e)
    raise h.Fail("%s: the join was not refused" % name)


def get(env, cloud, host, target="/healthz"):
    st, _, body, s = h.Api(env, cloud.ports["stream"]).request("GET", target, [("Host", host)])
    s.close()
    return st, body


# ---- join --------------------------------------------------------------------------------------

def group_join():
    with h.Group("join", "boot-join", nodes=("edge-1", "edge-2")) as g:
        env = g.env
        tokens = os.path.join(env.dir, "join-tokens")
        open(tokens, "w").close()
        cloud = h.start_cloudstream(env, signing_flags(env, tokens))
        kubelet = h.start_kubelet(env)
        pin = ca_hash(env, env.path("tunnel-ca.crt"))
        proxy = CaptureProxy(env, cloud.ports["tunnel"])
        g.on_close(proxy.close)

        def fresh_edge_joins_key_stays_home():
            tok = new_token(env, tokens, "--ttl", "10m", "--uses", "1", "--node", "edge-7")
            check(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", tok), "token format: %r" % tok)
            with open(tokens) as f:
                check(tok.split(".")[1] not in f.read(), "the token file holds the secret")
            d = os.path.join(env.dir, "edge-7")
            edge = join_edge(env, cloud, kubelet, "edge-7", tok, pin, d, "es-join",
                             join_url="https://127.0.0.1:%d" % proxy.port)
            st, body = get(env, cloud, "edge-7:10350", "/healthz")
            check(st == 200 and body == b"ok", "request through the joined edge: %d %r"
                  % (st, body))
            key = os.path.join(d, "edge.key")
            mode = os.stat(key).st_mode & 0o777
            check(mode == 0o600, "key mode %o" % mode)
            with proxy.lock:
                sent = bytes(proxy.sent)
            check(b"POST /v1/cloudstream/join" in sent and b"GET /v1/cloudstream/ca" in sent,
                  "the proxy did not see the join (%d bytes)" % len(sent))
            check(b"PRIVATE KEY" not in sent, "a PEM private key crossed the wire")
            for form in private_key_forms(key):
                check(form not in sent, "the private key crossed the wire (%d bytes form)"
                      % len(form))
            # what crossed is the public half of that very key
            pub = subprocess.run(["openssl", "pkey", "-in", key, "-pubout"], check=True,
                                 capture_output=True).stdout
            check(spki_of_csr_in(sent) == pub, "the CSR is not for the key on disk")
            subj = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                                   os.path.join(d, "edge.crt")], check=True,
                                  capture_output=True, text=True).stdout
            check("CN = system:node:edge-7" in subj, "subject %r" % subj)
            check(h.log_has(cloud, "joined with token %s" % tok.split(".")[0], 0),  # its own token
                  "cloud log")
            check(tok.split(".")[1] not in open(cloud.logpath).read(), "the secret was logged")
            check(h.metric(cloud, "cloudstream_certificates_signed_total", 'kind="join"') == 1,
                  "signed count")
            print("     captured %d bytes from the edge during the join, no key in them"
                  % len(sent))
            # a restart with the files in place needs no token (it is spent now)
            check(env.stop(edge) == 0, "edgestream exit status (ASan/LSan)")
            edge = join_edge(env, cloud, kubelet, "edge-7", tok, pin, d, "es-join-again")
            check(get(env, cloud, "edge-7:10350")[0] == 200, "restart with the joined files")
            check(env.stop(edge) == 0, "edgestream exit status (ASan/LSan)")

        def reused_token_refused():
            tok = new_token(env, tokens, "--uses", "1")
            join_edge(env, cloud, kubelet, "edge-8", tok, pin, os.path.join(env.dir, "e8"),
                      "es-e8")
            mark = h.log_mark(cloud)
            why = refused_join(env, cloud, kubelet, "edge-9", tok, pin,
                               os.path.join(env.dir, "e9"), "es-e9")
            check("refused the join (403): reused: token %s was already used"
                  % tok.split(".")[0] in why, why)
            check(h.log_has(cloud, "join from", mark), "cloud did not log the refusal")
            check(not os.path.exists(os.path.join(env.dir, "e9", "edge.key")),
                  "a refused join left a key")

        def used_token_stays_used_after_restart():
            """The uses taken are kept in --join-uses: a single-use token spent before a
            restart is still spent after it; a use that cannot be recorded is not taken."""
            toks2 = os.path.join(env.dir, "join-tokens-2")
            open(toks2, "w").close()
            tok = new_token(env, toks2, "--uses", "1")
            c2 = h.start_cloudstream(env, signing_flags(env, toks2), name="cloud-uses")
            join_edge(env, c2, kubelet, "edge-11", tok, pin, os.path.join(env.dir, "e11"),
                      "es-e11")
            uses = toks2 + ".uses"
            with open(uses) as f:
                text = f.read()
            check(text == "use %s 1\n" % tok.split(".")[0], "uses file %r" % text)
            check(os.stat(uses).st_mode & 0o777 == 0o600, "uses file mode")
            check(env.stop(c2) == 0, "cloudstream exit status")
            c2 = h.start_cloudstream(env, signing_flags(env, toks2), name="cloud-uses-2")
            why = refused_join(env, c2, kubelet, "edge-12", tok, pin,
                               os.path.join(env.dir, "e12"), "es-e12")
            check("reused: token %s was already used" % tok.split(".")[0] in why,
                  "after a restart: %s" % why)
            check(env.stop(c2) == 0, "cloudstream exit status")
            # a uses file that cannot be written: the join is refused, the use not taken
            tok2 = new_token(env, toks2, "--uses", "1")
            c3 = h.start_cloudstream(env, signing_flags(env, toks2) + [
                "--join-uses", os.path.join(env.dir, "no-such-dir", "uses")],
                name="cloud-uses-3")
            why = refused_join(env, c3, kubelet, "edge-13", tok2, pin,
                               os.path.join(env.dir, "e13"), "es-e13")
            check("(503)" in why and "cannot be kept" in why, "unwritable uses file: %s" % why)
            check(env.stop(c3) == 0, "cloudstream exit status")
            c4 = h.start_cloudstream(env, signing_flags(env, toks2), name="cloud-uses-4")
            join_edge(env, c4, kubelet, "edge-13", tok2, pin, os.path.join(env.dir, "e13b"),
                      "es-e13b")
            check(env.stop(c4) == 0, "cloudstream exit status")

        def expired_token_refused():
            tok = new_token(env, tokens, "--ttl", "1s")
            time.sleep(1.5)
            why = refused_join(env, cloud, kubelet, "edge-10", tok, pin,
                               os.path.join(env.dir, "e10"), "es-e10")
            check("(403): expired: token" in why, why)

        def foreign_node_token_refused():
            tok = new_token(env, tokens, "--node", "edge-11")
            why = refused_join(env, cloud, kubelet, "edge-12", tok, pin,
                               os.path.join(env.dir, "e12"), "es-e12")
            check("(403): foreign_node: token %s is for node edge-11, not edge-12"
                  % tok.split(".")[0] in why, why)

        def unknown_token_refused():
            why = refused_join(env, cloud, kubelet, "edge-13", "abcdef.0123456789abcdef", pin,
                               os.path.join(env.dir, "e13"), "es-e13")
            check("(403): unknown" in why, why)

        def ca_not_matching_pin_refused():
            tok = new_token(env, tokens)
            before = h.metric(cloud, "cloudstream_certificates_signed_total", 'kind="join"')
            wrong = ca_hash(env, env.path("stream-ca.crt"))
            why = refused_join(env, cloud, kubelet, "edge-14", tok, wrong,
                               os.path.join(env.dir, "e14"), "es-e14")
            check("the cloud's CA does not match --cloud-ca-hash" in why, why)
            check(h.metric(cloud, "cloudstream_certificates_signed_total", 'kind="join"') ==
                  before, "a join was signed for a cloud the edge does not trust")
            # the token is still good: the same edge with the right pin joins
            e14 = join_edge(env, cloud, kubelet, "edge-14", tok, pin,
                            os.path.join(env.dir, "e14"), "es-e14-ok")
            check(env.stop(e14) == 0, "edgestream exit status (ASan/LSan)")

        def renewal_for_another_node_refused():
            d = os.path.join(env.dir, "csr")
            os.makedirs(d)
            subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                            os.path.join(d, "k.pem"), "-out", os.path.join(d, "r.csr"),
                            "-subj", "/O=system:nodes/CN=system:node:edge-2"],
                           check=True, capture_output=True)
            body = open(os.path.join(d, "r.csr"), "rb").read()
            ctx = ssl.create_default_context(cafile=env.path("tunnel-ca.crt"))
            ctx.check_hostname = False
            ctx.load_cert_chain(env.path("node-edge-1.crt"), env.path("node-edge-1.key"))
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", cloud.ports["tunnel"])))
            s.sendall(h.head("POST", "/v1/cloudstream/renew", [("Host", "cloud")], len(body))
                      + body)
            st, hdrs, rest = h.read_head(s)
            text = h.read_body(s, hdrs, rest).decode()
            s.close()
            check(st == 403 and "names node edge-2; the certificate presented is node edge-1"
                  in text, "%d %r" % (st, text))
            check(hdrs.get("x-cloudstream-refusal", "").startswith("csr_name:"), repr(hdrs))
            # and an upgrade without a certificate is still refused, now that it is optional
            ctx2 = ssl.create_default_context(cafile=env.path("tunnel-ca.crt"))
            ctx2.check_hostname = False
            s = ctx2.wrap_socket(socket.create_connection(("127.0.0.1", cloud.ports["tunnel"])))
            s.sendall(h.head("GET", "/v1/kubeedge/connect",
                             [("Host", "cloud"), ("Connection", "Upgrade"),
                              ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
                              ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")]))
            st, hdrs, rest = h.read_head(s)
            s.close()
            check(st == 403, "upgrade without a certificate: %d" % st)

        rc = g.run([
            ("fresh_edge_joins_key_stays_home", fresh_edge_joins_key_stays_home),
            ("reused_token_refused", reused_token_refused),
            ("used_token_stays_used_after_restart", used_token_stays_used_after_restart),
            ("expired_token_refused", expired_token_refused),
            ("foreign_node_token_refused", foreign_node_token_refused),
            ("unknown_token_refused", unknown_token_refused),
            ("ca_not_matching_pin_refused", ca_not_matching_pin_refused),
            ("renewal_for_another_node_refused", renewal_for_another_node_refused),
        ])
        for reason in ("reused", "expired", "foreign_node", "unknown", "csr_name"):
            check(h.metric(cloud, "cloudstream_join_refusals_total", 'reason="%s"' % reason) >= 1,
                  "refusal metric %s" % reason)
        h.stop_exits_0(env, cloud)
        return rc


# ---- rotation ----------------------------------------------------------------------------------

class ExecEcho:
    """An exec-like stream held open through cloudstream and the edge: a SPDY upgrade to the
    kubelet stand-in's echoing exec; a message every @period seconds must come back."""

    def __init__(self, env, cloud, node):
        self.s, _, self.buf = h.open_exec(h.Api(env, cloud.ports["stream"]), node,
                                          "greet&input=1&output=1")
        self.n = 0

    def ping(self):
        msg = b"message %06d through the rotating tunnel\n" % self.n
        self.n += 1
        self.s.sendall(msg)
        got = h.recv_until(self.s, lambda b: len(b) >= len(msg), self.buf)
        check(got[:len(msg)] == msg, "exec echo %d: %r" % (self.n, got[:80]))
        self.buf = got[len(msg):]


class LogsFollow:
    """A logs -f stream held open: the stand-in writes "line N" every 100 ms; a thread reads
    and checks that N counts up without a gap."""

    def __init__(self, env, cloud, node):
        self.s = h.Api(env, cloud.ports["stream"]).connect()
        self.s.sendall(h.head("GET", "/containerLogs/default/pod-a/ctr?tailLines=1&follow=true",
                              [("Host", "%s:10350" % node)]))
        st, _, self.rest = h.read_head(self.s)
        check(st == 200, "logs: %d" % st)
        self.last = 0
        self.lines = 0
        self.error = None
        self.last_at = time.monotonic()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        buf = self.rest
        try:
            self.s.settimeout(5)
            while True:
                for m in re.finditer(rb"line (\d+)\n", buf):
                    n = int(m.group(1))
                    if self.last and n != self.last + 1:
                        self.error = "logs: line %d after %d" % (n, self.last)
                        return
                    self.last = n
                    self.lines += 1
                    self.last_at = time.monotonic()
                buf = buf[buf.rfind(b"\n") + 1:] if b"\n" in buf else buf
                d = self.s.recv(65536)
                if not d:
                    self.error = "logs: the stream ended after line %d" % self.last
                    return
                buf += d
        except (OSError, ssl.SSLError) as e:
            self.error = "logs: %s after line %d" % (e, self.last)

    def check_alive(self):
        check(self.error is None, str(self.error))
        check(time.monotonic() - self.last_at < 3, "logs: nothing for %.1f s"
              % (time.monotonic() - self.last_at))


def issuer_of(path):
    return subprocess.run(["openssl", "x509", "-noout", "-issuer", "-in", path], check=True,
                          capture_output=True, text=True).stdout.strip()


def certs_in(path):
    with open(path) as f:
        return f.read().count("BEGIN CERTIFICATE")


def replace_file(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst + ".tmp", "wb") as f:
        f.write(data)
    os.chmod(dst + ".tmp", os.stat(src).st_mode & 0o777)
    os.rename(dst + ".tmp", dst)


def group_rotation():
    long_run = os.environ.get("ST_ROTATION_LONG") == "1"
    lifetime = int(os.environ.get("ST_ROTATION_LIFETIME", "120" if long_run else "15"))
    seconds = int(os.environ.get("ST_ROTATION_SECONDS", "600" if long_run else "60"))
    env = h.Env("boot-rot", nodes=("edge-1",))
    failed = True
    try:
        d = os.path.join(env.dir, "cloud")
        os.makedirs(d)
        # The cloud's tunnel files and signer, in files the test replaces during the run.
        for src, dst in (("cloudstream-tunnel.crt", "tunnel.crt"),
                         ("cloudstream-tunnel.key", "tunnel.key"),
                         ("tunnel-ca.crt", "trust.crt"), ("tunnel-ca.crt", "signer.crt"),
                         ("tunnel-ca.key", "signer.key")):
            replace_file(env.path(src), os.path.join(d, dst))
        tokens = os.path.join(env.dir, "join-tokens")
        tok = new_token(env, tokens)
        cloud = h.start_cloudstream(env, [
            "--tunnel-cert", os.path.join(d, "tunnel.crt"),
            "--tunnel-key", os.path.join(d, "tunnel.key"),
            "--tunnel-ca", os.path.join(d, "trust.crt"),
            "--join-tokens", tokens, "--signer-cert", os.path.join(d, "signer.crt"),
            "--signer-key", os.path.join(d, "signer.key"),
            "--signed-cert-lifetime", "%ds" % lifetime])
        kubelet = h.start_kubelet(env)
        e = os.path.join(env.dir, "edge")
        edge = join_edge(env, cloud, kubelet, "edge-r", tok, ca_hash(env, env.path("tunnel-ca.crt")),
                         e, "es-rot", extra=["--rotate-certificate", "--cert-check-interval", "1s"])
        ecert, eca = os.path.join(e, "edge.crt"), os.path.join(e, "ca.crt")
        ca1 = issuer_of(ecert)
        serials = [serial_of(ecert)]
        ex = ExecEcho(env, cloud, "edge-r")
        logs = LogsFollow(env, cloud, "edge-r")
        print("     certificate lifetime %d s, run %d s, two streams open" % (lifetime, seconds),
              flush=True)

        def tick(until, what=None):
            """Keeps both streams busy until @until (monotonic), noting new serials; stops
            early when @what() is true."""
            while time.monotonic() < until:
                ex.ping()
                logs.check_alive()
                s = serial_of(ecert)
                if s != serials[-1]:
                    serials.append(s)
                if what and what():
                    return True
                time.sleep(0.5)
            return False

        t0 = time.monotonic()
        tick(t0 + seconds / 3)
        before_ca = len(serials)
        check(before_ca >= 2, "no renewal in the first third (%d s)" % (seconds // 3))
        # CA rotation through a bundle: the cloud trusts old + new, the signer becomes the new
        # CA; the edge's next renewal brings a certificate of the new CA and the bundle.
        env.mint("ca", "--out", os.path.join(d, "ca2"), "--cn", "cloudstream tunnel CA 2")
        with open(env.path("tunnel-ca.crt")) as a, open(os.path.join(d, "ca2.crt")) as b:
            bundle = a.read() + b.read()
        with open(os.path.join(d, "trust.tmp"), "w") as f:
            f.write(bundle)
        os.rename(os.path.join(d, "trust.tmp"), os.path.join(d, "trust.crt"))
        cloud.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        replace_file(os.path.join(d, "ca2.key"), os.path.join(d, "signer.key.new"))
        replace_file(os.path.join(d, "ca2.crt"), os.path.join(d, "signer.crt.new"))
        os.rename(os.path.join(d, "signer.key.new"), os.path.join(d, "signer.key"))
        os.rename(os.path.join(d, "signer.crt.new"), os.path.join(d, "signer.crt"))
        t_ca = time.monotonic()
        check(tick(t0 + seconds, lambda: certs_in(eca) == 2 and issuer_of(ecert) != ca1),
              "the edge never got a certificate of the new CA and the bundle")
        print("     new CA's certificate and the bundle on the edge %.1f s after the switch"
              % (time.monotonic() - t_ca), flush=True)
        # the cloud's own certificate from the new CA: the edge's renewals verify it with the
        # bundle
        env.mint("server", "--ca", os.path.join(d, "ca2"), "--out", os.path.join(d, "srv2"),
                 "--cn", "cloudstream", "--dns", "localhost", "--ip", "127.0.0.1")
        replace_file(os.path.join(d, "srv2.key"), os.path.join(d, "tunnel.key"))
        replace_file(os.path.join(d, "srv2.crt"), os.path.join(d, "tunnel.crt"))
        cloud.send_signal(signal.SIGHUP)
        after_srv = len(serials)
        tick(t0 + seconds)
        check(len(serials) > after_srv, "no renewal against the new CA's server certificate")
        ex.ping()
        logs.check_alive()
        renewals = h.metric(edge, "edgestream_certificate_renewals_total", 'result="ok"')
        fails = h.metric(edge, "edgestream_certificate_renewals_total", 'result="failed"')
        connects = h.metric(edge, "edgestream_tunnel_connects_total")
        signed = h.metric(cloud, "cloudstream_certificates_signed_total", 'kind="renew"')
        print("     %d renewals (%d failed), %d serials, %d exec echoes, %d log lines, "
              "%d tunnel connects" % (renewals, fails, len(serials), ex.n, logs.lines, connects),
              flush=True)
        want = max(3, int(seconds / (lifetime * 0.75)) - 1)
        check(renewals >= want and signed == renewals, "renewals %d (cloud signed %d), want >= %d"
              % (renewals, signed, want))
        check(fails == 0, "%d renewals failed" % fails)
        check(connects == 1, "the tunnel reconnected (%d connects)" % connects)
        check(h.metric(edge, "edgestream_tunnel_disconnects_total") == 0, "a disconnect")
        check(len(set(serials)) == len(serials), "a serial came back")
        # a new handshake now: new CA on both sides, the edge's trust a bundle
        st, _ = h.admin_post(cloud, "/nodes/edge-r/close")
        check(st == 200, "admin close: %d" % st)
        deadline = time.monotonic() + 10
        while get(env, cloud, "edge-r:10350")[0] != 200:
            check(time.monotonic() < deadline, "no tunnel after the redial with the new CA")
            time.sleep(0.2)
        check(env.stop(edge) == 0, "edgestream exit status (ASan/LSan)")
        check(env.stop(cloud) == 0, "cloudstream exit status")
        print("ok   rotation.renewed_under_open_streams_ca_bundle  %.2fs"
              % (time.monotonic() - t0), flush=True)
        failed = False
        return 0
    except Exception as e:  # noqa: BLE001 - reported like h.run does
        print("FAIL rotation.renewed_under_open_streams_ca_bundle  %s: %s"
              % (type(e).__name__, e), flush=True)
        return 1
    finally:
        h.close_env(env, failed)


# ---- the kubelet's rotating certificate -----------------------------------------------------------

def group_kubelet():
    with h.Group("kubelet", "boot-kubelet", nodes=("edge-k",)) as g:
        env = g.env
        deny = os.path.join(env.dir, "deny-list")
        open(deny, "w").close()
        cloud = h.start_cloudstream(env, ["--deny-list", deny])
        kubelet = h.start_kubelet(env)
        pki = os.path.join(env.dir, "var-lib-kubelet-pki")
        os.makedirs(pki)

        def kubelet_writes(stamp, cert_base):
            """What the kubelet's certificate manager does: a new dated file with the
            certificate and then its key, and the -current.pem symlink replaced atomically."""
            dated = os.path.join(pki, "kubelet-client-%s.pem" % stamp)
            with open(cert_base + ".crt") as c, open(cert_base + ".key") as k:
                data = c.read() + k.read()
            fd = os.open(dated, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, data.encode())
            os.close(fd)
            tmp = os.path.join(pki, ".current.tmp")
            os.symlink(dated, tmp)
            os.rename(tmp, os.path.join(pki, "kubelet-client-current.pem"))

        kubelet_writes("2026-11-24-10-00-00", env.path("node-edge-k"))
        current = os.path.join(pki, "kubelet-client-current.pem")

        def no_tunnel_files(argv):
            out = []
            skip = 0
            for a in argv:
                if skip:
                    skip -= 1
                    continue
                if a in ("--tunnel-cert", "--tunnel-key"):
                    skip = 1
                    continue
                out.append(a)
            return out

        def uses_the_rotating_file():
            edge = h.start_edgestream(env, cloud, kubelet, node="edge-k", name="es-kubelet",
                                      extra=["--kubelet-rotating-cert", current,
                                             "--cert-check-interval", "200ms",
                                             "--backoff-initial", "50ms",
                                             "--backoff-max", "200ms"],
                                      wrap=no_tunnel_files)
            check(get(env, cloud, "edge-k:10350")[0] == 200, "through the kubelet's certificate")
            old = serial_of(env.path("node-edge-k.crt"))
            # the kubelet rotates: a new dated file, the symlink moved
            env.mint("client", "--ca", env.path("tunnel-ca"), "--out",
                     os.path.join(env.dir, "rotated"), "--node", "edge-k")
            kubelet_writes("2026-11-24-11-00-00", os.path.join(env.dir, "rotated"))
            check(h.log_has(edge, "reloaded the tunnel certificate", 0, 5),  # this test's edge
                  "the replaced symlink was not noticed")
            check(get(env, cloud, "edge-k:10350")[0] == 200, "the tunnel after the reload")
            check(h.metric(edge, "edgestream_tunnel_connects_total") == 1,
                  "the reload reconnected")
            # the old serial revoked: the redial must use the rotated certificate
            with open(deny, "w") as f:
                f.write("serial %s\n" % old)
            mark = h.log_mark(cloud)
            cloud.send_signal(signal.SIGHUP)
            check(h.log_has(cloud, "revoked by the deny list", mark), "old tunnel not closed")
            deadline = time.monotonic() + 10
            while get(env, cloud, "edge-k:10350")[0] != 200:
                check(time.monotonic() < deadline, "no tunnel with the rotated certificate")
                time.sleep(0.1)
            check(h.metric(edge, "edgestream_tunnel_connects_total") == 2, "one redial")
            check(env.stop(edge) == 0, "edgestream exit status (ASan/LSan)")

        def refuses_other_tunnel_files():
            try:
                h.start_edgestream(env, cloud, kubelet, node="edge-k", name="es-kubelet-bad",
                                   extra=["--kubelet-rotating-cert", current], timeout=5)
            except h.Fail as e:
                check("kubelet-rotating-cert replaces --tunnel-cert" in str(e), str(e))
            else:
                raise h.Fail("--tunnel-cert with --kubelet-rotating-cert was accepted")

        return g.run([
            ("uses_the_rotating_file", uses_the_rotating_file),
            ("refuses_other_tunnel_files", refuses_other_tunnel_files),
        ], exit_0=[cloud])


# ---- the Kubernetes CSR API as the signer -----------------------------------------------------------

class CsrApi:
    """kube-apiserver's certificates.k8s.io/v1 CSR API over HTTPS with a bearer token, with a
    cluster approver and signer for one signerName behind it: 0.3 s after a create, a request
    for system:node:edge-deny is Denied, any other is Approved and signed by the tunnel CA
    (subject and key from the request, clientAuth, expirationSeconds)."""

    def __init__(self, env, signer):
        import json
        import base64
        import datetime
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        self.token_file = standin.write_token(env, "csr-token-7", "csr-token")
        self.objects = {}
        self.creates = []
        with open(env.path("tunnel-ca.key"), "rb") as f:
            ca_key = serialization.load_pem_private_key(f.read(), None)
        with open(env.path("tunnel-ca.crt"), "rb") as f:
            ca = x509.load_pem_x509_certificate(f.read())
        outer = self

        def decide(name):
            time.sleep(0.3)
            o = outer.objects[name]
            req = x509.load_pem_x509_csr(base64.b64decode(o["spec"]["request"]))
            cn = req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
            if cn == "system:node:edge-deny":
                o["status"] = {"conditions": [{"type": "Denied", "status": "True",
                                               "reason": "NotAllowed",
                                               "message": "edge-deny is not on the site list"}]}
                return
            now = datetime.datetime.now(datetime.timezone.utc)
            cert = (x509.CertificateBuilder().subject_name(req.subject)
                    .issuer_name(ca.subject).public_key(req.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(seconds=30))
                    .not_valid_after(now + datetime.timedelta(
                        seconds=o["spec"]["expirationSeconds"]))
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                                   critical=False)
                    .sign(ca_key, hashes.SHA256()))
            pem = cert.public_bytes(serialization.Encoding.PEM)
            o["status"] = {"conditions": [{"type": "Approved", "status": "True",
                                           "reason": "AutoApproved", "message": "test"}],
                           "certificate": base64.b64encode(pem).decode()}

        class Handler(standin.Handler):
            protocol_version = "HTTP/1.1"
            base = "/apis/certificates.k8s.io/v1/certificatesigningrequests"

            def answer(self, code, obj):
                self.reply(code, json.dumps(obj).encode())

            def authorized(self):
                if self.headers.get("Authorization") == "Bearer csr-token-7":
                    return True
                self.answer(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
                return False

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n))
                if not self.authorized():
                    return
                if self.path != self.base or body["spec"].get("signerName") != signer:
                    self.answer(422, {"kind": "Status", "code": 422, "reason": "Invalid"})
                    return
                name = body["metadata"]["generateName"] + "%05d" % len(outer.objects)
                body["metadata"] = {"name": name}
                body["status"] = {}
                outer.objects[name] = body
                outer.creates.append(body)
                threading.Thread(target=decide, args=(name,), daemon=True).start()
                self.answer(201, body)

            def do_GET(self):
                if not self.authorized():
                    return
                name = self.path[len(self.base) + 1:]
                if self.path.startswith(self.base + "/") and name in outer.objects:
                    self.answer(200, outer.objects[name])
                else:
                    self.answer(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

        self.httpd = standin.serve(Handler, env)

    def flags(self, env):
        return standin.apiserver_flags(env, self.httpd.url, self.token_file)

    def close(self):
        self.httpd.shutdown()


def group_kube_csr():
    with h.Group("kube_csr", "boot-csr", nodes=("edge-1",)) as g:
        env = g.env
        signer = "example.com/edge-client"
        api = CsrApi(env, signer)
        g.on_close(api.close)
        tokens = os.path.join(env.dir, "join-tokens")
        open(tokens, "w").close()
        cloud = h.start_cloudstream(env, ["--join-tokens", tokens, "--csr-signer-name", signer,
                                          "--signed-cert-lifetime", "1h"] + api.flags(env))
        kubelet = h.start_kubelet(env)
        pin = ca_hash(env, env.path("tunnel-ca.crt"))

        def join_signed_by_the_cluster():
            tok = new_token(env, tokens)
            d = os.path.join(env.dir, "edge-c")
            edge = join_edge(env, cloud, kubelet, "edge-c", tok, pin, d, "es-csr")
            check(get(env, cloud, "edge-c:10350")[0] == 200, "request through the edge")
            check(len(api.creates) == 1, "CSRs created: %d" % len(api.creates))
            spec = api.creates[0]["spec"]
            check(spec["signerName"] == signer and spec["expirationSeconds"] == 3600 and
                  sorted(spec["usages"]) == ["client auth", "digital signature"], repr(spec))
            import base64
            req = base64.b64decode(spec["request"])
            pub = subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "edge.key"),
                                  "-pubout"], check=True, capture_output=True).stdout
            check(spki_of_csr_in(req) == pub, "spec.request is not the edge's own request")
            check(h.log_has(cloud, "joined with token %s" % tok.split(".")[0], 0),  # its own token
                  "cloud log")
            check(env.stop(edge) == 0, "edgestream exit status")

        def denied_by_the_cluster():
            tok = new_token(env, tokens)
            why = refused_join(env, cloud, kubelet, "edge-deny", tok, pin,
                               os.path.join(env.dir, "edge-deny"), "es-deny")
            check("(403): csr_denied: CSR cloudstream-join-" in why and
                  "Denied (NotAllowed): edge-deny is not on the site list" in why, why)
            # the use was given back: the same token still joins another node
            e = join_edge(env, cloud, kubelet, "edge-d2", tok, pin,
                          os.path.join(env.dir, "edge-d2"), "es-d2")
            check(env.stop(e) == 0, "edgestream exit status")

        return g.run([
            ("join_signed_by_the_cluster", join_signed_by_the_cluster),
            ("denied_by_the_cluster", denied_by_the_cluster),
        ], exit_0=[cloud])


def main():
    return h.main_by_group({"join": group_join, "rotation": group_rotation,
                            "kubelet": group_kubelet, "kube_csr": group_kube_csr}, "join")


if __name__ == "__main__":
    sys.exit(main())

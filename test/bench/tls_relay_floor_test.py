#!/usr/bin/python3
"""tls_relay_floor (the relay benches' CPU floor) still relays: a quick check so the bench tool
cannot rot unnoticed.

A TLS server in this process (the kubelet stand-in's certificate, a client certificate from the
kubelet CA required) behind one tls_relay_floor; a client uploads 3 MiB, the server checks
their sha256 and answers 5 MiB of its own, then closes with close_notify; the client checks
those bytes and that the close arrived, and closes in turn, which the server must see as a
close_notify too (both directions' clean shutdown passed through). Also: ALPN passed through
(the client's http/1.1, then h2, reaches the server, the relay picking it out of its list),
AES-128-GCM chosen on both legs although Python offers AES-256 first, three connections in turn,
--help (exit 0), a bad option (exit 2), a missing CA (exit 2) and SIGTERM → exit 0.
"""
import hashlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration", "lib"))
import harness as h  # noqa: E402

UP = os.urandom(3 << 20)
DOWN = os.urandom(5 << 20)


def recv_exact(s, n):
    out = bytearray()
    while len(out) < n:
        b = s.recv(min(1 << 20, n - len(out)))
        if not b:
            break
        out += b
    return bytes(out)


def serve(lsock, ctx, results):
    """Each connection: read len(UP) bytes, answer DOWN, close_notify, wait for the client's."""
    for _ in range(3):
        raw, _ = lsock.accept()
        raw.settimeout(10)
        stage = "handshake"
        try:
            s = ctx.wrap_socket(raw, server_side=True)
            alpn, suite = s.selected_alpn_protocol(), s.cipher()[0]
            stage = "upload"
            got = recv_exact(s, len(UP))
            stage = "download"
            s.sendall(DOWN)
            stage = "close"
            s.unwrap()  # our close_notify, then the client's (through the relay)
            results.append((hashlib.sha256(got).hexdigest(), alpn, suite))
        except Exception as e:  # noqa: BLE001 — reported by the main thread
            results.append(("error", stage + ": " + repr(e), None))
        finally:
            raw.close()


def one_client(port, alpn):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(alpn)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw)
    s.sendall(UP)
    got = recv_exact(s, len(DOWN) + 1)  # + 1: the close_notify must end it
    alpn, suite = s.selected_alpn_protocol(), s.cipher()[0]
    s.unwrap()
    raw.close()
    return got, alpn, suite


def main():
    env = h.Env("floor-smoke")
    ok = False
    results = []
    try:
        tool = os.path.join(h.BIN, "test", "bench", "tls_relay_floor")
        r = subprocess.run([tool, "--help"], capture_output=True, text=True)
        h.check(r.returncode == 0 and "--upstream-port" in r.stdout, "--help: %r" % (r,))
        r = subprocess.run([tool, "--bogus"], capture_output=True, text=True)
        h.check(r.returncode == 2 and "usage:" in r.stderr, "bad option: %r" % (r,))
        r = subprocess.run([tool, "--cert", env.path("kubelet.crt"), "--key",
                            env.path("kubelet.key"), "--upstream-port", "1"],
                           capture_output=True, text=True)
        h.check(r.returncode == 2 and "--upstream-ca" in r.stderr, "no CA: %r" % (r,))

        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(env.path("kubelet.crt"), env.path("kubelet.key"))
        sctx.load_verify_locations(env.path("kubelet-ca.crt"))
        sctx.verify_mode = ssl.CERT_REQUIRED
        sctx.set_alpn_protocols(["h2", "http/1.1"])
        sctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE  # as nginx: the client's order
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(4)
        server = threading.Thread(target=serve, args=(lsock, sctx, results), daemon=True)
        server.start()

        ready = os.path.join(env.dir, "floor.ready")
        proc, text = env.start("floor", [
            tool, "--cert", env.path("cloudstream-stream.crt"),
            "--key", env.path("cloudstream-stream.key"),
            "--upstream-port", str(lsock.getsockname()[1]),
            "--upstream-cert", env.path("edgestream-kubelet-client.crt"),
            "--upstream-key", env.path("edgestream-kubelet-client.key"),
            "--upstream-ca", env.path("kubelet-ca.crt"), "--ready-file", ready], ready)
        port = int(text.strip().split("=")[1])
        # the third offers h2 alone: the relay takes it and offers the upstream h2 alone
        want = ["http/1.1", "http/1.1", "h2"]
        for i, proto in enumerate(want):
            got, alpn, suite = one_client(port, [proto])
            h.check(got == DOWN, "connection %d: %d bytes back, want %d intact" % (
                i, len(got), len(DOWN)))
            h.check(alpn == proto and suite == "TLS_AES_128_GCM_SHA256",
                    "client leg %d: ALPN %r, suite %r" % (i, alpn, suite))
        server.join(15)
        h.check(len(results) == 3, "server saw %r" % (results,))
        for (digest, alpn, suite), proto in zip(results, want):
            h.check(digest == hashlib.sha256(UP).hexdigest(), "upload: %r" % ((digest, alpn),))
            h.check(alpn == proto and suite == "TLS_AES_128_GCM_SHA256",
                    "upstream leg: ALPN %r, suite %r" % (alpn, suite))
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
        h.check(rc == 0, "exit %s after SIGTERM" % rc)
        log = open(proc.logpath).read()
        h.check(log == "", "the relay logged: %s" % log)
        print("tls_relay_floor: 3 connections, %d + %d bytes each way intact, ALPN (http/1.1, "
              "h2) and AES-128-GCM passed through, SIGTERM -> 0" % (len(UP), len(DOWN)))
        ok = True
    finally:
        if not ok:
            print("server side: %r" % (results,))
        h.close_env(env, not ok)


if __name__ == "__main__":
    main()

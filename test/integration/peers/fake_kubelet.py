#!/usr/bin/python3
"""A kubelet stand-in over TLS for the integration tests: deterministic answers on the kubelet
API paths the tunnel carries, HTTP/1.1 keep-alive, many connections (asyncio).

    fake_kubelet.py --listen 127.0.0.1:0 [--cert C --key K [--client-ca CA]] --ready-file F

Without --cert it speaks plain HTTP, to sit behind a TLS front (socat's OPENSSL-LISTEN).

Paths:
  upgrade to /exec|/attach|/portForward/...   101 echoing Upgrade (and the first
        X-Stream-Protocol-Version), then an echo of every byte. ?command=greet first writes
        "hello from <ns>/<pod>/<ctr>\\n"; command=greet-exit writes it and closes;
        command=sink&n=N reads N bytes, writes nothing until then, then their sha256 (hex,
        newline) and closes; command=blast&n=N writes N bytes of body_bytes(N, 0) and closes;
        command=stall reads nothing (for a minute), a backend that stopped.
        With Upgrade: websocket and refuse-websocket=1: 400 + JSON, like a kubelet that only
        speaks SPDY (the kubectl >= 1.30 fallback case).
  /containerLogs/ns/pod/ctr?tailLines=N[&follow=true]   chunked "line <i>\\n", i = 1..N
        (default 10); with follow, one more line every 100 ms until the client leaves
        (&burst=N: N lines of 100 bytes every 100 ms, a log that floods; &interval=S: one
        line every S seconds instead, a quiet log).
  /metrics, /metrics/cadvisor, /metrics/resource   Prometheus text, Content-Length
  /healthz /pods /stats/summary /configz            small bodies
  /whoami               {"cn": CN of the client certificate this kubelet verified}
  /conn[?close]         the client's source port: which connection carried the request
                        (with close: "Connection: close", then it closes; with v10 instead:
                        an HTTP/1.0 answer without keep-alive, then it closes; &linger=S:
                        it closes S seconds later, reading nothing meanwhile)
  /bytes?n=N&seed=S     N deterministic bytes (see body_bytes), header X-Body-Sha256
  /stream[?n=N]         chunked 64 KiB chunks, endless unless n is given
  /status/CODE          that status, a short body
  PUT /upload[?hints=N] a request body (Content-Length) read in blocks: with "Expect:
        100-continue", first "HTTP/1.1 100 Continue" and N "103 Early Hints" heads (RFC 9110
        §15.2 interim answers, before any body byte is read), then 201 Created with
        "<sha256 hex> <length>\n" of what came
  anything else         404 JSON
With --h2 it also speaks HTTP/2 (ALPN h2, then http/1.1, as the kubelet's Go server offers
them; python3-h2), on the same paths but the upgrades: SETTINGS_MAX_CONCURRENT_STREAMS
--h2-max-streams (250, Go's default), flow control obeyed per stream. Extra paths:
  /proto                "h2" or "http/1.1": what carried the request
  /conn?hold=S          the client port at once, the end of the answer S seconds later
  /goaway               answers, then GOAWAY (last stream: this one) and closes the connection
                        a second later, a kubelet going away
  /stream?tag=T         as /stream, counting the body bytes the edge's window let it send
  /sent?tag=T           that count (how much of a stalled stream the edge was let to take)
  /bursts?n=N&pause=S&count=C  C bursts of N bytes (chunked), each followed by S seconds of
                        silence, then the end: a `logs -f` that had bursts and went quiet
The ready file gets the bound port. SIGTERM stops it.
"""
import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import ssl
import sys
import urllib.parse

BLOCK = 65536


def body_base(seed):
    """The repeating unit of /bytes: 65537 pseudo-random bytes from random.Random(seed). An odd
    length so the pattern never lines up with 64 KiB reads."""
    return random.Random(seed).randbytes(BLOCK + 1)


def body_chunks(n, seed):
    base = body_base(seed)
    sent = 0
    while sent < n:
        k = min(len(base), n - sent)
        yield base[:k] if k < len(base) else base
        sent += k


def body_sha256(n, seed):
    h = hashlib.sha256()
    for c in body_chunks(n, seed):
        h.update(c)
    return h.hexdigest()


METRICS = "".join("fake_metric{i=\"%d\"} %d\n" % (i, i * 7) for i in range(300)).encode()


def log(*a):
    print("fake_kubelet:", *a, file=sys.stderr, flush=True)


async def read_head(reader):
    data = await reader.readuntil(b"\r\n\r\n")
    lines = data.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers.setdefault(k.strip().lower(), v.strip())
    return method, target, headers


def response(status, body=b"", ctype="text/plain; charset=utf-8", extra=()):
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Status")
    head = ["HTTP/1.1 %d %s" % (status, reason), "Content-Type: %s" % ctype,
            "Content-Length: %d" % len(body)] + list(extra)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def chunk(writer, data):
    writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
    await writer.drain()


async def serve_upgrade(reader, writer, path, q, headers):
    up = headers.get("upgrade", "")
    if up.lower() == "websocket" and q.get("refuse-websocket") == ["1"]:
        body = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                b'"message":"websocket not supported here","code":400}')
        writer.write(response(400, body, "application/json"))
        await writer.drain()
        return True
    extra = ["Connection: Upgrade", "Upgrade: %s" % up]
    if "x-stream-protocol-version" in headers:
        extra.append("X-Stream-Protocol-Version: %s" %
                     headers["x-stream-protocol-version"].split(",")[0].strip())
    writer.write(("HTTP/1.1 101 Switching Protocols\r\n" + "\r\n".join(extra) +
                  "\r\n\r\n").encode())
    parts = path.strip("/").split("/")
    cmd = q.get("command", [""])[0]
    if cmd == "sink":  # an upload with nothing coming back until its end
        n = int(q.get("n", ["0"])[0])
        await writer.drain()
        digest = hashlib.sha256()
        while n > 0:
            data = await reader.read(min(BLOCK, n))
            if not data:
                return False
            digest.update(data)
            n -= len(data)
        writer.write(("%s\n" % digest.hexdigest()).encode())
        await writer.drain()
        return False
    if cmd == "stall":  # a backend that stopped reading
        await writer.drain()
        await asyncio.sleep(60)
        return False
    if cmd == "blast":  # output that ends by itself, as much as asked
        n = int(q.get("n", ["0"])[0])
        for block in body_chunks(n, 0):
            writer.write(block)
            await writer.drain()
        return False
    if cmd in ("greet", "greet-exit"):
        writer.write(("hello from %s\n" % "/".join(parts[1:4])).encode())
    await writer.drain()
    if cmd == "greet-exit":
        return False
    while True:
        data = await reader.read(BLOCK)
        if not data:
            return False
        writer.write(data)
        await writer.drain()


INTERIM_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def interim_hint(i):
    return b"HTTP/1.1 103 Early Hints\r\nLink: </hint/%d.css>; rel=preload\r\n\r\n" % i


async def serve_upload(reader, writer, q, headers):
    """PUT /upload: interim answers first when the client waits for them, then the body."""
    n = int(headers["content-length"])
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(INTERIM_CONTINUE)
        for i in range(int(q.get("hints", ["0"])[0])):
            writer.write(interim_hint(i))
        await writer.drain()
    sha = hashlib.sha256()
    left = n
    while left:
        data = await reader.read(min(BLOCK, left))
        if not data:
            return False
        sha.update(data)
        left -= len(data)
    body = b"%s %d\n" % (sha.hexdigest().encode(), n)
    writer.write(b"HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    return headers.get("connection", "").lower() != "close"


async def serve(reader, writer, method, target, headers):
    """Serves one request. Returns whether the connection may carry another."""
    u = urllib.parse.urlsplit(target)
    path, q = u.path, urllib.parse.parse_qs(u.query, keep_blank_values=True)
    if path == "/upload" and "content-length" in headers:
        return await serve_upload(reader, writer, q, headers)
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    first = path.strip("/").split("/")[0]
    if first in ("exec", "attach", "portForward", "run"):
        if "upgrade" in headers.get("connection", "").lower():
            return await serve_upgrade(reader, writer, path, q, headers)
        writer.write(response(400, b"upgrade request required\n"))
    elif first == "containerLogs":
        n = int(q.get("tailLines", ["10"])[0])
        follow = q.get("follow", ["false"])[0] not in ("false", "0")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(1, n + 1):
            await chunk(writer, b"line %d\n" % i)
        i = n
        burst = int(q.get("burst", ["0"])[0])
        interval = float(q.get("interval", ["0.1"])[0])
        while follow:
            await asyncio.sleep(interval)
            if burst:
                await chunk(writer, b"".join(b"line %-94d\n" % (i + k) for k in range(burst)))
                i += burst
                continue
            i += 1
            await chunk(writer, b"line %d\n" % i)
        writer.write(b"0\r\n\r\n")
    elif path in ("/metrics", "/metrics/cadvisor", "/metrics/resource"):
        writer.write(response(200, METRICS, "text/plain; version=0.0.4; charset=utf-8"))
    elif path == "/healthz":
        writer.write(response(200, b"ok"))
    elif path == "/whoami":  # the client certificate this kubelet verified: whose TLS it is
        cert = writer.get_extra_info("peercert") or {}
        cn = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"]
        writer.write(response(200, json.dumps({"cn": cn[0] if cn else None}).encode(),
                              "application/json"))
    elif path == "/headers":  # the request's headers, as this kubelet received them
        writer.write(response(200, json.dumps(headers).encode(), "application/json"))
    elif path == "/proto":
        writer.write(response(200, b"http/1.1"))
    elif path == "/conn":
        port = b"%d" % writer.get_extra_info("peername")[1]
        linger = float(q.get("linger", ["0"])[0])
        if "close" in q or "v10" in q:  # answer, say so (or HTTP/1.0), and close
            r = response(200, port, extra=[] if "v10" in q else ["Connection: close"])
            writer.write(r.replace(b"HTTP/1.1", b"HTTP/1.0", 1) if "v10" in q else r)
            await writer.drain()
            await asyncio.sleep(linger)  # reading nothing more meanwhile
            return False
        writer.write(response(200, port))
    elif path in ("/pods", "/stats/summary", "/configz"):
        writer.write(response(200, b'{"kind":"%s"}' % path[1:].encode(), "application/json"))
    elif path == "/bytes":
        n = int(q.get("n", ["0"])[0])
        seed = int(q.get("seed", ["0"])[0])
        writer.write(response(200, b"", "application/octet-stream",
                              ["X-Body-Sha256: %s" % body_sha256(n, seed)])
                     .replace(b"Content-Length: 0", b"Content-Length: %d" % n))
        for c in body_chunks(n, seed):
            writer.write(c)
            await writer.drain()
    elif path == "/stream":
        n = int(q.get("n", [str(1 << 62)])[0])
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        base = body_base(1)[:BLOCK]
        sent = 0
        while sent < n:
            k = min(BLOCK, n - sent)
            await chunk(writer, base[:k])
            sent += k
        writer.write(b"0\r\n\r\n")
    elif first == "status" and len(path.split("/")) == 3:
        code = int(path.split("/")[2])
        writer.write(response(code, b"status %d from the kubelet\n" % code))
    else:
        writer.write(response(404, b'{"kind":"Status","code":404}', "application/json"))
    await writer.drain()
    return headers.get("connection", "").lower() != "close"


H2_SENT = {}  # /stream?tag=T: body bytes sent so far, by tag


class H2Server:
    """One HTTP/2 connection: the h2 state machine fed from the socket, a task per stream."""

    def __init__(self, reader, writer, max_streams):
        import h2.config
        import h2.connection
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(config=h2.config.H2Configuration(
            client_side=False, header_encoding="utf-8"))
        self.max_streams = max_streams
        self.window = {}  # stream id -> asyncio.Event set when its window may have grown
        self.tasks = {}
        self.closed = False

    def flush(self):
        data = self.conn.data_to_send()
        if data and not self.closed:
            self.writer.write(data)

    async def send(self, sid, data, end=False, tag=None):
        import h2.exceptions
        while data:
            try:
                room = min(self.conn.local_flow_control_window(sid),
                           self.conn.max_outbound_frame_size)
            except (h2.exceptions.StreamClosedError, KeyError):
                raise asyncio.CancelledError()
            if room <= 0:
                ev = self.window.setdefault(sid, asyncio.Event())
                ev.clear()
                await ev.wait()
                continue
            self.conn.send_data(sid, data[:room])
            if tag is not None:  # counted as the window lets it go
                H2_SENT[tag] = H2_SENT.get(tag, 0) + min(room, len(data))
            data = data[room:]
            self.flush()
            await self.writer.drain()
        if end:
            self.conn.end_stream(sid)
            self.flush()
            await self.writer.drain()

    def head(self, sid, status, ctype="text/plain; charset=utf-8", length=None, extra=()):
        hdrs = [(":status", str(status)), ("content-type", ctype)]
        if length is not None:
            hdrs.append(("content-length", str(length)))
        self.conn.send_headers(sid, hdrs + list(extra))
        self.flush()

    async def whole(self, sid, status, body, ctype="text/plain; charset=utf-8"):
        self.head(sid, status, ctype, len(body))
        await self.send(sid, body, end=True)

    async def serve(self, sid, headers):
        h = dict(headers)
        u = urllib.parse.urlsplit(h.get(":path", "/"))
        path, q = u.path, urllib.parse.parse_qs(u.query, keep_blank_values=True)
        log("h2", sid, h.get(":method"), h.get(":path"))
        first = path.strip("/").split("/")[0]
        if first == "containerLogs":
            n = int(q.get("tailLines", ["10"])[0])
            follow = q.get("follow", ["false"])[0] not in ("false", "0")
            self.head(sid, 200, "text/plain")
            for i in range(1, n + 1):
                await self.send(sid, b"line %d\n" % i)
            i = n
            burst = int(q.get("burst", ["0"])[0])
            interval = float(q.get("interval", ["0.1"])[0])
            while follow:
                await asyncio.sleep(interval)
                if burst:
                    await self.send(sid, b"".join(b"line %-94d\n" % (i + k)
                                                  for k in range(burst)))
                    i += burst
                    continue
                i += 1
                await self.send(sid, b"line %d\n" % i)
            await self.send(sid, b"", end=True)
        elif path in ("/metrics", "/metrics/cadvisor", "/metrics/resource"):
            await self.whole(sid, 200, METRICS, "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/healthz":
            await self.whole(sid, 200, b"ok")
        elif path == "/proto":
            await self.whole(sid, 200, b"h2")
        elif path == "/conn":
            port = b"%d\n" % self.writer.get_extra_info("peername")[1]
            if "hold" not in q:
                await self.whole(sid, 200, port)
                return
            self.head(sid, 200)  # the port now, the end only after hold seconds
            await self.send(sid, port)
            await asyncio.sleep(float(q["hold"][0]))
            await self.send(sid, b"", end=True)
        elif path == "/headers":
            await self.whole(sid, 200, json.dumps(
                {k: v for k, v in headers if not k.startswith(":")}).encode(),
                "application/json")
        elif path in ("/pods", "/stats/summary", "/configz"):
            await self.whole(sid, 200, b'{"kind":"%s"}' % path[1:].encode(), "application/json")
        elif path == "/bytes":
            n = int(q.get("n", ["0"])[0])
            seed = int(q.get("seed", ["0"])[0])
            self.head(sid, 200, "application/octet-stream", n,
                      [("x-body-sha256", body_sha256(n, seed))])
            for c in body_chunks(n, seed):
                await self.send(sid, c)
            await self.send(sid, b"", end=True)
        elif path == "/stream":
            n = int(q.get("n", [str(1 << 62)])[0])
            tag = q.get("tag", [None])[0]
            self.head(sid, 200, "application/octet-stream")
            base = body_base(1)[:BLOCK]
            sent = 0
            while sent < n:
                k = min(BLOCK, n - sent)
                await self.send(sid, base[:k], tag=tag)
                sent += k
            await self.send(sid, b"", end=True)
        elif path == "/bursts":
            n = int(q.get("n", ["0"])[0])
            pause = float(q.get("pause", ["5"])[0])
            self.head(sid, 200, "application/octet-stream")
            base = body_base(1)[:BLOCK]
            for _ in range(int(q.get("count", ["2"])[0])):
                sent = 0
                while sent < n:
                    k = min(BLOCK, n - sent)
                    await self.send(sid, base[:k])
                    sent += k
                await asyncio.sleep(pause)
            await self.send(sid, b"", end=True)
        elif path == "/sent":
            await self.whole(sid, 200, b"%d" % H2_SENT.get(q.get("tag", [""])[0], 0))
        elif path == "/goaway":
            await self.whole(sid, 200, b"going away\n")
            self.conn.close_connection(last_stream_id=sid)
            self.flush()
            await asyncio.sleep(1)
            self.writer.close()
        elif first == "status" and len(path.split("/")) == 3:
            code = int(path.split("/")[2])
            await self.whole(sid, code, b"status %d from the kubelet\n" % code)
        else:
            await self.whole(sid, 404, b'{"kind":"Status","code":404}', "application/json")

    async def run_stream(self, sid, headers):
        try:
            await self.serve(sid, headers)
        except (asyncio.CancelledError, ConnectionError):
            pass
        except Exception as e:  # noqa: BLE001 - a stream reset under us
            log("h2 stream", sid, "ended:", repr(e))
        finally:
            self.tasks.pop(sid, None)
            self.window.pop(sid, None)

    async def run(self):
        import h2.events
        import h2.settings
        # The limit in the first SETTINGS, as Go's server sends it (not in a second one).
        self.conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        self.conn.initiate_connection()
        self.flush()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for ev in self.conn.receive_data(data):
                    if isinstance(ev, h2.events.RequestReceived):
                        self.tasks[ev.stream_id] = asyncio.create_task(
                            self.run_stream(ev.stream_id, ev.headers))
                    elif isinstance(ev, h2.events.DataReceived):
                        self.conn.acknowledge_received_data(ev.flow_controlled_length,
                                                            ev.stream_id)
                    elif isinstance(ev, h2.events.WindowUpdated):
                        for sid, e in list(self.window.items()):
                            if ev.stream_id in (0, sid):
                                e.set()
                    elif isinstance(ev, h2.events.RemoteSettingsChanged):
                        for e in self.window.values():
                            e.set()
                    elif isinstance(ev, h2.events.StreamReset):
                        t = self.tasks.pop(ev.stream_id, None)
                        if t:
                            t.cancel()
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        return
                self.flush()
                await self.writer.drain()
        finally:
            self.closed = True
            for t in list(self.tasks.values()):
                t.cancel()


H2_MAX_STREAMS = 250


async def handle(reader, writer):
    sslobj = writer.get_extra_info("ssl_object")
    if sslobj is not None and sslobj.selected_alpn_protocol() == "h2":
        try:
            await H2Server(reader, writer, H2_MAX_STREAMS).run()
        except (ConnectionError, ssl.SSLError) as e:
            log("h2 connection ended:", repr(e))
        except Exception as e:  # noqa: BLE001 - the h2 library's protocol errors
            log("h2 connection failed:", repr(e))
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass
        return
    try:
        while True:
            try:
                method, target, headers = await read_head(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            log(method, target)
            if not await serve(reader, writer, method, target, headers):
                break
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as e:
        log("connection ended:", repr(e))
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - the peer may be gone already
            pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--client-ca")
    ap.add_argument("--ready-file")
    ap.add_argument("--h2", action="store_true", help="offer ALPN h2 (then http/1.1)")
    ap.add_argument("--h2-max-streams", type=int, default=250)
    a = ap.parse_args()
    global H2_MAX_STREAMS
    H2_MAX_STREAMS = a.h2_max_streams
    ctx = None  # plain HTTP
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        if a.client_ca:
            ctx.load_verify_locations(a.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        if a.h2:
            ctx.set_alpn_protocols(["h2", "http/1.1"])
    host, port = a.listen.rsplit(":", 1)
    # The backlog a Go listener gets (net.Listen: the kernel's somaxconn), not asyncio's 100:
    # thousands of connections at once (stream_burst.py --front-door) are queued, not dropped.
    with open("/proc/sys/net/core/somaxconn") as f:
        backlog = int(f.read())
    server = await asyncio.start_server(handle, host, int(port), ssl=ctx, backlog=backlog)
    bound = server.sockets[0].getsockname()[1]
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % bound)
        os.rename(tmp, a.ready_file)
    log("listening on %s:%d" % (host, bound))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())

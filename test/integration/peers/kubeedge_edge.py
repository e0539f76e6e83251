#!/usr/bin/python3
"""A test edge node speaking the tunnel protocol to a cloud, in front of a TLS kubelet.

    kubeedge_edge.py --cloud wss://HOST:PORT/v1/kubeedge/connect --cert C --key K
        [--ca CA --server-name NAME | --insecure-skip-verify] --node-name N [--internal-ip IP]
        --backend https://HOST:PORT --backend-cert C --backend-key K --backend-ca CA
        [--protocol base|ext] [--chunk BYTES] [--window BYTES] [--ready-file F]

--protocol base behaves exactly like KubeEdge's edge (spec/kubeedge-tunnel.md): TEXT frames with
binary payloads, the JSON connect request, EXEC/ATTACH relayed raw (the backend's status line
first), LOGS/METRIC relayed as the response body only (logs in --chunk pieces, 256 bytes by
default like upstream; metrics one line per message with '\\n' appended), REMOVE at the end,
pings "ping you" every 5 s, unknown IDs and types ignored. Endings as upstream (pkg/stream
edged*connection.go Serve at v1.15.0): the stream's end, whichever side caused it, sends one
REMOVE, so the cloud's REMOVE for a live stream is answered with ours; a REMOVE for an ID no
longer known is ignored. Every REMOVE from the cloud is logged ("REMOVE from the cloud for N
live|ended|unknown") for the tests to count. --send-remove ID sends REMOVE for ID three times
once connected (an ID the cloud never opened).
--protocol ext offers our extensions (stream/PROTOCOL.md §5): BINARY frames, HELLO, per-stream
credit (WINDOW), raw responses for LOGS/METRIC, ERROR when the backend is unreachable, 64 KiB DATA.
The ready file is written once the websocket is up. SIGTERM closes it cleanly.
"""
import argparse
import asyncio
import os
import signal
import ssl
import sys
import time
import urllib.parse

import websockets
from websockets.legacy.client import WebSocketClientProtocol
from websockets.frames import OP_BINARY, OP_TEXT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunnelproto as tp  # noqa: E402


def log(*a):
    print(time.strftime("%H:%M:%S") + ".%03d edge:" % (time.time() % 1 * 1000), *a,
          file=sys.stderr, flush=True)


class RawProtocol(WebSocketClientProtocol):
    """Messages as bytes whatever the opcode: TEXT frames carry binary (never UTF-8 checked)."""

    async def read_message(self):
        frame = await self.read_data_frame(max_size=self.max_size)
        if frame is None:
            return None
        parts = [frame.data]
        while not frame.fin:
            frame = await self.read_data_frame(max_size=self.max_size)
            if frame is None:
                return None
            parts.append(frame.data)
        return b"".join(parts)


class Stream:
    def __init__(self, cid, credit):
        self.cid = cid
        self.credit = credit      # ext: bytes we may still send
        self.more = asyncio.Event()
        self.writer = None        # backend connection
        self.alive = True
        self.received = 0         # ext: DATA bytes from the cloud not yet credited back
        self.pending = []         # DATA from the cloud before the backend is connected


class Edge:
    def __init__(self, a):
        self.a = a
        self.ext = False
        self.streams = {}
        self.ended = set()  # IDs whose REMOVE we sent
        self.send_lock = asyncio.Lock()
        self.cloud_window = 1 << 20

    async def send(self, cid, typ, payload=b""):
        msg = tp.encode(cid, typ, payload)
        async with self.send_lock:
            await self.ws.write_frame(True, OP_BINARY if self.ext else OP_TEXT, msg)

    async def backend(self):
        u = urllib.parse.urlsplit(self.a.backend)
        ctx = ssl.create_default_context(cafile=self.a.backend_ca)
        ctx.check_hostname = False
        ctx.load_cert_chain(self.a.backend_cert, self.a.backend_key)
        return await asyncio.open_connection(u.hostname, u.port, ssl=ctx,
                                             server_hostname=u.hostname)

    async def send_data(self, st, data):
        """DATA in --chunk pieces; with flow control, only within credit: as much as the credit
        allows (a receiver grants more only once half its window is drained)."""
        while data:
            n = min(len(data), self.a.chunk)
            while self.ext and st.credit == 0 and st.alive:
                st.more.clear()
                await st.more.wait()
            if not st.alive:
                return
            if self.ext:
                n = min(n, st.credit)
                st.credit -= n
            piece, data = data[:n], data[n:]
            await self.send(st.cid, tp.DATA, piece)

    async def finish(self, st):
        if st.alive:
            st.alive = False
            self.streams.pop(st.cid, None)
            self.ended.add(st.cid)
            await self.send(st.cid, tp.REMOVE)
        if st.writer:
            st.writer.close()

    async def run_stream(self, st, typ, payload):
        try:
            method, path, query, headers = tp.connect_request(payload)
        except (ValueError, KeyError) as e:
            log("bad connect request:", e)
            await self.finish(st)
            return
        try:
            reader, st.writer = await self.backend()
        except OSError as e:
            log("backend unreachable:", e)
            if self.ext:
                st.alive = False
                self.streams.pop(st.cid, None)
                await self.send(st.cid, tp.ERROR, tp.uvarint(3) + str(e).encode())
            else:
                await self.finish(st)
            return
        st.writer.write(tp.request_head(method, path, query, headers,
                                        urllib.parse.urlsplit(self.a.backend).netloc))
        for d in st.pending:
            st.writer.write(d)
        st.pending = []
        try:
            if self.ext or typ in (tp.EXEC, tp.ATTACH):
                while st.alive:
                    data = await reader.read(65536)
                    if not data:
                        break
                    await self.send_data(st, data)
            else:
                await self.relay_body(st, reader, typ)
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as e:
            log("stream", st.cid, "backend error:", e)
        await self.finish(st)

    async def relay_body(self, st, reader, typ):
        """Base protocol LOGS/METRIC: the body only, as upstream's HTTP client hands it over."""
        head = await reader.readuntil(b"\r\n\r\n")
        hdrs = {}
        for line in head.decode("latin-1").split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
        line_buf = b""

        async def out(data):
            nonlocal line_buf
            if typ == tp.LOGS:
                await self.send_data(st, data)
                return
            line_buf += data
            while b"\n" in line_buf:
                line, line_buf = line_buf.split(b"\n", 1)
                await self.send(st.cid, tp.DATA, line + b"\n")

        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                await out(await reader.readexactly(size))
                await reader.readexactly(2)
        elif "content-length" in hdrs:
            left = int(hdrs["content-length"])
            while left > 0:
                data = await reader.read(min(left, 65536))
                if not data:
                    break
                left -= len(data)
                await out(data)
        else:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await out(data)
        if line_buf:
            await self.send(st.cid, tp.DATA, line_buf + b"\n")

    async def on_message(self, msg):
        try:
            cid, typ, payload = tp.decode(msg)
        except ValueError as e:
            log("malformed message:", e)
            return
        st = self.streams.get(cid)
        if typ in tp.CONNECT_TYPES:
            if st is not None:
                return
            st = Stream(cid, self.cloud_window)
            self.streams[cid] = st
            asyncio.ensure_future(self.run_stream(st, typ, payload))
        elif typ == tp.DATA and st is not None:
            if st.writer:
                st.writer.write(payload)
            else:
                st.pending.append(payload)
            if self.ext:
                st.received += len(payload)
                if st.received >= self.a.window // 2:
                    await self.send(cid, tp.WINDOW, tp.uvarint(st.received))
                    st.received = 0
        elif typ in (tp.REMOVE, tp.ERROR):
            if typ == tp.REMOVE:
                log("REMOVE from the cloud for %d %s" % (
                    cid, "live" if st is not None else "ended" if cid in self.ended
                    else "unknown"))
            if st is None:
                return
            if not self.ext:
                await self.finish(st)  # upstream: Serve() returns, its deferred REMOVE goes
                return
            st.alive = False
            st.more.set()
            self.streams.pop(cid, None)
            if st.writer:
                st.writer.close()
        elif typ == tp.WINDOW and self.ext and st is not None:
            inc, _ = tp.read_uvarint(payload, 0)
            st.credit += inc
            st.more.set()
        elif typ == tp.CLOSE:
            log("cloud closed the tunnel:", payload.decode(errors="replace"))
            await self.ws.close()
        # anything else (unknown IDs, unknown types, HELLO, HALF_CLOSE) is ignored

    async def pinger(self):
        while True:
            await asyncio.sleep(self.a.ping_interval)
            await self.ws.ping(b"ping you")

    async def run(self):
        a = self.a
        ctx = ssl.create_default_context(cafile=a.ca)
        if a.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(a.cert, a.key)
        headers = {"SessionHostNameOverride": a.node_name}
        if a.internal_ip:
            headers["SessionInternalIP"] = a.internal_ip
        if a.protocol == "ext":
            headers[tp.EXT_HEADER] = ("v=1; caps=flow,half-close,error,binary,raw-response; "
                                      "window=%d; replica=%s" % (a.window, a.node_name))
        self.ws = await websockets.connect(
            a.cloud, ssl=ctx, server_hostname=a.server_name, extra_headers=headers,
            origin=None, ping_interval=None, max_size=2 << 20, compression=None, close_timeout=1,
            create_protocol=RawProtocol)
        echo = self.ws.response_headers.get(tp.EXT_HEADER)
        if a.protocol == "ext":
            if echo is None:
                log("the cloud did not echo the extensions: base protocol")
            else:
                offer = tp.parse_offer(echo)
                self.ext = True
                self.cloud_window = int(offer.get("window", 1 << 20))
                hello = (tp.uvarint(1) + tp.uvarint(0x2f) + tp.uvarint(a.window) +
                         tp.uvarint(len(a.node_name)) + a.node_name.encode())
                await self.send(0, tp.HELLO, hello)
        log("connected to %s (%s protocol)" % (a.cloud, "extended" if self.ext else "base"))
        for _ in range(3 if a.send_remove else 0):
            await self.send(a.send_remove, tp.REMOVE)
        if a.ready_file:
            tmp = a.ready_file + ".tmp"
            with open(tmp, "w") as f:
                f.write("connected\n")
            os.rename(tmp, a.ready_file)
        ping = asyncio.ensure_future(self.pinger())
        try:
            async for msg in self.ws:
                await self.on_message(msg)
        finally:
            ping.cancel()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cloud", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--server-name", default="localhost")
    ap.add_argument("--insecure-skip-verify", action="store_true")
    ap.add_argument("--node-name", required=True)
    ap.add_argument("--internal-ip")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--backend-cert", required=True)
    ap.add_argument("--backend-key", required=True)
    ap.add_argument("--backend-ca", required=True)
    ap.add_argument("--protocol", choices=("base", "ext"), default="base")
    ap.add_argument("--chunk", type=int)
    ap.add_argument("--window", type=int, default=1 << 20)
    ap.add_argument("--ping-interval", type=float, default=5.0)
    ap.add_argument("--ready-file")
    ap.add_argument("--send-remove", type=int)
    ap.add_argument("--redial", type=float, default=0.0,
                    help="after the tunnel closes or a dial fails, dial again after this many "
                         "seconds, as KubeEdge's edge does (2 s there); 0: exit instead")
    a = ap.parse_args()
    if a.chunk is None:
        a.chunk = 65536 if a.protocol == "ext" else 256

    async def dial_loop():
        while True:
            try:
                await Edge(a).run()  # a new tunnel: no stream survives the old one
                log("tunnel closed by the cloud")
            except websockets.exceptions.ConnectionClosed as e:
                log("tunnel closed:", e)
            except (OSError, websockets.exceptions.WebSocketException) as e:
                if not a.redial:
                    raise  # as before --redial: a failed dial ends the process with it
                log("dial failed:", e)
            if not a.redial:
                return
            await asyncio.sleep(a.redial)

    task = asyncio.ensure_future(dial_loop())
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    asyncio.run(main())

"""A test cloud speaking exactly KubeEdge's base tunnel protocol (spec/kubeedge-tunnel.md), to
drive an edge the way an unmodified KubeEdge cloudcore would: wss + mTLS on
/v1/kubeedge/connect, no extension echo, TEXT frames, JSON connect requests in Go's layout with
Scheme "http" and Host "127.0.0.1:10350", DATA relayed raw, REMOVE at the end.

Used in-process by the tests (an asyncio loop on a thread):

    cloud = KubeEdgeCloud(cert, key, client_ca).start()
    cloud.wait_session("edge-1")
    s = cloud.open(EXEC, "/exec/ns/pod/ctr", "command=greet", {"Connection": ["Upgrade"], ...},
                   method="POST")
    s.send(b"bytes after the request head"); data = s.read_until(pred); s.remove()

It records what a KubeEdge cloud would see: the upgrade headers, every frame's opcode, every
message type (an extension type from a base edge is a bug: the v1.15 cloud would drop the
tunnel).
"""
import asyncio
import json
import os
import queue
import ssl
import sys
import threading
import time

import websockets
from websockets.frames import OP_BINARY, OP_TEXT
from websockets.legacy.server import WebSocketServerProtocol

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tunnelproto as tp  # noqa: E402


class RawServerProtocol(WebSocketServerProtocol):
    """Messages as (opcode, bytes): TEXT frames carry binary and are never UTF-8 checked."""

    async def read_message(self):
        frame = await self.read_data_frame(max_size=self.max_size)
        if frame is None:
            return None
        op = frame.opcode
        parts = [frame.data]
        while not frame.fin:
            frame = await self.read_data_frame(max_size=self.max_size)
            if frame is None:
                return None
            parts.append(frame.data)
        return (op, b"".join(parts))


class Stream:
    def __init__(self, cloud, cid):
        self.cloud = cloud
        self.cid = cid
        self.data = queue.Queue()
        self.removed = threading.Event()
        self.buf = b""

    def send(self, payload):
        self.cloud.send(self.cid, tp.DATA, payload)

    def remove(self):
        self.cloud.send(self.cid, tp.REMOVE)

    def read_until(self, pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not pred(self.buf):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("stream %d: %r so far" % (self.cid, self.buf[:200]))
            try:
                self.buf += self.data.get(timeout=min(left, 0.1))
            except queue.Empty:
                if self.removed.is_set() and self.data.empty():
                    raise EOFError("stream %d removed: %r so far" % (self.cid, self.buf[:200]))
        return self.buf

    def read_all(self, timeout=10.0):
        """Everything until the edge's REMOVE."""
        if not self.removed.wait(timeout):
            raise TimeoutError("stream %d: no REMOVE" % self.cid)
        while not self.data.empty():
            self.buf += self.data.get()
        return self.buf


class KubeEdgeCloud:
    def __init__(self, cert, key, client_ca):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.load_verify_locations(client_ca)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.sessions = {}          # node -> websocket
        self.upgrade_headers = {}   # node -> request headers
        self.opcodes = set()
        self.types = []
        self.streams = {}
        self.next_id = 1
        self.session_up = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self.port = None
        self.ws = None

    def start(self):
        ready = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)

            async def serve():
                self.server = await websockets.serve(
                    self.handler, "127.0.0.1", 0, ssl=self.ctx, max_size=2 << 20,
                    compression=None, create_protocol=RawServerProtocol, ping_interval=None)
                self.port = self.server.sockets[0].getsockname()[1]
                ready.set()

            self.loop.run_until_complete(serve())
            self.loop.run_forever()
            self.loop.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)
        self.ports = {"tunnel": self.port}
        return self

    def stop(self):
        async def close():
            self.server.close()
            await self.server.wait_closed()
        asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def handler(self, ws, path):
        if path.rstrip("/") != "/v1/kubeedge/connect":
            await ws.close()
            return
        node = ws.request_headers.get("SessionHostNameOverride", "")
        with self.session_up:
            self.sessions[node] = ws
            # names lower-cased: HTTP header names are case-insensitive (Go canonicalises them)
            self.upgrade_headers[node] = {k.lower(): v for k, v in ws.request_headers.raw_items()}
            self.ws = ws
            self.session_up.notify_all()
        try:
            async for op, msg in ws:
                self.opcodes.add(op)
                cid, typ, payload = tp.decode(msg)
                self.types.append(typ)
                st = self.streams.get(cid)
                if st is None:
                    continue  # KubeEdge ignores unknown IDs
                if typ == tp.DATA:
                    st.data.put(payload)
                elif typ == tp.REMOVE:
                    st.removed.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            with self.session_up:
                if self.sessions.get(node) is ws:
                    del self.sessions[node]

    def wait_session(self, node, timeout=20.0):
        with self.session_up:
            if not self.session_up.wait_for(lambda: node in self.sessions, timeout):
                raise TimeoutError("no session from %s" % node)

    def send(self, cid, typ, payload=b""):
        msg = tp.encode(cid, typ, payload)

        async def go():
            await self.ws.write_frame(True, OP_TEXT, msg)  # KubeEdge sends TEXT frames
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    def open(self, typ, path, query="", headers=None, method=None):
        """Sends a connect as KubeEdge's cloud writes it (Go's encoding/json layout)."""
        cid = self.next_id
        self.next_id += 1
        st = Stream(self, cid)
        self.streams[cid] = st
        req = {"MessID": cid,
               "url": {"Scheme": "http", "Opaque": "", "User": None, "Host": "127.0.0.1:10350",
                       "Path": path, "RawPath": "", "OmitHost": False, "ForceQuery": False,
                       "RawQuery": query, "Fragment": "", "RawFragment": ""},
               "header": headers or {}}
        if method:
            req["method"] = method
        body = json.dumps(req, separators=(",", ":")).replace("&", "\\u0026").encode()
        self.send(cid, typ, body)
        return st

    def raw_binary_frame(self, msg):
        async def go():
            await self.ws.write_frame(True, OP_BINARY, msg)
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

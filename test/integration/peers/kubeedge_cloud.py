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
    s.apiserver_gone()    # the apiserver side ended: REMOVE the way upstream sends it

It records what a KubeEdge cloud would see: the upgrade headers, every frame's opcode, every
message type (an extension type from a base edge is a bug: the v1.15 cloud would drop the
tunnel), and per stream every REMOVE both ways.

Stream endings as upstream (cloud/pkg/cloudstream at v1.15.0, read with fetch): when the
apiserver side of an exec or attach ends, containerexec_connection.go / containerattach_
connection.go Serve() reads EOF from the hijacked connection, sends REMOVE, and loops: each turn
it checks whether the edge's REMOVE has come (EdgePeerDone), else reads EOF again and sends
REMOVE again, as fast as the tunnel takes them, until the edge answers. For logs and metrics
(containerlog_connection.go, containermetrics_connection.go) the request context ends and one
REMOVE goes. A REMOVE from the edge ends the stream on the cloud without an answer
(session.go ProxyTunnelMessageToApiserver -> SetEdgePeerDone; Serve returns).
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
    def __init__(self, cloud, cid, typ):
        self.cloud = cloud
        self.cid = cid
        self.typ = typ
        self.data = queue.Queue()
        self.removed = threading.Event()  # the edge's REMOVE came (upstream: EdgePeerDone)
        self.edge_removes = 0             # REMOVEs from the edge for this stream
        self.edge_removes_at = []         # when each came (time.monotonic())
        self.cloud_removes = 0            # REMOVEs we sent
        self.loop_started = None          # apiserver_gone(): when, and when the loop ended
        self.loop_stopped = threading.Event()
        self.loop_stopped_at = None
        self.abandoned = False
        self.buf = b""

    def send(self, payload):
        self.cloud.send(self.cid, tp.DATA, payload)

    def remove(self):
        self.cloud_removes += 1
        self.cloud.send(self.cid, tp.REMOVE)

    def apiserver_gone(self):
        """The apiserver side ended (kubectl killed, or done): REMOVE as upstream sends it, in
        a loop for exec/attach until the edge's REMOVE arrives (see the top of this file).
        Returns at once; loop_stopped is set when it ends."""
        self.loop_started = time.monotonic()
        asyncio.run_coroutine_threadsafe(self.cloud.remove_loop(self), self.cloud.loop)

    def wait_loop_end(self, timeout=10.0):
        if not self.loop_stopped.wait(timeout):
            self.abandoned = True  # stop the loop: the test has failed, the next may run
            raise TimeoutError("stream %d: the REMOVE loop still runs after %.0f s (%d sent)"
                               % (self.cid, timeout, self.cloud_removes))
        return self.loop_stopped_at - self.loop_started

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
        self.unknown = []           # (ConnectID, type) received for IDs never opened
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
                    self.unknown.append((cid, typ))
                    continue  # KubeEdge ignores unknown IDs
                if typ == tp.DATA:
                    st.data.put(payload)
                elif typ == tp.REMOVE:
                    st.edge_removes += 1
                    st.edge_removes_at.append(time.monotonic())
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

    async def remove_loop(self, st):
        msg = tp.encode(st.cid, tp.REMOVE)
        try:
            while True:
                # Serve(): Read() gave EOF -> sendCloseMessage(); then the select at the top
                # of the next turn sees EdgePeerDone or goes round again.
                await self.ws.write_frame(True, OP_TEXT, msg)
                st.cloud_removes += 1
                if st.typ not in (tp.EXEC, tp.ATTACH):
                    break  # logs/metrics: the request context ended, one REMOVE
                await asyncio.sleep(0)  # the reader goroutine runs meanwhile
                if st.removed.is_set() or st.abandoned:
                    break
        except websockets.ConnectionClosed:
            pass
        st.loop_stopped_at = time.monotonic()
        st.loop_stopped.set()

    def pause_reading(self):
        """Stop reading the tunnel (the edge's writes back up), writes still go."""
        self.loop.call_soon_threadsafe(self.ws.transport.pause_reading)

    def resume_reading(self):
        self.loop.call_soon_threadsafe(self.ws.transport.resume_reading)

    def open(self, typ, path, query="", headers=None, method=None):
        """Sends a connect as KubeEdge's cloud writes it (Go's encoding/json layout)."""
        cid = self.next_id
        self.next_id += 1
        st = Stream(self, cid, typ)
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

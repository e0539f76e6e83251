#!/usr/bin/python3
"""kube-apiserver's EgressSelector HTTPConnect dialer as a TCP shim, for nginx playing
kube-apiserver (peers/apiserver.py), which cannot dial through a CONNECT proxy itself.

    egress_shim.py --listen 127.0.0.1:0 --uds PATH --target HOST:PORT --ready-file F

Every connection accepted on --listen is one dial of the egress dialer: a new connection to the
front door's unix socket (--uds), then exactly what staging/src/k8s.io/apiserver/pkg/server/
egressselector/egress_selector.go (tunnelHTTPConnect) writes,

    CONNECT <target> HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n

one response read, a status other than 200 or any byte buffered after the response's head
failing the dial (the accepted connection is closed: nginx answers 502), and from then on the
bytes spliced both ways untouched (nginx's TLS to the kubelet side runs through). One line per
dial on stderr: "dial N: 200" or "dial N: failed: <why>". The ready file gets the bound port.
"""
import argparse
import asyncio
import os
import signal
import sys

dials = 0


def log(*a):
    print("egress_shim:", *a, file=sys.stderr, flush=True)


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - the peer may be gone already
            pass


async def handle(cr, cw, uds, target):
    global dials
    dials += 1
    n = dials
    try:
        pr, pw = await asyncio.open_unix_connection(uds)
    except OSError as e:
        log("dial %d: failed: %s" % (n, e))
        cw.close()
        return
    pw.write(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, "127.0.0.1")).encode())
    await pw.drain()
    try:
        head = await asyncio.wait_for(pr.readuntil(b"\r\n\r\n"), 30)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError) as e:
        log("dial %d: failed: reading the answer: %r" % (n, e))
        pw.close()
        cw.close()
        return
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    # Go's bufio.Reader: whatever already arrived after the head counts as buffered data.
    buffered = len(pr._buffer)  # noqa: SLF001 - what a bufio.Reader would hold
    if status.split(" ")[1:2] != ["200"] or buffered:
        log("dial %d: failed: %s%s" % (n, status,
                                       " (%d bytes buffered)" % buffered if buffered else ""))
        pw.close()
        cw.close()
        return
    log("dial %d: 200" % n)
    await asyncio.gather(pipe(cr, pw), pipe(pr, cw))


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--uds", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--ready-file")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: handle(r, w, a.uds, a.target), host,
                                        int(port))
    bound = server.sockets[0].getsockname()[1]
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % bound)
        os.rename(tmp, a.ready_file)
    log("listening on %s:%d, dialling %s through %s" % (host, bound, a.target, a.uds))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())

#!/usr/bin/python3
"""Forwarded uploads in a loop, to catch a stream that stops at one window (issue 13; README
"High availability", the open stall of a forwarded exec-like upload).

    ST_BIN_DIR=build/asan test/bench/forward_upload_stress.py [--rounds 200] [--workers 4]
        [--small-windows] [--max-kib 512]

The fleet of test/integration/replicas_test.py (3 replicas on loopback linked through TCP
relays, 3 edgestream and 2 KubeEdge-protocol edges). Each round, --workers threads each run
one exec-like upgrade through a replica that does not hold the node (so it is forwarded over a
peer link): a random payload of 1 KiB .. --max-kib written whole before the echo is read, as
`mesh` does with 200 KB. --small-windows starts every replica with 16 KiB first windows, 64 KiB
largest windows, 8 KiB DATA and 16 KiB stream queues, so every transfer crosses many windows.
An echo that stops for 10 s is a stall: the replicas' /streams listings and the byte counts are
printed, the run directory is kept, and the program exits 1. A program, not a test.
"""
import argparse
import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "integration", "lib"))
import harness as h  # noqa: E402
import replicas_test as rt  # noqa: E402

SMALL = ["--stream-first-window-bytes", "16384", "--stream-window-bytes", "65536",
         "--data-payload-bytes", "8192", "--stream-queue-bytes", "16384"]


def upload(api, node, size):
    """One exec-like upgrade echoing @size random bytes; returns None or what went wrong."""
    s = api.connect()
    try:
        s.sendall(h.head("POST", "/exec/default/pod-a/ctr?command=greet&input=1&output=1",
                         [("Host", "%s:10350" % node)] + rt.UPGRADE_SPDY))
        status, _, rest = h.read_head(s)
        if status != 101:
            return "status %d" % status
        greet = b"hello from default/pod-a/ctr\n"
        buf = h.recv_until(s, lambda b: len(b) >= len(greet), rest)
        payload = os.urandom(size)
        s.sendall(payload)
        got = bytearray(buf[len(greet):])
        while len(got) < size:
            try:
                chunk = s.recv(1 << 18)
            except OSError as e:
                return "echo stopped at %d of %d bytes (%s)" % (len(got), size, e)
            if not chunk:
                return "closed at %d of %d bytes" % (len(got), size)
            got += chunk
        return None if bytes(got) == payload else "echo differs"
    except (OSError, h.Fail) as e:
        return "failed: %s" % e
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-kib", type=int, default=512)
    ap.add_argument("--small-windows", action="store_true")
    args = ap.parse_args()
    if args.small_windows:
        start = rt.h.start_cloudstream

        def small(env, extra=(), **kw):
            return start(env, extra=list(extra) + SMALL, **kw)
        rt.h.start_cloudstream = small
    fleet = rt.make_fleet("fwd-stress", tuple(rt.LAYOUT))
    failed = True
    try:
        rt.start_layout(fleet)
        pairs = [(node, r) for node, (i, kind) in rt.LAYOUT.items() for r in range(3) if r != i]
        done, bad = 0, []
        t0 = time.monotonic()
        for rnd in range(args.rounds):
            jobs = []
            for _ in range(args.workers):
                node, r = random.choice(pairs)
                size = random.randint(1024, args.max_kib << 10)
                jobs.append((node, r, size, [None]))

            def run(job):
                node, r, size, out = job
                out[0] = upload(fleet.api(r), node, size)
            threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for node, r, size, out in jobs:
                done += 1
                if out[0] is not None:
                    bad.append("round %d: %s via %s, %d bytes: %s" % (rnd, node, rt.NAMES[r],
                                                                    size, out[0]))
            if bad:
                for line in bad:
                    print(line, flush=True)
                for i, p in enumerate(fleet.cs):
                    print("--- %s /streams\n%s" % (rt.NAMES[i], rt.admin_get(p, "/streams")[1]))
                print("run directory kept: %s" % fleet.env.dir)
                sys.exit(1)
        print("%d forwarded uploads in %d rounds of %d (1 KiB..%d KiB each%s) in %.0f s: none "
              "stalled" % (done, args.rounds, args.workers, args.max_kib,
                           ", small windows" if args.small_windows else "",
                           time.monotonic() - t0), flush=True)
        failed = False
    finally:
        fleet.close(failed)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Prometheus' own checks on what we ship: deploy/prometheus/alerts.yaml passes `promtool check
rules` and its unit tests (`promtool test rules alerts_test.yaml`); the real daemons' /metrics
pass `promtool check metrics` (the exposition format and naming lint); and every metric the
alert rules use is one the daemons really export, so a renamed metric fails here instead of
silently never alerting. Needs Debian's prometheus package (promtool); skipped without it,
failed under CI=true."""
import os
import re
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402

ROOT = os.environ.get("ST_SOURCE_DIR", os.path.join(HERE, "..", ".."))
RULES = os.path.join(ROOT, "deploy", "prometheus")


def promtool(*args, stdin=None):
    return subprocess.run(["promtool"] + list(args), input=stdin, capture_output=True,
                          timeout=60, cwd=RULES)


def main():
    if subprocess.run(["sh", "-c", "command -v promtool"], capture_output=True).returncode:
        if os.environ.get("CI"):
            print("promtool is missing (Debian package prometheus)")
            return 1
        print("skipped: no promtool")
        return 0
    env = h.Env("promtool", nodes=("edge-1",))
    ok = False
    try:
        def rules_check():
            r = promtool("check", "rules", "alerts.yaml")
            check(r.returncode == 0, "check rules: %s%s" % (r.stdout.decode(), r.stderr.decode()))

        def rules_unit_tests():
            r = promtool("test", "rules", "alerts_test.yaml")
            check(r.returncode == 0, "test rules: %s%s" % (r.stdout.decode(), r.stderr.decode()))

        kubelet = h.start_kubelet(env)
        cloud = h.start_cloudstream(env)
        edge = h.start_edgestream(env, cloud, kubelet)
        texts = {}
        for name, p in (("cloudstream", cloud), ("edgestream", edge)):
            texts[name] = urllib.request.urlopen(
                "http://127.0.0.1:%d/metrics" % p.ports["admin"], timeout=10).read()

        def metrics_lint():
            for name, text in texts.items():
                r = promtool("check", "metrics", stdin=text)
                out = (r.stdout + r.stderr).decode()
                check(r.returncode == 0 and not out.strip(), "%s: %s" % (name, out))

        def rules_use_exported_metrics():
            with open(os.path.join(RULES, "alerts.yaml")) as f:
                used = set(re.findall(r"\b((?:cloudstream|edgestream)_[a-z_]+)", f.read()))
            exported = set()
            for text in texts.values():
                exported |= set(re.findall(r"^# TYPE (\S+)", text.decode(), re.M))
            # a histogram's series are its family's name plus _bucket, _sum or _count
            used = {re.sub(r"_(bucket|sum|count)$", "", u)
                    if re.sub(r"_(bucket|sum|count)$", "", u) in exported else u for u in used}
            missing = sorted(used - exported)
            check(used and not missing, "alert rules use metrics nobody exports: %r" % missing)

        rc = h.run([rules_check, rules_unit_tests, metrics_lint, rules_use_exported_metrics])
        ok = rc == 0
        return rc
    finally:
        h.close_env(env, not ok)


if __name__ == "__main__":
    sys.exit(main())

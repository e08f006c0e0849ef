#!/usr/bin/env python3
"""How fast b3osd answers after a crash restart.

A private b3osd with warm and fork pools (their members become orphans when it dies) and
--sandboxes live sandboxes is SIGKILLed and started again, --runs times. Per restart: when the
first HTTP answer came (any status), when /healthz said ready (200) and when the orphans were
gone (runsc holds only the live sandboxes and the refilled pools). With --baseline-bin, the
same against another build, back to back, and the ratios.

  python3 bench/restart.py --bin build/bin [--baseline-bin OLD/bin] [--sandboxes 10] [--runs 5]
"""
import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import time

from harness import Client, PrivateDaemon

POOL_FLAGS = ["--warm-pool", "2", "--fork-pool", "3", "--template-checkpoints", "off"]


def probe(port):
    """The /healthz status, or None when nothing answers."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
        c.request("GET", "/healthz")
        return c.getresponse().status
    except OSError:
        return None


def restart_once(d, live):
    os.kill(d.proc.pid, signal.SIGKILL)
    d.proc.wait()
    orphans = len(d.containers()) - live
    t0 = time.monotonic()
    d.proc = subprocess.Popen(d.proc.args, stdout=open(f"{d.tmp}/b3osd.log", "a"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    first = ready = None
    while ready is None and time.monotonic() - t0 < 120:
        st = probe(d.port)
        now = time.monotonic() - t0
        if st is not None and first is None:
            first = now
        if st == 200:
            ready = now
        time.sleep(0.005)
    # Swept: none of the old pool members is left (new ones may be there already).
    before = set(d.containers())
    swept = None
    while swept is None and time.monotonic() - t0 < 300:
        if not any(i in before and i not in d.live_ids for i in d.containers()):
            swept = time.monotonic() - t0
        else:
            time.sleep(0.1)
    return first, ready, swept, orphans


def measure(bindir, templates, sandboxes, runs):
    with PrivateDaemon(bindir, templates, POOL_FLAGS) as d:
        d.live_ids = set()
        for _ in range(sandboxes):
            _, body = d.client.call("POST", "/v1/sandboxes", {"template": "base", "timeout_s": 3600})
            d.live_ids.add(json.loads(body)["id"])
        d.wait_containers(sandboxes + 5)
        rows = [restart_once(d, sandboxes) for _ in range(runs)]
        client = Client(d.port, open(f"{d.tmp}/data/admin.key").read().strip())  # the old connection died
        for i in d.live_ids:
            _, body = client.call("GET", f"/v1/sandboxes/{i}")
            assert json.loads(body)["status"] == "running", (i, body)
    return rows


def med(rows, k):
    vals = [r[k] for r in rows if r[k] is not None]
    return statistics.median(vals) * 1000 if vals else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--baseline-bin")
    ap.add_argument("--templates", default="/var/lib/b3os/templates")
    ap.add_argument("--sandboxes", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    results = {"this": measure(a.bin, a.templates, a.sandboxes, a.runs)}
    if a.baseline_bin:
        results["baseline"] = measure(a.baseline_bin, a.templates, a.sandboxes, a.runs)
    print(f"restart after SIGKILL: {a.sandboxes} live sandboxes, pools 2 warm + 3 fork; medians of {a.runs} (ms)")
    print(f"{'build':<10} {'orphans':>8} {'first answer':>13} {'ready':>9} {'swept':>9}")
    for name, rows in results.items():
        print(f"{name:<10} {statistics.median(r[3] for r in rows):>8} {med(rows, 0):>13.0f} {med(rows, 1):>9.0f} "
              f"{med(rows, 2):>9.0f}")
    if "baseline" in results:
        for k, label in ((0, "first answer"), (1, "ready"), (2, "swept")):
            print(f"ratio {label}: {med(results['this'], k) / med(results['baseline'], k):.2f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Preview URLs (docs/ports.md): what the preview path adds, against the same app reached from
inside its own sandbox, in the same run:

  latency: GET / (a short answer), a new connection each time
           inside the sandbox -> 127.0.0.1:8000   vs   host -> b3osd preview -> agent -> app
           with two clients on both sides: curl (its own time_total, so not its start-up) and
           python's http.client. The two sides run in alternating rounds (inside, preview,
           inside, ...) and the medians are over all rounds: the app's own latency drifts by
           more than the target within a minute, so measuring one side after the other
           compares two moments, not two paths.
  throughput: GET of a 64 MiB body, median of a few
           inside the sandbox -> 127.0.0.1:8000   vs   host -> b3osd preview -> agent -> app

The app is tests/e2e/ports_app.py (python's http.server) in an egress-deny sandbox.
Usage (root): bench/ports.py [--rounds N] [--per-round N] [--mib 64]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The client inside: N GETs of / with python (a new connection each), then N with curl, or a
# few big GETs; JSON on stdout.
INSIDE = r'''
import http.client, json, subprocess, sys, time
what, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def get(path):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 8000, timeout=60)
    c.request("GET", path)
    r = c.getresponse(); size = 0
    while True:
        b = r.read(1 << 20)
        if not b: break
        size += len(b)
    c.close()
    assert r.status == 200, r.status
    return time.perf_counter() - t0, size
if what == "small":
    get("/")
    py = [get("/")[0] * 1000 for _ in range(n)]
    out = subprocess.run(["sh", "-c", "for i in $(seq %d); do curl -s -o /dev/null -w '%%{time_total}\\n' "
                          "http://127.0.0.1:8000/; done" % n], stdout=subprocess.PIPE, text=True).stdout
    print(json.dumps({"py": py, "curl": [float(x) * 1000 for x in out.split()]}))
else:
    rates = []
    for _ in range(n):
        s, size = get(f"/big?n={mib << 20}")
        rates.append(size / s / 1e6)
    print(json.dumps({"mb_s": rates}))
'''


def get(port, host, path):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    size = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        size += len(b)
    c.close()
    assert r.status == 200, (r.status, path)
    return time.perf_counter() - t0, size


def curl_times(url, host, n):
    """curl's own time_total of n GETs, each a new process and connection (ms)."""
    out = subprocess.run(["sh", "-c", f"for i in $(seq {n}); do curl -s -o /dev/null -w '%{{time_total}}\\n' "
                          f"-H 'Host: {host}' '{url}'; done"], stdout=subprocess.PIPE, text=True, check=True).stdout
    return [float(x) * 1000 for x in out.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--per-round", type=int, default=10)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--big-runs", type=int, default=5)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    med = statistics.median
    flags = ["--warm-pool", "0", "--fork-pool", "0", "--template-checkpoints", "off"]
    with PrivateDaemon(args.bin, args.templates, flags) as d:
        _, b = d.client.call("POST", "/v1/sandboxes", {"ports": [{"port": 8000, "public": True}], "memory_mib": 1024})
        sbx = json.loads(b)
        sid = sbx["id"]
        token = sbx["ports"][0]["url"].split("b3os_token=")[1]
        host = f"8000-{sbx['host_id']}.localhost"
        app = open(os.path.join(ROOT, "tests", "e2e", "ports_app.py"), "rb").read()
        d.client.call("PUT", f"/v1/sandboxes/{sid}/files?path=/opt/app.py", raw=app, ctype="application/octet-stream")
        d.client.call("PUT", f"/v1/sandboxes/{sid}/files?path=/opt/inside.py", raw=INSIDE.encode(),
                      ctype="application/octet-stream")
        # The app's request log goes nowhere: the bench measures the path, not the app's disk.
        d.client.call("POST", f"/v1/sandboxes/{sid}/exec",
                      {"cmd": "nohup python3 /opt/app.py 8000 /dev/null >/dev/null 2>&1 & sleep 1"})

        def inside(what, n):
            _, b = d.client.call("POST", f"/v1/sandboxes/{sid}/exec",
                                 {"cmd": ["python3", "/opt/inside.py", what, str(n), str(args.mib)],
                                  "timeout_ms": 600000})
            r = json.loads(b)
            assert r["exit_code"] == 0, r
            return json.loads(r["stdout"].strip().splitlines()[-1])

        path = f"/?b3os_token={token}"
        url = f"http://127.0.0.1:{d.preview_port}{path}"
        for _ in range(10):
            get(d.preview_port, host, path)
        in_py, in_curl, via_py, via_curl = [], [], [], []
        for _ in range(args.rounds):
            r = inside("small", args.per_round)
            in_py += r["py"]
            in_curl += r["curl"]
            get(d.preview_port, host, path)
            via_py += [get(d.preview_port, host, path)[0] * 1000 for _ in range(args.per_round)]
            via_curl += curl_times(url, host, args.per_round)
        rates_in, rates_via = [], []
        for _ in range(args.big_runs):
            rates_in += inside("big", 1)["mb_s"]
            s, size = get(d.preview_port, host, f"/big?n={args.mib << 20}&b3os_token={token}")
            assert size == args.mib << 20, size
            rates_via.append(size / s / 1e6)
        d.client.call("DELETE", f"/v1/sandboxes/{sid}")
    n = args.rounds * args.per_round
    print(f"preview URLs: {os.cpu_count()} cores, {args.rounds} alternating rounds of {args.per_round} requests "
          f"({n} a side), {args.big_runs} x {args.mib} MiB, medians")
    print(f"{'metric':34} {'inside':>9} {'preview':>9} {'added':>8} {'ratio':>6}  target")
    for name, a, b in (("GET / latency, curl (ms)", in_curl, via_curl), ("GET / latency, python (ms)", in_py, via_py)):
        print(f"{name:34} {med(a):9.2f} {med(b):9.2f} {med(b) - med(a):8.2f} {med(b) / med(a):6.2f}  <= 2 ms added")
    mb_in, mb_via = med(rates_in), med(rates_via)
    print(f"{'64 MiB GET (MB/s)':34} {mb_in:9.1f} {mb_via:9.1f} {'':>8} {mb_via / mb_in:6.2f}  >= 100 MB/s")


if __name__ == "__main__":
    main()

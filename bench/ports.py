#!/usr/bin/env python3
"""Preview URLs (docs/ports.md): what the preview path adds, against the same app reached from
inside its own sandbox, in the same run:

  latency: GET / (a short answer), a new connection each time, median of N
           inside the sandbox -> 127.0.0.1:8000   vs   host -> b3osd preview -> agent -> app
  throughput: GET of a 64 MiB body, median of a few
           inside the sandbox -> 127.0.0.1:8000   vs   host -> b3osd preview -> agent -> app

The app is tests/e2e/ports_app.py (python's http.server) in an egress-deny sandbox; the
baseline client inside is python's http.client, the same as the host's, so the difference is
the preview path: b3osd's listener, the token check, the agent channel and the agent's socket.
Usage (root): bench/ports.py [--runs N] [--mib 64]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INSIDE = r'''
import http.client, json, statistics, sys, time
n, mib, big_runs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
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
for _ in range(10): get("/")
lat = [get("/")[0] * 1000 for _ in range(n)]
rates = []
for _ in range(big_runs):
    s, size = get(f"/big?n={mib << 20}")
    rates.append(size / s / 1e6)
print(json.dumps({"latency_ms": statistics.median(lat), "mb_s": statistics.median(rates)}))
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=200)
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
        url = sbx["ports"][0]["url"]
        token = url.split("b3os_token=")[1]
        host = f"8000-{sbx['host_id']}.localhost"
        app = open(os.path.join(ROOT, "tests", "e2e", "ports_app.py"), "rb").read()
        d.client.call("PUT", f"/v1/sandboxes/{sid}/files?path=/opt/app.py", raw=app, ctype="application/octet-stream")
        d.client.call("PUT", f"/v1/sandboxes/{sid}/files?path=/opt/inside.py", raw=INSIDE.encode(),
                      ctype="application/octet-stream")
        d.client.call("POST", f"/v1/sandboxes/{sid}/exec",
                      {"cmd": "nohup python3 /opt/app.py 8000 /tmp/app.log >/dev/null 2>&1 & sleep 1"})
        # The app logs each request line; keep it quiet for the bench.
        d.client.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "ln -sf /dev/null /tmp/app.log"})
        path = f"/?b3os_token={token}"
        for _ in range(10):
            get(d.preview_port, host, path)
        via = [get(d.preview_port, host, path)[0] * 1000 for _ in range(args.runs)]
        rates = []
        for _ in range(args.big_runs):
            s, size = get(d.preview_port, host, f"/big?n={args.mib << 20}&b3os_token={token}")
            assert size == args.mib << 20, size
            rates.append(size / s / 1e6)
        _, b = d.client.call("POST", f"/v1/sandboxes/{sid}/exec",
                             {"cmd": ["python3", "/opt/inside.py", str(args.runs), str(args.mib), str(args.big_runs)],
                              "timeout_ms": 600000})
        r = json.loads(b)
        assert r["exit_code"] == 0, r
        inside = json.loads(r["stdout"].strip().splitlines()[-1])
        d.client.call("DELETE", f"/v1/sandboxes/{sid}")
    lat_via, lat_in = med(via), inside["latency_ms"]
    mb_via, mb_in = med(rates), inside["mb_s"]
    print(f"preview URLs: {os.cpu_count()} cores, {args.runs} requests, {args.big_runs} x {args.mib} MiB, medians")
    print(f"{'metric':28} {'inside':>9} {'preview':>9} {'added':>8} {'ratio':>6}  target")
    print(f"{'GET / latency (ms)':28} {lat_in:9.2f} {lat_via:9.2f} {lat_via - lat_in:8.2f} {lat_via / lat_in:6.2f}  <= 2 ms added")
    print(f"{'64 MiB GET (MB/s)':28} {mb_in:9.1f} {mb_via:9.1f} {'':>8} {mb_via / mb_in:6.2f}  >= 100 MB/s")


if __name__ == "__main__":
    main()

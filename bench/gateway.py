#!/usr/bin/env python3
"""Model gateway overhead: the same local upstream (the scripted model server, a test fixture)
called directly and through b3osd, in the same run, medians of N calls each:

  non-streamed call, host -> upstream           vs  host -> b3osd /v1/infer -> upstream
  time to first streamed byte (data: event)      vs  the same through b3osd
  from inside a sandbox (agent relay on 127.0.0.1:7700 -> channel -> gateway) vs from the host

Each call opens its own connection on both sides (the gateway opens one per upstream call).
Usage (root): bench/gateway.py [--runs N]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = {"model": "scripted", "max_tokens": 16, "messages": [{"role": "user", "content": "bench"}]}


def call(port, path, body, headers, stream=False):
    """Returns (ms to the whole answer, ms to the first body byte)."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    r = c.getresponse()
    first = None
    while True:
        chunk = r.read1(65536) if stream else r.read()
        if first is None:
            first = (time.perf_counter() - t0) * 1000
        if not chunk or not stream:
            break
    total = (time.perf_counter() - t0) * 1000
    assert r.status == 200, (r.status, path)
    c.close()
    return total, first


INSIDE = r'''
import http.client, json, os, statistics, sys, time
n = int(sys.argv[1]); stream = sys.argv[2] == "1"
body = {"model": os.environ["B3OS_MODEL"], "max_tokens": 16, "stream": stream,
        "messages": [{"role": "user", "content": "bench"}]}
totals, firsts = [], []
for _ in range(n):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", 7700, timeout=30)
    c.request("POST", "/v1/infer/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); first = None
    while True:
        chunk = r.read1(65536)
        if first is None: first = (time.perf_counter() - t0) * 1000
        if not chunk: break
    totals.append((time.perf_counter() - t0) * 1000); firsts.append(first)
    assert r.status == 200, r.status
    c.close()
print(json.dumps({"total": statistics.median(totals), "first": statistics.median(firsts)}))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    med = statistics.median
    tmp = tempfile.mkdtemp(prefix="b3os-bench-gw-")
    fixture = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "fixtures", "scripted_model.py"),
                                "--port", "0", "--port-file", f"{tmp}/port", "--quiet"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if os.path.exists(f"{tmp}/port") and open(f"{tmp}/port").read().strip():
                break
            time.sleep(0.1)
        up = int(open(f"{tmp}/port").read())
        flags = ["--warm-pool", "0", "--fork-pool", "0", "--template-checkpoints", "off",
                 "--model", f"b3os/bench=http://127.0.0.1:{up}/v1,upstream=scripted,in=0.05,out=0.4"]
        with PrivateDaemon(args.bin, args.templates, flags) as d:
            auth = dict(d.client.auth)
            gw_body = dict(BODY, model="b3os/bench")
            rows = []
            for stream in (False, True):
                b_direct = dict(BODY, stream=stream)
                b_gw = dict(gw_body, stream=stream)
                for _ in range(10):  # warm both paths
                    call(up, "/v1/chat/completions", b_direct, {}, stream)
                    call(d.port, "/v1/infer/chat/completions", b_gw, auth, stream)
                direct, via = [], []
                for _ in range(args.runs):  # interleaved, so drift hits both alike
                    direct.append(call(up, "/v1/chat/completions", b_direct, {}, stream))
                    via.append(call(d.port, "/v1/infer/chat/completions", b_gw, auth, stream))
                idx = 1 if stream else 0
                rows.append(("stream: first byte" if stream else "non-streamed call",
                             med(x[idx] for x in direct), med(x[idx] for x in via)))
            # From inside a sandbox: the agent relay, beside the host's own calls through b3osd.
            _, b = d.client.call("POST", "/v1/sandboxes", {"api": {"scopes": ["infer:run"]}})
            sbx = json.loads(b)["id"]
            d.client.call("PUT", f"/v1/sandboxes/{sbx}/files?path=/opt/inside.py", raw=INSIDE.encode(),
                          ctype="application/octet-stream")
            inside = {}
            for stream in ("0", "1"):
                _, b = d.client.call("POST", f"/v1/sandboxes/{sbx}/exec",
                                     {"cmd": ["python3", "/opt/inside.py", str(max(20, args.runs // 4)), stream],
                                      "timeout_ms": 300000})
                r = json.loads(b)
                assert r["exit_code"] == 0, r
                inside[stream] = json.loads(r["stdout"].strip().splitlines()[-1])
            d.client.call("DELETE", f"/v1/sandboxes/{sbx}")
    finally:
        fixture.terminate()
        fixture.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"gateway overhead: {os.cpu_count()} cores, {args.runs} calls each, medians (ms)")
    print(f"{'metric':34} {'direct':>8} {'b3osd':>8} {'added':>7}  target")
    for name, direct, via in rows:
        print(f"{name:34} {direct:8.2f} {via:8.2f} {via - direct:7.2f}  <= 2 ms added")
    host_total, host_first = rows[0][2], rows[1][2]
    print(f"{'inside sandbox, non-streamed':34} {host_total:8.2f} {inside['0']['total']:8.2f} "
          f"{inside['0']['total'] - host_total:7.2f}  (relay vs host through b3osd)")
    print(f"{'inside sandbox, first byte':34} {host_first:8.2f} {inside['1']['first']:8.2f} "
          f"{inside['1']['first'] - host_first:7.2f}  (relay vs host through b3osd)")


if __name__ == "__main__":
    main()

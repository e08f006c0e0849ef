#!/usr/bin/env python3
"""What issue 20's egress checks cost, this build against a baseline build (the one before), in
one run, on the fake internet the tests use (tests/net/fakenet.sh; nothing is sent elsewhere):

  download      256 MiB of plain HTTP from a.b3t.test through the allowlist proxy (every
                request now read by HttpGuard, the answer passed on as it comes), and the raw
                baseline: the same download through `public` egress (NAT, no proxy)
  keep-alive    200 small GETs on one plain-HTTP connection through the proxy (each request
                head now judged): requests per second. The fake internet's server writes head
                and body apart, so each answer waits for a delayed ACK (~44 ms) on both builds:
                this row shows that keep-alive still works, not what the guard costs
  https         TLS connect + GET through the proxy (the ClientHello is also checked for ECH)
  dns           an allowlist sandbox's A question answered from the resolver's cache, and a
                public sandbox's A question forwarded upstream (its answer now filtered)

Each build gets a b3osd of its own, one after the other, with the same flags; the baseline is
run first, then this build, then both again (--rounds), so drift over the run shows. Medians;
ratios are this build over the baseline.

Usage (root, base template built):
  bench/egress_guard.py --baseline-bin OLD/build/bin [--bin build/bin] [--runs N] [--rounds R]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402
from network import CONNECT, FAKENET, HOST_A, MIB256, NAME_A, READER, UPLINKS, create, execj, sh, sweep_networks  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
med = statistics.median

# The download by name (the proxy resolves it itself), 1 MiB reads as network.py's READER.
READER_BY_NAME = READER.replace('ip, n = sys.argv[1], int(sys.argv[2])', 'ip, n = sys.argv[1], int(sys.argv[2])\n'
                                'ip = socket.getaddrinfo(ip, 80, socket.AF_INET)[0][4][0]')

KEEPALIVE = r"""
import socket, sys, time
n = int(sys.argv[1])
ip = socket.getaddrinfo("a.b3t.test", 80, socket.AF_INET)[0][4][0]
s = socket.create_connection((ip, 80))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else each request waits for a delayed ACK
req = b"GET / HTTP/1.1\r\nHost: a.b3t.test\r\n\r\n"
f = s.makefile("rb")
def one():
    s.sendall(req)
    length = 0
    while True:
        line = f.readline()
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        if line in (b"\r\n", b""):
            break
    f.read(length)
for _ in range(10):
    one()
t = time.perf_counter()
for _ in range(n):
    one()
print(n / (time.perf_counter() - t))
"""


DNS = r"""
import socket, struct, sys, time, statistics
name, n = sys.argv[1], int(sys.argv[2])
q = lambda i: struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("10.0.0.1", 53)); s.settimeout(3)
out = []
for i in range(n + 3):
    t = time.perf_counter(); s.send(q(i + 1)); s.recv(512)
    if i >= 3: out.append((time.perf_counter() - t) * 1e6)
print(statistics.median(out))
"""


def put(c, sid, path, data):
    c.call("PUT", f"/v1/sandboxes/{sid}/files?path={path}", raw=data, ctype="application/octet-stream")


def measure(bindir, templates, fn, runs):
    flags = ["--network", "on", "--net-uplinks", UPLINKS, "--dns-upstream", "198.51.100.53", "--warm-pool", "0",
             "--net-warm-pool", "0", "--fork-pool", "0", "--net-fork-pool", "0", "--template-checkpoints", "off"]
    r = {}
    with PrivateDaemon(bindir, templates, flags) as d:
        c = d.client
        allow, _ = create(c, {"egress": {"mode": "allowlist", "allow": [NAME_A]}})
        pub, _ = create(c, {"egress": {"mode": "public"}})
        ca = open(f"{fn}/ca.pem", "rb").read()
        for sid in (allow["id"], pub["id"]):
            for path, data in (("/workspace/reader.py", READER_BY_NAME.encode()), ("/workspace/keepalive.py", KEEPALIVE.encode()),
                               ("/workspace/https.py", CONNECT.encode()), ("/workspace/dns.py", DNS.encode()),
                               ("/workspace/ca.pem", ca)):
                put(c, sid, path, data)
        reader = ["python3", "/workspace/reader.py", NAME_A, str(MIB256)]
        r["download_proxy"] = [float(execj(c, allow["id"], reader)) for _ in range(runs)]
        r["download_nat"] = [float(execj(c, pub["id"], reader)) for _ in range(runs)]
        r["keepalive"] = [float(execj(c, allow["id"], ["python3", "/workspace/keepalive.py", "200"])) for _ in range(runs)]
        r["https"] = [float(execj(c, allow["id"], ["python3", "/workspace/https.py", "20"])) for _ in range(runs)]
        r["dns_allow"] = [float(execj(c, allow["id"], ["python3", "/workspace/dns.py", NAME_A, "200"])) for _ in range(runs)]
        r["dns_public"] = [float(execj(c, pub["id"], ["python3", "/workspace/dns.py", NAME_A, "200"])) for _ in range(runs)]
        for sid in (allow["id"], pub["id"]):
            c.call("DELETE", f"/v1/sandboxes/{sid}")
    sweep_networks()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--baseline-bin", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    fn = tempfile.mkdtemp(prefix="b3os-bench-fakenet-")
    sh(FAKENET, "up", fn)
    got = {"baseline": {}, "this": {}}
    try:
        for _ in range(args.rounds):
            for name, b in (("baseline", args.baseline_bin), ("this", args.bin)):
                for k, v in measure(b, args.templates, fn, args.runs).items():
                    got[name].setdefault(k, []).extend(v)
    finally:
        sweep_networks()
        sh(FAKENET, "down", fn, check=False)
    print(f"egress checks: {os.cpu_count()} cores, {args.rounds} rounds x {args.runs} runs per build, medians")
    rows = [("download_nat", "plain HTTP 256 MiB, public (NAT, the raw baseline)", "MB/s"),
            ("download_proxy", "plain HTTP 256 MiB through the allowlist proxy", "MB/s"),
            ("keepalive", "keep-alive GETs through the proxy (200 per run)", "req/s"),
            ("https", "TLS connect + GET through the proxy", "ms"),
            ("dns_allow", "allowlist A question (resolver cache)", "us"),
            ("dns_public", "public A question (forwarded, answer filtered)", "us")]
    for k, what, unit in rows:
        b, t = med(got["baseline"][k]), med(got["this"][k])
        print(f"  {what:52s} baseline {b:9.1f} {unit:5s} this {t:9.1f} {unit:5s} ratio {t / b:.3f}")
    nat, prox = med(got["this"]["download_nat"]), med(got["this"]["download_proxy"])
    print(f"  this build: proxy download / NAT download = {prox / nat:.2f}")
    print(json.dumps(got))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sandbox networks against their raw baselines, in one run, against the fake internet the
tests use (tests/net/fakenet.sh; nothing is sent anywhere else):

  download      256 MiB over HTTP from a test host through `public` egress, against the same
                download by curl in a plain network namespace of the host on the same path
                (veth, the host's routing and NAT) - target >= 100 MB/s and >= 0.5x
  https connect TLS connect + GET of a small answer from inside a sandbox: `allowlist` (through
                the egress proxy) against `public` (straight through NAT) - target <= 1 ms added
  create        from the warm pool: egress `public` against `deny` - target within 2 ms
  fork          count 1, of an idle source and of one running a process: networked against
                deny - target <= 1.2x

Medians and ratios. Usage (root, base template built): bench/network.py [--runs N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FAKENET = f"{ROOT}/tests/net/fakenet.sh"
UPLINKS = "10.203.0.0/16"
RAW_NS, RAW_IF, RAW_NET = "b3bench-raw", "b3ubenchraw", "10.204.0."  # b3u*: like a sandbox's uplink
HOST_A, NAME_A = "198.51.100.10", "a.b3t.test"
MIB256 = 256 * 1024 * 1024
med = statistics.median


def sh(*cmd, check=True, input=None):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, input=input).stdout


def raw_netns_up():
    """A plain namespace with a veth to the host, routed and masqueraded by the host."""
    raw_netns_down()
    sh("ip", "netns", "add", RAW_NS)
    sh("ip", "link", "add", RAW_IF, "type", "veth", "peer", "name", "eth0", "netns", RAW_NS)
    sh("ip", "addr", "add", RAW_NET + "1/30", "dev", RAW_IF)
    sh("ip", "link", "set", RAW_IF, "up")
    for c in (["link", "set", "lo", "up"], ["addr", "add", RAW_NET + "2/30", "dev", "eth0"], ["link", "set", "eth0", "up"],
              ["route", "add", "default", "via", RAW_NET + "1"]):
        sh("ip", "-n", RAW_NS, *c)
    sh("nft", "-f", "-", input=f"table ip b3bench {{\n chain post {{\n type nat hook postrouting priority srcnat;\n"
                                f" ip saddr {RAW_NET}0/30 masquerade\n }}\n}}\n")


def raw_netns_down():
    sh("ip", "netns", "del", RAW_NS, check=False)
    sh("ip", "link", "del", RAW_IF, check=False)
    sh("nft", "delete", "table", "ip", "b3bench", check=False)


def sweep_networks():
    """What the bench's b3osd leaves (it stops without deleting running sandboxes)."""
    table = "b3os_" + UPLINKS.replace(".", "_").replace("/", "_")
    for line in sh("ip", "netns", "list", check=False).splitlines():
        ns = line.split()[0] if line else ""
        if ns.startswith("b3s-") and " 10.203." in sh("ip", "-n", ns, "-4", "-o", "addr", "show", "dev", "up0", check=False):
            sh("ip", "netns", "del", ns, check=False)
    sh("nft", "delete", "table", "inet", table, check=False)
    sh("ip", "addr", "del", "10.203.0.1/32", "dev", "lo", check=False)


def execj(c, sid, cmd, timeout_ms=120000):
    _, b = c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd, "timeout_ms": timeout_ms})
    r = json.loads(b)
    if r["exit_code"] != 0:
        raise RuntimeError(f"{cmd}: exit {r['exit_code']}: {r['stderr'][:300]}")
    return r["stdout"]


def create(c, body):
    t0 = time.perf_counter()
    r, b = c.call("POST", "/v1/sandboxes", body)
    client = (time.perf_counter() - t0) * 1000
    s = json.loads(b)
    return s, client


# The same reader on both sides: 1 MiB reads (curl reads 16 KiB at a time, and in gVisor each
# read is a trip through its sentry: curl gets ~200 MB/s where this gets ~700).
READER = r"""
import socket, sys, time
ip, n = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((ip, 80))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.sendall(f"GET /bytes/{n} HTTP/1.1\r\nHost: a.b3t.test\r\nConnection: close\r\n\r\n".encode())
buf, got, t = bytearray(1 << 20), 0, time.perf_counter()
while True:
    k = s.recv_into(buf)
    if not k:
        break
    got += k
assert got > n, got
print(got / (time.perf_counter() - t) / 1e6)
"""

CONNECT = r"""
import socket, ssl, sys, time, statistics
n = int(sys.argv[1]); ctx = ssl.create_default_context(cafile="/workspace/ca.pem")
out = []
for i in range(n + 3):
    t = time.perf_counter()
    ip = socket.getaddrinfo("a.b3t.test", 443, socket.AF_INET)[0][4][0]
    s = ctx.wrap_socket(socket.create_connection((ip, 443), timeout=5), server_hostname="a.b3t.test")
    s.sendall(b"GET / HTTP/1.1\r\nHost: a.b3t.test\r\nConnection: close\r\n\r\n")
    while s.recv(65536): pass
    s.close()
    if i >= 3: out.append((time.perf_counter() - t) * 1000)
print(statistics.median(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    fn = tempfile.mkdtemp(prefix="b3os-bench-fakenet-")
    sh(FAKENET, "up", fn)
    flags = ["--network", "on", "--net-uplinks", UPLINKS, "--dns-upstream", "198.51.100.53", "--warm-pool", "2",
             "--net-warm-pool", "2", "--fork-pool", "2", "--net-fork-pool", "2", "--template-checkpoints", "off"]
    print(f"sandbox networks: {os.cpu_count()} cores, {args.runs} runs, medians")
    try:
        raw_netns_up()
        with PrivateDaemon(args.bin, args.templates, flags) as d:
            c = d.client
            d.wait_containers(8)
            made = []
            # ---- download
            pub, _ = create(c, {"egress": {"mode": "public"}})
            made.append(pub["id"])
            url = f"http://{HOST_A}/bytes/{MIB256}"
            curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", url]
            c.call("PUT", f"/v1/sandboxes/{pub['id']}/files?path=/workspace/reader.py", raw=READER.encode(),
                   ctype="application/octet-stream")
            with open(f"{fn}/reader.py", "w") as f:
                f.write(READER)
            reader = ["python3", "/workspace/reader.py", HOST_A, str(MIB256)]
            sbx, raw, sbx_curl, raw_curl = [], [], [], []
            for _ in range(max(3, args.runs // 2)):
                raw.append(float(sh("ip", "netns", "exec", RAW_NS, "python3", f"{fn}/reader.py", HOST_A, str(MIB256))))
                sbx.append(float(execj(c, pub["id"], reader)))
                raw_curl.append(float(sh("ip", "netns", "exec", RAW_NS, *curl)) / 1e6)
                sbx_curl.append(float(execj(c, pub["id"], curl)) / 1e6)
            print(f"download 256 MiB   sandbox public {med(sbx):8.1f} MB/s   plain netns {med(raw):8.1f} MB/s   "
                  f"ratio {med(sbx) / med(raw):.2f}  (target >= 100 MB/s and >= 0.5x; python, 1 MiB reads)")
            print(f"  the same with curl: sandbox {med(sbx_curl):8.1f} MB/s   plain netns {med(raw_curl):8.1f} MB/s   "
                  f"ratio {med(sbx_curl) / med(raw_curl):.2f}  (curl's 16 KiB reads)")

            # ---- https connect: allowlist (proxy) against public (NAT)
            allow, _ = create(c, {"egress": {"mode": "allowlist", "allow": [NAME_A]}})
            made.append(allow["id"])
            ca = open(f"{fn}/ca.pem", "rb").read()
            for sid in (pub["id"], allow["id"]):
                c.call("PUT", f"/v1/sandboxes/{sid}/files?path=/workspace/ca.pem", raw=ca, ctype="application/octet-stream")
                c.call("PUT", f"/v1/sandboxes/{sid}/files?path=/workspace/connect.py", raw=CONNECT.encode(),
                       ctype="application/octet-stream")
            n = max(20, args.runs * 5)
            p_ms, a_ms = [], []
            for _ in range(3):
                p_ms.append(float(execj(c, pub["id"], ["python3", "/workspace/connect.py", str(n)])))
                a_ms.append(float(execj(c, allow["id"], ["python3", "/workspace/connect.py", str(n)])))
            print(f"https connect+GET  allowlist {med(a_ms):7.2f} ms   public {med(p_ms):7.2f} ms   "
                  f"added {med(a_ms) - med(p_ms):+.2f} ms  (target <= 1 ms; {n} connects x 3)")
            for sid in made:
                c.call("DELETE", f"/v1/sandboxes/{sid}")

            # ---- create from the warm pool
            res = {"deny": ([], []), "public": ([], [])}
            for _ in range(args.runs):
                for mode in ("deny", "public"):
                    d.wait_containers(8)
                    s, client = create(c, {"egress": {"mode": mode}})
                    assert "claim_ms" in s["timing"], (mode, s["timing"])
                    res[mode][0].append(s["timing"]["total_ms"])
                    res[mode][1].append(client)
                    c.call("DELETE", f"/v1/sandboxes/{s['id']}")
            dn, pb = res["deny"], res["public"]
            print(f"create (warm pool) public {med(pb[0]):6.2f} ms (client {med(pb[1]):6.2f})   deny {med(dn[0]):6.2f} ms "
                  f"(client {med(dn[1]):6.2f})   difference {med(pb[1]) - med(dn[1]):+.2f} ms  (target within 2 ms)")

            # ---- fork, idle and with a process running
            for busy in (False, True):
                forks = {}
                for mode in ("deny", "public"):
                    src, _ = create(c, {"forkable": True, "egress": {"mode": mode}})
                    if busy:
                        execj(c, src["id"], ["sh", "-c", "nohup python3 -c 'import time\nwhile True: time.sleep(0.01)' "
                                                           ">/dev/null 2>&1 &"])
                    totals = []
                    for _ in range(args.runs):
                        d.wait_containers(8)
                        _, b = c.call("POST", f"/v1/sandboxes/{src['id']}/fork", {"count": 1})
                        f = json.loads(b)
                        totals.append(f["timing"]["total_ms"])
                        for x in f["data"]:
                            c.call("DELETE", f"/v1/sandboxes/{x['id']}")
                    forks[mode] = totals
                    c.call("DELETE", f"/v1/sandboxes/{src['id']}")
                print(f"fork ({'process running' if busy else 'idle source'}) public {med(forks['public']):7.1f} ms   "
                      f"deny {med(forks['deny']):7.1f} ms   ratio {med(forks['public']) / med(forks['deny']):.2f}  "
                      f"(target <= 1.2x)")
    finally:
        raw_netns_down()
        sweep_networks()
        sh(FAKENET, "down", fn, check=False)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""MCP against REST (docs/mcp.md), in the same run: `tools/call sandbox_exec` of `true` over
`POST /v1/sandboxes/{id}/exec` of `true`, each on its own kept-alive connection, alternating
call by call (so both sides see the same moment), medians:

  alone:          one client
  20 clients:     20 threads at once, each with a sandbox of its own, alternating on its own
                  two connections (20 MCP sessions of one key): an agent fleet on one node

Target: at most 1 ms added (median). Usage (root, base template built): bench/mcp.py [--calls N]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mcp:
    def __init__(self, port, key):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        self.n = 0
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        self.h["Mcp-Session-Id"] = r[0]
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        self.c.request("POST", "/mcp?toolsets=sandboxes", body=json.dumps(body), headers=self.h)
        r = self.c.getresponse()
        data = r.read()
        return r.getheader("Mcp-Session-Id"), (json.loads(data) if data else None)

    def exec_true(self, sid):
        self.n += 1
        t0 = time.perf_counter()
        _, j = self.post({"jsonrpc": "2.0", "id": self.n, "method": "tools/call",
                          "params": {"name": "sandbox_exec", "arguments": {"sandbox_id": sid, "cmd": ["true"]}}})
        ms = (time.perf_counter() - t0) * 1000
        assert j["result"]["structuredContent"]["exit_code"] == 0, j
        return ms


class Rest:
    def __init__(self, port, key):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def exec_true(self, sid):
        t0 = time.perf_counter()
        self.c.request("POST", f"/v1/sandboxes/{sid}/exec", body=json.dumps({"cmd": ["true"]}), headers=self.h)
        r = self.c.getresponse()
        j = json.loads(r.read())
        ms = (time.perf_counter() - t0) * 1000
        assert j["exit_code"] == 0, j
        return ms


def pairs(port, key, sid, n, out_rest, out_mcp):
    rest, mcp = Rest(port, key), Mcp(port, key)
    for _ in range(3):
        rest.exec_true(sid), mcp.exec_true(sid)
    for i in range(n):
        # Alternate which goes first, so neither always follows the other.
        if i % 2:
            out_rest.append(rest.exec_true(sid))
            out_mcp.append(mcp.exec_true(sid))
        else:
            out_mcp.append(mcp.exec_true(sid))
            out_rest.append(rest.exec_true(sid))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    med = statistics.median
    flags = ["--warm-pool", "0", "--fork-pool", "0", "--template-checkpoints", "off",
             "--max-requests-per-key", "256", "--max-requests-per-project", "512"]
    with PrivateDaemon(args.bin, args.templates, flags) as d:
        key = d.client.auth["Authorization"].split()[1]
        _, b = d.client.call("POST", "/v1/sandboxes", {"vcpu": 2})
        sid = json.loads(b)["id"]
        rest1, mcp1 = [], []
        pairs(d.port, key, sid, args.calls, rest1, mcp1)
        rest20, mcp20 = [], []
        per = max(10, args.calls // args.clients)
        # One sandbox per client, as an agent fleet has.
        sids = [json.loads(d.client.call("POST", "/v1/sandboxes", {})[1])["id"] for _ in range(args.clients)]
        threads = [threading.Thread(target=pairs, args=(d.port, key, s, per, rest20, mcp20)) for s in sids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in [sid, *sids]:
            d.client.call("DELETE", f"/v1/sandboxes/{s}")
    print(f"MCP tools/call sandbox_exec vs REST exec, `true`, kept-alive connections: {os.cpu_count()} cores, medians")
    print(f"{'case':28} {'REST ms':>9} {'MCP ms':>9} {'added':>8}  target")
    print(f"{'alone (' + str(args.calls) + ' pairs)':28} {med(rest1):9.3f} {med(mcp1):9.3f} {med(mcp1) - med(rest1):+8.3f}  <= 1 ms")
    print(f"{str(args.clients) + ' clients (' + str(len(rest20)) + ' pairs)':28} {med(rest20):9.3f} {med(mcp20):9.3f} "
          f"{med(mcp20) - med(rest20):+8.3f}  <= 1 ms")


if __name__ == "__main__":
    main()

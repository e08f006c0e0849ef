#!/usr/bin/env python3
"""Create from the warm pool: server total_ms and client round trip of a non-forkable create
served by a ready sandbox, beside a cold create (boot) in the same run. Between creates the pool
is allowed to refill, so each create finds a ready sandbox. Usage (root): bench/pool.py [--runs N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    with PrivateDaemon(args.bin, args.templates, ["--warm-pool", "2"]) as d:
        c = d.client

        def containers():
            return len(d.containers())

        def wait_pool(live):
            for _ in range(200):
                if containers() >= live + 2:
                    return
                time.sleep(0.1)

        warm_server, warm_client, cold_server, cold_client = [], [], [], []
        for _ in range(args.runs):
            wait_pool(0)
            t0 = time.perf_counter()
            _, b = c.call("POST", "/v1/sandboxes", {"template": "base"})
            warm_client.append((time.perf_counter() - t0) * 1000)
            s = json.loads(b)
            assert "claim_ms" in s["timing"], s["timing"]
            warm_server.append(s["timing"]["total_ms"])
            c.call("DELETE", f"/v1/sandboxes/{s['id']}")
            # A forkable create never claims: it boots, as a cold create does.
            wait_pool(0)
            t0 = time.perf_counter()
            _, b = c.call("POST", "/v1/sandboxes", {"template": "base", "forkable": True})
            cold_client.append((time.perf_counter() - t0) * 1000)
            s = json.loads(b)
            cold_server.append(s["timing"]["total_ms"])
            c.call("DELETE", f"/v1/sandboxes/{s['id']}")
        med = statistics.median
        print(f"create from the warm pool: server total_ms {med(warm_server):.2f}, client round trip {med(warm_client):.2f} ms")
        print(f"forkable create (boots):   server total_ms {med(cold_server):.1f}, client round trip {med(cold_client):.1f} ms")


if __name__ == "__main__":
    main()

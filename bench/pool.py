#!/usr/bin/env python3
"""The create paths side by side, each in its own private b3osd, medians of server total_ms
and of the client round trip (create answered), plus create -> first exec done:

  warm claim      non-forkable create served by a booted sandbox of the warm pool
  pooled boot     forkable create: boots in a container the fork pool created ahead of time
  pooled restore  forkable create restoring the template checkpoint (--template-checkpoints on)
  cold boot       no pools, no template checkpoint: runsc create + start

Between creates the pools are given time to refill, as they would between a user's creates.
Usage (root): bench/pool.py [--runs N]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

CASES = [
    ("warm claim", ["--warm-pool", "2", "--fork-pool", "0", "--template-checkpoints", "off"], {}, 2, "claim_ms"),
    ("pooled boot", ["--warm-pool", "0", "--fork-pool", "2", "--template-checkpoints", "off"], {"forkable": True}, 2,
     "start_ms"),
    ("pooled restore", ["--warm-pool", "0", "--fork-pool", "2", "--template-checkpoints", "on"], {"forkable": True}, 2,
     "restore_ms"),
    ("cold boot", ["--warm-pool", "0", "--fork-pool", "0", "--template-checkpoints", "off"], {"forkable": True}, 0,
     "create_ms"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    med = statistics.median
    print(f"create paths: {os.cpu_count()} cores, {args.runs} runs each, medians (ms)")
    print(f"{'path':16} {'server total':>12} {'client':>8} {'+first exec':>12}  phases")
    for name, flags, body, pool, must in CASES:
        with PrivateDaemon(args.bin, args.templates, flags) as d:
            c = d.client
            if "on" in flags:
                for _ in range(100):  # the template checkpoint is built at start
                    _, b = c.call("GET", "/v1/templates")
                    if json.loads(b)["data"][0]["checkpoint"]["status"] != "building":
                        break
                    time.sleep(0.2)
            server, client, first_exec, phases = [], [], [], {}
            for _ in range(args.runs):
                d.wait_containers(pool)
                t0 = time.perf_counter()
                _, b = c.call("POST", "/v1/sandboxes", {"template": "base", **body})
                client.append((time.perf_counter() - t0) * 1000)
                s = json.loads(b)
                assert must in s["timing"], (name, s["timing"])
                c.call("POST", f"/v1/sandboxes/{s['id']}/exec", {"cmd": ["true"]})
                first_exec.append((time.perf_counter() - t0) * 1000)
                server.append(s["timing"]["total_ms"])
                for k, v in s["timing"].items():
                    phases.setdefault(k, []).append(v)
                c.call("DELETE", f"/v1/sandboxes/{s['id']}")
            detail = ", ".join(f"{k[:-3]} {med(v):.1f}" for k, v in phases.items()
                               if k not in ("total_ms", "parse_ms", "validate_ms") and med(v) >= 0.5)
            print(f"{name:16} {med(server):12.2f} {med(client):8.2f} {med(first_exec):12.1f}  {detail}")


if __name__ == "__main__":
    main()

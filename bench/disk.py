#!/usr/bin/env python3
"""Fork of a sandbox with 0, 100 MB and 1 GB written to its root filesystem, with the writable
layer on a disk of its own (--root-overlay disk, the default) against in memory (--root-overlay
memory, as before), each in its own private b3osd in the same run. Medians of the fork's server
total and of its phases (snapshot: the checkpoint writing the image; precreate: runsc create of
the fork's container; disk: making the fork's disk; restore: the image read back), and the
image's size (a snapshot of the same source).

Both daemons run without pools (--fork-pool 0 --warm-pool 0), so every fork makes its own
container (and, on disk, its own disk) on the request path, like for like; the sources have
memory_mib 2048 (the in-memory overlay holds the 1 GB file in memory) and disk_gib 2.
Usage (root): bench/disk.py [--bin build/bin] [--runs N]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon, server_timing  # noqa: E402

MB = 1000 * 1000
SIZES = [("0", 0), ("100 MB", 100 * MB), ("1 GB", 1000 * MB)]
PHASES = ["snapshot", "disk", "precreate", "restore", "agent"]


def measure(bindir, templates, overlay, runs):
    out = {}
    flags = ["--warm-pool", "0", "--fork-pool", "0", "--template-checkpoints", "off", "--root-overlay", overlay]
    with PrivateDaemon(bindir, templates, flags) as d:
        c = d.client
        for label, size in SIZES:
            _, b = c.call("POST", "/v1/sandboxes",
                          {"template": "base", "forkable": True, "memory_mib": 2048, "disk_gib": 2, "timeout_s": 3600})
            src = json.loads(b)["id"]
            if size:
                cmd = f"head -c {size} /dev/urandom > /workspace/data && sync"
                c.call("POST", f"/v1/sandboxes/{src}/exec", {"cmd": cmd, "timeout_ms": 600000})
            totals, phases = [], {p: [] for p in PHASES}
            for _ in range(runs):
                r, b = c.call("POST", f"/v1/sandboxes/{src}/fork", {"count": 1})
                st = server_timing(r)
                totals.append(st.get("total", float("nan")))
                for p in PHASES:
                    phases[p].append(st.get(p, 0.0))
                for f in json.loads(b)["data"]:
                    c.call("DELETE", f"/v1/sandboxes/{f['id']}")
                time.sleep(0.5)
            r, b = c.call("POST", f"/v1/sandboxes/{src}/snapshot")
            snap = json.loads(b)
            c.call("DELETE", f"/v1/snapshots/{snap['id']}")
            c.call("DELETE", f"/v1/sandboxes/{src}")
            out[label] = {"total": statistics.median(totals),
                          "phases": {p: statistics.median(v) for p, v in phases.items()},
                          "image_mb": snap["size_bytes"] / MB}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    disk = measure(args.bin, args.templates, "disk", args.runs)
    mem = measure(args.bin, args.templates, "memory", args.runs)
    print(f"fork count 1 by data written: {os.cpu_count()} cores, {args.runs} runs, medians (ms)")
    print(f"{'written':8} {'overlay':7} {'total':>8} {'ratio':>6} {'image MB':>9}  " +
          " ".join(f"{p:>9}" for p in PHASES))
    for label, _ in SIZES:
        for name, res in (("disk", disk), ("memory", mem)):
            r = res[label]
            ratio = r["total"] / mem[label]["total"] if mem[label]["total"] else float("nan")
            print(f"{label:8} {name:7} {r['total']:8.1f} {ratio:6.2f} {r['image_mb']:9.1f}  " +
                  " ".join(f"{r['phases'][p]:9.1f}" for p in PHASES))


if __name__ == "__main__":
    main()

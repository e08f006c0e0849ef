#!/usr/bin/env python3
"""Host memory per idle sandbox: starts a private b3osd, creates N idle `base` sandboxes, and sums
the proportional set size (PSS, so shared runsc text counts once) of each sandbox's host
processes: runsc-sandbox, runsc-gofer and b3os-shim. Also the fork of a sandbox holding 256 MiB
of dirty memory. Usage (root): bench/density.py [--bin build/bin] [--count 10]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon, pids_where, server_timing  # noqa: E402


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pids_of(needle):
    return pids_where(lambda cmd: needle in cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    with PrivateDaemon(args.bin, args.templates, ["--warm-pool", "0"]) as d:
        c = d.client
        ids = [json.loads(c.call("POST", "/v1/sandboxes", {"template": "base"})[1])["id"] for _ in range(args.count)]
        time.sleep(3)  # let them settle idle
        per = []
        for sid in ids:
            # runsc-sandbox and runsc-gofer carry the id in their argv; the shim its socket path.
            per.append(sum(pss_kb(p) for p in pids_of(sid)))
        med_mb = statistics.median(per) / 1024
        avail_gib = 24
        print(f"idle sandboxes: {args.count}; host PSS per sandbox (sandbox+gofer+shim): median {med_mb:.1f} MB, "
              f"min {min(per)/1024:.1f}, max {max(per)/1024:.1f}")
        print(f"=> about {int(avail_gib * 1024 / med_mb)} idle sandboxes in {avail_gib} GiB by memory alone "
              f"(the per-node limit, --max-sandboxes-per-node, is a separate setting)")
        for sid in ids:
            c.call("DELETE", f"/v1/sandboxes/{sid}")
        # Fork of a sandbox holding 256 MiB of dirty memory.
        _, b = c.call("POST", "/v1/sandboxes", {"template": "base", "forkable": True, "memory_mib": 1024})
        src = json.loads(b)["id"]
        c.call("POST", f"/v1/sandboxes/{src}/exec", {"cmd": "nohup python3 -c \"import os,time\nb=bytearray(os.urandom(256<<20))\ntime.sleep(3600)\" >/dev/null 2>&1 & sleep 4"})
        times = []
        for _ in range(3):
            r, b = c.call("POST", f"/v1/sandboxes/{src}/fork", {"count": 1})
            times.append(server_timing(r))
            for f in json.loads(b)["data"]:
                c.call("DELETE", f"/v1/sandboxes/{f['id']}")
        c.call("DELETE", f"/v1/sandboxes/{src}")
        med = lambda k: statistics.median(t.get(k, 0) for t in times)
        print(f"fork count 1 of a sandbox with 256 MiB dirty: total {med('total'):.0f} ms, paused "
              f"{med('pause') + med('snapshot'):.0f} ms (snapshot {med('snapshot'):.0f}), restore {med('restore'):.0f} ms, "
              f"precreate {med('precreate'):.0f} ms")


if __name__ == "__main__":
    main()

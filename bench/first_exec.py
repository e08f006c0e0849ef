#!/usr/bin/env python3
"""The first exec in a fork just made, beside an exec in its source, with and without
--refill-settle-ms (issue 25: "the fork's first exec: no slower than an exec in the source").

A busy forkable source (a python writing a file every 50 ms) is forked --runs times; right after
each fork one exec of `true` goes to the fork and one to the source, taking turns at going first
(the first one meets whatever the node does after a fork). Run on one b3osd with its default
--refill-settle-ms and on one with 0 (pool refills start the moment a fork's launch ends), in
turn, --rounds times. Medians of the round trips (ms).

Usage (root, base template built): bench/first_exec.py [--runs 16] [--rounds 2]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon, busy_source, exec_ms  # noqa: E402



def one(bindir, templates, flags, runs):
    with PrivateDaemon(bindir, templates, flags) as d:
        c = d.client
        time.sleep(3)
        src = busy_source(c)
        time.sleep(1)
        in_fork, in_src = [], []
        for i in range(runs):
            _, b = c.call("POST", f"/v1/sandboxes/{src}/fork", {"count": 1})
            fid = json.loads(b)["data"][0]["id"]
            if i % 2:
                in_fork.append(exec_ms(c, fid))
                in_src.append(exec_ms(c, src))
            else:
                in_src.append(exec_ms(c, src))
                in_fork.append(exec_ms(c, fid))
            c.call("DELETE", f"/v1/sandboxes/{fid}")
            time.sleep(1.5)
        c.call("DELETE", f"/v1/sandboxes/{src}")
    return statistics.median(in_fork), statistics.median(in_src)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    a = ap.parse_args()
    print(f"first exec in a fork of a busy source, beside one in the source: {os.cpu_count()} cores, "
          f"{a.runs} forks per run, medians (ms)")
    print(f"{'b3osd':28} {'in the fork':>12} {'in the source':>14} {'ratio':>6}")
    for r in range(a.rounds):
        for name, flags in (("--refill-settle-ms 0", ["--refill-settle-ms", "0"]), ("default (250)", [])):
            f, s = one(a.bin, a.templates, flags, a.runs)
            print(f"{name + f' (run {r + 1})':28} {f:12.1f} {s:14.1f} {f / s:6.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

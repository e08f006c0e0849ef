#!/usr/bin/env python3
"""Where a fork's time goes inside the runtime (issue 25: "measure where the checkpoint time
goes"): b3osd with --runsc-debug, a busy forkable source (a python writing a file every 50 ms)
forked --runs times, and each fork's phases (Server-Timing) beside what the sentry itself logged
for that checkpoint and that restore:

  save      from the checkpoint call to "Overall save took" (the world stopped, the kernel's
            state serialised, the memory file written), split into its kernel and memory parts
  restore   from the restore call to "Restore successful", split into the seccomp filter built
            and installed (this runsc has no precompiled filters), the kernel's state loaded,
            the memory file loaded

What is left of b3os's own "snapshot" and "restore" phases after the sentry's figures is b3osd's
part (its control-socket calls, the image files, locks). Medians of --runs.

Usage (root, base template built): bench/fork_runtime.py [--runs 10]
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon, busy_source, server_timing  # noqa: E402


# glog lines: I1207 00:44:44.022351   14813 file.go:489] message
LINE = re.compile(r"^[IWDE](\d{4}) (\d\d:\d\d:\d\d\.\d{6})\s+\d+ [^\]]+\] (.*)$")
TOOK = re.compile(r"took \[([0-9.]+)(µs|ms|s)\]")


def ms_of(m):
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "µs" else v * 1000 if unit == "s" else v


def events(path):
    """(time in ms of the day, message) of each glog line of a runsc log."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if m:
                t = datetime.strptime(m.group(2), "%H:%M:%S.%f")
                out.append(((t.hour * 3600 + t.minute * 60 + t.second) * 1000 + t.microsecond / 1000, m.group(3)))
    return out


def saves(path):
    """Each checkpoint the source's sentry logged: {save, kernel, memory} in ms."""
    out, start, cur = [], None, {}
    for t, msg in events(path):
        if msg.startswith("containerManager.Checkpoint"):
            start, cur = t, {}
        elif start is not None and (m := TOOK.search(msg)):
            if msg.startswith("Kernel save took"):
                cur["kernel"] = ms_of(m)
            elif msg.startswith("Memory files save took"):
                cur["memory"] = ms_of(m)
            elif msg.startswith("Overall save took"):
                cur["save"] = t - start
                out.append(cur)
                start = None
    return out


def restore(path):
    """The restore a fork's sentry logged: {restore, seccomp, kernel, memory} in ms, or None."""
    start, cur, seccomp_from = None, {}, None
    for t, msg in events(path):
        if msg.startswith("containerManager.Restore"):
            start = t
        elif start is None:
            continue
        elif msg.startswith("No precompiled program found") or msg.startswith("Loaded precompiled seccomp"):
            seccomp_from = t
        elif msg.startswith("Seccomp filters installed") and seccomp_from is not None:
            cur["seccomp"] = t - seccomp_from
        elif msg.startswith("Kernel load took") and (m := TOOK.search(msg)):
            cur["kernel"] = ms_of(m)
        elif msg.startswith("Memory files load took") and (m := TOOK.search(msg)):
            cur["memory"] = ms_of(m)
        elif msg.startswith("Restore successful"):
            cur["restore"] = t - start
            return cur
    return None


def med(rows, key):
    xs = [r[key] for r in rows if key in r]
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    ap.add_argument("flags", nargs="*", help="more b3osd flags (after --)")
    a = ap.parse_args()
    # No spares: a busy source never has one, and their checkpoints would mix into the log.
    with PrivateDaemon(a.bin, a.templates, ["--runsc-debug", "--fork-ahead", "0", *a.flags]) as d:
        c = d.client
        time.sleep(3)
        src = busy_source(c)
        phases, restores = [], []
        for _ in range(a.runs):
            r, b = c.call("POST", f"/v1/sandboxes/{src}/fork", {"count": 1})
            phases.append(server_timing(r))
            fid = json.loads(b)["data"][0]["id"]
            logs = glob.glob(f"{d.tmp}/run/sandboxes/{fid}/runsc-debug/*.boot.txt")
            got = restore(logs[0]) if logs else None
            if got:
                restores.append(got)
            c.call("DELETE", f"/v1/sandboxes/{fid}")
            time.sleep(1.5)
        logs = glob.glob(f"{d.tmp}/run/sandboxes/{src}/runsc-debug/*.boot.txt")
        saved = saves(logs[0]) if logs else []
        c.call("DELETE", f"/v1/sandboxes/{src}")

    print(f"b3os fork, by the runtime's own log: {os.cpu_count()} cores, busy source, {a.runs} runs, medians (ms)")
    print(f"  b3os phases    snapshot {med(phases, 'snapshot'):.1f}, restore {med(phases, 'restore'):.1f}, "
          f"agent {med(phases, 'agent'):.1f}, total {med(phases, 'total'):.1f}")
    print(f"  sentry save    {med(saved, 'save'):.1f} (kernel state {med(saved, 'kernel'):.1f}, "
          f"memory file {med(saved, 'memory'):.1f}; {len(saved)} logged)")
    print(f"  sentry restore {med(restores, 'restore'):.1f} (seccomp filter {med(restores, 'seccomp'):.1f}, "
          f"kernel state {med(restores, 'kernel'):.1f}, memory file {med(restores, 'memory'):.1f}; "
          f"{len(restores)} logged)")
    print(f"  b3osd's own    snapshot - save {med(phases, 'snapshot') - med(saved, 'save'):.1f}, "
          f"restore - restore {med(phases, 'restore') - med(restores, 'restore'):.1f}")


if __name__ == "__main__":
    sys.exit(main())

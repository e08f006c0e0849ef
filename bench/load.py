#!/usr/bin/env python3
"""Throughput under load: N clients (default 20) each looping create, exec
`python3 -c 'print(1)'`, delete for a duration (default 120 s) against a private b3osd, and
optionally the same against a baseline build back to back (baseline first).

Prints cycles/s, p50/p99 of each operation, the ratios to the baseline, the medians of the
server's phases (the `timing` of each answer: where the time goes) and any error.
The clients are tests/reliability/load.py's (mode `bench`): one kept-alive connection each,
429/503 retried after Retry-After.

Usage (root): bench/load.py [--bin build/bin] [--baseline-bin DIR] [--duration 120]
                            [--clients 20] [--flags "--warm-pool 2 ..."]
"""
import argparse
import importlib.util
import json
import os
import shlex
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import PrivateDaemon  # noqa: E402

# tests/reliability/load.py under another name (this file is load.py too).
_spec = importlib.util.spec_from_file_location(
    "reliability_load", os.path.join(os.path.dirname(HERE), "tests", "reliability", "load.py"))
load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load)

OPS = ["create", "exec", "delete"]


def wait_ready(port, timeout_s=120):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def run_one(label, bindir, args):
    flags = shlex.split(args.flags)
    with PrivateDaemon(bindir, args.templates, flags) as d:
        if not wait_ready(d.port):
            sys.exit(f"{label}: b3osd in {bindir} did not answer /healthz (log: {d.tmp}/b3osd.log)")
        d.wait_containers(args.pool, timeout_s=120)  # the pools fill before the clock starts
        key = d.client.auth["Authorization"].split()[1]
        url = f"http://127.0.0.1:{d.port}"
        stats = load.Stats(load.documented_statuses())
        # Where deletes wait: sandboxes whose directory is still there after their delete was
        # answered (the release backlog; the pools' members and live sandboxes subtracted).
        samples, stop = [], threading.Event()

        def sample():
            while not stop.wait(0.5):
                try:
                    dirs = len(os.listdir(f"{d.tmp}/run/sandboxes"))
                except OSError:
                    continue
                with stats.lock:
                    live = stats.live
                samples.append(max(dirs - live - args.pool, 0))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        done, secs = load.run_clients(url, [key], stats, "bench", args.clients, duration=args.duration,
                                      idempotency=False)
        stop.set()
        sampler.join()
        out = load.summary(stats, "bench", done, secs, label=f"{label}: ")
        out["backlog_p50"], out["backlog_max"] = load.pct(samples, 50), max(samples or [0])
        print(f"# {label}: deleted sandboxes not yet released (dirs left): median {out['backlog_p50']}, "
              f"max {out['backlog_max']} (over {len(samples)} samples)", flush=True)
        out["phases"] = {op: load.phase_medians(stats, op) for op in OPS}
        for op in OPS:
            ph = out["phases"][op]
            if ph:
                info = ", ".join(f"{k[:-3] if k.endswith('_ms') else k} {v:.1f}" for k, v in ph.items())
                print(f"# {label}: {op} phases (median ms): {info}", flush=True)
        out["errors_list"] = stats.errors[:20] + stats.server_errors[:20]
        for e in out["errors_list"]:
            print(f"# {label}: error: {e}", flush=True)
        out["statuses"] = {f"{r} {s}": n for (r, s), n in sorted(stats.statuses.items())}
        print(f"# {label}: statuses {json.dumps(out['statuses'])}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--baseline-bin", default=None)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--flags", default="", help="more b3osd flags for both daemons (the defaults otherwise)")
    ap.add_argument("--pool", type=int, default=5, help="containers the pools hold when full (default 2 + 3)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()

    runs = []
    if args.baseline_bin:
        runs.append(("baseline", args.baseline_bin))
    runs.append(("today", args.bin))
    res = {}
    for label, bindir in runs:
        print(f"# {label}: {os.path.abspath(bindir)}, {args.clients} clients, {args.duration:g} s", flush=True)
        res[label] = run_one(label, bindir, args)

    print(f"\nload: {args.clients} clients looping create, exec `python3 -c 'print(1)'`, delete for "
          f"{args.duration:g} s each; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    cols = [label for label, _ in runs]
    head = f"{'metric':22}" + "".join(f"{c:>12}" for c in cols) + (f"{'ratio':>8}" if len(cols) == 2 else "")
    print(head)

    def row(name, get):
        vals = [get(res[c]) for c in cols]
        line = f"{name:22}" + "".join(f"{v:12.2f}" if v == v else f"{'-':>12}" for v in vals)
        if len(vals) == 2 and vals[0]:
            line += f"{vals[1] / vals[0]:8.2f}"
        print(line)

    row("cycles/s", lambda r: r["cycles_per_s"])
    row("cycles", lambda r: float(r["cycles"]))
    row("errors", lambda r: float(r["errors"]))
    row("429/503 retries", lambda r: float(r["retries"]))
    row("release backlog p50", lambda r: float(r["backlog_p50"]))
    row("release backlog max", lambda r: float(r["backlog_max"]))
    for op in OPS:
        row(f"{op} p50 (ms)", lambda r, op=op: r.get(op, {}).get("p50_ms", float("nan")))
        row(f"{op} p99 (ms)", lambda r, op=op: r.get(op, {}).get("p99_ms", float("nan")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 1 if any(r["errors"] for r in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

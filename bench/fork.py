#!/usr/bin/env python3
"""Fork, measured as issue 25 asks: the realistic source beside the easy one, each against the
raw runsc baseline (checkpoint --leave-running, create, restore) measured in the same run.

  quiet source   a forkable sandbox with only its agent alive, nothing changed since its last fork
                 (fork-ahead's case: a claim of a spare made ahead); the same with --fork-ahead 0
                 on a second b3osd, in the same run, as the baseline it replaces
  busy source    the same with a python writing a file every 50 ms (a process the fork continues)
  count 3        of the busy source
  first exec     `true` in a fork just made, against `true` in its source
  disk           the busy source after 100 MB (and 1 GB) written to its disk

Each case: the median server total (Server-Timing "total") and the median of each phase, over
--runs forks (forks deleted, 1.5 s between forks so that pools refill as between a user's
forks). Raw: the same shapes by hand with runsc on the base template (/bin/sleep, or the same
python, as PID 1). b3osd runs with its defaults (but --network off, as every bench here).

Usage (root, base template built): bench/fork.py [--runs 20] [--disk-mb 100,1024] [-- b3osd flags]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TICKER, PrivateDaemon, busy_source, exec_ms, server_timing  # noqa: E402



def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fork_runs(c, src, count, runs, first_exec=None, src_exec=None):
    """`runs` forks of src: their Server-Timing phases, each a dict; first_exec collects the
    first exec's round trip in each fork (ms), and src_exec one in the source beside it
    (the same moment: the same pause before it, the same work of the node's in the background;
    the two take turns at going first)."""
    out = []
    for _ in range(runs):
        r, b = c.call("POST", f"/v1/sandboxes/{src}/fork", {"count": count})
        out.append(server_timing(r))
        ids = [f["id"] for f in json.loads(b)["data"]]
        # Whichever exec comes first meets the pools refilling after the fork: the two take turns.
        pair = [(first_exec, ids[0]), (src_exec, src)]
        for into, sid in (pair if len(out) % 2 else pair[::-1]):
            if into is not None:
                into.append(exec_ms(c, sid))
        for i in ids:
            c.call("DELETE", f"/v1/sandboxes/{i}")
        time.sleep(1.5)
    return out


def phases(samples):
    keys = []
    for s in samples:
        keys += [k for k in s if k not in keys]
    return {k: median([s.get(k, 0.0) for s in samples]) for k in keys}


def raw_forks(templates, tmp, args, runs):
    """runsc by hand: a container running `args`, checkpointed (left running) and restored into a
    new container, `runs` times: the round trips (ms)."""
    root = f"{tmp}/raw-{abs(hash(tuple(args)))}"
    bundle = f"{root}/bundle"
    os.makedirs(bundle)
    cfg = {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": args,
                    "env": ["PATH=/usr/bin:/bin"], "cwd": "/"},
        "root": {"path": f"{templates}/base/rootfs", "readonly": False},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                                 {"type": "network"}]},
    }
    with open(f"{bundle}/config.json", "w") as f:
        json.dump(cfg, f)
    rawc = ["runsc", "--root", f"{root}/state", "--overlay2", "root:memory", "--network", "none"]
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run(rawc + ["create", "--bundle", bundle, "src"], check=True, **quiet)
    subprocess.run(rawc + ["start", "src"], check=True)
    time.sleep(0.5)
    out = []
    for i in range(runs):
        img = f"{root}/img{i}"
        os.makedirs(img)
        t0 = time.perf_counter()
        subprocess.run(rawc + ["checkpoint", "--leave-running", "--compression=none", "--image-path", img, "src"], check=True)
        subprocess.run(rawc + ["create", "--bundle", bundle, f"f{i}"], check=True, **quiet)
        subprocess.run(rawc + ["restore", "--detach", "--image-path", img, "--bundle", bundle, f"f{i}"], check=True)
        out.append((time.perf_counter() - t0) * 1000)
        subprocess.run(rawc + ["delete", "--force", f"f{i}"], check=True)
        shutil.rmtree(img, ignore_errors=True)
    subprocess.run(rawc + ["delete", "--force", "src"], check=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--disk-mb", default="100,1024", help="sizes written to the busy source's disk, in turn ('' for none)")
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    ap.add_argument("flags", nargs="*", help="more b3osd flags (after --)")
    a = ap.parse_args()
    rows, breakdown = [], []
    with PrivateDaemon(a.bin, a.templates, a.flags) as d:
        c, tmp = d.client, d.tmp
        time.sleep(3)  # the pools fill before anything is timed

        # Quiet: only the agent; forked once first, so the runs fork a source unchanged since.
        _, b = c.call("POST", "/v1/sandboxes", {"template": "base", "forkable": True})
        quiet = json.loads(b)["id"]
        fork_runs(c, quiet, 1, 1)
        q_first = []
        q = fork_runs(c, quiet, 1, a.runs, q_first)
        # After the forks, since an exec changes the source (its spare would go): each after
        # the same pause as a fork's first exec, not hot from the one before it.
        q_src_exec = []
        for _ in range(a.runs):
            time.sleep(1.5)
            q_src_exec.append(exec_ms(c, quiet))
        c.call("DELETE", f"/v1/sandboxes/{quiet}")

        # Busy: a python writing a file every 50 ms.
        busy = busy_source(c)
        first, src_exec = [], []
        b1 = fork_runs(c, busy, 1, a.runs, first, src_exec)
        b3 = fork_runs(c, busy, 3, max(5, a.runs // 2))
        c.call("DELETE", f"/v1/sandboxes/{busy}")
        # Disk: a busy source with room for 1 GB (2 GiB of disk: another geometry than the
        # fork pool's containers, so these forks create theirs).
        disk = []
        sizes = [int(x) for x in a.disk_mb.split(",") if x.strip()]
        if sizes:
            big = busy_source(c, 2)
            for mb in sizes:
                c.call("POST", f"/v1/sandboxes/{big}/exec",
                       {"cmd": ["dd", "if=/dev/urandom", f"of=/workspace/blob{mb}", "bs=1M", f"count={mb}"], "timeout_ms": 600000})
                disk.append((mb, fork_runs(c, big, 1, max(3, a.runs // 4))))
                c.call("POST", f"/v1/sandboxes/{big}/exec", {"cmd": ["rm", "-f", f"/workspace/blob{mb}"]})
            c.call("DELETE", f"/v1/sandboxes/{big}")

        raw_quiet = raw_forks(a.templates, tmp, ["/bin/sleep", "100000"], a.runs)
        raw_busy = raw_forks(a.templates, tmp, ["python3", "-c", TICKER], a.runs)

    # The quiet source again without spares: what a claim replaces, measured in the same run.
    q_off = []
    if "--fork-ahead" not in a.flags:
        with PrivateDaemon(a.bin, a.templates, a.flags + ["--fork-ahead", "0"]) as d:
            time.sleep(3)
            _, b = d.client.call("POST", "/v1/sandboxes", {"template": "base", "forkable": True})
            quiet = json.loads(b)["id"]
            fork_runs(d.client, quiet, 1, 1)
            q_off = fork_runs(d.client, quiet, 1, a.runs)

    tot = lambda s: median([x.get("total", float("nan")) for x in s])  # noqa: E731
    rows.append(("fork count 1, quiet source (ms)", tot(q), median(raw_quiet), "< 10 ms (issue 25)"))
    if q_off:
        rows.append(("  the same, --fork-ahead 0 (ms)", tot(q_off), median(raw_quiet), "what a claim replaces"))
    rows.append(("first exec in a fork of the quiet source (ms)", median(q_first), median(q_src_exec),
                 "no slower than in the source"))
    rows.append(("fork count 1, busy source (ms)", tot(b1), median(raw_busy), "< 52 ms (issue 25)"))
    rows.append(("fork count 3, busy source (ms)", tot(b3), tot(b1), "<= 1.3x count 1 (issue 25)"))
    rows.append(("first exec in a fork of the busy source (ms)", median(first), median(src_exec),
                 "no slower than in the source"))
    for mb, s in disk:
        rows.append((f"fork count 1, busy, 2 GiB disk, {mb} MB written (ms)", tot(s), None, "report; no worse than before"))
    breakdown = [("quiet", phases(q))] + ([("quiet, off", phases(q_off))] if q_off else []) + \
        [("busy", phases(b1)), ("busy x3", phases(b3))] + \
        [(f"busy +{mb} MB", phases(s)) for mb, s in disk]

    print(f"b3os fork benchmark: {os.cpu_count()} cores, {a.runs} runs, medians")
    print(f"{'metric':46} {'b3os':>9} {'baseline':>9} {'ratio':>6}  target")
    for name, ours, raw, target in rows:
        raw_s = f"{raw:9.1f}" if raw is not None else f"{'':>9}"
        ratio = f"{ours / raw:6.2f}" if raw else f"{'':>6}"
        print(f"{name:46} {ours:9.1f} {raw_s} {ratio}  {target}")
    print("baselines: raw runsc checkpoint + create + restore of the same shape (fork rows), count 1 (count 3),")
    print("           an exec in the source (first exec rows: the busy one's beside the fork's, turn about,")
    print("           the quiet one's after the same 1.5 s pause, since an exec changes the quiet source)")
    print("phases (ms, medians of Server-Timing):")
    for name, ph in breakdown:
        print(f"  {name:14} " + ", ".join(f"{k} {v:.1f}" for k, v in ph.items()))


if __name__ == "__main__":
    sys.exit(main())

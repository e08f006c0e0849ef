#!/usr/bin/env python3
"""Idle density: what N idle sandboxes cost the node once the idle freezer has frozen them.

Starts a private b3osd, then on the empty node measures the exec of `true` in one sandbox
(back to back: never frozen between) and the same exec after the sandbox was frozen idle (a
pause longer than the grace before each: the thaw is on the exec's path). Then launches N
idle `base` sandboxes, waits for them to be frozen, and measures
  - the CPU used by all sandbox host processes together (runsc-sandbox, runsc-gofer, b3os-shim:
    utime + stime from /proc/PID/stat) over --window seconds, as a share of one core;
  - the exec of `true` in the first sandbox again, against its median on the empty node.
Prints medians and ratios. Usage (root):
  bench/idle.py [--bin build/bin] [--count 300] [--runs 30] [--freeze-ms 1500]
  bench/idle.py --until-fail [--max-used-gib 18] [--max-pid-frac 0.8]   # launch until something gives
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon, pids_where  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def used_gib():
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0])
    return (m["MemTotal"] - m["MemAvailable"]) / (1 << 20)


def threads_used():
    """(threads on the host, pid_max): every thread takes a pid."""
    total = int(open("/proc/loadavg").read().split()[3].split("/")[1])
    return total, int(open("/proc/sys/kernel/pid_max").read())


def sandbox_pids(tmp):
    """Host processes of the daemon's sandboxes: runsc (sandbox, gofer) under its root, and shims."""
    return pids_where(lambda cmd: tmp in cmd and ("runsc" in cmd or "b3os-shim" in cmd))


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            # Fields after the command (which may hold spaces): utime is the 14th, stime the 15th.
            rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += int(rest[11]) + int(rest[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


def freezer_states(ids):
    out = {}
    for sid in ids:
        try:
            s = open(f"/sys/fs/cgroup/freezer/b3os/{sid}/freezer.state").read().strip()
        except OSError:
            s = "unknown"
        out[s] = out.get(s, 0) + 1
    return out


def exec_ms(c, sid):
    t0 = time.perf_counter()
    c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    return (time.perf_counter() - t0) * 1000


def idle_cpu(d, seconds):
    pids = sandbox_pids(d.tmp)
    t0, c0 = time.time(), cpu_ticks(pids)
    time.sleep(seconds)
    t1, c1 = time.time(), cpu_ticks(pids)
    return (c1 - c0) / TICK / (t1 - t0), len(pids)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--count", type=int, default=300, help="idle sandboxes to launch")
    ap.add_argument("--runs", type=int, default=30, help="execs per measurement")
    ap.add_argument("--window", type=float, default=10.0, help="seconds over which idle CPU is measured")
    ap.add_argument("--freeze-ms", type=int, default=1500, help="--idle-freeze-ms of the daemon (0: never freeze)")
    ap.add_argument("--until-fail", action="store_true", help="launch until a create fails or memory runs short")
    ap.add_argument("--max-used-gib", type=float, default=18.0, help="stop launching above this much host memory used")
    ap.add_argument("--max-pid-frac", type=float, default=0.8, help="stop launching above this share of pid_max in threads")
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    limit = 100000 if args.until_fail else args.count + 10
    flags = ["--warm-pool", "0", "--idle-freeze-ms", str(args.freeze_ms),
             "--max-sandboxes-per-node", str(limit), "--max-sandboxes-per-project", str(limit)]
    grace_s = max(args.freeze_ms, 0) / 1000
    with PrivateDaemon(args.bin, args.templates, flags) as d:
        c = d.client
        d.wait_containers(3)  # the fork pool fills first
        sid = json.loads(c.call("POST", "/v1/sandboxes", {"template": "base", "timeout_s": 86400})[1])["id"]
        for _ in range(3):
            exec_ms(c, sid)
        empty = [exec_ms(c, sid) for _ in range(args.runs)]
        thawed, gap = [], []
        if args.freeze_ms > 0:
            # The same exec after the same idle gap in a sandbox that is never frozen (a process
            # left behind keeps it thawed): what the thaw itself costs, apart from the gap.
            busy = json.loads(c.call("POST", "/v1/sandboxes", {"template": "base", "timeout_s": 86400})[1])["id"]
            c.call("POST", f"/v1/sandboxes/{busy}/exec", {"cmd": "nohup sleep 100000 >/dev/null 2>&1 &"})
            for _ in range(min(args.runs, 10)):
                time.sleep(grace_s + 1.0)
                thawed.append(exec_ms(c, sid))
                gap.append(exec_ms(c, busy))
            c.call("DELETE", f"/v1/sandboxes/{busy}")
        time.sleep(grace_s + 1.0)  # the measuring sandbox frozen too, when freezing is on
        base_cpu, base_pids = idle_cpu(d, args.window)
        print(f"empty node: exec `true` median {statistics.median(empty):.2f} ms (back to back: never frozen, {args.runs} runs)")
        if thawed:
            print(f"empty node: exec `true` in a frozen-idle sandbox median {statistics.median(thawed):.2f} ms "
                  f"({len(thawed)} runs; x{statistics.median(thawed) / statistics.median(empty):.2f} of back to back)")
            print(f"empty node: exec `true` after the same idle gap, never frozen (a process left behind) median "
                  f"{statistics.median(gap):.2f} ms; frozen-idle x{statistics.median(thawed) / statistics.median(gap):.2f}")
        print(f"empty node: idle CPU of 1 sandbox + pool: {base_cpu * 100:.2f}% of one core ({base_pids} processes)")

        ids, t0, gave = [], time.time(), None
        target = limit if args.until_fail else args.count
        while len(ids) < target:
            if used_gib() > args.max_used_gib:
                gave = f"host memory used passed {args.max_used_gib} GiB (stopped by the bench)"
                break
            nthreads, pid_max = threads_used()
            if nthreads > args.max_pid_frac * pid_max:
                gave = (f"{nthreads} threads on the host, over {args.max_pid_frac:.0%} of pid_max {pid_max} "
                        f"(stopped by the bench: other processes of the host need pids too)")
                break
            try:
                r = c.call("POST", "/v1/sandboxes", {"template": "base", "timeout_s": 86400})
                ids.append(json.loads(r[1])["id"])
            except Exception as e:  # noqa: BLE001
                gave = f"create {len(ids) + 1} failed: {e}"
                break
            if len(ids) % 50 == 0:
                print(f"  {len(ids)} launched in {time.time() - t0:.0f} s, host memory used {used_gib():.1f} GiB, "
                      f"threads {threads_used()[0]}", flush=True)
        print(f"launched {len(ids)} idle sandboxes in {time.time() - t0:.0f} s; host memory used {used_gib():.1f} GiB, "
              f"threads {threads_used()[0]}"
              + (f"; stopped: {gave}" if gave else ""))
        time.sleep(grace_s + 3)
        print(f"freezer states: {freezer_states(ids)}")
        cpu, npids = idle_cpu(d, args.window)
        print(f"idle CPU of all sandbox processes ({npids}) over {args.window:.0f} s: {cpu * 100:.2f}% of one core "
              f"(target < 5%)")
        for _ in range(3):
            exec_ms(c, sid)
        loaded = [exec_ms(c, sid) for _ in range(args.runs)]
        ratio = statistics.median(loaded) / statistics.median(empty)
        print(f"with {len(ids)} idle: exec `true` median {statistics.median(loaded):.2f} ms, "
              f"x{ratio:.2f} of the empty node (target <= 1.2)")
        t0 = time.time()
        for i in ids:
            try:
                c.call("DELETE", f"/v1/sandboxes/{i}")
            except Exception as e:  # noqa: BLE001
                print(f"delete {i}: {e}")
        print(f"deleted {len(ids)} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()

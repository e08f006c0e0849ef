#!/usr/bin/env python3
"""E2B's SDK against b3os's own REST API, same run, same b3osd (docs/e2b.md):

  commands.run('true') through the unmodified e2b SDK (a background process, its output
  followed over a Connect stream, as E2B's envd does) against REST exec of ["true"], and
  against REST exec of what the SDK runs (/bin/bash -l -c true), alternating call by call with
  --gap-ms before each (each call alone); then both back to back, in bursts of 10 of a kind
  after a pause of a second (an agent's turn), and 50 in a row with no pause;
  Sandbox.create() then its first command against REST create then exec.

Targets (issue 24): commands.run within 1.5x of REST exec; create-to-first-command reported.
Medians and ratios. Usage (root, base template built, npm ci in tests/e2b):
  bench/e2b.py [--calls 200] [--creates 20] [--gap-ms 150]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import PrivateDaemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=f"{ROOT}/build/bin")
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--creates", type=int, default=20)
    ap.add_argument("--gap-ms", type=int, default=150, help="pause before each call (0: back to back)")
    a = ap.parse_args()
    with PrivateDaemon(a.bin, a.templates) as d:
        d.wait_containers(2)
        e2b_key = subprocess.run([f"{a.bin}/b3os", "keys", "create", "--e2b", "--data-dir", f"{d.tmp}/data"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout.strip()
        url = f"http://127.0.0.1:{d.port}"
        env = dict(os.environ, E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY=e2b_key)
        admin = open(f"{d.tmp}/data/admin.key").read().strip()
        r = subprocess.run(["node", "bench_sdk.mjs", url, admin, str(a.calls), str(a.creates), str(a.gap_ms)],
                           cwd=f"{ROOT}/tests/e2b", env=env, stdout=subprocess.PIPE, text=True, check=True)
        s = json.loads(r.stdout.strip().splitlines()[-1])
    med = {k: statistics.median(v) for k, v in s.items()}
    print(f"commands.run('true') via the e2b SDK: median {med['sdk_run']:.2f} ms over {a.calls}")
    print(f"  the same with a new environment each call (no login shell started ahead): {med['sdk_cold']:.2f} ms")
    print(f"REST exec [\"true\"]:                  median {med['rest_true']:.2f} ms  (SDK/REST {med['sdk_run'] / med['rest_true']:.2f}x, target <= 1.5x)")
    print(f"REST exec bash -l -c true:           median {med['rest_bash']:.2f} ms  (SDK/REST same argv {med['sdk_run'] / med['rest_bash']:.2f}x)")
    print(f"back to back, bursts of 10 after 1 s: commands.run('true') {med['sdk_burst']:.2f} ms, REST exec [\"true\"] "
          f"{med['rest_burst']:.2f} ms  (SDK/REST {med['sdk_burst'] / med['rest_burst']:.2f}x); "
          f"with a new environment each call {med['sdk_cold_burst']:.2f} ms")
    print(f"  50 in a row with no pause: commands.run('true') {med['sdk_long']:.2f} ms, REST exec [\"true\"] "
          f"{med['rest_long']:.2f} ms  (SDK/REST {med['sdk_long'] / med['rest_long']:.2f}x)")
    pos = [statistics.median(s["sdk_burst"][i::10]) for i in range(10)]
    print("  commands.run('true') back to back, median by place in the burst: " + " ".join(f"{p:.1f}" for p in pos))
    print(f"Sandbox.create() + first command:    median {med['sdk_create_run']:.1f} ms over {a.creates}")
    print(f"REST create + exec:                  median {med['rest_create_exec']:.1f} ms  (ratio {med['sdk_create_run'] / med['rest_create_exec']:.2f}x)")


if __name__ == "__main__":
    main()

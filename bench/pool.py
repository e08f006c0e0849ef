#!/usr/bin/env python3
"""Create from the warm pool: server total_ms and client round trip of a non-forkable create
served by a ready sandbox, beside a cold create (boot) in the same run. Between creates the pool
is allowed to refill, so each create finds a ready sandbox. Usage (root): bench/pool.py [--runs N]
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench import Client, free_port  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    bindir = os.path.abspath(args.bin)
    tmp = tempfile.mkdtemp(prefix="b3os-pool-")
    port = free_port()
    root = f"{tmp}/run/runsc"
    daemon = subprocess.Popen(
        [f"{bindir}/b3osd", "--listen", f"127.0.0.1:{port}", "--data-dir", f"{tmp}/data", "--run-dir", f"{tmp}/run",
         "--runsc-root", root, "--templates-dir", args.templates, "--quiet-key", "--warm-pool", "2"],
        stdout=open(f"{tmp}/b3osd.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def containers():
        return len(subprocess.run(["runsc", "--root", root, "list", "--quiet"], stdout=subprocess.PIPE,
                                  text=True).stdout.split())

    def wait_pool(live):
        for _ in range(200):
            if containers() >= live + 2:
                return
            time.sleep(0.1)

    try:
        for _ in range(100):
            if os.path.exists(f"{tmp}/data/admin.key"):
                break
            time.sleep(0.1)
        time.sleep(0.3)
        c = Client(port, open(f"{tmp}/data/admin.key").read().strip())
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
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait()
        for i in subprocess.run(["runsc", "--root", root, "list", "--quiet"], stdout=subprocess.PIPE, text=True).stdout.split():
            subprocess.run(["runsc", "--root", root, "delete", "--force", i], stderr=subprocess.DEVNULL)
        subprocess.run(["pkill", "-f", f"b3os-shim {tmp}"], stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What the request bookkeeping of issue 13 costs (metrics per request and per operation, a
request id per answer): this build against a baseline build, both b3osd running at once, in
alternating rounds so that both see the same moments of the machine.

Measures, on kept-alive connections:
  get       GET /v1/sandboxes/ID     (the cheapest authenticated route: where a fixed cost shows most)
  exec      POST .../exec of `true`
each alone (one client) and with 20 clients at once. Prints medians and the ratio to the baseline.

Usage (root): bench/metrics_cost.py --baseline-bin OLD/bin [--bin build/bin] [--rounds 10] [--per-round 50]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, PrivateDaemon  # noqa: E402


def timed_calls(client, method, path, body, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.call(method, path, body)  # raises on an answer over 299
        out.append((time.perf_counter() - t0) * 1000)
    return out


def concurrent(daemon, key, method, path, body, clients, n):
    results, threads = [], []
    lock = threading.Lock()

    def worker():
        c = Client(daemon.port, key)
        xs = timed_calls(c, method, path, body, n)
        with lock:
            results.extend(xs)

    for _ in range(clients):
        threads.append(threading.Thread(target=worker))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def key_of(daemon):
    return open(f"{daemon.tmp}/data/admin.key").read().strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--baseline-bin", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=50)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    flags = ["--warm-pool", "0", "--fork-pool", "0", "--idle-freeze-ms", "0", "--template-checkpoints", "off"]
    with PrivateDaemon(args.bin, args.templates, flags) as new, \
            PrivateDaemon(args.baseline_bin, args.templates, flags) as old:
        sides = {}
        for name, d in (("this", new), ("baseline", old)):
            _, body = d.client.call("POST", "/v1/sandboxes", {"template": "base", "timeout_s": 3600})
            sbx = json.loads(body)["id"]
            d.client.call("POST", f"/v1/sandboxes/{sbx}/exec", {"cmd": ["true"]})  # warm
            sides[name] = (d, sbx)
        cases = [("get", "GET", "/v1/sandboxes/{id}", None), ("exec", "POST", "/v1/sandboxes/{id}/exec", {"cmd": ["true"]})]
        samples = {}
        for r in range(args.rounds):
            # Alternate which side goes first, so neither always follows the other.
            order = ["this", "baseline"] if r % 2 == 0 else ["baseline", "this"]
            for case, method, pattern, body in cases:
                for name in order:
                    d, sbx = sides[name]
                    path = pattern.format(id=sbx)
                    samples.setdefault((case, "alone", name), []).extend(
                        timed_calls(d.client, method, path, body, args.per_round))
                    per_client = max(1, args.per_round // 5)
                    samples.setdefault((case, f"{args.clients} clients", name), []).extend(
                        concurrent(d, key_of(d), method, path, body, args.clients, per_client))
        for name, (d, sbx) in sides.items():
            d.client.call("DELETE", f"/v1/sandboxes/{sbx}", None)
    print(f"{'case':<6} {'load':<11} {'this p50':>9} {'base p50':>9} {'ratio':>6} {'added':>9}   samples")
    for case, _, _, _ in cases:
        for load in ("alone", f"{args.clients} clients"):
            a = statistics.median(samples[(case, load, "this")])
            b = statistics.median(samples[(case, load, "baseline")])
            print(f"{case:<6} {load:<11} {a:>7.3f}ms {b:>7.3f}ms {a / b:>6.3f} {a - b:>+7.3f}ms   "
                  f"{len(samples[(case, load, 'this')])}/{len(samples[(case, load, 'baseline')])}")


if __name__ == "__main__":
    main()

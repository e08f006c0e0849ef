#!/usr/bin/env python3
"""The cluster's costs (docs/cluster.md), on one machine: a Postgres 15 of its own
(tests/store/postgres.sh), b3osd nodes on it with internal listeners, and a b3os-router.

1. Router overhead: exec of `true` (JSON answer) and create+delete, each through the router
   and straight to the node's API port in the same run, alternating, alone and with 20
   concurrent clients; medians and the router's added milliseconds.
2. Throughput: 20 clients looping create, exec `python3 -c 'print(1)'`, delete for a while
   (tests/reliability/load.py's clients) through the router in front of three nodes, against
   one node alone with the same CPU (the same machine), and the errors of each.
3. A snapshot restored on another node (its image fetched from the object store: s3rver on
   loopback from tests/cluster/node_modules, else a shared directory) against a local restore
   on the node that took it, taking turns; of an idle sandbox and of a busy one (a python
   process appending to a file every 50 ms); the first remote restore, which also fetches the
   template's root, apart.
4. A sandbox moved off a draining node (b3os nodes drain; forkable, idle and busy): the node's
   own time for the move and the longest gap a client polling exec through the router saw,
   against the same data path by hand in the same run: a snapshot on the node, then a restore
   of it on another node.

Usage (root): bench/cluster.py [--bin build/bin] [--rounds 200] [--duration 60] [--clients 20]
              [--restores 20] [--moves 5]
"""
import argparse
import concurrent.futures
import http.client
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import PrivateDaemon, free_port  # noqa: E402

_spec = importlib.util.spec_from_file_location("reliability_load", os.path.join(ROOT, "tests", "reliability", "load.py"))
load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load)

PG = os.path.join(ROOT, "tests", "store", "postgres.sh")
# Every node the same: the default pools; no template checkpoint built at start (three nodes
# building one at once on two cores would be the measurement).
COMMON = ["--template-checkpoints", "off", "--max-sandboxes-per-project", "64"]


def pg_start():
    out = subprocess.run(["bash", "-c", f". {PG}; pg_start >&2 && echo $PG_DIR"], stdout=subprocess.PIPE, text=True,
                         check=True).stdout.strip()
    return out


def pg_createdb(pg_dir, name):
    return subprocess.run(["bash", "-c", f". {PG}; PG_DIR={pg_dir}; pg_createdb {name}"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()


def psql(pg_dir, db, sql):
    subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", pg_dir, "-d", db, "-tAq", "-c", sql], check=True,
                   stdout=subprocess.DEVNULL)


def pg_stop(pg_dir):
    subprocess.run(["bash", "-c", f". {PG}; PG_DIR={pg_dir}; pg_stop"])


def wait_http(port, path="/healthz", timeout_s=60):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


class Router:
    def __init__(self, bindir, store, secret, tmp):
        self.port = free_port()
        self.proc = subprocess.Popen([f"{bindir}/b3os-router", "--port", str(self.port), "--store", store,
                                      "--cluster-secret-file", secret, "--name", "bench-router"],
                                     stdout=open(f"{tmp}/router.log", "w"), stderr=subprocess.STDOUT)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Conn:
    def __init__(self, port, key):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.c.request(method, path, body=None if body is None else json.dumps(body), headers=self.h)
        r = self.c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
        return json.loads(data) if data else None


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def overhead(node_port, router_port, key, rounds, clients):
    """Medians direct and through the router, the two taking turns request by request (so that
    the machine's drift falls on both): GET of a sandbox (the router's own cost, nearly alone),
    exec of `true`, create+delete; alone and with `clients` clients at once."""
    sid = Conn(node_port, key).call("POST", "/v1/sandboxes", {"timeout_s": 3600})["id"]
    out = {}

    def get(c):
        c.call("GET", f"/v1/sandboxes/{sid}")

    def exec_true(c):
        c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})

    def create_delete(c):
        s = c.call("POST", "/v1/sandboxes", {"timeout_s": 60})["id"]
        c.call("DELETE", f"/v1/sandboxes/{s}")

    def pairs(fn, n):
        d, r = Conn(node_port, key), Conn(router_port, key)
        direct, routed = [], []
        for i in range(n):
            first, second = ((d, direct), (r, routed)) if i % 2 == 0 else ((r, routed), (d, direct))
            first[1].append(timed(lambda: fn(first[0])))
            second[1].append(timed(lambda: fn(second[0])))
        return direct, routed

    try:
        for label, fn, n in (("GET sandbox", get, rounds * 2), ("exec true", exec_true, rounds),
                             ("create+delete", create_delete, max(rounds // 10, 10))):
            for conc in (1, clients):
                direct, routed = [], []
                per = n if conc == 1 else max(n // conc, 5)
                with concurrent.futures.ThreadPoolExecutor(conc) as ex:
                    for d, r in ex.map(lambda _: pairs(fn, per), range(conc)):
                        direct.extend(d)
                        routed.extend(r)
                name = f"{label}, {'alone' if conc == 1 else f'{conc} clients'}"
                out[name] = {"direct_ms": med(direct), "router_ms": med(routed), "n": len(direct)}
                dm, rm = out[name]["direct_ms"], out[name]["router_ms"]
                print(f"# {name}: direct {dm:.2f} ms, through the router {rm:.2f} ms ({rm - dm:+.2f} ms, "
                      f"{rm / dm:.2f}x), {len(direct)} each", flush=True)
    finally:
        Conn(node_port, key).call("DELETE", f"/v1/sandboxes/{sid}")
    return out


def restores(a, b, key, rounds):
    """Restores of one snapshot on the node that took it (a) and on another (b), taking turns;
    server total and fetch medians, and the client's wall time."""
    out = {}
    ca, cb = Conn(a.port, key), Conn(b.port, key)
    busy_cmd = ("nohup python3 -c 'import time\nwhile True:\n open(\"/tmp/tick\",\"a\").write(\"x\")\n time.sleep(0.05)' "
                ">/dev/null 2>&1 &")
    for label, cmd in (("idle", None), ("busy", busy_cmd)):
        sid = ca.call("POST", "/v1/sandboxes", {"timeout_s": 3600})["id"]
        try:
            if cmd:
                ca.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
                time.sleep(0.5)
            snap = ca.call("POST", f"/v1/sandboxes/{sid}/snapshot", {})
            snp = snap["id"]
            up = snap.get("timing", {}).get("upload_ms", float("nan"))
            rows = {"local": [], "remote": []}
            last_timing = {}
            first = None
            for i in range(rounds + 1):
                order = (("local", ca), ("remote", cb)) if i % 2 == 0 else (("remote", cb), ("local", ca))
                for where, c in order:
                    t = time.perf_counter()
                    r = c.call("POST", "/v1/sandboxes", {"snapshot": snp, "timeout_s": 120})
                    wall = (time.perf_counter() - t) * 1000
                    c.call("DELETE", f"/v1/sandboxes/{r['id']}")
                    tm = r.get("timing", {})
                    row = (tm.get("total_ms", float("nan")), tm.get("fetch_ms", 0.0), wall)
                    last_timing[where] = tm
                    if where == "remote" and first is None:
                        first = row  # the root came too
                        continue
                    rows[where].append(row)
            ca.call("DELETE", f"/v1/snapshots/{snp}")
        finally:
            ca.call("DELETE", f"/v1/sandboxes/{sid}")
        for where in ("local", "remote"):
            rs = rows[where]
            out[f"{label}, {where}"] = {"total_ms": med([r[0] for r in rs]), "fetch_ms": med([r[1] for r in rs]),
                                        "wall_ms": med([r[2] for r in rs]), "n": len(rs)}
        out[f"{label}, remote first"] = {"total_ms": first[0], "fetch_ms": first[1], "wall_ms": first[2], "n": 1}
        for where, tm in last_timing.items():
            phases = ", ".join(f"{k[:-3]} {v:.1f}" for k, v in tm.items() if k.endswith("_ms") and k != "total_ms" and v >= 1)
            print(f"# {label}, {where}: the last restore's phases (ms): {phases}", flush=True)
        print(f"# restore of a {label} sandbox's snapshot (upload at snapshot {up:.0f} ms, size "
              f"{snap.get('size_bytes', 0) / 1e6:.1f} MB): local {out[label + ', local']['total_ms']:.1f} ms, "
              f"on another node {out[label + ', remote']['total_ms']:.1f} ms (fetch "
              f"{out[label + ', remote']['fetch_ms']:.1f}); the first there {first[0]:.0f} ms (fetch {first[1]:.0f}, "
              f"with the root)", flush=True)
    return out


def psql_value(pg_dir, db, sql):
    return subprocess.run(["runuser", "-u", "postgres", "--", "psql", "-h", pg_dir, "-d", db, "-tAq", "-c", sql],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def moves(a, b, router_port, pg_dir, key, rounds):
    """A forkable sandbox moved off node a (draining) against a snapshot on a and its restore on
    b done by hand: the mover's own time (a's log), and the longest gap between two answers of
    a client polling exec of `true` through the router every 50 ms (503s while it moves)."""
    out = {}
    ca, cb = Conn(a.port, key), Conn(b.port, key)
    busy_cmd = ("nohup python3 -c 'import time\nwhile True:\n open(\"/tmp/tick\",\"a\").write(\"x\")\n time.sleep(0.05)' "
                ">/dev/null 2>&1 &")
    log = f"{a.tmp}/b3osd.log"
    for label, cmd in (("idle", None), ("busy", busy_cmd)):
        rows = {"by hand": [], "move": [], "gap": []}
        for _ in range(rounds):
            # The same data path by hand: a snapshot on a, restored on b.
            sid = ca.call("POST", "/v1/sandboxes", {"timeout_s": 600, "forkable": True})["id"]
            if cmd:
                ca.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
                time.sleep(0.5)
            t = time.perf_counter()
            snp = ca.call("POST", f"/v1/sandboxes/{sid}/snapshot", {})["id"]
            r = cb.call("POST", "/v1/sandboxes", {"snapshot": snp, "timeout_s": 120})
            rows["by hand"].append((time.perf_counter() - t) * 1000)
            cb.call("DELETE", f"/v1/sandboxes/{r['id']}")
            ca.call("DELETE", f"/v1/snapshots/{snp}")
            # The move of that same sandbox, a client polling it through the router.
            seen = len(open(log).read())
            stop = threading.Event()
            gaps = []

            def poll():
                c = Conn(router_port, key)
                last_ok = time.perf_counter()
                while not stop.is_set():
                    try:
                        c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
                        now = time.perf_counter()
                        gaps.append((now - last_ok) * 1000)
                        last_ok = now
                    except Exception:
                        c = Conn(router_port, key)
                    time.sleep(0.05)

            poller = threading.Thread(target=poll)
            poller.start()
            time.sleep(0.5)
            psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'draining' WHERE id = 'bench-a'")
            moved_ms = None
            deadline = time.time() + 120
            while time.time() < deadline and moved_ms is None:
                m = re.search(r"drain: sandbox " + sid + r" moved to node \S+ in (\d+) ms", open(log).read()[seen:])
                if m:
                    moved_ms = float(m.group(1))
                time.sleep(0.2)
            psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'ready' WHERE id = 'bench-a'")
            time.sleep(1.5)
            stop.set()
            poller.join()
            if moved_ms is None:
                print(f"# {label}: sandbox {sid} was not moved in 120 s", flush=True)
            else:
                rows["move"].append(moved_ms)
                rows["gap"].append(max(gaps) if gaps else float("nan"))
            holder = psql_value(pg_dir, "b3bench", f"SELECT node_id FROM sandboxes WHERE id = '{sid}'")
            (cb if holder == "bench-b" else ca).call("DELETE", f"/v1/sandboxes/{sid}")
        out[label] = {k: med(v) for k, v in rows.items()}
        out[label]["n"] = len(rows["move"])
        print(f"# move of a {label} sandbox: {out[label]['move']:.0f} ms (the client's longest gap "
              f"{out[label]['gap']:.0f} ms); by hand, snapshot then restore on another node: "
              f"{out[label]['by hand']:.0f} ms", flush=True)
    return out


def throughput(url, key, clients, duration, label):
    stats = load.Stats(load.documented_statuses())
    done, secs = load.run_clients(url, [key], stats, "bench", clients, duration=duration, idempotency=False)
    out = load.summary(stats, "bench", done, secs, label=f"{label}: ")
    for e in (stats.errors[:5] + stats.server_errors[:5]):
        print(f"# {label}: error: {e}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--restores", type=int, default=20, help="rounds of the restore comparison (0: none)")
    ap.add_argument("--moves", type=int, default=5, help="rounds of the move comparison (0: none)")
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    bindir = os.path.abspath(args.bin)

    pg_dir = pg_start()
    res = {}
    try:
        # One node alone (its own SQLite store), the same clients: the baseline of throughput.
        if args.duration > 0:
            with PrivateDaemon(bindir, args.templates, COMMON) as d:
                wait_http(d.port)
                d.wait_containers(5, timeout_s=120)
                key = d.client.auth["Authorization"].split()[1]
                res["one node"] = throughput(f"http://127.0.0.1:{d.port}", key, args.clients, args.duration, "one node")

        store = pg_createdb(pg_dir, "b3bench")
        secret = os.path.join(pg_dir, "cluster.secret")
        with open(secret, "w") as f:
            f.write(os.urandom(32).hex())
        os.chmod(secret, 0o600)
        s3 = None
        s3rver = os.path.join(ROOT, "tests", "cluster", "node_modules", ".bin", "s3rver")
        if os.path.exists(s3rver):
            s3_port = free_port()
            os.makedirs(os.path.join(pg_dir, "s3"), exist_ok=True)
            s3 = subprocess.Popen([s3rver, "-d", os.path.join(pg_dir, "s3"), "-a", "127.0.0.1", "-p", str(s3_port),
                                   "--silent", "--configure-bucket", "b3os"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
            os.environ.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
            objects = f"s3://b3os/bench?endpoint=http://127.0.0.1:{s3_port}"
            time.sleep(1.5)
        else:
            objects = "dir:" + os.path.join(pg_dir, "objects")
        print(f"# object store: {objects}", flush=True)
        flags = lambda n: ["--store", store, "--node-id", f"bench-{n}", "--cluster-listen", "127.0.0.1:0",
                           "--cluster-secret-file", secret, "--object-store", objects, "--drain-move-after", "0",
                           *COMMON]
        with PrivateDaemon(bindir, args.templates, flags("a")) as a, \
                PrivateDaemon(bindir, args.templates, flags("b")) as b, \
                PrivateDaemon(bindir, args.templates, flags("c")) as c:
            for d in (a, b, c):
                wait_http(d.port)
            router = Router(bindir, store, secret, a.tmp)
            try:
                wait_http(router.port)
                for d in (a, b, c):
                    d.wait_containers(5, timeout_s=120)
                key = a.client.auth["Authorization"].split()[1]
                # The router's cost alone: b and c draining, so its creates go where the direct
                # ones go (node a); the rest of the machine quiet.
                psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'draining' WHERE id <> 'bench-a'")
                time.sleep(3)
                if args.rounds > 0:
                    res["overhead"] = overhead(a.port, router.port, key, args.rounds, args.clients)
                psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'ready'")
                if args.restores > 0:
                    res["restores"] = restores(a, b, key, args.restores)
                if args.moves > 0:
                    psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'draining' WHERE id = 'bench-c'")
                    res["moves"] = moves(a, b, router.port, pg_dir, key, args.moves)
                    psql(pg_dir, "b3bench", "UPDATE nodes SET state = 'ready'")
                time.sleep(2)
                if args.duration > 0:
                    res["three nodes"] = throughput(f"http://127.0.0.1:{router.port}", key, args.clients,
                                                    args.duration, "three nodes via router")
            finally:
                router.stop()
    finally:
        if 's3' in locals() and s3:
            s3.kill()
        pg_stop(pg_dir)

    print(f"\ncluster: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'operation':30}{'direct ms':>12}{'router ms':>12}{'added ms':>10}{'ratio':>8}")
    for name, r in res.get("overhead", {}).items():
        print(f"{name:30}{r['direct_ms']:12.2f}{r['router_ms']:12.2f}{r['router_ms'] - r['direct_ms']:10.2f}"
              f"{r['router_ms'] / r['direct_ms']:8.2f}")
    if "restores" in res:
        print(f"\nA snapshot restored (server total, median of {args.restores}; the fetch part; the client's wall time):")
        print(f"{'':30}{'total ms':>12}{'fetch ms':>12}{'wall ms':>10}")
        for name, r in res["restores"].items():
            print(f"{name:30}{r['total_ms']:12.1f}{r['fetch_ms']:12.1f}{r['wall_ms']:10.1f}")
        for label in ("idle", "busy"):
            loc, rem = res["restores"][f"{label}, local"], res["restores"][f"{label}, remote"]
            print(f"{label + ': another node / local':30}{rem['total_ms'] / loc['total_ms']:12.2f}")
    if "moves" in res:
        print(f"\nA forkable sandbox moved off a draining node (median of {args.moves}): the node's time, the longest")
        print("gap a client polling exec through the router saw, and the same data path by hand (snapshot, then")
        print("a restore of it on another node):")
        print(f"{'':30}{'move ms':>12}{'gap ms':>12}{'by hand ms':>12}{'ratio':>8}")
        for label, r in res["moves"].items():
            print(f"{label:30}{r['move']:12.0f}{r['gap']:12.0f}{r['by hand']:12.0f}{r['move'] / r['by hand']:8.2f}")
    if "one node" in res and "three nodes" in res:
        one, three = res["one node"], res["three nodes"]
        print(f"\n{args.clients} clients looping create, exec, delete for {args.duration:g} s:")
        print(f"{'':30}{'cycles/s':>12}{'errors':>10}")
        for label, r in (("one node", one), ("three nodes via a router", three)):
            print(f"{label:30}{r['cycles_per_s']:12.2f}{r['errors']:10d}")
        print(f"{'ratio':30}{three['cycles_per_s'] / one['cycles_per_s']:12.2f}")


if __name__ == "__main__":
    main()

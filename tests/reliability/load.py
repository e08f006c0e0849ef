#!/usr/bin/env python3
"""Concurrent clients looping sandbox lifecycles against a running b3osd, then what the node
holds afterwards. Importable: bench/load.py runs the same clients (mode `bench`).

Usage: load.py --url URL --key KEY --pid PID --dir T [options]
  --url, --key      the daemon and an API key (env B3OS_API_URL, B3OS_API_KEY)
  --pid             b3osd's pid (RSS and fds are read from /proc/PID)
  --dir T           the test's temp dir: the daemon runs with --data-dir T/data, --run-dir T/run,
                    --runsc-root T/run/runsc (tests/e2e/lib.sh's layout)
  --mode            load: create (forkable every other cycle), exec `python3 -c 'print(1)'`,
                          upload 4 KiB, download it (bytes compared), fork (count 1) when
                          forkable, delete the fork and the sandbox
                    leaks: create forkable, fork, snapshot, create from the snapshot, delete
                          the three sandboxes and the snapshot
                    bench: create, exec, delete (the loop of docs/benchmarks.md)
  --clients N       concurrent clients (threads, one kept-alive connection each; default 20)
  --duration S      seconds of load after the warm-up (default 180); or
  --cycles N        a number of cycles shared by the clients instead of a duration
  --warmup S|Nc     load before the first measurement: seconds, or cycles with a `c` suffix
                    (default 20)
  --pool N          containers the daemon keeps in its pools (--warm-pool + --fork-pool);
                    when the node has settled it holds exactly these and nothing else
  --rss-tolerance PCT,MIB   growth of b3osd's RSS allowed (default 25,64: +25% or +64 MiB,
                    whichever is larger)
  --fd-tolerance N  growth of b3osd's open fds allowed (default 32)
  --settle S        at most this long for the node to settle before a measurement (default 90)

Checks (PASS name / FAIL name: detail / SKIP name: reason):
  statuses.documented   every answer's status is one docs/openapi.yaml lists for its route
  statuses.retry_after  every 429 and 503 carries Retry-After (clients wait for it and retry)
  statuses.no_5xx       no 5xx but 503 (each 500 printed with its body)
  cycles.all_ok         every cycle's operations succeeded (after retries of 429/503), with the
                        right bodies (exec printed 1, the download is the upload)
  daemon.rss_flat, daemon.fds_flat   after the warm-up and after the run, both settled
  leaks.*               nothing of the test's dirs beyond the pool members: containers, shims,
                        runsc processes, sandbox dirs, cgroups, disk mounts and loop devices,
                        fork images, snapshots; no cgroup of any sandbox id the clients saw
                        (mode leaks also compares processes, mounts, cgroups, netns, files,
                        fds and RSS before and after)
Standard library only. Exit 1 if any check failed.
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from urllib.parse import urlparse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FAILED = []


def result(ok, name, detail=""):
    if ok:
        print(f"PASS {name}" + (f" ({detail})" if detail else ""), flush=True)
    else:
        print(f"FAIL {name}: {detail}", flush=True)
        FAILED.append(name)
    return ok


def skip(name, reason):
    print(f"SKIP {name}: {reason}", flush=True)


def info(msg):
    print(f"# {msg}", flush=True)


# ---- the documented statuses ------------------------------------------------------------------

def documented_statuses(spec=os.path.join(ROOT, "docs", "openapi.yaml")):
    """{(METHOD, "/v1/sandboxes/{sandbox_id}"): {200, 400, ...}} read from openapi.yaml's
    `paths` (line-based: the document's two-space layout), so no YAML library is needed."""
    out, path, method, in_resp = {}, None, None, False
    with open(spec, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^\S", line):
                path = None if not line.startswith("paths:") else path
                continue
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                path, method, in_resp = m.group(1), None, False
                continue
            if path is None:
                continue
            m = re.match(r"^    (get|put|post|delete|patch|head|options):\s*$", line)
            if m:
                method, in_resp = m.group(1).upper(), False
                continue
            if method and re.match(r"^      responses:\s*$", line):
                in_resp = True
                continue
            if method and re.match(r"^      \S", line):
                in_resp = False
                continue
            m = re.match(r"^        '?(\d{3})'?:\s*$", line)
            if in_resp and m:
                out.setdefault((method, path), set()).add(int(m.group(1)))
    return out


# ---- one client ------------------------------------------------------------------------------

class Stats:
    """What every client saw, under one lock."""

    def __init__(self, spec_statuses):
        self.lock = threading.Lock()
        self.spec = spec_statuses
        self.latency = {}        # op -> [seconds of the answered attempt]
        self.phases = {}         # op -> {phase: [ms]} from the `timing` of JSON answers
        self.statuses = {}       # (route, status) -> count
        self.undocumented = []   # "METHOD route -> status"
        self.no_retry_after = []
        self.server_errors = []  # 5xx other than 503, with bodies
        self.errors = []         # operations that did not succeed, or answered wrongly
        self.transport = []      # connection errors
        self.retries = 0
        self.cycles = 0
        self.ids = set()         # every sandbox id the clients were given
        self.live = 0            # sandboxes created and not yet answered deleted

    def record(self, op, method, route, status, headers, body, seconds):
        with self.lock:
            self.statuses[(f"{method} {route}", status)] = self.statuses.get((f"{method} {route}", status), 0) + 1
            allowed = self.spec.get((method, route))
            if allowed is not None and status not in allowed:
                self.undocumented.append(f"{method} {route} -> {status} {body[:200]!r}")
            if status in (429, 503):
                ra = headers.get("Retry-After")
                if ra is None or not ra.strip().isdigit():
                    self.no_retry_after.append(f"{method} {route} -> {status} Retry-After={ra!r}")
            if status >= 500 and status != 503:
                self.server_errors.append(f"{op}: {method} {route} -> {status} {body[:2000].decode('utf-8', 'replace')}")

    def ok(self, op, seconds, doc):
        with self.lock:
            self.latency.setdefault(op, []).append(seconds)
            timing = doc.get("timing") if isinstance(doc, dict) else None
            if isinstance(timing, dict):
                ph = self.phases.setdefault(op, {})
                for k, v in timing.items():
                    if isinstance(v, (int, float)):
                        ph.setdefault(k, []).append(float(v))

    def error(self, msg):
        with self.lock:
            self.errors.append(msg)


class Failure(Exception):
    pass


class Client:
    """One kept-alive connection. call() retries 429 and 503 after their Retry-After (with a
    fresh Idempotency-Key: those answers did nothing) and connection errors once (with the same
    key, so a POST that did happen is replayed, not repeated)."""

    def __init__(self, url, key, stats, idempotency=True, give_up_s=300):
        self.nerr = 0
        u = urlparse(url)
        self.host, self.port, self.key, self.stats = u.hostname, u.port or 80, key, stats
        self.idempotency, self.give_up_s = idempotency, give_up_s
        self.conn = None
        self.last = None  # the previous answer on this connection: (status, had Connection: close)

    def _connect(self):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
            self.last = None
        return self.conn

    def err(self, msg):
        self.nerr += 1
        self.stats.error(msg)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def call(self, op, method, path, route, body=None, raw=None, want=(200,)):
        """(status, headers, raw body, parsed JSON or None); raises Failure when the operation
        did not get a status in `want`."""
        headers = {"Authorization": f"Bearer {self.key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            data = raw
            headers["Content-Type"] = "application/octet-stream"
        idem = self.idempotency and method in ("POST", "DELETE")
        if idem:
            headers["Idempotency-Key"] = f"load-{uuid.uuid4().hex}"
        deadline = time.monotonic() + self.give_up_s
        transport_retries = 0
        while True:
            t0 = time.monotonic()
            try:
                conn = self._connect()
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                status, rh = resp.status, resp.headers
                if resp.will_close:
                    self.close()
                else:
                    self.last = (status, rh.get("Connection"))
            except (OSError, http.client.HTTPException) as e:
                # A kept-alive connection the daemon closed after an answer that did not say
                # `Connection: close` (RFC 9112 9.6): the client could not know.
                why = (f" (the previous answer on this connection, HTTP {self.last[0]}, kept it alive)"
                       if self.last else "")
                self.close()
                with self.stats.lock:
                    self.stats.transport.append(f"{op}: {method} {path}: {type(e).__name__} {e}{why}")
                transport_retries += 1
                if transport_retries > 2 or time.monotonic() > deadline:
                    raise Failure(f"{op}: {method} {path}: connection error {type(e).__name__} {e}")
                time.sleep(0.5)
                continue
            dt = time.monotonic() - t0
            self.stats.record(op, method, route, status, rh, payload, dt)
            doc = None
            if payload[:1] in (b"{", b"["):
                try:
                    doc = json.loads(payload)
                except ValueError:
                    doc = None
            if status in (429, 503) and time.monotonic() < deadline:
                ra = rh.get("Retry-After", "")
                wait = int(ra) if ra.strip().isdigit() else 1
                with self.stats.lock:
                    self.stats.retries += 1
                time.sleep(max(wait, 0.05) + random.uniform(0, 0.25))
                if idem:
                    headers["Idempotency-Key"] = f"load-{uuid.uuid4().hex}"
                continue
            if status not in want:
                raise Failure(f"{op}: {method} {path} -> HTTP {status} {payload[:300]!r}")
            self.stats.ok(op, dt, doc)
            return status, rh, payload, doc


# ---- the cycles ------------------------------------------------------------------------------

SBX = "/v1/sandboxes"
SBX_ID = "/v1/sandboxes/{sandbox_id}"


def create(c, body):
    _, _, _, doc = c.call("create", "POST", SBX, SBX, body=body, want=(201,))
    sid = doc["id"]
    with c.stats.lock:
        c.stats.ids.add(sid)
        c.stats.live += 1
    return sid


def delete(c, sid, op="delete"):
    _, _, _, doc = c.call(op, "DELETE", f"{SBX}/{sid}", SBX_ID, want=(200,))
    with c.stats.lock:
        c.stats.live -= 1
    if not isinstance(doc, dict) or doc.get("status") != "stopped":
        raise Failure(f"{op} {sid}: answer is not a stopped sandbox: {json.dumps(doc)[:300]}")


def run_exec(c, sid):
    _, _, _, doc = c.call("exec", "POST", f"{SBX}/{sid}/exec", SBX_ID + "/exec",
                          body={"cmd": ["python3", "-c", "print(1)"]}, want=(200,))
    if doc.get("exit_code") != 0 or doc.get("stdout") != "1\n":
        raise Failure(f"exec in {sid}: exit {doc.get('exit_code')} stdout {doc.get('stdout')!r} "
                      f"stderr {str(doc.get('stderr'))[:200]!r}")


def fork1(c, sid):
    _, _, _, doc = c.call("fork", "POST", f"{SBX}/{sid}/fork", SBX_ID + "/fork", body={"count": 1}, want=(201,))
    fid = doc["data"][0]["id"]
    with c.stats.lock:
        c.stats.ids.add(fid)
        c.stats.live += 1
    return fid


def with_cleanup(c, ids, fn):
    """Runs fn(); whatever it created (ids, appended by fn) is deleted even when it failed."""
    try:
        fn()
    finally:
        for kind, i in reversed(ids):
            if kind == "done":
                continue
            try:
                if kind == "snapshot":
                    c.call("delete_snapshot", "DELETE", f"/v1/snapshots/{i}", "/v1/snapshots/{snapshot_id}", want=(200,))
                else:
                    delete(c, i, "delete" if kind == "sandbox" else "delete_fork")
            except Failure as e:
                c.err(f"cleanup: {e}")


def cycle_load(c, n, ctx):
    forkable = (n + ctx["client"]) % 2 == 1
    ids = []

    def body():
        sid = create(c, {"template": "base", "forkable": forkable, "metadata": {"test": "load"}})
        ids.append(("sandbox", sid))
        run_exec(c, sid)
        blob = os.urandom(4096)
        path = f"/workspace/load-{n}.bin"
        c.call("upload", "PUT", f"{SBX}/{sid}/files?path={path}", SBX_ID + "/files", raw=blob, want=(201,))
        _, _, got, _ = c.call("download", "GET", f"{SBX}/{sid}/files?path={path}", SBX_ID + "/files", want=(200,))
        if got != blob:
            raise Failure(f"download of {path} in {sid}: {len(got)} bytes differ from the {len(blob)} uploaded")
        if forkable:
            fid = fork1(c, sid)
            ids.append(("fork", fid))
            # The fork is a copy: it has the file too.
            _, _, got, _ = c.call("download", "GET", f"{SBX}/{fid}/files?path={path}", SBX_ID + "/files", want=(200,))
            if got != blob:
                raise Failure(f"download of {path} in fork {fid}: differs from the source's")
            delete(c, fid, "delete_fork")
            ids[-1] = ("done", fid)
        delete(c, sid)
        ids[0] = ("done", sid)

    with_cleanup(c, ids, body)


def cycle_leaks(c, n, ctx):
    ids = []

    def body():
        sid = create(c, {"template": "base", "forkable": True, "metadata": {"test": "leaks"}})
        ids.append(("sandbox", sid))
        fid = fork1(c, sid)
        ids.append(("fork", fid))
        _, _, _, snap = c.call("snapshot", "POST", f"{SBX}/{sid}/snapshot", SBX_ID + "/snapshot", body={}, want=(201,))
        ids.append(("snapshot", snap["id"]))
        _, _, _, doc = c.call("restore", "POST", SBX, SBX, body={"snapshot": snap["id"]}, want=(201,))
        rid = doc["id"]
        with c.stats.lock:
            c.stats.ids.add(rid)
            c.stats.live += 1
        ids.append(("restored", rid))
        for kind, i in reversed(list(ids)):
            if kind == "snapshot":
                c.call("delete_snapshot", "DELETE", f"/v1/snapshots/{i}", "/v1/snapshots/{snapshot_id}", want=(200,))
            else:
                delete(c, i, {"sandbox": "delete", "fork": "delete_fork", "restored": "delete_restored"}[kind])
            ids[ids.index((kind, i))] = ("done", i)

    with_cleanup(c, ids, body)


def cycle_bench(c, n, ctx):
    ids = []

    def body():
        sid = create(c, {"template": "base"})
        ids.append(("sandbox", sid))
        run_exec(c, sid)
        delete(c, sid)
        ids[0] = ("done", sid)

    with_cleanup(c, ids, body)


CYCLES = {"load": cycle_load, "leaks": cycle_leaks, "bench": cycle_bench}
OPS = {"load": ["create", "exec", "upload", "download", "fork", "delete_fork", "delete"],
       "leaks": ["create", "fork", "snapshot", "restore", "delete_restored", "delete_snapshot", "delete_fork", "delete"],
       "bench": ["create", "exec", "delete"]}


def run_clients(url, keys, stats, mode, clients, duration=None, cycles=None, idempotency=True):
    """Runs `clients` threads looping `mode` cycles until `duration` seconds passed (a cycle
    begun is finished) or `cycles` were begun. Returns (completed cycles, seconds)."""
    fn = CYCLES[mode]
    lock = threading.Lock()
    state = {"begun": 0, "done": 0}
    start = time.monotonic()
    stop_at = start + duration if duration is not None else None

    def worker(i):
        c = Client(url, keys[i % len(keys)], stats, idempotency=idempotency)
        n = 0
        try:
            while True:
                with lock:
                    if cycles is not None and state["begun"] >= cycles:
                        return
                    if stop_at is not None and time.monotonic() >= stop_at:
                        return
                    state["begun"] += 1
                errors_before = c.nerr
                try:
                    fn(c, n, {"client": i})
                except Failure as e:
                    c.err(str(e))
                except Exception as e:  # a bug here or an answer of the wrong shape
                    c.err(f"client {i} cycle {n}: {type(e).__name__}: {e}")
                n += 1
                with lock:
                    state["done"] += 1
                with stats.lock:
                    if c.nerr == errors_before:
                        stats.cycles += 1
        finally:
            c.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return state["done"], time.monotonic() - start


def pct(xs, p):
    """Nearest-rank percentile of xs (p in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def summary(stats, mode, done, seconds, label=""):
    """{"cycles", "seconds", "cycles_per_s", op: {"n", "p50_ms", "p99_ms"}}; printed too."""
    out = {"cycles": done, "ok_cycles": stats.cycles, "seconds": seconds, "cycles_per_s": stats.cycles / seconds,
           "retries": stats.retries, "errors": len(stats.errors)}
    info(f"{label}{done} cycles ({stats.cycles} without error) in {seconds:.1f} s: "
         f"{stats.cycles / seconds:.2f} cycles/s; {stats.retries} retries after 429/503")
    info(f"{label}{'operation':16} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for op in OPS[mode]:
        xs = stats.latency.get(op, [])
        if not xs:
            continue
        out[op] = {"n": len(xs), "p50_ms": pct(xs, 50) * 1000, "p99_ms": pct(xs, 99) * 1000}
        info(f"{label}{op:16} {len(xs):6d} {pct(xs, 50) * 1000:9.1f} {pct(xs, 99) * 1000:9.1f} {max(xs) * 1000:9.1f}")
    return out


def phase_medians(stats, op):
    return {k: pct(v, 50) for k, v in stats.phases.get(op, {}).items()}


# ---- the host: what the daemon and its sandboxes hold ------------------------------------------

def daemon_usage(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def _cmdlines():
    """{pid: [argv...]} of every process."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if argv and argv[-1] == "":
            argv.pop()
        if argv:
            out[int(p)] = argv
    return out


def host_state(tmp, pid):
    """Everything of the test's dirs the host holds, as sets and counts."""
    data, run = f"{tmp}/data", f"{tmp}/run"
    root = f"{run}/runsc"
    st = {}
    r = subprocess.run(["runsc", "--root", root, "list", "--quiet"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    st["containers"] = set(r.stdout.split())
    cmd = _cmdlines()
    me = os.getpid()
    st["shims"], st["shim_ids"] = set(), set()
    for p, argv in cmd.items():
        if os.path.basename(argv[0]) == "b3os-shim" and len(argv) > 1 and argv[1].startswith(f"{run}/sandboxes/"):
            st["shims"].add(p)
            st["shim_ids"].add(argv[1][len(f"{run}/sandboxes/"):].split("/")[0])
    st["runsc_procs"] = {p for p, argv in cmd.items() if "runsc" in os.path.basename(argv[0])
                         and any(root in a for a in argv)}
    # Processes of the test's dirs: runsc (sandbox, gofer, CLI), shims; not b3osd, not us.
    st["procs"] = {p for p, argv in cmd.items() if p not in (me, pid) and any(f"{tmp}/" in a for a in argv)
                   and os.path.basename(argv[0]) in ("runsc", "runsc-sandbox", "runsc-gofer", "b3os-shim", "exe")
                   or p in st["runsc_procs"]}
    try:
        st["sandbox_dirs"] = set(os.listdir(f"{run}/sandboxes"))
    except OSError:
        st["sandbox_dirs"] = set()
    cg = set()
    for d in os.listdir("/sys/fs/cgroup"):
        try:
            cg |= {(d, i) for i in os.listdir(f"/sys/fs/cgroup/{d}/b3os") if os.path.isdir(f"/sys/fs/cgroup/{d}/b3os/{i}")}
        except OSError:
            pass
    try:  # cgroup v2: /sys/fs/cgroup/b3os/ID
        cg |= {("v2", i) for i in os.listdir("/sys/fs/cgroup/b3os") if os.path.isdir(f"/sys/fs/cgroup/b3os/{i}")}
    except OSError:
        pass
    st["cgroups_all"] = cg
    st["cgroup_ids"] = {i for _, i in cg}
    with open("/proc/self/mountinfo") as f:
        st["mounts"] = [line.split()[4] for line in f if f" {tmp}/" in f" {line.split()[4]}"]
    st["disk_mount_ids"] = set()
    for m in st["mounts"]:
        mm = re.match(re.escape(data) + r"/disks/([^/]+)/", m + "/")
        if mm:
            st["disk_mount_ids"].add(mm.group(1))
    loops = set()
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                bf = f.read().strip()
        except OSError:
            continue
        if bf.startswith(f"{data}/disks/"):
            loops.add(bf[len(f"{data}/disks/"):].split("/")[0])
    st["loop_ids"] = loops
    try:
        st["disk_dirs"] = set(os.listdir(f"{data}/disks"))
    except OSError:
        st["disk_dirs"] = set()
    for name in ("fork-images", "snapshots"):
        try:
            st[name] = set(os.listdir(f"{data}/{name}"))
        except OSError:
            st[name] = set()
    try:
        st["netns"] = set(os.listdir("/run/netns"))
    except OSError:
        st["netns"] = set()
    files = 0
    for base in (data, run):
        for dirpath, _, names in os.walk(base):
            if dirpath.startswith(f"{data}/templates") or dirpath.startswith(f"{data}/template-images"):
                continue
            files += sum(1 for n in names if not n.startswith("b3os.db"))
    st["files"] = files
    st.update(daemon_usage(pid))
    return st


def settle(tmp, pid, pool, limit_s):
    """Waits until the node holds exactly `pool` containers (and as many shims and sandbox dirs)
    and its fd count has been the same for 3 s; returns (state, seconds, settled?)."""
    start = time.monotonic()
    last, same_since = None, None
    while True:
        st = host_state(tmp, pid)
        key = (len(st["containers"]), len(st["shims"]), len(st["sandbox_dirs"]), st["fds"])
        now = time.monotonic()
        calm = key[0] <= pool and key[1] == key[0] and key[2] == key[0]
        if calm and key == last:
            if now - same_since >= 3:
                return st, now - start, True
        else:
            same_since = now
        last = key
        if now - start > limit_s:
            return st, now - start, False
        time.sleep(0.5)


def check_growth(name, before, after, pct_allowed, abs_allowed, unit):
    allowed = max(before * pct_allowed / 100.0, abs_allowed)
    grew = after - before
    return result(grew <= allowed, name,
                  f"{before} -> {after} {unit} ({grew:+d}; allowed +{allowed:.0f})")


def check_no_leaks(st, pool, seen_ids, prefix="leaks"):
    """Nothing but the pool's members: every resource keyed by a sandbox id is one of the
    containers runsc lists, and there are at most `pool` of those."""
    ctr = st["containers"]
    result(len(ctr) <= pool, f"{prefix}.containers", f"{len(ctr)} containers in the test's runsc root, pool {pool}"
           + (f": {sorted(ctr)}" if len(ctr) > pool else ""))

    def subset(name, ids, what):
        extra = sorted(set(ids) - ctr)
        result(not extra, f"{prefix}.{name}", f"{len(ids)} {what}, each of a pool member" if not extra
               else f"{len(extra)} {what} with no container: {extra[:5]}")

    subset("shims", st["shim_ids"], "b3os-shim processes")
    subset("sandbox_dirs", st["sandbox_dirs"], "dirs under RUN/sandboxes")
    subset("disk_mounts", st["disk_mount_ids"], "disk mounts")
    subset("loop_devices", st["loop_ids"], "loop devices on DATA/disks")
    subset("disk_dirs", st["disk_dirs"], "dirs under DATA/disks")
    stray = sorted(i for i in seen_ids if i in st["cgroup_ids"] and i not in ctr)
    result(not stray, f"{prefix}.cgroups", f"none of the {len(seen_ids)} sandbox ids seen has a cgroup left" if not stray
           else f"{len(stray)} cgroups of deleted sandboxes: {stray[:5]}")
    mine = sorted(i for i in st["cgroup_ids"] if i in ctr)
    info(f"{prefix}: cgroups of pool members: {len(mine)}")
    result(not st["fork-images"], f"{prefix}.fork_images", f"DATA/fork-images: {sorted(st['fork-images'])[:5]}")
    # Each container is a runsc-sandbox and a runsc-gofer; anything more (a runsc CLI still
    # running, a sandbox of a container runsc forgot) is left over.
    result(len(st["runsc_procs"]) <= 2 * len(ctr), f"{prefix}.runsc_processes",
           f"{len(st['runsc_procs'])} runsc processes for {len(ctr)} containers (at most 2 each)")


# ---- main --------------------------------------------------------------------------------------

def parse_tolerance(s):
    a, _, b = s.partition(",")
    return float(a), float(b or 0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("B3OS_API_URL"))
    p.add_argument("--key", action="append", default=None)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--mode", choices=sorted(CYCLES), default="load")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--cycles", type=int, default=None)
    p.add_argument("--warmup", default="20")
    p.add_argument("--pool", type=int, default=0)
    p.add_argument("--rss-tolerance", default="25,64")
    p.add_argument("--fd-tolerance", type=int, default=32)
    p.add_argument("--files-tolerance", type=int, default=0)
    p.add_argument("--settle", type=float, default=90)
    args = p.parse_args()
    keys = args.key or ([os.environ["B3OS_API_KEY"]] if os.environ.get("B3OS_API_KEY") else [])
    if not args.url or not keys:
        print("SKIP load: no daemon to test (--url/--key or B3OS_API_URL/B3OS_API_KEY)")
        return 2
    if args.duration is None and args.cycles is None:
        args.duration = 180
    spec = documented_statuses()
    for route in [("POST", SBX), ("POST", SBX_ID + "/exec"), ("PUT", SBX_ID + "/files"), ("GET", SBX_ID + "/files"),
                  ("POST", SBX_ID + "/fork"), ("DELETE", SBX_ID), ("POST", SBX_ID + "/snapshot"),
                  ("DELETE", "/v1/snapshots/{snapshot_id}")]:
        if route not in spec:
            result(False, "statuses.spec", f"docs/openapi.yaml has no responses for {route[0]} {route[1]}")
            return 1
    rss_pct, rss_mib = parse_tolerance(args.rss_tolerance)

    # Warm-up: the allocator, SQLite and the pools reach their working size.
    warm = Stats(spec)
    if args.warmup.endswith("c"):
        done, secs = run_clients(args.url, keys, warm, args.mode, args.clients, cycles=int(args.warmup[:-1]))
    else:
        done, secs = run_clients(args.url, keys, warm, args.mode, args.clients, duration=float(args.warmup))
    info(f"warm-up: {done} cycles in {secs:.1f} s ({len(warm.errors)} with errors)")
    before, waited, ok = settle(args.dir, args.pid, args.pool, args.settle)
    result(ok, "settle.after_warmup", f"{waited:.1f} s to hold only the pool ({len(before['containers'])} containers)")
    info(f"before: b3osd RSS {before['rss_kib'] // 1024} MiB, {before['fds']} fds; {len(before['containers'])} containers, "
         f"{len(before['procs'])} processes, {len(before['mounts'])} mounts, {len(before['cgroup_ids'] & before['containers'])} "
         f"cgroups, {len(before['netns'])} netns, {before['files']} files")

    stats = Stats(spec)
    stats.ids |= warm.ids
    done, secs = run_clients(args.url, keys, stats, args.mode, args.clients, duration=args.duration, cycles=args.cycles)
    summary(stats, args.mode, done, secs)

    after, waited, ok = settle(args.dir, args.pid, args.pool, args.settle)
    result(ok, "settle.after_run", f"{waited:.1f} s to hold only the pool ({len(after['containers'])} containers)")
    info(f"after:  b3osd RSS {after['rss_kib'] // 1024} MiB, {after['fds']} fds; {len(after['containers'])} containers, "
         f"{len(after['procs'])} processes, {len(after['mounts'])} mounts, {len(after['cgroup_ids'] & after['containers'])} "
         f"cgroups, {len(after['netns'])} netns, {after['files']} files")

    for s in (warm, stats):
        for e in s.server_errors:
            info(f"5xx: {e}")
    all_undoc = warm.undocumented + stats.undocumented
    result(not all_undoc, "statuses.documented",
           f"{sum(stats.statuses.values()) + sum(warm.statuses.values())} answers, statuses "
           f"{sorted({s for (_, s) in list(stats.statuses) + list(warm.statuses)})}" if not all_undoc
           else f"{len(all_undoc)} undocumented: {all_undoc[:5]}")
    limited = sum(n for (_, s), n in list(stats.statuses.items()) + list(warm.statuses.items()) if s in (429, 503))
    nra = warm.no_retry_after + stats.no_retry_after
    result(not nra, "statuses.retry_after", f"{limited} answers 429/503, each with Retry-After, retried after it"
           if not nra else f"{len(nra)} without: {nra[:5]}")
    s5 = warm.server_errors + stats.server_errors
    result(not s5, "statuses.no_5xx", "no 5xx but 503" if not s5 else f"{len(s5)} (printed above)")
    tr = warm.transport + stats.transport
    result(not tr, "connections.no_errors", "no connection reset or closed by the daemon" if not tr
           else f"{len(tr)}: {tr[:3]}")
    errs = warm.errors + stats.errors
    for e in errs[:20]:
        info(f"error: {e}")
    result(not errs and stats.cycles > 0, "cycles.all_ok",
           f"{stats.cycles + warm.cycles} cycles, every operation answered as documented" if not errs
           else f"{len(errs)} failed (first 20 above)")

    check_growth("daemon.rss_flat", before["rss_kib"], after["rss_kib"], rss_pct, rss_mib * 1024, "KiB")
    check_growth("daemon.fds_flat", before["fds"], after["fds"], 0, args.fd_tolerance, "fds")
    check_no_leaks(after, args.pool, stats.ids)
    result(not after["snapshots"], "leaks.snapshots", f"DATA/snapshots: {sorted(after['snapshots'])[:5]}")
    if args.mode == "leaks":
        check_growth("before_after.processes", len(before["procs"]), len(after["procs"]), 0, 0, "processes of the test's dirs")
        check_growth("before_after.mounts", len(before["mounts"]), len(after["mounts"]), 0, 0, "mounts under the test's dirs")
        check_growth("before_after.cgroups", len(before["cgroup_ids"] & before["containers"]),
                     len(after["cgroup_ids"] & after["containers"]), 0, 0, "cgroups of the node's containers")
        # The host's netns are shared with every other test on it: fail on a new one that
        # names one of the test's sandboxes (b3os sandboxes run --network=none: none expected).
        new_ns = sorted(after["netns"] - before["netns"])
        ours = [n for n in new_ns if any(i in n for i in stats.ids)]
        result(not ours, "before_after.netns", f"{len(before['netns'])} -> {len(after['netns'])} in /run/netns"
               + (f", new (not of this test): {new_ns[:5]}" if new_ns and not ours else "")
               + (f", of this test's sandboxes: {ours[:5]}" if ours else ""))
        check_growth("before_after.files", before["files"], after["files"], 0, args.files_tolerance,
                     "files under DATA and RUN (not the db)")
    print(f"# load ({args.mode}): {len(FAILED)} failed" + (f": {' '.join(FAILED)}" if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

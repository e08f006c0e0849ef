#!/usr/bin/env python3
"""Living in a sandbox (docs/api.md: streamed exec, background processes, terminals), each
against the runtime's own path in the same run:

  first byte  a command writes a time stamp (CLOCK_REALTIME, in the sandbox) every 50 ms;
              the client notes when each reaches it. Streamed exec (SSE)  vs  `runsc exec`
              with its stdout on a pipe to the client.
  1 GB cat    `cat` of a 1 GiB text file on the sandbox's disk, read by the client: streamed
              exec (SSE, the bytes in JSON)  vs  `runsc exec cat` to a pipe. MB/s of payload.
  keystroke   one key typed into `b3os shell` (the CLI in a pty of the bench's, raw mode, its
              WebSocket, the sandbox's pty running `cat`), time until its echo shows: median
              and p99  vs  the same key through `runsc exec cat` on pipes.
  memory      100 background processes (`sleep`) in one sandbox: host PSS of the sandbox's
              processes and of b3osd, per process; 50 open terminals (the node `ws` client of
              the e2e suite): the same, per terminal.

Usage (root): bench/living.py [--bin build/bin] [--rounds 5] [--keys 200]
"""
import argparse
import base64
import http.client
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Client, PrivateDaemon, pids_where  # noqa: E402
from density import pss_kb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAMPS = ("import sys, time\n"
          "for i in range(20):\n"
          "    time.sleep(0.05)\n"
          "    sys.stdout.write('%d\\n' % time.time_ns()); sys.stdout.flush()\n")
BIG = "/workspace/big.txt"
FLOOD = f"cat {BIG}"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def sse_exec(port, key, sbx, cmd, on_chunk):
    """A streamed exec; on_chunk(bytes) for each stdout chunk as it arrives."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST", f"/v1/sandboxes/{sbx}/exec", body=json.dumps({"cmd": cmd, "timeout_ms": 600000}),
              headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                       "Accept": "text/event-stream"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read()[:300])
    buf = b""
    event = None
    while True:
        data = r.read1(1 << 20)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            event, payload = None, b""
            for line in block.split(b"\n"):
                if line.startswith(b"event: "):
                    event = line[7:]
                elif line.startswith(b"data: "):
                    payload = line[6:]
            if event == b"stdout":
                j = json.loads(payload)
                d = j["data"]
                on_chunk(base64.b64decode(d) if j.get("encoding") == "base64" else d.encode())
    c.close()


def runsc_exec(d, cid, argv, on_chunk, stdin=None):
    p = subprocess.Popen(["runsc", "--root", d.runsc_root, "exec", cid, *argv], stdout=subprocess.PIPE,
                         stdin=stdin)
    while True:
        data = p.stdout.read1(1 << 20)
        if not data:
            break
        on_chunk(data)
    p.wait()


def stamp_reader(lat):
    part = [b""]

    def on(data):
        now = time.time_ns()
        part[0] += data
        *lines, part[0] = part[0].split(b"\n")
        for l in lines:
            if l.strip():
                lat.append((now - int(l)) / 1e6)
    return on


def first_byte(d, key, sbx, cid, rounds):
    sse, raw = [], []
    for _ in range(rounds):
        sse_exec(d.port, key, sbx, ["python3", "-c", STAMPS], stamp_reader(sse))
        runsc_exec(d, cid, ["python3", "-c", STAMPS], stamp_reader(raw))
    return sse, raw


def curl_exec(d, key, sbx, cmd):
    """The streamed exec read by curl (a C client that only reads): seconds."""
    out = subprocess.run(["curl", "-sN", "-o", "/dev/null", "-w", "%{time_total}", "-H", f"Authorization: Bearer {key}",
                          "-H", "Content-Type: application/json", "-H", "Accept: text/event-stream",
                          "-d", json.dumps({"cmd": cmd, "timeout_ms": 600000}),
                          f"http://127.0.0.1:{d.port}/v1/sandboxes/{sbx}/exec"], stdout=subprocess.PIPE, text=True)
    return float(out.stdout)


def flood(d, key, sbx, cid, rounds):
    sse, raw, curl = [], [], []
    for _ in range(rounds):
        for out, run in ((sse, lambda on: sse_exec(d.port, key, sbx, FLOOD, on)),
                         (raw, lambda on: runsc_exec(d, cid, ["cat", BIG], on))):
            n = [0]
            t0 = time.perf_counter()
            run(lambda b: n.__setitem__(0, n[0] + len(b)))
            dt = time.perf_counter() - t0
            assert n[0] == 1 << 30, n[0]
            out.append(n[0] / dt / 1e6)
        curl.append((1 << 30) / curl_exec(d, key, sbx, FLOOD) / 1e6)
    return sse, raw, curl


def read_until(fd, want, timeout=10):
    got = b""
    deadline = time.time() + timeout
    while want not in got:
        r, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
        if not r:
            raise RuntimeError(f"no {want!r} within {timeout} s; got {got[-200:]!r}")
        got += os.read(fd, 65536)
    return got


def keystrokes(fd_in, fd_out, n):
    out = []
    for i in range(n):
        time.sleep(0.01)
        k = b"abcdefghij"[i % 10:i % 10 + 1]
        t0 = time.perf_counter()
        os.write(fd_in, k)
        read_until(fd_out, k)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def shell_keys(d, key, sbx, n):
    pid, fd = pty.fork()
    if pid == 0:
        os.environ.update(B3OS_API_URL=f"http://127.0.0.1:{d.port}", B3OS_API_KEY=key)
        os.execv(f"{d.bindir}/b3os", ["b3os", "shell", sbx, "--cmd", "echo READY; exec cat"])
    try:
        read_until(fd, b"READY")
        return keystrokes(fd, fd, n)
    finally:
        os.write(fd, b"\x03")
        os.waitpid(pid, 0)
        os.close(fd)


def raw_keys(d, cid, n):
    p = subprocess.Popen(["runsc", "--root", d.runsc_root, "exec", cid, "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, bufsize=0)
    try:
        time.sleep(0.5)
        return keystrokes(p.stdin.fileno(), p.stdout.fileno(), n)
    finally:
        p.stdin.close()
        p.wait()


def pss_of(needle):
    return sum(pss_kb(p) for p in pids_where(lambda cmd: needle in cmd))


def memory(d, key, sbx):
    c = Client(d.port, key)  # a new connection: the first one's keep-alive may have ended
    daemon = d.proc.pid
    settle = lambda: time.sleep(2)
    settle()
    s0, d0 = pss_of(sbx), pss_kb(daemon)
    for i in range(100):
        c.call("POST", f"/v1/sandboxes/{sbx}/processes", {"cmd": ["sleep", "3600"], "tag": f"b{i}"})
    settle()
    s1, d1 = pss_of(sbx), pss_kb(daemon)
    procs = ((s1 - s0) / 100, (d1 - d0) / 100)
    for p in json.loads(c.call("GET", f"/v1/sandboxes/{sbx}/processes")[1])["data"]:
        c.call("POST", f"/v1/sandboxes/{sbx}/processes/{p['id']}/signal", {"signal": "KILL"})
    settle()
    s0, d0 = pss_of(sbx), pss_kb(daemon)
    keys = [key] + [subprocess.run([f"{d.bindir}/b3os", "keys", "create", "--project", "default", "--data-dir",
                                    f"{d.tmp}/data"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True).stdout.strip()]
    node = subprocess.Popen(["node", f"{ROOT}/tests/e2e/pty_client.mjs", f"http://127.0.0.1:{d.port}", key, sbx,
                             "rows=24&cols=80", json.dumps({"many": 50, "keys": keys[1:], "hold": 8})],
                            stdout=subprocess.PIPE, text=True)
    line = node.stdout.readline()
    counts = json.loads(line)["counts"]
    time.sleep(3)
    s1, d1 = pss_of(sbx), pss_kb(daemon)
    node.wait()
    terms = ((s1 - s0) / 50, (d1 - d0) / 50, counts)
    return procs, terms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--templates", default=os.environ.get("B3OS_TEMPLATES_DIR", "/var/lib/b3os/templates"))
    args = ap.parse_args()
    # No idle freezing: the raw side's `runsc exec` processes are not the agent's children, so
    # the agent would report the sandbox idle and b3osd would freeze it under them.
    with PrivateDaemon(args.bin, args.templates, ["--warm-pool", "0", "--fork-pool", "0", "--idle-freeze-ms", "0"]) as d:
        key = open(f"{d.tmp}/data/admin.key").read().strip()
        c = d.client
        sbx = json.loads(c.call("POST", "/v1/sandboxes", {"memory_mib": 1024, "disk_gib": 2,
                                                          "timeout_s": 3600})[1])["id"]
        c.call("POST", f"/v1/sandboxes/{sbx}/exec",
               {"cmd": f"yes abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz012345678 | "
                       f"head -c 1073741824 > {BIG}", "timeout_ms": 600000})
        cid = sbx  # the container's id is the sandbox's
        assert cid in d.containers(), d.containers()
        print(f"# {args.rounds} rounds; the same sandbox for both sides")
        sse, raw = first_byte(d, key, sbx, cid, args.rounds)
        print(f"first byte after the write: streamed exec median {statistics.median(sse):.2f} ms, p99 "
              f"{pct(sse, 99):.2f} ({len(sse)} stamps) | runsc exec pipe median {statistics.median(raw):.2f} ms, "
              f"p99 {pct(raw, 99):.2f} | ratio {statistics.median(sse) / statistics.median(raw):.2f}")
        sse, raw, curl = flood(d, key, sbx, cid, max(3, args.rounds // 2))
        print(f"1 GiB cat: streamed exec read by python (every event parsed) median {statistics.median(sse):.0f} MB/s, "
              f"by curl {statistics.median(curl):.0f} MB/s | runsc exec cat to a pipe {statistics.median(raw):.0f} MB/s "
              f"| ratios {statistics.median(sse) / statistics.median(raw):.2f} and "
              f"{statistics.median(curl) / statistics.median(raw):.2f}")
        shell = shell_keys(d, key, sbx, args.keys)
        raw = raw_keys(d, cid, args.keys)
        print(f"keystroke echo: b3os shell median {statistics.median(shell):.2f} ms, p99 {pct(shell, 99):.2f} | "
              f"runsc exec cat (pipes) median {statistics.median(raw):.2f} ms, p99 {pct(raw, 99):.2f} | ratio "
              f"{statistics.median(shell) / statistics.median(raw):.2f}")
        (sp, dp), (st, dt, counts) = memory(d, key, sbx)
        print(f"memory per background process (sleep): sandbox {sp:.0f} KB, b3osd {dp:.1f} KB (host PSS, 100 of them)")
        print(f"memory per open terminal (bash): sandbox {st:.0f} KB, b3osd {dt:.1f} KB (host PSS, 50 of them: {counts})")


if __name__ == "__main__":
    main()

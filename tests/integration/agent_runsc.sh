#!/usr/bin/env bash
# Integration test of b3os-agent and b3os-shim in a real gVisor sandbox.
#
# Starts the agent as PID 1 of a runsc container built on the base template (which is never
# written: the container's root is an in-memory overlay), speaks the channel protocol to it
# from a Python driver, hands the channel over through b3os-shim, then deletes the container
# and checks that nothing of it is left running.
#
# Usage (as root): B3OS_BUILD_DIR=/path/to/build tests/integration/agent_runsc.sh
# Env: B3OS_TEMPLATE_ROOTFS (default /var/lib/b3os/templates/base/rootfs),
#      B3OS_RUNSC_DEBUG=1 (runsc debug logs kept in the temp dir), B3OS_KEEP_TMP=1.
set -euo pipefail

build=${B3OS_BUILD_DIR:?set B3OS_BUILD_DIR to the cmake build directory}
rootfs=${B3OS_TEMPLATE_ROOTFS:-/var/lib/b3os/templates/base/rootfs}
find_bin() {
  for p in "$build/bin/$2" "$build/$1/$2" "$build/$2"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "agent_runsc: $2 not found under $build" >&2
  return 1
}
agent=$(find_bin agent b3os-agent)
shim=$(find_bin shim b3os-shim)
[ "$(id -u)" = 0 ] || { echo "agent_runsc: must run as root" >&2; exit 2; }
[ -d "$rootfs/usr" ] || { echo "agent_runsc: no template rootfs at $rootfs" >&2; exit 2; }
command -v runsc >/dev/null || { echo "agent_runsc: runsc not installed" >&2; exit 2; }

tmp=$(mktemp -d /tmp/b3os-agent-it.XXXXXX)
id="b3os-it-$$-$RANDOM"
runsc_root="$tmp/runsc"
runsc_flags=(--root "$runsc_root" --overlay2=root:memory --network=none)
mkdir -p "$runsc_root" "$tmp/bundle"
failures=0
pass() { echo "PASS $1"; }
failed() { echo "FAIL $1"; failures=$((failures + 1)); }

cleanup() {
  runsc "${runsc_flags[@]}" kill "$id" KILL >/dev/null 2>&1 || true
  runsc "${runsc_flags[@]}" delete --force "$id" >/dev/null 2>&1 || true
  if [ "${B3OS_KEEP_TMP:-0}" = 1 ]; then echo "agent_runsc: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

template_workspace_before=$(ls -A "$rootfs/workspace" | wc -l)

cat >"$tmp/driver.py" <<'PY'
"""Drives b3os-agent in a runsc container over the channel protocol (docs/agent-protocol.md)."""
import hashlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

HELLO, RESYNC, RESYNC_ACK, PING, PONG, IDENTITY, IDENTITY_ACK = range(1, 8)
OPEN, DATA, STDOUT, STDERR, EOF, WINDOW, HEADER, END, CANCEL = range(0x10, 0x19)
INITIAL_WINDOW = 512 * 1024
MAX_DATA = 64 * 1024
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}

AGENT, SHIM = os.environ["B3OS_AGENT"], os.environ["B3OS_SHIM"]
ROOTFS, TMP, CID = os.environ["B3OS_ROOTFS"], os.environ["B3OS_TMP"], os.environ["B3OS_ID"]
# The same global flags on every runsc command: `start` sets the network up again.
RUNSC = ["runsc", "--root", os.environ["B3OS_RUNSC_ROOT"], "--overlay2=root:memory",
         "--network=none"]
if os.environ.get("B3OS_RUNSC_DEBUG") == "1":
    RUNSC += ["--debug", "--debug-log=" + TMP + "/runsc-logs/"]
failures = 0


def check(name, ok, detail=""):
    global failures
    if ok:
        print("PASS " + name, flush=True)
    else:
        failures += 1
        print("FAIL %s%s" % (name, ": " + str(detail) if detail else ""), flush=True)
    return ok


def frame(t, stream, payload=b""):
    return struct.pack("<BBBBII", 0xB3, 0x05, 1, t, stream, len(payload)) + payload


def u32(n):
    return struct.pack("<I", n)


class Timeout(Exception):
    pass


class Channel:
    """The daemon's side of the channel: frames queued per stream as they arrive."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0  # parsed prefix of buf, dropped in bulk (per-frame deletes are slow)
        self.queues = {}
        self.next_id = 1

    def send(self, t, stream, payload=b""):
        self.sock.sendall(frame(t, stream, payload))

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.sock], [], [], left)[0]:
            raise Timeout()
        data = self.sock.recv(1 << 20)
        if not data:
            raise RuntimeError("channel closed by the agent")
        self.buf += data

    def _read_frame(self, deadline):
        while True:
            at = self.pos
            if len(self.buf) - at >= 12:
                m0, m1, v, t, s, n = struct.unpack_from("<BBBBII", self.buf, at)
                if (m0, m1, v) != (0xB3, 5, 1):
                    raise RuntimeError("bad frame header from agent: %r" % bytes(self.buf[at:at + 12]))
                if len(self.buf) - at >= 12 + n:
                    p = bytes(self.buf[at + 12:at + 12 + n])
                    self.pos = at + 12 + n
                    if self.pos >= 1 << 20 or self.pos == len(self.buf):
                        del self.buf[:self.pos]
                        self.pos = 0
                    return t, s, p
            self._fill(deadline)

    def wait(self, stream, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            q = self.queues.get(stream)
            if q:
                return q.pop(0)
            t, s, p = self._read_frame(deadline)
            self.queues.setdefault(s, []).append((t, p))

    def wait_type(self, stream, want, timeout=10.0):
        deadline = time.monotonic() + timeout
        while True:
            t, p = self.wait(stream, max(0.0, deadline - time.monotonic()))
            if t == want:
                return p

    def open(self, req):
        sid = self.next_id
        self.next_id += 1
        self.send(OPEN, sid, json.dumps(req).encode())
        return sid

    def resync(self, garbage=b"", timeout=10.0):
        """Like a restarted daemon: garbage may precede; repeat RESYNC until the ACK shows."""
        nonce = os.urandom(16)
        want = frame(RESYNC_ACK, 0, nonce)
        self.buf = bytearray()
        self.pos = 0
        self.queues = {}
        self.sock.sendall(garbage)
        start = time.monotonic()
        deadline = start + timeout
        next_send = start
        while True:
            now = time.monotonic()
            if now >= next_send:
                self.send(RESYNC, 0, nonce)
                next_send = now + 0.2
            i = self.buf.find(want)
            if i >= 0:
                del self.buf[:i + len(want)]
                return time.monotonic() - start
            try:
                self._fill(min(next_send, deadline))
            except Timeout:
                if time.monotonic() >= deadline:
                    raise

    def collect_exec(self, sid, timeout=20.0, stdin_data=None, grant_every=0):
        """Runs an exec stream to its END. Returns (end, stdout, stderr, max_outstanding)."""
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        credit, off, eof_sent = INITIAL_WINDOW, 0, stdin_data is None
        outstanding = ungranted = max_out = 0
        while True:
            while not eof_sent and credit > 0:
                if off >= len(stdin_data):
                    self.send(EOF, sid)
                    eof_sent = True
                    break
                n = min(MAX_DATA, credit, len(stdin_data) - off)
                self.send(DATA, sid, stdin_data[off:off + n])
                off, credit = off + n, credit - n
            t, p = self.wait(sid, max(0.0, deadline - time.monotonic()))
            if t in (STDOUT, STDERR):
                (out if t == STDOUT else err).extend(p)
                outstanding += len(p)
                ungranted += len(p)
                max_out = max(max_out, outstanding)
                if ungranted >= grant_every:
                    self.send(WINDOW, sid, u32(ungranted))
                    outstanding -= ungranted
                    ungranted = 0
            elif t == WINDOW:
                credit += struct.unpack("<I", p)[0]
            elif t == END:
                return json.loads(p), bytes(out), bytes(err), max_out

    def run(self, argv, timeout=20.0, stdin_data=None, grant_every=0, **kw):
        req = {"op": "exec", "argv": argv, "env": ENV, "cwd": "/", "timeout_ms": 0,
               "stdin": stdin_data is not None, "max_output": 16 << 20}
        req.update(kw)
        return self.collect_exec(self.open(req), timeout, stdin_data, grant_every)

    def simple(self, req, timeout=10.0):
        return json.loads(self.wait_type(self.open(req), END, timeout))

    def file_write(self, path, data, **kw):
        sid = self.open(dict({"op": "file_write", "path": path}, **kw))
        credit, off, granted = INITIAL_WINDOW, 0, 0
        while off < len(data):
            while credit > 0 and off < len(data):
                n = min(MAX_DATA, credit, len(data) - off)
                self.send(DATA, sid, data[off:off + n])
                off, credit = off + n, credit - n
            while credit == 0:
                t, p = self.wait(sid)
                if t == WINDOW:
                    n = struct.unpack("<I", p)[0]
                    credit, granted = credit + n, granted + n
                elif t == END:
                    return json.loads(p), granted
        self.send(EOF, sid)
        while True:
            t, p = self.wait(sid, 30)
            if t == WINDOW:
                granted += struct.unpack("<I", p)[0]
            elif t == END:
                return json.loads(p), granted

    def file_read(self, path, grant_every=256 * 1024):
        sid = self.open({"op": "file_read", "path": path})
        header, data, eof = None, bytearray(), False
        outstanding = ungranted = max_out = 0
        while True:
            t, p = self.wait(sid, 30)
            if t == HEADER:
                header = json.loads(p)
            elif t == DATA:
                data.extend(p)
                outstanding += len(p)
                ungranted += len(p)
                max_out = max(max_out, outstanding)
                if ungranted >= grant_every:
                    self.send(WINDOW, sid, u32(ungranted))
                    outstanding -= ungranted
                    ungranted = 0
            elif t == EOF:
                eof = True
            elif t == END:
                return json.loads(p), header, bytes(data), eof, max_out


def write_bundle():
    caps = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
            "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
            "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_SYS_ADMIN"]
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/.b3os/agent"],
            "env": ["PATH=" + ENV["PATH"]], "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 65536}],
        },
        "root": {"path": ROOTFS, "readonly": False},
        "hostname": "sandbox",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/.b3os/agent", "type": "bind", "source": AGENT,
             "options": ["rbind", "ro"]},
        ],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }
    with open(TMP + "/bundle/config.json", "w") as f:
        json.dump(config, f, indent=1)


def start_container():
    """runsc create with the agent end of a socketpair as the container's stdin and stdout."""
    write_bundle()
    daemon_end, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    log = open(TMP + "/agent.log", "wb")
    t0 = time.monotonic()
    create = subprocess.run(RUNSC + ["create", "--bundle", TMP + "/bundle", "--pid-file",
                                     TMP + "/pid", CID],
                            stdin=agent_end, stdout=agent_end, stderr=log, timeout=60)
    t1 = time.monotonic()
    agent_end.close()
    if create.returncode != 0:
        raise RuntimeError("runsc create failed (%d); see agent.log" % create.returncode)
    start = subprocess.run(RUNSC + ["start", CID], stderr=subprocess.PIPE, timeout=60)
    if start.returncode != 0:
        raise RuntimeError("runsc start failed: %s" % start.stderr.decode(errors="replace"))
    print("INFO runsc create %.0f ms, start %.0f ms" %
          ((t1 - t0) * 1000, (time.monotonic() - t1) * 1000), flush=True)
    return daemon_end


def print_rss(ch, when):
    _, out, _, _ = ch.run(["sh", "-c", "grep VmRSS /proc/1/status"])
    print("INFO agent (PID 1) %s %s" % (when, out.decode(errors="replace").split(":")[-1].strip()),
          flush=True)


def test_basics(ch):
    t, p = ch.wait(0, 15)
    hello = json.loads(p) if t == HELLO else {}
    check("HELLO on start", t == HELLO and hello.get("version") == 1
          and len(hello.get("boot_id", "")) == 32 and "agent" in hello, p)
    ch.send(PING, 0, b"ping-123")
    check("PING/PONG", ch.wait_type(0, PONG) == b"ping-123")
    print_rss(ch, "idle")
    ident = {"sandbox_id": "sb_test", "hostname": "sb-test-host", "machine_id": "0123456789abcdef0123456789abcdef",
             "seed": os.urandom(32).hex(), "time_ns": time.time_ns()}
    ch.send(IDENTITY, 0, json.dumps(ident).encode())
    ack = json.loads(ch.wait_type(0, IDENTITY_ACK))
    check("IDENTITY_ACK ok", ack.get("ok") is True, ack)
    end, out, _, _ = ch.run(["sh", "-c", "hostname; cat /etc/hostname /etc/machine-id"])
    check("identity applied", out == b"sb-test-host\nsb-test-host\n0123456789abcdef0123456789abcdef\n", out)


def test_exec(ch):
    end, out, err, _ = ch.run(["python3", "-c", "print(6*7)"])
    check("exec python3 prints 42", end.get("ok") and out == b"42\n" and end["exit_code"] == 0,
          (end, out, err))
    check("exec END fields", all(k in end for k in (
        "signal", "timed_out", "duration_ms", "stdout_bytes", "stderr_bytes", "stdout_truncated",
        "stderr_truncated")) and end["stdout_bytes"] == 3 and isinstance(end["duration_ms"], float), end)
    end, out, err, _ = ch.run(["sh", "-c", "echo oops >&2; exit 3"])
    check("exec stderr and exit code", err == b"oops\n" and end["exit_code"] == 3, (end, err))
    end, out, _, _ = ch.run(["sh", "-c", "pwd; echo $FOO"], cwd="/tmp", env=dict(ENV, FOO="bar"))
    check("exec cwd and env", out == b"/tmp\nbar\n", out)
    end, out, err, _ = ch.run(["/no/such/program"])
    check("exec nonexistent -> 127", end.get("exit_code") == 127
          and err.startswith(b"b3os: exec /no/such/program: No such file"), (end, err))
    end, out, err, _ = ch.run(["python3", "-c", "1"], env={"PATH": "/nonexistent"})
    check("exec PATH from request env", end.get("exit_code") == 127, (end, err))
    end = ch.simple({"op": "exec", "argv": ["true"], "env": ENV, "cwd": "/nonexistent"})
    check("exec missing cwd -> invalid_request", end.get("ok") is False
          and end["error"]["code"] == "invalid_request" and "No such file" in end["error"]["message"], end)
    end, _, _, _ = ch.run(["sh", "-c", "kill -9 $$"])
    check("exec killed by signal -> 128+9", end.get("exit_code") == 137 and end.get("signal") == 9, end)
    t0 = time.monotonic()
    end, _, _, _ = ch.run(["sleep", "10"], timeout_ms=300)
    el = time.monotonic() - t0
    check("exec timeout_ms 300 of sleep 10", end.get("timed_out") is True and end["exit_code"] == 137
          and el < 1.0, (end, el))
    t0 = time.monotonic()
    end, out, _, _ = ch.run(["sh", "-c", "sleep 5 & echo hi"])
    el = time.monotonic() - t0
    check("exec background child holding pipes does not hang", out == b"hi\n" and el < 1.0, (end, el))
    sid = ch.open({"op": "exec", "argv": ["sleep", "30"], "env": ENV, "cwd": "/"})
    time.sleep(0.1)
    t0 = time.monotonic()
    ch.send(CANCEL, sid)
    end, _, _, _ = ch.collect_exec(sid, timeout=5)
    check("exec CANCEL kills and ENDs", end.get("exit_code") == 137 and time.monotonic() - t0 < 1.0, end)
    data = os.urandom(2 << 20)
    end, out, _, _ = ch.run(["cat"], stdin_data=data)
    check("exec stdin 2 MiB through cat", out == data and end["exit_code"] == 0, (end, len(out)))
    end, out, _, _ = ch.run(["head", "-c", "3000000", "/dev/zero"], max_output=1 << 20)
    check("exec max_output truncates", len(out) == 1 << 20 and end["stdout_bytes"] == 1 << 20
          and end["stdout_truncated"] is True and end["exit_code"] == 0, end)
    end, out, _, max_out = ch.run(["head", "-c", "4000000", "/dev/zero"], grant_every=300 * 1024)
    check("exec output respects the window", len(out) == 4000000 and max_out <= INITIAL_WINDOW,
          (end, max_out))
    t0 = time.monotonic()
    sids = [ch.open({"op": "exec", "argv": ["sh", "-c", "sleep 0.5; echo %d" % i], "env": ENV,
                     "cwd": "/"}) for i in range(4)]
    results = [ch.collect_exec(s) for s in sids]
    el = time.monotonic() - t0
    check("4 concurrent execs", [r[1] for r in results] == [b"%d\n" % i for i in range(4)]
          and el < 1.5, (el, [r[1] for r in results]))


def test_files(ch):
    data = os.urandom(3 << 20)
    end, granted = ch.file_write("/workspace/sub/big.bin", data)
    check("file_write 3 MiB", end == {"ok": True, "bytes": len(data)} and granted == len(data),
          (end, granted))
    end, header, got, eof, max_out = ch.file_read("/workspace/sub/big.bin")
    check("file_read 3 MiB byte-exact", end.get("ok") and end.get("bytes") == len(data) and eof
          and header == {"size": len(data), "mode": 0o644}
          and hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), (end, header, len(got)))
    check("file_read respects the window", max_out <= INITIAL_WINDOW, max_out)
    end, _ = ch.file_write("/workspace/run.sh", b"#!/bin/sh\necho script\n", mode=0o755)
    r, out, _, _ = ch.run(["/workspace/run.sh"])
    check("file_write mode 0755 runs", end.get("ok") and out == b"script\n", (end, r, out))
    end = ch.simple({"op": "list", "path": "/workspace"})
    names = [e["name"] for e in end.get("entries", [])]
    run = next((e for e in end.get("entries", []) if e["name"] == "run.sh"), {})
    check("list /workspace", end.get("ok") and names == sorted(names) and "sub" in names
          and run.get("type") == "file" and run.get("mode") == 0o755 and run.get("size") == 22
          and isinstance(run.get("mtime_ns"), int), end)
    end = ch.simple({"op": "stat", "path": "/workspace/sub/big.bin"})
    check("stat file", end.get("ok") and end.get("type") == "file" and end.get("size") == len(data), end)
    end = ch.simple({"op": "remove", "path": "/workspace/sub"})
    check("remove non-empty dir needs recursive", end.get("ok") is False
          and end["error"]["code"] == "invalid_request" and "recursive" in end["error"]["message"], end)
    end = ch.simple({"op": "remove", "path": "/workspace/sub", "recursive": True})
    check("remove recursive", end == {"ok": True}, end)
    end = ch.simple({"op": "remove", "path": "/workspace/run.sh"})
    check("remove file", end == {"ok": True}, end)
    end = ch.simple({"op": "stat", "path": "/workspace/sub/big.bin"})
    check("stat missing -> file_not_found", end.get("ok") is False
          and end["error"]["code"] == "file_not_found", end)
    for name, req, code in [
        ("file_read of a dir", {"op": "file_read", "path": "/workspace"}, "invalid_request"),
        ("file_read missing", {"op": "file_read", "path": "/nope"}, "file_not_found"),
        ("file_write over a dir", {"op": "file_write", "path": "/workspace"}, "invalid_request"),
        ("relative path", {"op": "stat", "path": "workspace"}, "invalid_request"),
        ("list of a file", {"op": "list", "path": "/etc/hostname"}, "invalid_request"),
        ("remove /", {"op": "remove", "path": "/", "recursive": True}, "invalid_request"),
        ("unknown op", {"op": "frobnicate"}, "invalid_request"),
    ]:
        end = ch.simple(req)
        check(name + " -> " + code, end.get("ok") is False and end["error"]["code"] == code, end)
    sid = ch.next_id
    ch.next_id += 1
    ch.send(OPEN, sid, b"{not json")
    end = json.loads(ch.wait_type(sid, END))
    check("malformed OPEN -> invalid_request", end.get("error", {}).get("code") == "invalid_request", end)
    ch.send(DATA, 9999, b"x")
    ch.send(WINDOW, 9998, u32(5))
    ch.send(PING, 0, b"still")
    check("frames for unknown streams ignored", ch.wait_type(0, PONG) == b"still")


def test_resync(ch):
    sid = ch.open({"op": "exec", "argv": ["sleep", "31"], "env": ENV, "cwd": "/"})
    time.sleep(0.2)
    # A daemon that died mid-frame: a header promising 100 bytes, 10 of them, then junk.
    garbage = frame(DATA, 12345, b"")[:8] + u32(100) + b"0123456789" + os.urandom(64)
    el = ch.resync(garbage)
    check("RESYNC after garbage -> RESYNC_ACK", el < 3.0, el)
    _, out, _, _ = ch.run(["ps", "-eo", "args="])
    check("RESYNC killed running execs", b"sleep 31" not in out, out)
    print_rss(ch, "after the tests")


def test_shim(ch):
    sock_path = TMP + "/shim.sock"
    fd = ch.sock.fileno()
    redirect = "" if fd == 3 else "3<&%d %d<&-" % (fd, fd)
    shim = subprocess.Popen(["/bin/sh", "-c", 'exec "$0" "$1" ' + redirect, SHIM, sock_path],
                            pass_fds=(fd,), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready = select.select([shim.stdout], [], [], 5)[0] and shim.stdout.readline()
    check("shim prints ready", ready == b"ready\n", ready)
    check("shim socket is 0600", os.stat(sock_path).st_mode & 0o777 == 0o600)
    ch.sock.close()
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(2)
    c.connect(sock_path)
    msg, fds, _, _ = socket.recv_fds(c, 1, 2)
    c.close()
    check("shim hands over one fd with message F", msg == b"F" and len(fds) == 1, (msg, fds))
    ch2 = Channel(socket.socket(fileno=fds[0]))
    ch2.next_id = 100000
    el = ch2.resync()
    end, out, _, _ = ch2.run(["sh", "-c", "echo handed over"])
    check("exec over the fd fetched from the shim", out == b"handed over\n" and end["exit_code"] == 0,
          (el, end, out))
    shim.send_signal(signal.SIGTERM)
    rc = shim.wait(5)
    check("shim exits 0 on SIGTERM and removes its socket", rc == 0 and not os.path.exists(sock_path), rc)
    ch2.sock.close()


def main():
    signal.alarm(240)
    ch = Channel(start_container())
    for test in (test_basics, test_exec, test_files, test_resync, test_shim):
        try:
            test(ch)
        except Exception as e:  # report and go on: later groups may still tell something
            check(test.__name__, False, "%s: %s" % (type(e).__name__, e))
            if isinstance(e, RuntimeError) and "closed" in str(e):
                break
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
PY

set +e
B3OS_AGENT="$agent" B3OS_SHIM="$shim" B3OS_ROOTFS="$rootfs" B3OS_TMP="$tmp" B3OS_ID="$id" \
  B3OS_RUNSC_ROOT="$runsc_root" timeout 300 python3 "$tmp/driver.py"
driver_rc=$?
set -e
if [ "$driver_rc" != 0 ]; then
  failures=$((failures + 1))
  echo "agent_runsc: driver exited with $driver_rc; agent log:"
  sed 's/^/  | /' "$tmp/agent.log" 2>/dev/null | tail -40 || true
fi

# Teardown: kill and delete the container, then nothing with its id may keep running.
runsc "${runsc_flags[@]}" kill "$id" KILL >/dev/null 2>&1 || true
if runsc "${runsc_flags[@]}" delete --force "$id" >"$tmp/delete.log" 2>&1; then
  pass "runsc delete --force"
else
  failed "runsc delete --force: $(tail -3 "$tmp/delete.log")"
fi
left=""
for _ in $(seq 1 40); do
  left=$(pgrep -f -- "$id" || true)
  [ -z "$left" ] && break
  sleep 0.05
done
if [ -z "$left" ]; then pass "no runsc process left for $id"; else failed "processes left for $id: $left"; fi
if runsc "${runsc_flags[@]}" list 2>/dev/null | grep -q -- "$id"; then
  failed "container still listed by runsc list"
else
  pass "container gone from runsc list"
fi
if [ "$(ls -A "$rootfs/workspace" | wc -l)" = "$template_workspace_before" ]; then
  pass "template rootfs untouched (/workspace)"
else
  failed "template rootfs /workspace changed"
fi

if [ "$failures" = 0 ]; then
  echo "agent_runsc: all checks passed"
  exit 0
fi
echo "agent_runsc: $failures failure(s)"
exit 1

#!/usr/bin/env python3
"""Drives b3os-agent in a runsc container over the channel protocol (docs/agent-protocol.md).

The Python half of tests/integration/agent_runsc.sh, which finds the binaries, makes the
temp dir, runs this driver, then checks that deleting the container leaves nothing behind.
The driver writes an OCI bundle on the base template's rootfs, starts b3os-agent as PID 1
with `runsc create` and `start`, and speaks the channel to it on the container's stdin and
stdout as b3osd would: HELLO, identity, exec (streams, signals, timeouts, cancel, windows),
files, the agent's HTTP relay on 127.0.0.1:7700 (the driver plays b3osd's model gateway; a
client inside the sandbox sends the requests), RESYNC after garbage on the channel, and the
hand-over of the channel through b3os-shim.

It prints one line per check (PASS name / FAIL name: detail) and exits 1 if any failed.

Env (all set by agent_runsc.sh): B3OS_AGENT, B3OS_SHIM (binaries), B3OS_ROOTFS (template
rootfs, never written), B3OS_TMP (temp dir: bundle, logs, sockets), B3OS_ID (container id),
B3OS_RUNSC_ROOT (runsc --root); B3OS_RUNSC_DEBUG=1 keeps runsc debug logs in B3OS_TMP.
"""
import base64
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
# The protocol's own limits (protocol/frame.h), for what the agent sends and must respect.
AGENT_WINDOW = 4 << 20
AGENT_MAX_DATA = 256 * 1024
AGENT_STREAM = 0x80000000
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

    def wait_agent_open(self, timeout=10.0):
        """The next OPEN of a stream the agent opened: (stream id, request)."""
        deadline = time.monotonic() + timeout
        while True:
            for s, q in self.queues.items():
                if s & AGENT_STREAM:
                    for i, (t, p) in enumerate(q):
                        if t == OPEN:
                            del q[i]
                            return s, json.loads(p)
            t, s, p = self._read_frame(deadline)
            self.queues.setdefault(s, []).append((t, p))

    def agent_opens_queued(self):
        return [s for s, q in self.queues.items() if s & AGENT_STREAM and any(t == OPEN for t, _ in q)]

    def relay_body(self, rid, timeout=10.0):
        """The request body of an agent-opened stream: DATA up to EOF. Returns (body, sizes)."""
        deadline = time.monotonic() + timeout
        body, sizes = bytearray(), []
        while True:
            t, p = self.wait(rid, max(0.0, deadline - time.monotonic()))
            if t == DATA:
                body.extend(p)
                sizes.append(len(p))
            elif t == EOF:
                self.send(WINDOW, rid, u32(len(body)))  # consumed, as the gateway would
                return bytes(body), sizes
            else:
                raise RuntimeError("relay stream %#x: frame 0x%x before EOF" % (rid, t))

    def relay_answer(self, rid, status, headers, chunks, gap=0.0, end=None, credit=AGENT_WINDOW):
        """Answers an agent-opened stream like the gateway: HEADER, DATA within the agent's
        window, then (once all of it was granted back) END. Returns (granted, cancelled)."""
        self.send(HEADER, rid, json.dumps({"status": status, "headers": headers}).encode())
        total = granted = 0

        def take(timeout):
            nonlocal credit, granted
            t, p = self.wait(rid, timeout)
            if t == WINDOW:
                n = struct.unpack("<I", p)[0]
                credit, granted = credit + n, granted + n
            return t == CANCEL

        for c in chunks:
            while credit < len(c):
                if take(10):
                    return granted, True
            self.send(DATA, rid, c)
            credit, total = credit - len(c), total + len(c)
            if gap:
                time.sleep(gap)
        deadline = time.monotonic() + 10
        while granted < total:
            if take(max(0.0, deadline - time.monotonic())):
                return granted, True
        self.send(END, rid, json.dumps(end or {"ok": True}).encode())
        return granted, False

    def start(self, argv, **kw):
        """Opens an exec stream without waiting for it (collect it with collect_exec)."""
        req = {"op": "exec", "argv": argv, "env": ENV, "cwd": "/", "timeout_ms": 60000,
               "stdin": False, "max_output": 16 << 20}
        req.update(kw)
        return self.open(req)

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
    # Credit is given back 3 MiB at a time: the agent may have up to its 4 MiB window unanswered,
    # never more (its output frames are up to 1 MiB each).
    end, out, _, max_out = ch.run(["head", "-c", "12000000", "/dev/zero"], grant_every=3 << 20)
    check("exec output respects the window", len(out) == 12000000 and (3 << 20) <= max_out <= AGENT_WINDOW,
          (end, max_out, len(out)))
    t0 = time.monotonic()
    sids = [ch.open({"op": "exec", "argv": ["sh", "-c", "sleep 0.5; echo %d" % i], "env": ENV,
                     "cwd": "/"}) for i in range(4)]
    results = [ch.collect_exec(s) for s in sids]
    el = time.monotonic() - t0
    check("4 concurrent execs", [r[1] for r in results] == [b"%d\n" % i for i in range(4)]
          and el < 1.5, (el, [r[1] for r in results]))


def test_exec_user(ch):
    """exec's `user`: resolved from the sandbox's own /etc/passwd and /etc/group."""
    end, out, err, _ = ch.run(["sh", "-c", "groupadd -g 2345 team && useradd -m -u 2001 alice"
                               " && usermod -aG team alice"])
    check("exec_user setup (useradd)", end.get("exit_code") == 0, (end, err))
    env = {"PATH": ENV["PATH"]}
    probe = ["sh", "-c", 'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; pwd']
    end, out, err, _ = ch.run(probe, user="alice", env=env, cwd="/home/alice")
    check("exec_user alice by name",
          out == b"2001\n2001\n2001 2345\n/home/alice alice alice\n/home/alice\n", (end, out, err))
    end, out, err, _ = ch.run(probe, user="2001", env=env)
    check("exec_user alice by uid", out.startswith(b"2001\n2001\n2001 2345\n/home/alice alice alice\n"),
          (end, out, err))
    end, out, err, _ = ch.run(probe, user="1234:4321", env=env)
    check("exec_user uid:gid without an entry", out == b"1234\n4321\n4321\n/  \n/\n", (end, out, err))
    end, out, err, _ = ch.run(probe, user="1234", env=env)
    check("exec_user uid alone: gid of the same number", out.startswith(b"1234\n1234\n1234\n"),
          (end, out, err))
    end, out, err, _ = ch.run(["sh", "-c", "echo $HOME $USER"], user="alice",
                              env=dict(env, HOME="/tmp", USER="someone"))
    check("exec_user request env wins", out == b"/tmp someone\n", (end, out, err))
    end, out, err, _ = ch.run(["sh", "-c", "id -u; echo $HOME"], user="root", env=env)
    check("exec_user root by name", out == b"0\n/root\n", (end, out, err))
    end, out, err, _ = ch.run(["sh", "-c", "echo x > /home/alice/f && stat -c '%U:%G' /home/alice/f"
                               " && touch /root/nope"], user="alice", env=env)
    check("exec_user files owned by alice, /root denied", out == b"alice:alice\n"
          and end.get("exit_code") != 0 and b"Permission denied" in err, (end, out, err))
    end = ch.simple({"op": "exec", "argv": ["true"], "env": env, "cwd": "/", "user": "nobody-here"})
    check("exec_user unknown name -> invalid_request", end.get("ok") is False
          and end["error"]["code"] == "invalid_request"
          and end["error"]["message"] == 'user: no user "nobody-here" in the sandbox\'s /etc/passwd', end)
    end = ch.simple({"op": "exec", "argv": ["true"], "env": env, "cwd": "/root", "user": "alice"})
    check("exec_user cwd the user cannot enter -> invalid_request", end.get("ok") is False
          and end["error"]["code"] == "invalid_request"
          and end["error"]["message"] == "cwd /root: Permission denied", end)
    end, out, err, _ = ch.run(["sh", "-c", "pwd"], cwd="/root", env=env)
    check("exec_user root still enters /root", out == b"/root\n", (end, out, err))


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


# The HTTP client the relay tests run inside the sandbox; one mode per case, a JSON line out.
RELAY_CLIENT = r"""
import base64, hashlib, json, socket, sys, time, urllib.error, urllib.request

URL = "http://127.0.0.1:7700/v1/infer/chat/completions"


def out(**kw):
    print(json.dumps(kw), flush=True)


def b64(b):
    return base64.b64encode(b).decode()


def raw(data, stop=None, pause=0.0):
    # Raw request bytes; the response read to EOF, or until `stop` shows up (then close).
    s = socket.create_connection(("127.0.0.1", 7700), timeout=20)
    s.sendall(data)
    if pause:
        time.sleep(pause)
        s.close()
        return b""
    got = b""
    try:
        while stop is None or stop not in got:
            b = s.recv(65536)
            if not b:
                break
            got += b
    finally:
        s.close()
    return got


def post(data, headers=None, url=URL):
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def error_case(name, status, body):
    out(case=name, status=status, body=b64(body))


def raw_case(name, data):
    got = raw(data)
    error_case(name, int(got.split()[1]), got.partition(b"\r\n\r\n")[2])


mode = sys.argv[1]
REQ = (b"POST /v1/infer/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:7700\r\n"
       b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
if mode == "sse":
    body = json.dumps({"model": "m", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(URL + "?stream=1&x=y", data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": "Bearer sk-not-for-the-daemon",
        "X-Trace": "t-1"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=20) as r:
        lines, times = [], []
        while True:
            line = r.readline()
            if not line:
                break
            lines.append(line)
            times.append(time.monotonic() - t0)
        out(status=r.status, reason=r.reason, headers=[[k.lower(), v] for k, v in r.getheaders()],
            body=b64(b"".join(lines)), times=times)
elif mode == "simple":
    status, body = post(b'{"model":"m"}')
    out(status=status, body=b64(body))
elif mode == "raw":
    out(got=b64(raw(REQ)))
elif mode == "disconnect_mid":
    out(got=b64(raw(REQ, stop=b"data: 1")))
elif mode == "disconnect_early":
    raw(REQ, pause=0.3)
    out(closed=True)
elif mode == "resync":
    try:
        out(got=b64(raw(REQ)))
    except Exception as e:
        out(error=repr(e))
elif mode == "errors":
    raw_case("chunked", b"POST /v1/infer/chat/completions HTTP/1.1\r\nHost: x\r\n"
                        b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
                        b"5\r\nhello\r\n0\r\n\r\n")
    error_case("5 MiB body", *post(b"x" * (5 << 20)))
    raw_case("70 KiB head", b"POST /v1/x HTTP/1.1\r\nX-Big: " + b"a" * (70 << 10) + b"\r\n\r\n")
    raw_case("malformed head", b"BLAH\r\n\r\n")
elif mode == "bigresp":
    time.sleep(0.5)  # a client slow to start reading: the agent must buffer and hold credit
    req = urllib.request.Request(URL, data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        time.sleep(0.5)
        h, n = hashlib.sha256(), 0
        while True:
            b = r.read(65536)
            if not b:
                break
            h.update(b)
            n += len(b)
    out(status=r.status, n=n, sha=h.hexdigest())
"""

RELAY_URL = "http://127.0.0.1:7700/v1/infer/chat/completions"
SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


def openai_error(body, code):
    try:
        e = json.loads(body)["error"]
    except Exception:
        return False
    return (e.get("code") == code and isinstance(e.get("message"), str) and "param" in e
            and e["param"] is None and e.get("type") in ("invalid_request_error", "server_error"))


def client_result(ch, sid, name):
    end, out, err, _ = ch.collect_exec(sid, timeout=40)
    try:
        return json.loads(out.splitlines()[-1]) if out.strip() else {}
    except ValueError:
        check(name + " (client output)", False, (end, out[-300:], err[-500:]))
        return {}


def test_relay(ch):
    end, _ = ch.file_write("/tmp/relay_client.py", RELAY_CLIENT.encode())
    check("relay client written", end.get("ok"), end)

    # A streamed chat completion through urllib.
    sid = ch.start(["python3", "/tmp/relay_client.py", "sse"])
    try:
        rid, req = ch.wait_agent_open()
    except Timeout:
        _, out, err, _ = ch.collect_exec(sid)
        raise RuntimeError("no relay OPEN; client said %r %r" % (out, err[-500:]))
    check("relay OPEN on stream 0x80000001", rid == AGENT_STREAM | 1, hex(rid))
    check("relay OPEN op/method/path/query", req.get("op") == "http" and req.get("method") == "POST"
          and req.get("path") == "/v1/infer/chat/completions" and req.get("query") == "stream=1&x=y", req)
    h = req.get("headers", {})
    check("relay OPEN headers (lower case; no authorization/host/connection/content-length)",
          h.get("content-type") == "application/json" and h.get("x-trace") == "t-1"
          and h.get("user-agent", "").startswith("Python-urllib") and all(k == k.lower() for k in h)
          and not {"authorization", "host", "connection", "content-length", "transfer-encoding"} & set(h), h)
    body, sizes = ch.relay_body(rid)
    check("relay request body as DATA then EOF",
          json.loads(body).get("messages") == [{"role": "user", "content": "hi"}], body)
    chunks = [b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n',
              b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n', b"data: [DONE]\n\n"]
    granted, _ = ch.relay_answer(rid, 200, SSE, chunks, gap=0.4)
    check("relay grants WINDOW for response bytes written to the client",
          granted == sum(map(len, chunks)), granted)
    r = client_result(ch, sid, "relay SSE")
    hdrs = dict(map(tuple, r.get("headers", [])))
    check("relay 200 SSE reaches the client byte-exact", r.get("status") == 200 and r.get("reason") == "OK"
          and base64.b64decode(r.get("body", "")) == b"".join(chunks)
          and hdrs.get("content-type") == "text/event-stream" and hdrs.get("connection") == "close"
          and "content-length" not in hdrs, r)
    t = r.get("times", [])
    check("relay SSE events are not buffered", len(t) == 6 and t[-1] - t[0] >= 0.6, t)

    # The gateway refuses: its 403 and body reach curl as they are.
    sid = ch.start(["curl", "-sS", "-i", "-H", "Content-Type: application/json", "-H",
                    "Authorization: Bearer x", "--data", '{"model":"m"}', RELAY_URL])
    rid, req = ch.wait_agent_open()
    body, _ = ch.relay_body(rid)
    err_body = (b'{"error":{"message":"this sandbox has no infer:run scope","type":'
                b'"invalid_request_error","param":null,"code":"forbidden"}}')
    ch.relay_answer(rid, 403, {"content-type": "application/json"}, [err_body])
    _, out, err, _ = ch.collect_exec(sid)
    head, _, got = out.partition(b"\r\n\r\n")
    check("relay HEADER 403 reaches curl with its body", rid == AGENT_STREAM | 2 and body == b'{"model":"m"}'
          and "authorization" not in req.get("headers", {})
          and head.startswith(b"HTTP/1.1 403 Forbidden\r\n") and b"\r\ncontent-type: application/json" in head
          and b"\r\nConnection: close" in head and b"content-length" not in head.lower() and got == err_body,
          (out, err))

    # A 3 MiB body from curl (which waits for 100 Continue) and a 6 MiB answer to a slow reader.
    data = os.urandom(3 << 20)
    ch.file_write("/tmp/big.bin", data)
    sid = ch.start(["curl", "-sS", "-v", "-o", "/tmp/resp.bin", "-w", "%{http_code}", "-H",
                    "Content-Type: application/octet-stream", "--data-binary", "@/tmp/big.bin", RELAY_URL])
    rid, req = ch.wait_agent_open()
    body, sizes = ch.relay_body(rid, timeout=20)
    check("relay 3 MiB body: DATA chunks <= 256 KiB, byte-exact",
          hashlib.sha256(body).digest() == hashlib.sha256(data).digest() and max(sizes) <= AGENT_MAX_DATA
          and "expect" not in req.get("headers", {}), (len(body), max(sizes), req))
    big = os.urandom(6 << 20)
    ch.relay_answer(rid, 200, {"content-type": "application/octet-stream"},
                    [big[i:i + AGENT_MAX_DATA] for i in range(0, len(big), AGENT_MAX_DATA)])
    _, out, err, _ = ch.collect_exec(sid, timeout=40)
    check("relay answers curl's Expect: 100-continue", b"Expect: 100-continue" in err
          and b"< HTTP/1.1 100 Continue" in err, err[-1500:])
    _, sha, _, _ = ch.run(["sha256sum", "/tmp/resp.bin"])
    check("relay 6 MiB response through the window to curl", out == b"200"
          and sha.split()[:1] == [hashlib.sha256(big).hexdigest().encode()], (out, err[-500:], sha))
    sid = ch.start(["python3", "/tmp/relay_client.py", "bigresp"])
    rid, req = ch.wait_agent_open()
    ch.relay_body(rid)
    granted, _ = ch.relay_answer(rid, 200, {"content-type": "application/octet-stream"},
                                 [big[i:i + AGENT_MAX_DATA] for i in range(0, len(big), AGENT_MAX_DATA)])
    r = client_result(ch, sid, "relay slow reader")
    check("relay 6 MiB response to a slow reader, credit granted as written",
          r.get("status") == 200 and r.get("n") == len(big)
          and r.get("sha") == hashlib.sha256(big).hexdigest()
          and granted == len(big), (r, granted))

    # Clients that go away: CANCEL, before the answer and in the middle of the body.
    sid = ch.start(["python3", "/tmp/relay_client.py", "disconnect_early"])
    rid, _ = ch.wait_agent_open()
    ch.relay_body(rid)
    try:
        ch.wait_type(rid, CANCEL, 5)
        ok = True
    except Timeout:
        ok = False
    check("relay client gone before HEADER -> CANCEL", ok)
    client_result(ch, sid, "relay early disconnect")
    sid = ch.start(["python3", "/tmp/relay_client.py", "disconnect_mid"])
    rid, _ = ch.wait_agent_open()
    ch.relay_body(rid)
    ch.send(HEADER, rid, json.dumps({"status": 200, "headers": SSE}).encode())
    ch.send(DATA, rid, b"data: 1\n\n")
    try:
        ch.wait_type(rid, CANCEL, 5)
        ok = True
    except Timeout:
        ok = False
    r = client_result(ch, sid, "relay mid-body disconnect")
    check("relay client gone mid-body -> CANCEL",
          ok and base64.b64decode(r.get("got", "")).endswith(b"data: 1\n\n"), r)
    # The daemon's frames still in flight for the cancelled stream, and for one never opened.
    ch.send(DATA, rid, b"data: 2\n\n")
    ch.send(END, rid, b'{"ok":true}')
    ch.send(HEADER, AGENT_STREAM | 999, b'{"status":200}')
    ch.send(WINDOW, AGENT_STREAM | 998, u32(5))
    ch.send(PING, 0, b"relay")
    check("frames for cancelled or unknown agent streams ignored", ch.wait_type(0, PONG) == b"relay")

    # The gateway fails: END ok:false mid-body closes with what came; before HEADER it is an error.
    sid = ch.start(["python3", "/tmp/relay_client.py", "raw"])
    rid, _ = ch.wait_agent_open()
    ch.relay_body(rid)
    ch.relay_answer(rid, 200, SSE, [b"data: partial\n\n"],
                    end={"ok": False, "error": {"code": "internal", "message": "upstream reset"}})
    got = base64.b64decode(client_result(ch, sid, "relay END ok:false").get("got", ""))
    check("relay END ok:false mid-body: closed after the bytes that came",
          got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\ndata: partial\n\n"), got)
    sid = ch.start(["python3", "/tmp/relay_client.py", "simple"])
    rid, _ = ch.wait_agent_open()
    ch.relay_body(rid)
    ch.send(END, rid, json.dumps({"ok": False,
                                  "error": {"code": "forbidden", "message": "no scope"}}).encode())
    r = client_result(ch, sid, "relay END ok:false before HEADER")
    check("relay END ok:false before HEADER -> its code as an HTTP error", r.get("status") == 403
          and openai_error(base64.b64decode(r.get("body", "")), "forbidden"), r)

    # Requests the agent refuses by itself, never opening a stream.
    before = ch.agent_opens_queued()
    sid = ch.start(["python3", "/tmp/relay_client.py", "errors"])
    _, out, err, _ = ch.collect_exec(sid, timeout=40)
    cases = {}
    for line in out.splitlines():
        c = json.loads(line)
        cases[c["case"]] = (c["status"], base64.b64decode(c["body"]))
    for name, status, code in [("chunked", 411, "length_required"), ("5 MiB body", 413, "payload_too_large"),
                               ("70 KiB head", 431, "request_header_fields_too_large"),
                               ("malformed head", 400, "invalid_request")]:
        st, body = cases.get(name, (None, b""))
        check("relay %s -> %d from the agent" % (name, status), st == status and openai_error(body, code)
              and json.loads(body)["error"]["type"] == "invalid_request_error", (st, body, err[-300:]))
    check("relay refusals open no stream", ch.agent_opens_queued() == before, ch.agent_opens_queued())


def test_resync(ch):
    # A relay request in flight (its client in the background, writing what it got to a file).
    ch.run(["sh", "-c", "python3 /tmp/relay_client.py resync >/tmp/resync-client.out 2>&1 &"])
    relay_id, _ = ch.wait_agent_open()
    ch.relay_body(relay_id)
    sid = ch.open({"op": "exec", "argv": ["sleep", "31"], "env": ENV, "cwd": "/"})
    time.sleep(0.2)
    # A daemon that died mid-frame: a header promising 100 bytes, 10 of them, then junk.
    garbage = frame(DATA, 12345, b"")[:8] + u32(100) + b"0123456789" + os.urandom(64)
    el = ch.resync(garbage)
    check("RESYNC after garbage -> RESYNC_ACK", el < 3.0, el)
    _, out, _, _ = ch.run(["ps", "-eo", "args="])
    check("RESYNC killed running execs", b"sleep 31" not in out, out)
    _, out, _, _ = ch.run(["sh", "-c", "for i in $(seq 50); do [ -s /tmp/resync-client.out ] && break; "
                           "sleep 0.1; done; cat /tmp/resync-client.out"])
    check("RESYNC closed the relay connection without an answer", out.strip() == b'{"got": ""}', out)
    sid = ch.start(["python3", "/tmp/relay_client.py", "simple"])
    rid, _ = ch.wait_agent_open()
    ch.relay_body(rid)
    ch.relay_answer(rid, 200, {"content-type": "application/json"}, [b'{"ok":1}'])
    r = client_result(ch, sid, "relay after RESYNC")
    check("relay works after RESYNC, stream ids go on", rid > relay_id and r.get("status") == 200
          and base64.b64decode(r.get("body", "")) == b'{"ok":1}', (hex(rid), hex(relay_id), r))
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
    signal.alarm(300)
    ch = Channel(start_container())
    for test in (test_basics, test_exec, test_exec_user, test_files, test_relay, test_resync, test_shim):
        try:
            test(ch)
        except Exception as e:  # report and go on: later groups may still tell something
            check(test.__name__, False, "%s: %s" % (type(e).__name__, e))
            if isinstance(e, RuntimeError) and "closed" in str(e):
                break
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

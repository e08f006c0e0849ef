"""Shared pieces of the benchmarks: an HTTP client on a kept-alive connection, and a private
b3osd (temporary data and run directories, the cached templates) that cleans up after itself."""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.auth = {"Authorization": f"Bearer {key}"}

    def call(self, method, path, body=None, raw=None, ctype="application/json"):
        headers = dict(self.auth)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif raw is not None:
            data = raw
            headers["Content-Type"] = ctype
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        payload = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {payload[:300]!r}")
        return r, payload


def server_timing(resp):
    """The Server-Timing header as {phase: ms}."""
    out = {}
    for part in resp.getheader("Server-Timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def pids_where(match):
    """Pids of the host processes whose command line (space-joined) satisfies match(cmd)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if match(cmd):
            out.append(int(pid))
    return out


class PrivateDaemon:
    """`with PrivateDaemon(bindir, templates, ["--warm-pool", "0"]) as d:` then d.client, d.tmp,
    d.runsc_root. On exit: SIGTERM, every container of its runsc root deleted, its dir removed."""

    def __init__(self, bindir, templates, flags=()):
        self.bindir, self.templates, self.flags = os.path.abspath(bindir), templates, list(flags)

    def has_flag(self, flag):
        out = subprocess.run([f"{self.bindir}/b3osd", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True).stdout
        return flag in out

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="b3os-bench-")
        self.port = free_port()
        # The preview listener (ports' URLs) of its own, so that benches never meet on 7080.
        self.preview_port = free_port()
        self.runsc_root = f"{self.tmp}/run/runsc"
        self.proc = subprocess.Popen(
            [f"{self.bindir}/b3osd", "--listen", f"127.0.0.1:{self.port}", "--data-dir", f"{self.tmp}/data",
             "--run-dir", f"{self.tmp}/run", "--runsc-root", self.runsc_root, "--templates-dir", self.templates,
             "--quiet-key", "--rate", "100000", "--burst", "100000",
             # Sandbox networks only where a bench asks (one b3osd per uplink range on a host).
             *([] if "--network" in self.flags else ["--network", "off"]),
             *([] if "--preview-listen" in self.flags else ["--preview-listen", f"127.0.0.1:{self.preview_port}"]),
             # No configuration file of the host's, and metrics on a port of the kernel's choosing
             # (for a b3osd that has them: a baseline build may be older).
             *([] if "--metrics-listen" in self.flags or not self.has_flag("--metrics-listen")
               else ["--metrics-listen", "127.0.0.1:0"]),
             *(["--config", "/dev/null"] if self.has_flag("--config") else []),
             *self.flags],
            stdout=open(f"{self.tmp}/b3osd.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        self.client = Client(self.port, open(f"{self.tmp}/data/admin.key").read().strip())
        return self

    def containers(self, root=None):
        out = subprocess.run(["runsc", "--root", root or self.runsc_root, "list", "--quiet"],
                             stdout=subprocess.PIPE, text=True).stdout
        return out.split()

    def wait_containers(self, n, timeout_s=60):
        """Waits until the pools have filled (n containers exist), so they do not add noise."""
        deadline = time.time() + timeout_s
        while time.time() < deadline and len(self.containers()) < n:
            time.sleep(0.2)
        time.sleep(0.5)

    def __exit__(self, *exc):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait()
        for root in (self.runsc_root, f"{self.tmp}/raw"):
            if os.path.isdir(root):
                for i in self.containers(root):
                    # A pool member left frozen (b3osd killed mid-refill) would hang runsc delete.
                    try:
                        with open(f"/sys/fs/cgroup/freezer/b3os/{i}/freezer.state", "w") as f:
                            f.write("THAWED")
                    except OSError:
                        pass
                    subprocess.run(["runsc", "--root", root, "delete", "--force", i], stderr=subprocess.DEVNULL,
                                   timeout=60)
        subprocess.run(["pkill", "-f", f"b3os-shim {self.tmp}"], stderr=subprocess.DEVNULL)
        # The disks of sandboxes b3osd left running (it stops without deleting them): unmounted
        # (their loop devices go with them) before the tree is removed, never walked into.
        with open("/proc/mounts") as f:
            for line in f:
                mnt = line.split()[1]
                if mnt.startswith(f"{self.tmp}/"):
                    subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return False


# Issue 25's realistic fork source: a python writing a file every 50 ms.
TICKER = ("import time\n"
          "while True:\n"
          "    open('/workspace/tick', 'w').write(repr(time.time()))\n"
          "    time.sleep(0.05)\n")


def busy_source(c, disk_gib=None):
    """A forkable sandbox running TICKER as a background process (its id), given a second to start."""
    spec = {"template": "base", "forkable": True, **({"disk_gib": disk_gib} if disk_gib else {})}
    _, b = c.call("POST", "/v1/sandboxes", spec)
    sid = json.loads(b)["id"]
    c.call("PUT", f"/v1/sandboxes/{sid}/files?path=/workspace/ticker.py", raw=TICKER.encode(),
           ctype="application/octet-stream")
    c.call("POST", f"/v1/sandboxes/{sid}/processes", {"cmd": ["python3", "/workspace/ticker.py"]})
    time.sleep(1)
    return sid


def exec_ms(c, sid, cmd=("true",)):
    """One exec's round trip (ms)."""
    t0 = time.perf_counter()
    c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": list(cmd)})
    return (time.perf_counter() - t0) * 1000

#!/usr/bin/env python3
"""Slow and idle clients against a running b3osd: the node keeps serving everyone else.

Usage: slow_clients.py [--url URL] [--key KEY] [--other-key KEY] [options]
  --url, --key        the daemon and an API key (env B3OS_API_URL, B3OS_API_KEY)
  --other-key         a key of another project (env B3OS_OTHER_API_KEY); without it the
                      in-flight check is skipped
  --connections N     idle connections to hold (default 2000)
  --head-timeout S    the daemon's --http-head-timeout (default 15)
  --body-timeout S    the daemon's --http-body-timeout (default 30)
  --per-key N         the daemon's --max-requests-per-key (default 64)
  --max-connections N the daemon's --max-connections; when given, also checks that new
                      connections past it evict the longest-idle ones
  --preview-url URL   the daemon's preview listener (--preview-listen; env B3OS_PREVIEW_URL);
                      without it the preview.* checks are skipped
  --idle-timeout S    the daemon's --http-idle-timeout (default 60)
  --preview-connections N  idle and half-head connections to hold on the preview listener
                      (default 1000)
  --daemon-pid PID    b3osd's pid, for its thread count (else not reported)
  --app PATH          the app run inside the preview sandboxes (default tests/e2e/ports_app.py)

Checks (one line each: PASS name / FAIL name: detail / SKIP name: reason):
  idle.*     N connections (a third send nothing, a third half a request head, a third a
             head with Content-Length: 100 and 8 bytes of body) stay open while /healthz and
             an authenticated GET /v1/sandboxes answer within 1 s, several times
  evict.*    past --max-connections, new clients are served and the oldest idle go
  head.*     a half-sent head is closed within the head deadline
  body.*     an authenticated body stopped after 8 of 100 bytes gets 408 request_timeout
             within the body deadline
  inflight.* --per-key + 10 concurrent `sleep 3` execs of one key: some get 429
             concurrency_limited with Retry-After, while another project's requests are
             answered within 1 s; afterwards the key is served again
  preview.*  the same against the preview listener, with two sandboxes each serving
             tests/e2e/ports_app.py on a public port (A, attacked, and B, a bystander):
    preview.setup         both apps answer through their public URLs
    preview.idle.*        N connections (half send nothing, half half a request head), 10
                          authenticated bodies stopped after 8 of 100 bytes, two trickling
                          bodies and a client that never reads a 256 MiB GET /big are held
                          while GET / of A and of B and the API's /healthz answer within 1 s
    preview.head.deadline the half heads are closed at the head deadline (not before)
    preview.idle.deadline the silent connections are closed at the idle deadline (not before)
    preview.body.*        a stopped body gets 408 request_timeout at the body deadline; a body
                          that trickles a byte every half deadline is served in full; one that
                          trickles and then stops gets 408 a body deadline after its last byte
    preview.write.*       the client that never reads is closed by b3osd at the 60 s write
                          deadline (its socket leaves ESTABLISHED; not a flag: kWriteStall),
                          and what it then drains is cut short, never the complete body
    preview.cap.*         300 concurrent GET /sleep?s=4 to A (the per-sandbox cap is 256):
                          some 429 concurrency_limited with Retry-After, at once; none hangs;
                          the app saw only the admitted ones; B and /healthz answer within 1 s
                          meanwhile; a request without a token is 401, not 429 (the token
                          is checked before a slot is taken); afterwards A serves 20
                          requests at once again; b3osd has at most one more thread per
                          request in flight; 300 clients looping requests with a bad token
                          never make A's token holder get a 429
Exit 1 if any check failed. Standard library only.
"""
import argparse
import http.client
import json
import os
import resource
import socket
import sys
import threading
import time
from urllib.parse import urlparse

FAILED = []
PROMPT_S = 1.0  # what "answers promptly" means here


def result(ok, name, detail=""):
    print(f"PASS {name}" + (f" ({detail})" if detail else "") if ok else f"FAIL {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def skip(name, reason):
    print(f"SKIP {name}: {reason}", flush=True)


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Api:
    def __init__(self, url):
        u = urlparse(url)
        self.host, self.port = u.hostname, u.port or 80

    def call(self, method, path, key=None, body=None, timeout=30, headers=None, raw_out=None):
        """(status, headers, parsed JSON or None, seconds). body: JSON, or bytes sent as they
        are; raw_out: a list the raw answer body is appended to."""
        start = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            headers = dict(headers or {})
            if key:
                headers["Authorization"] = f"Bearer {key}"
            data = None
            if isinstance(body, bytes):
                data = body
                headers.setdefault("Content-Type", "application/octet-stream")
            elif body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            if raw_out is not None:
                raw_out.append(raw)
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            return resp.status, resp.headers, doc, time.monotonic() - start
        except (OSError, http.client.HTTPException) as e:
            return 0, {}, {"error": {"code": "client", "message": str(e)}}, time.monotonic() - start
        finally:
            conn.close()

    def connect(self):
        s = socket.create_connection((self.host, self.port), timeout=5)
        s.setblocking(False)
        return s


def is_open(sock):
    """False once the server closed the connection (EOF or reset); answers read are dropped."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def prompt_rounds(api, key, rounds, name):
    """/healthz and GET /v1/sandboxes, `rounds` times: each must be 200 within PROMPT_S."""
    worst = {"healthz": 0.0, "list": 0.0}
    bad = []
    for _ in range(rounds):
        for what, path, k in (("healthz", "/healthz", None), ("list", "/v1/sandboxes", key)):
            st, _, doc, dt = api.call("GET", path, k, timeout=10)
            worst[what] = max(worst[what], dt)
            if st != 200 or dt >= PROMPT_S:
                bad.append(f"{path}: HTTP {st} in {dt:.2f} s {json.dumps(doc)[:120]}")
        time.sleep(0.2)
    result(not bad, f"{name}.healthz_and_list_prompt",
           "; ".join(bad[:3]) if bad else f"{rounds} rounds, slowest /healthz {worst['healthz'] * 1000:.0f} ms, "
                                          f"GET /v1/sandboxes {worst['list'] * 1000:.0f} ms")


HALF_HEAD = b"GET /v1/sandboxes HTTP/1.1\r\nHost: b3os\r\nX-Slow: "
STALLED_BODY = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: b3os\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{\"templa")


def open_idle(api, n):
    """n connections, in thirds: nothing sent, half a head, a head and 8 of 100 body bytes."""
    kinds = {"nothing": [], "half_head": [], "stalled_body": []}
    names = list(kinds)
    for i in range(n):
        kind = names[i % 3]
        s = api.connect()
        if kind == "half_head":
            s.send(HALF_HEAD)
        elif kind == "stalled_body":
            s.send(STALLED_BODY)
        kinds[kind].append(s)
    return kinds


def check_idle(api, args):
    start = time.monotonic()
    try:
        kinds = open_idle(api, args.connections)
    except OSError as e:
        result(False, "idle.open", f"opening {args.connections} connections: {e}")
        return None
    opened = time.monotonic() - start
    result(True, "idle.open", f"{args.connections} connections in {opened:.1f} s")
    prompt_rounds(api, args.key, 5, "idle")
    elapsed = time.monotonic() - start
    # Nothing should have gone before its deadline (a half head has head_timeout).
    held = kinds["nothing"] + (kinds["half_head"] if elapsed < args.head_timeout - 0.5 else [])
    still = sum(is_open(s) for s in held)
    result(still == len(held), "idle.held_open",
           f"{still} of {len(held)} idle and half-head connections open after {elapsed:.1f} s")
    return kinds


def check_evict(api, args, kinds):
    if not args.max_connections:
        return skip("evict", "--max-connections not given")
    # The first opened wait longest for a head: 200 past the cap must close at least these.
    oldest = kinds["nothing"][:50]
    live = sum(is_open(s) for socks in kinds.values() for s in socks)
    try:
        fresh = [api.connect() for _ in range(max(args.max_connections + 200 - live, 200))]
    except OSError as e:
        return result(False, "evict.open", f"opening more connections: {e}")
    kinds["fresh"] = fresh
    time.sleep(0.5)
    prompt_rounds(api, args.key, 3, "evict")
    gone = sum(not is_open(s) for s in oldest)
    newest_open = sum(is_open(s) for s in fresh[-100:])
    result(gone == len(oldest), "evict.oldest_closed",
           f"{gone} of the {len(oldest)} longest-idle connections closed after {len(fresh)} more opened")
    result(newest_open == 100, "evict.newest_open", f"{newest_open} of the 100 newest connections open")


def wait_closed(sock, limit):
    """Seconds until the server answers or closes the connection, and what it sent."""
    start = time.monotonic()
    got = b""
    sock.setblocking(True)
    sock.settimeout(limit)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            got += data
            if b"\r\n\r\n" in got and len(got.split(b"\r\n\r\n", 1)[1]) > 0:
                break
    except socket.timeout:
        return None, got
    except OSError:
        pass
    return time.monotonic() - start, got


def check_head_deadline(api, args, out):
    s = api.connect()
    s.send(HALF_HEAD)
    out["dt"], _ = wait_closed(s, args.head_timeout + 10)
    s.close()


def report_head_deadline(args, out):
    dt = out.get("dt")
    ok = dt is not None and args.head_timeout - 0.5 <= dt <= args.head_timeout + 2
    result(ok, "head.deadline",
           f"half a head closed after {dt:.1f} s (deadline {args.head_timeout:g} s)" if dt is not None
           else f"still open {args.head_timeout + 10:g} s after half a head")


def check_body_deadline(api, args):
    s = api.connect()
    s.send(STALLED_BODY.replace(b"Host: b3os\r\n", f"Host: b3os\r\nAuthorization: Bearer {args.key}\r\n".encode()))
    dt, got = wait_closed(s, args.body_timeout + 10)
    s.close()
    status = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1 ") else "none"
    ok = dt is not None and args.body_timeout - 0.5 <= dt <= args.body_timeout + 2
    result(ok, "body.deadline",
           f"answered after {dt:.1f} s (deadline {args.body_timeout:g} s)" if dt is not None
           else f"no answer {args.body_timeout + 10:g} s after 8 of 100 body bytes")
    result(status == "408" and b'"request_timeout"' in got, "body.408_request_timeout",
           f"HTTP {status}" if status == "408" else f"got {got[:200]!r}")


def create_sandbox(api, key):
    st, _, doc, _ = api.call("POST", "/v1/sandboxes", key, {"template": "base"}, timeout=120)
    return (doc or {}).get("id") if st == 201 else None, st, doc


def check_in_flight(api, args):
    if not args.other_key:
        return skip("inflight", "no second key (--other-key or B3OS_OTHER_API_KEY)")
    sbx, st, doc = create_sandbox(api, args.key)
    if not sbx:
        return skip("inflight", f"could not create a sandbox to exec in: HTTP {st} {json.dumps(doc)[:200]}")
    try:
        run_in_flight(api, args, sbx)
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sbx}", args.key, timeout=60)


def run_in_flight(api, args, sbx):
    n = args.per_key + 10
    answers = [None] * n
    go = threading.Barrier(n)

    def one(i):
        go.wait()
        answers[i] = api.call("POST", f"/v1/sandboxes/{sbx}/exec", args.key, {"cmd": "sleep 3"}, timeout=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    prompt_rounds(api, args.other_key, 3, "inflight.other_project")
    for t in threads:
        t.join()
    ok = [a for a in answers if a[0] == 200]
    limited = [a for a in answers if a[0] == 429]
    other = [f"HTTP {a[0]} {json.dumps(a[2])[:120]}" for a in answers if a[0] not in (200, 429)]
    result(not other and 1 <= len(ok) <= args.per_key and len(limited) >= 10, "inflight.capped",
           f"{n} concurrent execs of one key: {len(ok)} ran, {len(limited)} got 429" + (f"; {other[:2]}" if other else ""))
    codes = {(a[2] or {}).get("error", {}).get("code") for a in limited}
    result(codes == {"concurrency_limited"}, "inflight.code", f"429 codes {sorted(map(str, codes))}")
    retry = [a[1].get("Retry-After") for a in limited]
    result(bool(retry) and all(r and r.isdigit() and int(r) >= 1 for r in retry), "inflight.retry_after",
           f"Retry-After {sorted(set(map(str, retry)))}")
    st, _, doc, _ = api.call("GET", "/v1/sandboxes", args.key)
    result(st == 200, "inflight.released", "the key is served again once its requests ended" if st == 200
           else f"HTTP {st} {json.dumps(doc)[:200]}")


# ---- the preview listener (--preview-listen: ports' preview URLs, docs/ports.md) -------------

PREVIEW_CAP = 256       # preview::Config::max_per_sandbox: preview requests in flight per sandbox
WRITE_STALL_S = 60      # kWriteStall of daemon/http: a response write with no progress (no flag)
APP_PORT = 8000
CAP_REQUESTS = 300
CAP_SLEEP_S = 4
BIG_BYTES = 256 << 20   # far more than every buffer on the way (sockets, the agent's window)
STALLED_BODIES = 10


class PreviewSandbox:
    """A sandbox serving tests/e2e/ports_app.py on a public port, and how to reach it."""

    def __init__(self, sid, host="", token=""):
        self.id, self.host, self.token = sid, host, token

    def target(self, path):
        return f"{path}{'&' if '?' in path else '?'}b3os_token={self.token}"


def start_preview_sandbox(api, key, app, memory_mib):
    """(PreviewSandbox or None, error or None): created with a public port, the app started."""
    st, _, doc, _ = api.call("POST", "/v1/sandboxes", key, {
        "template": "base", "timeout_s": 900, "memory_mib": memory_mib,
        "ports": [{"port": APP_PORT, "public": True}]}, timeout=120)
    if st != 201:
        return None, f"create: HTTP {st} {json.dumps(doc)[:200]}"
    url = (doc.get("ports") or [{}])[0].get("url") or ""
    sb = PreviewSandbox(doc["id"], f"{APP_PORT}-{doc.get('host_id')}.localhost", url.partition("b3os_token=")[2])
    if not sb.token:
        return sb, f"no public URL in the sandbox object: {json.dumps(doc)[:200]}"
    st, _, doc, _ = api.call("PUT", f"/v1/sandboxes/{sb.id}/files?path=/opt/ports_app.py", key, app, timeout=60)
    if st // 100 != 2:
        return sb, f"upload of the app: HTTP {st} {json.dumps(doc)[:200]}"
    cmd = (f"nohup python3 /opt/ports_app.py {APP_PORT} /tmp/app.log >/tmp/app.out 2>&1 & "
           "for i in $(seq 100); do grep -q listening /tmp/app.log 2>/dev/null && break; sleep 0.1; done; "
           "cat /tmp/app.log")
    st, _, doc, _ = api.call("POST", f"/v1/sandboxes/{sb.id}/exec", key, {"cmd": cmd, "timeout_ms": 30000}, timeout=60)
    if st != 200 or "listening" not in (doc or {}).get("stdout", ""):
        return sb, f"starting the app: HTTP {st} {json.dumps(doc)[:200]}"
    return sb, None


def preview_call(papi, sb, path, timeout=10, raw_out=None):
    return papi.call("GET", sb.target(path), headers={"Host": sb.host}, timeout=timeout, raw_out=raw_out)


def daemon_counts(pid):
    """(threads, open fds) of b3osd, or (None, None) without its pid."""
    if not pid:
        return None, None
    try:
        with open(f"/proc/{pid}/status") as f:
            threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
        return threads, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return None, None


class Prompt:
    """Rounds of /healthz and GET / of some preview sandboxes, each of which must be 200 within
    PROMPT_S: in a thread until stop() (a slow phase), or `rounds` times (run())."""

    def __init__(self, api, papi, sandboxes):
        self.api, self.papi, self.sandboxes = api, papi, sandboxes
        self.worst, self.bad, self.rounds = {}, [], 0
        self.done = threading.Event()
        self.thread = None

    def one_round(self):
        calls = [("healthz", lambda: self.api.call("GET", "/healthz", timeout=10))]
        calls += [(f"GET / of {label}", lambda sb=sb: preview_call(self.papi, sb, "/")) for label, sb in self.sandboxes]
        for what, fn in calls:
            st, _, doc, dt = fn()
            self.worst[what] = max(self.worst.get(what, 0.0), dt)
            if st != 200 or dt >= PROMPT_S:
                self.bad.append(f"{what}: HTTP {st} in {dt:.2f} s {json.dumps(doc)[:100]}")
        self.rounds += 1

    def run(self, rounds):
        for _ in range(rounds):
            self.one_round()
            time.sleep(0.2)
        return self

    def start(self):
        def loop():
            while not self.done.is_set():
                self.one_round()
                self.done.wait(0.3)
        self.thread = threading.Thread(target=loop)
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        if self.thread:
            self.thread.join()
        return self

    def report(self, name, during):
        worst = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.worst.items())
        result(self.rounds > 0 and not self.bad, name,
               "; ".join(self.bad[:3]) if self.bad else f"{self.rounds} rounds {during}; slowest: {worst}")


def server_side_state(port, peer_port):
    """(state, inode) of the socket of 127.0.0.1:port whose peer is 127.0.0.1:peer_port, from
    /proc/net/tcp ("01" is ESTABLISHED; inode "0" once no process holds it), or None."""
    local, remote = f"0100007F:{port:04X}", f"0100007F:{peer_port:04X}"
    with open("/proc/net/tcp") as f:
        for line in f:
            x = line.split()
            if len(x) > 9 and x[1] == local and x[2] == remote:
                return x[3], x[9]
    return None


def never_reader(papi, sb, out):
    """GET /big?n=BIG_BYTES and never read: b3osd must give up at its write deadline."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # fills at once
        s.settimeout(5)
        s.connect((papi.host, papi.port))
        lport = s.getsockname()[1]
        s.sendall(f"GET {sb.target(f'/big?n={BIG_BYTES}')} HTTP/1.1\r\nHost: {sb.host}\r\n\r\n".encode())
    except OSError as e:
        out["error"] = f"connecting: {e}"
        return
    t0 = time.monotonic()
    seen = False
    while time.monotonic() - t0 < WRITE_STALL_S + 30:
        state = server_side_state(papi.port, lport)
        if state and state[0] == "01" and state[1] != "0":
            seen = True
        elif seen:
            out["closed_after"] = time.monotonic() - t0
            out["state_after"] = state
            break
        time.sleep(0.25)
    out["seen"] = seen
    # What the client gets once it reads at last: the start of the body, then the end.
    got, head = 0, b""
    s.settimeout(10)
    try:
        while True:
            data = s.recv(1 << 20)
            if not data:
                out["end"] = "EOF"
                break
            if len(head) < 64:
                head += data[:64]
            got += len(data)
    except socket.timeout:
        out["end"] = "still open 10 s after the last byte"
    except OSError as e:
        out["end"] = f"reset ({e.strerror or e})"
    s.close()
    out["head"], out["got"] = head, got


def report_never_reader(out):
    if "error" in out:
        return result(False, "preview.write.deadline", out["error"])
    dt = out.get("closed_after")
    ok = out.get("seen") and dt is not None and WRITE_STALL_S - 5 <= dt <= WRITE_STALL_S + 15
    result(ok, "preview.write.deadline",
           f"b3osd closed the connection {dt:.1f} s after the request (write deadline {WRITE_STALL_S} s; "
           f"its socket then {out.get('state_after')})" if dt is not None
           else ("b3osd's socket of the connection was never seen" if not out.get("seen")
                 else f"still ESTABLISHED {WRITE_STALL_S + 30} s after the request"))
    head, got = out.get("head", b""), out.get("got", 0)
    ok = head.startswith(b"HTTP/1.1 200") and out.get("end", "").startswith(("EOF", "reset")) and got < BIG_BYTES
    result(ok, "preview.write.cut_short",
           f"the client then drained {got} bytes of a {BIG_BYTES}-byte body, then {out.get('end')}"
           + ("" if head.startswith(b"HTTP/1.1 200") else f"; head {head[:40]!r}"))


def body_client(papi, sb, length, pieces, gap, out):
    """POST /echo declaring `length` bytes, then `pieces` (bytes each) with `gap` s between
    them; then waits for the answer. out: status, body, seconds from the last byte."""
    try:
        s = socket.create_connection((papi.host, papi.port), timeout=5)
        s.sendall(f"POST {sb.target('/echo')} HTTP/1.1\r\nHost: {sb.host}\r\n"
                  f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n\r\n".encode())
        t0 = time.monotonic()
        for i, p in enumerate(pieces):
            if i:
                time.sleep(gap)
            s.sendall(p)
        last = time.monotonic()
        s.settimeout(60)
        got = b""
        while True:
            data = s.recv(65536)
            if not data:
                break
            got += data
            head, sep, body = got.partition(b"\r\n\r\n")
            if sep:
                n = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
                if n and len(body) >= n[0]:
                    break
        out["after_last"], out["total"] = time.monotonic() - last, time.monotonic() - t0
        out["status"] = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1 ") else "none"
        out["body"] = got.partition(b"\r\n\r\n")[2]
        s.close()
    except OSError as e:
        out["error"] = str(e)


def tokenless_flood(papi, a, attackers=300, legit=100):
    """Clients with no valid token (they know only the host) loop requests at A while its
    token holder makes `legit` requests: none of the holder's may be refused for the cap."""
    stop, seen, lock = threading.Event(), {}, threading.Lock()

    def attacker():
        while not stop.is_set():
            conn = http.client.HTTPConnection(papi.host, papi.port, timeout=10)
            try:
                while not stop.is_set():  # keep-alive: a 401 leaves the connection open
                    conn.request("GET", "/?b3os_token=" + "a" * 32, headers={"Host": a.host})
                    r = conn.getresponse()
                    r.read()
                    with lock:
                        seen[r.status] = seen.get(r.status, 0) + 1
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()

    threads = [threading.Thread(target=attacker) for _ in range(attackers)]
    for t in threads:
        t.start()
    time.sleep(1)
    got = {}
    for _ in range(legit):
        st = preview_call(papi, a, "/", timeout=30)[0]
        got[st] = got.get(st, 0) + 1
    stop.set()
    for t in threads:
        t.join()
    result(got == {200: legit} and 429 not in seen, "preview.cap.tokenless_flood",
           f"{attackers} clients with a bad token looping at A ({seen}): its token holder got {got}")


def check_preview(api, args):
    if not args.preview_url:
        return skip("preview", "no preview listener given (--preview-url or B3OS_PREVIEW_URL)")
    try:
        app = open(args.app, "rb").read()
    except OSError as e:
        return skip("preview", f"the app {args.app} cannot be read: {e}")
    papi = Api(args.preview_url)
    made = []
    try:
        a, err = start_preview_sandbox(api, args.key, app, 1024)
        made += [a] if a else []
        if not err:
            b, err = start_preview_sandbox(api, args.key, app, 512)
            made += [b] if b else []
        if err:
            return result(False, "preview.setup", err)
        raw_a, raw_b = [], []
        sa, _, _, _ = preview_call(papi, a, "/", raw_out=raw_a)
        sb_, _, _, _ = preview_call(papi, b, "/", raw_out=raw_b)
        ok = sa == 200 and sb_ == 200 and all(b"hello from the sandbox" in r[0] for r in (raw_a, raw_b))
        result(ok, "preview.setup", "two sandboxes serve ports_app.py on public port 8000" if ok
               else f"GET / of A: HTTP {sa} {raw_a[:1]!r}, of B: HTTP {sb_} {raw_b[:1]!r}")
        if not ok:
            return skip("preview.*", "the apps do not answer through their public URLs")
        preview_slow(api, papi, args, a, b)
    finally:
        for sb in made:
            api.call("DELETE", f"/v1/sandboxes/{sb.id}", args.key, timeout=60)


def preview_slow(api, papi, args, a, b):
    never = {}
    never_thread = threading.Thread(target=never_reader, args=(papi, a, never))
    never_thread.start()
    # The silent connections and the half heads.
    half_head = f"GET {a.target('/')} HTTP/1.1\r\nHost: {a.host}\r\nX-Slow: ".encode()
    silent, half, opened_at = [], [], {}
    start = time.monotonic()
    try:
        for i in range(args.preview_connections):
            s = papi.connect()
            if i % 2:
                s.send(half_head)
                half.append(s)
            else:
                silent.append(s)
            opened_at[s] = time.monotonic()
    except OSError as e:
        result(False, "preview.idle.open", f"opening {args.preview_connections} connections: {e}")
        for s in silent + half:
            s.close()
        never_thread.join()
        return
    result(True, "preview.idle.open", f"{len(silent)} silent and {len(half)} half-head connections in "
                                      f"{time.monotonic() - start:.1f} s")
    # The bodies: stopped after 8 of 100 bytes; a byte every half deadline, in full; the same, then stopped.
    bt = args.body_timeout
    stalled = [{} for _ in range(STALLED_BODIES)]
    trickle_full, trickle_stop = {}, {}
    bodies = [(100, [b"12345678"], 0, o) for o in stalled]
    bodies.append((8, [bytes([c]) for c in b"trickled"], bt / 2, trickle_full))
    bodies.append((100, [b"a", b"b", b"c", b"d"], bt / 2, trickle_stop))
    body_threads = [threading.Thread(target=body_client, args=(papi, a, *b_)) for b_ in bodies]
    for t in body_threads:
        t.start()
    prompt = Prompt(api, papi, [("A", a), ("B", b)]).start()
    threads_held = daemon_counts(args.daemon_pid)
    # Watch every connection until each has been closed, or well past the idle deadline.
    closed_at = {}
    until = start + args.idle_timeout + 4
    while time.monotonic() < until and len(closed_at) < len(silent) + len(half):
        now = time.monotonic()
        for s in silent + half:
            if s not in closed_at and not is_open(s):
                closed_at[s] = now - opened_at[s]
        time.sleep(0.25)
    prompt.stop()
    for t in body_threads:
        t.join()
    prompt.report("preview.idle.prompt", "of /healthz and GET / of A and B while the slow clients were held")
    if threads_held[0] is not None:
        print(f"# b3osd held the slow preview clients with {threads_held[0]} threads and {threads_held[1]} fds", flush=True)

    def deadline(name, socks, limit, what):
        times = [closed_at[s] for s in socks if s in closed_at]
        ok = len(times) == len(socks) and min(times) >= limit - 0.5 and max(times) <= limit + 2.5
        result(ok, name, f"{len(times)} of {len(socks)} {what} closed, "
                         + (f"{min(times):.1f} to {max(times):.1f} s after they were opened " if times else "")
                         + f"(deadline {limit:g} s)")

    deadline("preview.head.deadline", half, args.head_timeout, "half heads")
    deadline("preview.idle.deadline", silent, args.idle_timeout, "silent connections")
    for s in silent + half:
        s.close()

    errs = [o.get("error") for o in stalled if o.get("error")]
    late = [o["after_last"] for o in stalled if "after_last" in o]
    ok = not errs and len(late) == STALLED_BODIES and all(bt - 0.5 <= x <= bt + 2 for x in late)
    result(ok, "preview.body.deadline",
           f"{len(late)} bodies stopped after 8 of 100 bytes answered {min(late):.1f} to {max(late):.1f} s later "
           f"(deadline {bt:g} s)" if late and not errs else f"errors {errs[:2]}, answered {len(late)}")
    codes = sorted({o.get("status") for o in stalled})
    result(codes == ["408"] and all(b'"request_timeout"' in o.get("body", b"") for o in stalled),
           "preview.body.408_request_timeout", f"statuses {codes}")
    t = trickle_full
    ok = t.get("status") == "200" and t.get("body") == b"trickled" and t.get("total", 0) >= 3 * bt
    result(ok, "preview.body.trickle_served",
           f"8 bytes a byte every {bt / 2:g} s: HTTP {t.get('status')} {t.get('body', b'')!r} after "
           f"{t.get('total', 0):.1f} s" + (f"; {t['error']}" if "error" in t else ""))
    t = trickle_stop
    ok = t.get("status") == "408" and bt - 0.5 <= t.get("after_last", -1) <= bt + 2
    result(ok, "preview.body.trickle_then_stop_408",
           f"4 bytes a byte every {bt / 2:g} s, then nothing: HTTP {t.get('status')} "
           f"{t.get('after_last', -1):.1f} s after the last byte (deadline {bt:g} s)"
           + (f"; {t['error']}" if "error" in t else ""))

    preview_cap(api, papi, args, a, b)
    never_thread.join()
    report_never_reader(never)


def preview_cap(api, papi, args, a, b):
    n = CAP_REQUESTS
    answers = [None] * n
    go = threading.Barrier(n + 1)

    def one(i):
        try:
            go.wait(30)
        except threading.BrokenBarrierError:
            pass
        raw = []
        st, h, doc, dt = preview_call(papi, a, f"/sleep?s={CAP_SLEEP_S}", timeout=CAP_SLEEP_S + 30, raw_out=raw)
        answers[i] = (st, h, doc, dt, raw[0] if raw else b"")

    def one_safe(i):
        try:
            one(i)
        finally:
            if answers[i] is None:
                answers[i] = (0, {}, None, 0.0, b"the client thread failed")

    before = daemon_counts(args.daemon_pid)
    threads = [threading.Thread(target=one_safe, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    go.wait(30)
    prompt = Prompt(api, papi, [("B", b)]).start()
    time.sleep(1)
    peak = daemon_counts(args.daemon_pid)
    st, _, doc, dt = preview_call(papi, a, "/")
    code = (doc or {}).get("error", {}).get("code")
    result(st == 429 and code == "concurrency_limited" and dt < PROMPT_S, "preview.cap.refused_at_once",
           f"GET / of A while it is at its cap: HTTP {st} {code} in {dt * 1000:.0f} ms")
    st, _, doc, dt = papi.call("GET", "/", headers={"Host": a.host})
    code = (doc or {}).get("error", {}).get("code")
    result(st == 401 and code == "unauthorized", "preview.cap.tokenless_401",
           f"GET / of A without a token while A is at its cap: HTTP {st} {code} (want 401: the token comes "
           "before a slot)")
    for t in threads:
        t.join()
    prompt.stop()
    after = daemon_counts(args.daemon_pid)
    prompt.report("preview.cap.other_sandbox_prompt", "of /healthz and GET / of B while A was at its cap")
    ok = [x for x in answers if x[0] == 200 and x[4] == f"slept {CAP_SLEEP_S}\n".encode()]
    limited = [x for x in answers if x[0] == 429]
    other = [f"HTTP {x[0]} {x[4][:80]!r}" for x in answers if x not in ok and x[0] != 429]
    result(not other and 1 <= len(ok) <= PREVIEW_CAP and len(limited) >= n - PREVIEW_CAP, "preview.cap.limited",
           f"{n} concurrent GET /sleep?s={CAP_SLEEP_S} to A: {len(ok)} served, {len(limited)} got 429"
           + (f"; others: {other[:3]}" if other else ""))
    codes = {(x[2] or {}).get("error", {}).get("code") for x in limited}
    retry = {x[1].get("Retry-After") for x in limited}
    result(codes == {"concurrency_limited"} and all(r and r.isdigit() and int(r) >= 1 for r in retry),
           "preview.cap.code", f"429 codes {sorted(map(str, codes))}, Retry-After {sorted(map(str, retry))}")
    slow429 = max((x[3] for x in limited), default=0)
    slow200 = max((x[3] for x in ok), default=0)
    result(all(x[0] for x in answers) and slow429 < PROMPT_S + 1 and slow200 < CAP_SLEEP_S + 10, "preview.cap.no_hang",
           f"every request answered: slowest 429 in {slow429:.2f} s, slowest 200 in {slow200:.1f} s "
           f"(the app sleeps {CAP_SLEEP_S} s)")
    st, _, doc, _ = api.call("POST", f"/v1/sandboxes/{a.id}/exec", args.key,
                             {"cmd": "grep -c '^GET /sleep' /tmp/app.log"}, timeout=60)
    saw = (doc or {}).get("stdout", "").strip()
    result(st == 200 and saw == str(len(ok)), "preview.cap.app_saw_only_admitted",
           f"the app saw {saw or '?'} GET /sleep requests; {len(ok)} were served")
    # Released: 20 at once are all served again.
    res = [None] * 20
    ts = [threading.Thread(target=lambda i=i: res.__setitem__(i, preview_call(papi, a, "/", timeout=30)))
          for i in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    good = sum(1 for r in res if r and r[0] == 200)
    result(good == 20, "preview.cap.released", f"afterwards {good} of 20 concurrent GET / of A served "
                                               f"(slowest {max(r[3] for r in res if r):.2f} s)")
    tokenless_flood(papi, a)
    if before[0] is None or peak[0] is None:
        return skip("preview.cap.threads_bounded", "b3osd's pid not given (--daemon-pid)")
    # One worker thread per request in flight, at most (the idle ones stay a minute).
    result(peak[0] - before[0] <= n + 16, "preview.cap.threads_bounded",
           f"b3osd threads {before[0]} before the {n} requests, {peak[0]} while A was at its cap, {after[0]} "
           f"after; fds {before[1]}, {peak[1]}, {after[1]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("B3OS_API_URL"))
    p.add_argument("--key", default=os.environ.get("B3OS_API_KEY"))
    p.add_argument("--other-key", default=os.environ.get("B3OS_OTHER_API_KEY"))
    p.add_argument("--connections", type=int, default=2000)
    p.add_argument("--head-timeout", type=float, default=15)
    p.add_argument("--body-timeout", type=float, default=30)
    p.add_argument("--per-key", type=int, default=64)
    p.add_argument("--max-connections", type=int, default=0)
    p.add_argument("--preview-url", default=os.environ.get("B3OS_PREVIEW_URL"))
    p.add_argument("--idle-timeout", type=float, default=60)
    p.add_argument("--preview-connections", type=int, default=1000)
    p.add_argument("--daemon-pid", type=int, default=0)
    p.add_argument("--app", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "ports_app.py"))
    args = p.parse_args()
    if not args.url or not args.key:
        print("SKIP slow_clients: no daemon to test (--url/--key or B3OS_API_URL/B3OS_API_KEY)")
        return 2
    api = Api(args.url)
    need = args.connections + max(args.max_connections, 0) + args.preview_connections + CAP_REQUESTS + 400
    have = raise_fd_limit()
    if have < need:
        print(f"SKIP slow_clients: RLIMIT_NOFILE is {have}, the test needs {need}")
        return 2

    kinds = check_idle(api, args)
    if kinds:
        check_evict(api, args, kinds)
        for socks in kinds.values():
            for s in socks:
                s.close()
    # Beside the checks that follow; after the eviction check, which would close it first.
    head = {}
    head_thread = threading.Thread(target=check_head_deadline, args=(api, args, head))
    head_thread.start()
    check_body_deadline(api, args)
    check_in_flight(api, args)
    head_thread.join()
    report_head_deadline(args, head)
    check_preview(api, args)
    print(f"# slow_clients: {len(FAILED)} failed" + (f": {' '.join(FAILED)}" if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

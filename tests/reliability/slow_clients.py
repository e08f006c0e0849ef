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

    def call(self, method, path, key=None, body=None, timeout=30):
        """(status, headers, parsed JSON or None, seconds)."""
        start = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            return resp.status, resp.headers, doc, time.monotonic() - start
        except OSError as e:
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
    args = p.parse_args()
    if not args.url or not args.key:
        print("SKIP slow_clients: no daemon to test (--url/--key or B3OS_API_URL/B3OS_API_KEY)")
        return 2
    api = Api(args.url)
    need = args.connections + max(args.max_connections, 0) + 400
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
    print(f"# slow_clients: {len(FAILED)} failed" + (f": {' '.join(FAILED)}" if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

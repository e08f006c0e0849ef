#!/usr/bin/env python3
"""Clients for tests/e2e/ports.sh and bench/ports.py that curl is not (stdlib only). Each
connects to the preview listener at ADDR (host:port) and names the preview host in Host.

  ports_client.py ws ADDR HOST TARGET MESSAGE...   WebSocket: each message echoed? JSON out
  ports_client.py sse ADDR HOST TARGET             server-sent events with arrival times
  ports_client.py many ADDR HOST TARGET N          N connections at once: their statuses
  ports_client.py browse ADDR HOST TARGET SUBPATH   a browser's visit: TARGET opened as a top-level
                                                   navigation (redirects followed, cookies kept),
                                                   then SUBPATH fetched as a subresource of the page
                                                   with the Referer a browser would send
  ports_client.py fair ADDR HOST TARGET NQ SECS N HOST TARGET [HOST TARGET...]
                                                   N requests at once to each hostile HOST TARGET
                                                   pair (a slow endpoint: the admitted ones hold their
                                                   slots); SECS later, NQ at once to the first HOST
"""
import base64
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def read_head(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def ws(addr, host, target, messages):
    s = connect(addr)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head, rest = read_head(s)
    status = int(head.split(" ")[1]) if head.startswith("HTTP/") else 0
    out = {"status": status, "echoes": [],
           "set_cookies": [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("set-cookie:")]}
    if status != 101:
        out["head"] = head[:300]
        return out
    buf = rest

    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = s.recv(65536)
            if not d:
                raise EOFError("closed")
            buf += d
        r, buf = buf[:n], buf[n:]
        return r

    for m in messages:
        data = m.encode()
        mask = os.urandom(4)
        hdr = bytes([0x81]) + (bytes([0x80 | len(data)]) if len(data) < 126 else b"\xfe" + struct.pack(">H", len(data)))
        s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
        h = need(2)
        ln = h[1] & 0x7F
        if ln == 126:
            ln = struct.unpack(">H", need(2))[0]
        out["echoes"].append(need(ln).decode())
    s.sendall(b"\x88\x80" + os.urandom(4))  # close
    try:
        out["close_opcode"] = need(2)[0] & 0x0F
    except EOFError:
        out["close_opcode"] = None
    return out


def sse(addr, host, target):
    s = connect(addr)
    t0 = time.time()
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
    head, rest = read_head(s)
    events, buf = [], rest
    while True:
        while b"data: " in buf and b"\n\n" in buf.split(b"data: ", 1)[1]:
            pre, after = buf.split(b"data: ", 1)
            ev, buf = after.split(b"\n\n", 1)
            events.append({"data": ev.decode(), "at_s": round(time.time() - t0, 3)})
        if len(events) >= 3:
            break
        d = s.recv(65536)
        if not d:
            break
        buf += d
    return {"status": int(head.split(" ")[1]), "content_type": [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("content-type:")],
            "events": events}


def many(addr, host, target, n):
    res = [None] * n
    go = threading.Barrier(n)

    def one(i):
        try:
            s = connect(addr)
            go.wait()
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
            head, _, body = data.partition(b"\r\n\r\n")
            res[i] = {"status": int(head.split(b" ")[1]), "bytes": len(body)}
        except Exception as e:  # noqa: BLE001 (reported, not raised)
            res[i] = {"status": 0, "error": str(e)}

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return res


def request(addr, host, method, target, headers):
    """One request on its own connection: (status, [(name, value)...], body)."""
    s = connect(addr)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items() if v is not None]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    rows = head.decode("latin-1").split("\r\n")
    fields = [tuple(x.strip() for x in r.split(":", 1)) for r in rows[1:] if ":" in r]
    return int(rows[0].split(" ")[1]), fields, body


def browse(addr, host, target, sub):
    """What a browser does with a preview URL, as far as the preview can tell: a top-level
    navigation (Sec-Fetch-Mode: navigate, Accept: text/html) that follows redirects and keeps
    the cookies set on the way, then a subresource of the page it ended on, sent with the
    Referer a browser sends for a same-origin request (the page's URL) unless the page's answer
    said Referrer-Policy: no-referrer."""
    jar, hops, url = {}, [], target
    nav = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document", "Sec-Fetch-Site": "none",
           "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    for _ in range(5):
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items()) or None
        status, fields, body = request(addr, host, "GET", url, dict(nav, Cookie=cookie))
        get = lambda name: [v for k, v in fields if k.lower() == name]  # noqa: E731
        for c in get("set-cookie"):
            k, _, v = c.split(";", 1)[0].partition("=")
            jar[k.strip()] = v.strip()
        hops.append({"target": url, "status": status, "location": (get("location") or [None])[0],
                     "set_cookie": get("set-cookie"), "referrer_policy": get("referrer-policy"),
                     "cache_control": get("cache-control")})
        if status in (301, 302, 303, 307, 308) and get("location"):
            url = urllib.parse.urljoin(f"http://{host}{url}", get("location")[0])
            url = url.split(host, 1)[1] if url.startswith(f"http://{host}/") else url
            continue
        break
    page = f"http://{host}{url}"
    referer = None if "no-referrer" in ",".join(hops[-1]["referrer_policy"]) else page
    cookie = "; ".join(f"{k}={v}" for k, v in jar.items()) or None
    sub_status, _, _ = request(addr, host, "GET", sub, {"Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "style",
                                                       "Sec-Fetch-Site": "same-origin", "Accept": "text/css,*/*;q=0.1",
                                                       "Cookie": cookie, "Referer": referer})
    return {"hops": hops, "page": page, "page_status": hops[-1]["status"], "page_body": body[:80].decode("latin-1"),
            "cookies": sorted(jar), "sub_status": sub_status, "sub_referer": referer}


def fair(addr, quiet_host, quiet_target, quiet_n, after_s, n, hostile):
    """n requests at once to each hostile (host, target) (a slow target: the admitted ones hold
    their slot), then, after_s later while they hold, quiet_n at once to the quiet host."""
    t0 = time.time()

    def one(host, target, out, i, go):
        try:
            go.wait(30)
            status, _, body = request(addr, host, "GET", target, {})
            doc = {}
            try:
                doc = json.loads(body)
            except ValueError:
                pass
            err = doc.get("error", {}) if isinstance(doc, dict) else {}
            out[i] = {"status": status, "code": err.get("code"), "message": err.get("message"),
                      "body": body[:40].decode("latin-1") if not err else None, "end_s": round(time.time() - t0, 2)}
        except Exception as e:  # noqa: BLE001 (reported, not raised)
            out[i] = {"status": 0, "error": str(e)}

    def burst(pairs, n):
        outs = [[None] * n for _ in pairs]
        go = threading.Barrier(n * len(pairs))
        ts = [threading.Thread(target=one, args=(h, t, outs[k], i, go)) for k, (h, t) in enumerate(pairs) for i in range(n)]
        [t.start() for t in ts]
        return outs, ts

    hostile_out, hostile_threads = burst(hostile, n)
    time.sleep(after_s)
    quiet_out, quiet_threads = burst([(quiet_host, quiet_target)], quiet_n)
    [t.join() for t in quiet_threads + hostile_threads]
    # end_s: when each answer ended, from the first burst (the hostile requests admitted end
    # after the quiet ones when they held their slots meanwhile).
    return {"hostile": hostile_out, "quiet": quiet_out[0]}


if __name__ == "__main__":
    cmd, addr, host, target = sys.argv[1:5]
    if cmd == "ws":
        print(json.dumps(ws(addr, host, target, sys.argv[5:])))
    elif cmd == "sse":
        print(json.dumps(sse(addr, host, target)))
    elif cmd == "many":
        print(json.dumps(many(addr, host, target, int(sys.argv[5]))))
    elif cmd == "browse":
        print(json.dumps(browse(addr, host, target, sys.argv[5])))
    elif cmd == "fair":
        rest = sys.argv[8:]
        print(json.dumps(fair(addr, host, target, int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]),
                              list(zip(rest[::2], rest[1::2])))))

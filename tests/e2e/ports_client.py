#!/usr/bin/env python3
"""Clients for tests/e2e/ports.sh and bench/ports.py that curl is not (stdlib only). Each
connects to the preview listener at ADDR (host:port) and names the preview host in Host.

  ports_client.py ws ADDR HOST TARGET MESSAGE...   WebSocket: each message echoed? JSON out
  ports_client.py sse ADDR HOST TARGET             server-sent events with arrival times
  ports_client.py many ADDR HOST TARGET N          N connections at once: their statuses
"""
import base64
import json
import os
import socket
import struct
import sys
import threading
import time


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
    out = {"status": status, "echoes": []}
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


if __name__ == "__main__":
    cmd, addr, host, target = sys.argv[1:5]
    if cmd == "ws":
        print(json.dumps(ws(addr, host, target, sys.argv[5:])))
    elif cmd == "sse":
        print(json.dumps(sse(addr, host, target)))
    elif cmd == "many":
        print(json.dumps(many(addr, host, target, int(sys.argv[5]))))

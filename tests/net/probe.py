#!/usr/bin/env python3
"""What a sandbox can reach: run INSIDE a sandbox by the network suites (tests/e2e/network.sh).
Each call prints one JSON object and exits 0, whatever happened, so the suite judges the result.

  probe.py http URL [--host H] [--connect IP] [--ca FILE] [--timeout S]
      GET URL by hand: the name of URL is resolved as the sandbox resolves (getaddrinfo: its
      /etc/hosts, its resolver) unless --connect gives the address; https sends the URL's name
      as SNI; --host sends another Host header (fronting). -> {"ok", "status", "body", "ms",
      "error"}; body is the JSON the fake internet's servers answer, parsed when it is JSON.
  probe.py tcp IP PORT [--send TEXT]     -> {"ok", "ms", "reply", "error"}
  probe.py udp IP PORT                   -> {"ok", "reply", "error"} (a connected socket)
  probe.py resolve NAME                  -> {"ok", "addrs", "error"}
"""
import argparse
import json
import socket
import ssl
import sys
import time
import urllib.parse


def out(**kw):
    print(json.dumps(kw))
    sys.exit(0)


def since(t0):
    return round((time.monotonic() - t0) * 1000, 2)


def http(a):
    u = urllib.parse.urlsplit(a.url)
    port = u.port or (443 if u.scheme == "https" else 80)
    name = u.hostname
    t0 = time.monotonic()
    try:
        ip = a.connect or socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError as e:
        out(ok=False, stage="resolve", error=f"{type(e).__name__}: {e}", ms=since(t0))
    try:
        s = socket.create_connection((ip, port), timeout=a.timeout)
        if u.scheme == "https":
            ctx = ssl.create_default_context(cafile=a.ca) if a.ca else ssl.create_default_context()
            # a bare IP is sent without SNI, as clients do
            sni = None if name.replace(".", "").isdigit() else name
            if sni is None:
                ctx.check_hostname = False
            s = ctx.wrap_socket(s, server_hostname=sni)
        host = a.host or (name if u.port is None else f"{name}:{u.port}")
        path = u.path or "/"
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
    except (OSError, ssl.SSLError) as e:
        out(ok=False, stage="connect" if not isinstance(e, ssl.SSLError) else "tls", ip=ip,
            error=f"{type(e).__name__}: {e}", ms=since(t0))
    head, _, body = data.partition(b"\r\n\r\n")
    line = head.split(b"\r\n")[0].decode(errors="replace")
    status = int(line.split()[1]) if len(line.split()) > 1 and line.split()[1].isdigit() else 0
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body[:300].decode(errors="replace")
    out(ok=status != 0, status=status, body=parsed, ip=ip, ms=since(t0))


def tcp(a):
    t0 = time.monotonic()
    try:
        s = socket.create_connection((a.ip, a.port), timeout=3)
        reply = None
        if a.send is not None:
            s.sendall(a.send.encode() + b"\n")
            s.settimeout(3)
            reply = s.recv(200).decode(errors="replace")
        s.close()
        out(ok=True, ms=since(t0), reply=reply)
    except OSError as e:
        out(ok=False, ms=since(t0), error=f"{type(e).__name__}: {e}")


def udp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.5)
    try:
        s.connect((a.ip, a.port))
        s.send(b"probe")
        out(ok=True, reply=s.recv(200).decode(errors="replace"))
    except OSError as e:
        out(ok=False, error=f"{type(e).__name__}: {e}")


def resolve(a):
    try:
        addrs = sorted({i[4][0] for i in socket.getaddrinfo(a.name, 80, socket.AF_INET, socket.SOCK_STREAM)})
        out(ok=True, addrs=addrs)
    except OSError as e:
        out(ok=False, error=f"{type(e).__name__}: {e}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("http")
    h.add_argument("url")
    h.add_argument("--host")
    h.add_argument("--connect")
    h.add_argument("--ca")
    h.add_argument("--timeout", type=float, default=3)
    t = sub.add_parser("tcp")
    t.add_argument("ip")
    t.add_argument("port", type=int)
    t.add_argument("--send")
    u = sub.add_parser("udp")
    u.add_argument("ip")
    u.add_argument("port", type=int)
    r = sub.add_parser("resolve")
    r.add_argument("name")
    a = p.parse_args()
    {"http": http, "tcp": tcp, "udp": udp, "resolve": resolve}[a.cmd](a)


if __name__ == "__main__":
    main()

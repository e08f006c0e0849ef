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
  probe.py requests IP PORT [--pipeline] [--lead-crlf] [--method M] REQ...
      several HTTP/1.1 requests on ONE connection (keep-alive), each answered before the next
      is sent, or with --pipeline all in one write. REQ is HOST/PATH, then any extra header
      lines after '|': "a.b3t.test/x|Upgrade: h2c". --lead-crlf sends an empty line first;
      --method another method than GET (as it is: "get"). -> {"ok" (no error), "responses": [{"status",
      "body"}...] in order, "error" (what ended the connection early), "ms"}
  probe.py websocket IP PORT HOST PATH --send TEXT
      a websocket Upgrade request with TEXT + "-early" in the same write (before the answer),
      then TEXT + "-late" once the answer came -> {"ok", "status", "echo" (what came back after
      the answer's head, when both were echoed), "error", "ms"}
  probe.py tls-hello IP PORT --sni NAME [--ech]
      a hand-made TLS 1.3 ClientHello with that server_name (and with --ech an
      encrypted_client_hello extension, 0xfe0d, as a client offering ECH sends in its outer
      hello); -> {"ok" (the server answered), "record" (the first reply byte: 22 handshake, 21
      alert), "error", "ms"}
"""
import argparse
import json
import os
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


def read_response(s, buf):
    """One response from socket s (bytes already read in buf[0]); (status, body) or raises."""
    while b"\r\n\r\n" not in buf[0]:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response head")
        buf[0] += chunk
    head, _, rest = buf[0].partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while length is not None and len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a response body")
        rest += chunk
    if length is None:                     # to the end of the connection
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        length = len(rest)
    body, buf[0] = rest[:length], rest[length:]
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body[:300].decode(errors="replace")


def requests(a):
    t0 = time.monotonic()
    wire = []
    for spec in a.reqs:
        first, *extra = spec.split("|")
        host, _, path = first.partition("/")
        wire.append(("%s /%s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
            a.method, path, host, "".join(h + "\r\n" for h in extra))).encode())
    if a.lead_crlf:
        wire[0] = b"\r\n" + wire[0]
    responses, error = [], None
    try:
        s = socket.create_connection((a.ip, a.port), timeout=a.timeout)
        buf = [b""]
        if a.pipeline:
            s.sendall(b"".join(wire))
        for i, req in enumerate(wire):
            if not a.pipeline:
                s.sendall(req)
            status, body = read_response(s, buf)
            responses.append({"status": status, "body": body})
        s.close()
    except (OSError, ValueError, IndexError) as e:
        error = f"{type(e).__name__}: {e}"
    out(ok=error is None, responses=responses, error=error, ms=since(t0))


def websocket(a):
    t0 = time.monotonic()
    early, late = (a.send + "-early").encode(), (a.send + "-late").encode()
    req = ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" % (a.path, a.host))
    status, data = 0, b""
    try:
        s = socket.create_connection((a.ip, a.port), timeout=3)
        s.sendall(req.encode() + early)
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the answer's head")
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        s.sendall(late)
        while len(data) < len(early) + len(late):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
    except (OSError, ValueError, IndexError) as e:
        out(ok=False, status=status, echo=data.decode(errors="replace"), error=f"{type(e).__name__}: {e}",
            ms=since(t0))
    out(ok=True, status=status, echo=data.decode(errors="replace"), ms=since(t0))


def client_hello(sni, ech):
    """A TLS 1.3 ClientHello record: what any client sends, with an X25519 key share."""
    import struct

    def ext(t, body):
        return struct.pack(">HH", t, len(body)) + body

    name = sni.encode()
    exts = ext(0, struct.pack(">HBH", len(name) + 3, 0, len(name)) + name)
    exts += ext(10, bytes.fromhex("0004001d0017"))                      # groups x25519, p256
    exts += ext(13, bytes.fromhex("000a04030804080504010601"))           # signature algorithms
    exts += ext(43, bytes.fromhex("020304"))                             # supported_versions 1.3
    exts += ext(51, struct.pack(">HHH", 36, 29, 32) + os.urandom(32))    # key_share x25519
    exts += ext(45, bytes.fromhex("0101"))                               # psk_ke_modes
    if ech:
        # ECHClientHello, outer: HKDF-SHA256 + AES-128-GCM, config id, enc, payload.
        enc, payload = os.urandom(32), os.urandom(176)
        exts += ext(0xFE0D, bytes([0]) + struct.pack(">HHB", 1, 1, 0x2A) + struct.pack(">H", 32) + enc +
                    struct.pack(">H", len(payload)) + payload)
    body = struct.pack(">H", 0x0303) + os.urandom(32) + bytes([32]) + os.urandom(32)
    body += bytes.fromhex("000613011302130301 00".replace(" ", ""))     # suites; compression null
    body += struct.pack(">H", len(exts)) + exts
    hs = bytes([1]) + len(body).to_bytes(3, "big") + body
    return bytes([22, 3, 1]) + struct.pack(">H", len(hs)) + hs


def tls_hello(a):
    t0 = time.monotonic()
    try:
        s = socket.create_connection((a.ip, a.port), timeout=3)
        s.sendall(client_hello(a.sni, a.ech))
        reply = s.recv(5)
        s.close()
        if not reply:
            out(ok=False, error="closed without a reply", ms=since(t0))
        out(ok=True, record=reply[0], ms=since(t0))
    except OSError as e:
        out(ok=False, error=f"{type(e).__name__}: {e}", ms=since(t0))


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
    q = sub.add_parser("requests")
    q.add_argument("ip")
    q.add_argument("port", type=int)
    q.add_argument("reqs", nargs="+")
    q.add_argument("--pipeline", action="store_true")
    q.add_argument("--lead-crlf", action="store_true")
    q.add_argument("--method", default="GET")
    q.add_argument("--timeout", type=float, default=3)
    w = sub.add_parser("websocket")
    w.add_argument("ip")
    w.add_argument("port", type=int)
    w.add_argument("host")
    w.add_argument("path")
    w.add_argument("--send", required=True)
    c = sub.add_parser("tls-hello")
    c.add_argument("ip")
    c.add_argument("port", type=int)
    c.add_argument("--sni", required=True)
    c.add_argument("--ech", action="store_true")
    a = p.parse_args()
    {"http": http, "tcp": tcp, "udp": udp, "resolve": resolve, "requests": requests,
     "websocket": websocket, "tls-hello": tls_hello}[a.cmd](a)


if __name__ == "__main__":
    main()

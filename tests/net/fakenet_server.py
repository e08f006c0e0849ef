#!/usr/bin/env python3
"""The fake internet's test hosts, and small clients to probe them (stdlib only).

Subcommands:
  serve --dir DIR --cert PEM --key PEM ADDR...   run every test host (started by fakenet.sh
                                                  inside the b3t-inet netns)
  query [--server IP] [--port N] [--tcp] [--type A|AAAA|...] [--timeout S] NAME
                                                  one DNS query; prints "rcode=<RCODE>" and one
                                                  "<TYPE> <data> ttl=<ttl>" line per answer
  udp HOST PORT PAYLOAD [--timeout S]             one UDP datagram; prints the reply
  tcp HOST PORT LINE [--timeout S]                one line to a line-echo port; prints the reply

What `serve` listens on, on each ADDR (see README.md):
  TCP 80, 8080  plain HTTP        TCP 443  HTTPS (SNI recorded)
On 198.51.100.10 (a.b3t.test) only, HTTP(S) GET/HEAD of /debian/... is a static file from
DIR/www/debian/... (read at each request, 404 when it is not a regular file there): a package
mirror a test fills after `up` (tests/fixtures/make_apt_repo.sh).
  TCP 5432      line echo: "echo <server-ip> <line>\\n" per line
  UDP 443, 7    datagram echo: "udp <server-ip> <payload>"
Every accepted connection and every datagram is appended to DIR/conn.log as
"<unix-time> <tcp|udp> <server-ip>:<port> from <peer-ip>:<port>", written with one
write(2) on an O_APPEND descriptor, so it is on disk before the server answers.
Every HTTP(S) request is appended to DIR/http.log as
"<unix-time> <scheme> <server-ip>:<port> from <peer-ip>:<port> host=<Host|-> sni=<SNI|-> <METHOD> <path>".
"""
import argparse
import http.server
import json
import os
import random
import re
import selectors
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.parse

TCP_HTTP_PORTS = (80, 8080)
TCP_HTTPS_PORT = 443
TCP_ECHO_PORT = 5432
UDP_PORTS = (443, 7)
MAX_BYTES = 1 << 30           # /bytes/N: N at most 1 GiB
STATIC_HOST = "198.51.100.10"  # the one host that serves files from DIR/www
STATIC_PREFIX = "/debian/"     # ... under this path only
CHUNK = 1 << 20               # streamed in 1 MiB writes
ZEROS = bytes(CHUNK)


class Log:
    """Append-only line log: one write(2) per line on an O_APPEND fd (no buffering)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, text):
        os.write(self.fd, (text + "\n").encode("utf-8", "backslashreplace"))


def hostport(addr):
    return "%s:%d" % (addr[0], addr[1])


class Conn:
    """What one HTTP handler needs to know about its connection (passed as `server`)."""

    def __init__(self, scheme, local, peer, sni, http_log, www):
        self.scheme, self.local, self.peer, self.sni, self.http_log = scheme, local, peer, sni, http_log
        self.www = www


def static_file(www, path):
    """The regular file under the directory `www` that the URL path names, or None. The path
    is percent-decoded; one that leaves `www` (.., a symlink out) names nothing."""
    rel = urllib.parse.unquote(path).lstrip("/")
    if "\0" in rel:
        return None
    root = os.path.realpath(www)
    real = os.path.realpath(os.path.join(root, rel))
    if not real.startswith(root + os.sep) or not os.path.isfile(real):
        return None
    return real


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"     # keep-alive; every answer has a Content-Length
    server_version = "b3t-fakenet/1"
    sys_version = ""
    timeout = 60

    def log_message(self, fmt, *args):  # no per-request noise on stderr
        pass

    def _answer(self, method):
        c = self.server
        host = self.headers.get("Host")
        c.http_log.line("%.6f %s %s from %s host=%s sni=%s %s %s" % (
            time.time(), c.scheme, hostport(c.local), hostport(c.peer), host or "-", c.sni or "-",
            method, self.path))
        path = self.path.split("?", 1)[0]
        if path.startswith("/ws-echo") and (self.headers.get("Upgrade") or "").lower() == "websocket":
            return self._echo_after_101()
        length = int(self.headers.get("Content-Length") or 0)
        while length > 0:                       # drain a request body, if any
            got = self.rfile.read(min(length, CHUNK))
            if not got:
                break
            length -= len(got)
        if c.local[0] == STATIC_HOST and path.startswith(STATIC_PREFIX) and method in ("GET", "HEAD"):
            return self._static(path, method)
        m = re.fullmatch(r"/bytes/(\d+)", path)
        if m:
            n = int(m.group(1))
            if n > MAX_BYTES:
                return self._send(400, "text/plain", b"at most %d bytes\n" % MAX_BYTES, method)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            if method == "HEAD":
                return
            view = memoryview(ZEROS)
            while n > 0:
                k = min(n, CHUNK)
                self.wfile.write(view[:k])
                n -= k
            return
        body = json.dumps({
            "server": c.local[0], "host": host, "sni": c.sni, "path": path, "scheme": c.scheme,
            "port": c.local[1], "peer": c.peer[0], "method": method,
        }).encode() + b"\n"
        self._send(200, "application/json", body, method)

    def _static(self, path, method):
        """A file of DIR/www, read now (a test fills the directory after `up`), or 404."""
        f = static_file(self.server.www, path)
        data = None
        if f is not None:
            try:
                with open(f, "rb") as fh:
                    data = fh.read()
            except OSError:
                data = None
        if data is None:
            return self._send(404, "text/plain", b"no such file\n", method)
        return self._send(200, "application/octet-stream", data, method)

    def _echo_after_101(self):
        """A websocket Upgrade to /ws-echo...: 101, then every byte is echoed back as it is
        (no websocket framing: what a test of a proxy's tunnel needs) until the client ends."""
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.close_connection = True
        while True:
            data = self.rfile.read1(65536)      # bytes the client sent early are buffered here
            if not data:
                return
            self.wfile.write(data)

    def _send(self, code, ctype, body, method):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self._answer("GET")

    def do_HEAD(self):
        self._answer("HEAD")

    def do_POST(self):
        self._answer("POST")

    def do_PUT(self):
        self._answer("PUT")


class Hosts:
    def __init__(self, d, cert, key, addrs):
        self.dir = d
        self.addrs = addrs
        self.conn_log = Log(os.path.join(d, "conn.log"))
        self.http_log = Log(os.path.join(d, "http.log"))
        self.www = os.path.join(d, "www")
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        self.tls.set_alpn_protocols(["http/1.1"])
        self.sni = {}                      # id(ssl socket) -> server name the client sent
        self.sni_lock = threading.Lock()
        self.tls.sni_callback = self._on_sni
        self.sel = selectors.DefaultSelector()

    def _on_sni(self, sslsock, name, ctx):
        with self.sni_lock:
            self.sni[id(sslsock)] = name
        return None

    def bind_all(self):
        for a in self.addrs:
            for port in TCP_HTTP_PORTS + (TCP_HTTPS_PORT, TCP_ECHO_PORT):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((a, port))
                s.listen(256)
                s.setblocking(False)
                self.sel.register(s, selectors.EVENT_READ, ("tcp", port))
            for port in UDP_PORTS:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((a, port))
                s.setblocking(False)
                self.sel.register(s, selectors.EVENT_READ, ("udp", port))

    def run(self):
        while True:
            for key, _ in self.sel.select():
                sock = key.fileobj
                proto, port = key.data
                if proto == "udp":
                    self._udp(sock)
                    continue
                try:
                    conn, peer = sock.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                local = conn.getsockname()
                self.conn_log.line("%.6f tcp %s from %s" % (time.time(), hostport(local), hostport(peer)))
                conn.setblocking(True)
                threading.Thread(target=self._tcp, args=(conn, port, local, peer), daemon=True).start()

    def _udp(self, sock):
        while True:
            try:
                data, peer = sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:                      # e.g. ICMP error queued on the socket
                return
            local = sock.getsockname()
            self.conn_log.line("%.6f udp %s from %s" % (time.time(), hostport(local), hostport(peer)))
            try:
                sock.sendto(b"udp " + local[0].encode() + b" " + data, peer)
            except OSError:
                pass

    def _tcp(self, conn, port, local, peer):
        try:
            conn.settimeout(60)
            if port == TCP_ECHO_PORT:
                self._echo(conn, local)
            elif port == TCP_HTTPS_PORT:
                tls = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                try:
                    tls.do_handshake()
                finally:
                    with self.sni_lock:
                        sni = self.sni.pop(id(tls), None)
                Handler(tls, peer, Conn("https", local, peer, sni, self.http_log, self.www))
            else:
                Handler(conn, peer, Conn("http", local, peer, None, self.http_log, self.www))
        except (OSError, ssl.SSLError, ValueError):
            pass                                # a client that goes away or fails TLS
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _echo(self, conn, local):
        f = conn.makefile("rb")
        prefix = b"echo " + local[0].encode() + b" "
        for line in f:
            conn.sendall(prefix + line.rstrip(b"\r\n") + b"\n")


def cmd_serve(a):
    h = Hosts(a.dir, a.cert, a.key, a.addrs)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
    h.bind_all()
    # The pid file appears only once every socket is bound: fakenet.sh waits for it.
    tmp = os.path.join(a.dir, "server.pid.tmp")
    with open(tmp, "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(tmp, os.path.join(a.dir, "server.pid"))
    h.run()


# ---- DNS client -------------------------------------------------------------------------

QTYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16, "AAAA": 28,
          "SRV": 33, "HTTPS": 65, "ANY": 255}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def read_name(msg, off):
    labels, jumped, end = [], False, off
    for _ in range(128):
        n = msg[off]
        if n & 0xC0 == 0xC0:
            ptr = ((n & 0x3F) << 8) | msg[off + 1]
            if not jumped:
                end = off + 2
            jumped, off = True, ptr
            continue
        off += 1
        if n == 0:
            break
        labels.append(msg[off:off + n].decode("ascii", "backslashreplace"))
        off += n
    return ".".join(labels), (end if jumped else off)


def dns_query(server, port, name, qtype, use_tcp, timeout):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode("ascii")
    q += b"\0" + struct.pack(">HH", qtype, 1)
    if use_tcp:
        with socket.create_connection((server, port), timeout=timeout) as s:
            s.sendall(struct.pack(">H", len(q)) + q)
            buf = b""
            while len(buf) < 2 or len(buf) < 2 + struct.unpack(">H", buf[:2])[0]:
                got = s.recv(65535)
                if not got:
                    raise OSError("connection closed")
                buf += got
            msg = buf[2:2 + struct.unpack(">H", buf[:2])[0]]
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(q, (server, port))
            while True:
                msg, _ = s.recvfrom(65535)
                if len(msg) >= 12 and struct.unpack(">H", msg[:2])[0] == qid:
                    break
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    answers = []
    for _ in range(an):
        _, off = read_name(msg, off)
        rtype, _, ttl, rdlen = struct.unpack(">HHIH", msg[off:off + 10])
        off += 10
        rdata = msg[off:off + rdlen]
        if rtype == 1:
            answers.append(("A", socket.inet_ntop(socket.AF_INET, rdata), ttl))
        elif rtype == 28:
            answers.append(("AAAA", socket.inet_ntop(socket.AF_INET6, rdata), ttl))
        elif rtype in (5, 12, 2):
            answers.append(({5: "CNAME", 12: "PTR", 2: "NS"}[rtype], read_name(msg, off)[0], ttl))
        else:
            answers.append(("TYPE%d" % rtype, rdata.hex(), ttl))
        off += rdlen
    return RCODES.get(flags & 0xF, str(flags & 0xF)), answers


def cmd_query(a):
    qtype = QTYPES.get(a.type.upper()) or int(a.type)
    try:
        rcode, answers = dns_query(a.server, a.port, a.name, qtype, a.tcp, a.timeout)
    except (OSError, socket.timeout) as e:
        print("error=%s" % (e or type(e).__name__))
        return 2
    print("rcode=%s" % rcode)
    for t, data, ttl in answers:
        print("%s %s ttl=%d" % (t, data, ttl))
    return 0


def cmd_udp(a):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(a.timeout)
        s.sendto(a.payload.encode(), (a.host, a.port))
        try:
            print(s.recvfrom(65535)[0].decode("utf-8", "backslashreplace"))
        except (OSError, socket.timeout) as e:
            print("error=%s" % (e or type(e).__name__))
            return 2
    return 0


def cmd_tcp(a):
    try:
        with socket.create_connection((a.host, a.port), timeout=a.timeout) as s:
            s.sendall(a.line.encode() + b"\n")
            f = s.makefile("rb")
            print(f.readline().decode("utf-8", "backslashreplace").rstrip("\n"))
    except (OSError, socket.timeout) as e:
        print("error=%s" % (e or type(e).__name__))
        return 2
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--dir", required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("addrs", nargs="+")
    q = sub.add_parser("query")
    q.add_argument("--server", default="198.51.100.53")
    q.add_argument("--port", type=int, default=53)
    q.add_argument("--tcp", action="store_true")
    q.add_argument("--type", default="A")
    q.add_argument("--timeout", type=float, default=3)
    q.add_argument("name")
    u = sub.add_parser("udp")
    u.add_argument("host")
    u.add_argument("port", type=int)
    u.add_argument("payload")
    u.add_argument("--timeout", type=float, default=3)
    t = sub.add_parser("tcp")
    t.add_argument("host")
    t.add_argument("port", type=int)
    t.add_argument("line")
    t.add_argument("--timeout", type=float, default=3)
    a = p.parse_args()
    return {"serve": cmd_serve, "query": cmd_query, "udp": cmd_udp, "tcp": cmd_tcp}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())

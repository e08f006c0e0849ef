#!/usr/bin/env python3
"""A tiny app for tests/e2e/ports.sh and bench/ports.py, run INSIDE a sandbox (stdlib only).

Usage: ports_app.py PORT LOGFILE [--bind ADDR]

Routes: GET / (a short text), GET /big?n=BYTES (that many bytes, Content-Length), GET /chunked
(a chunked body), GET /sse (three server-sent events, then the end), GET /ws (a WebSocket that
echoes text and binary messages; /ws?evilcookie also answers its 101 with a Set-Cookie named
like the preview's), POST /echo (the body back), GET /sleep?s=SECONDS (a short text after that
long: a slow endpoint), GET /set-cookies (an answer that tries to set cookies named like the
preview's token cookie, and one of its own, app=1). Every request line, its Cookie, Referer and
Host headers go to LOGFILE, so a test can prove what the app saw (and never saw).
"""
import base64
import hashlib
import http.server
import socketserver
import struct
import sys
import threading
import time

PORT = int(sys.argv[1])
LOG = sys.argv[2]
BIND = sys.argv[sys.argv.index("--bind") + 1] if "--bind" in sys.argv else "127.0.0.1"
lock = threading.Lock()
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EVIL_COOKIES = [
    f"__Host-b3os_token_{PORT}=evil; Secure; HttpOnly; Path=/",
    f"b3os_token_{PORT}=evil; Domain=localhost; Path=/",
    "B3OS_TOKEN=evil; Path=/",
    "__secure-b3os_token=evil; Secure; Path=/",
    f"=__Host-b3os_token_{PORT}=evil; Secure; Path=/",
    f" b3os_token_{PORT} =evil",
]


def log(line):
    with lock, open(LOG, "a") as f:
        f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        log(f"{self.command} {self.path} cookie={self.headers.get('Cookie', '')!r} host={self.headers.get('Host', '')} "
            f"referer={self.headers.get('Referer', '')!r}")

    def send_text(self, body, ctype="text/plain"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.note()
        path = self.path.split("?")[0]
        if path == "/":
            return self.send_text("hello from the sandbox\n")
        if path == "/big":
            n = int(self.path.split("n=")[1]) if "n=" in self.path else 1 << 20
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = b"x" * (256 << 10)
            while n > 0:
                k = min(n, len(block))
                self.wfile.write(block[:k])
                n -= k
            return
        if path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one,", b"two,", b"three\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for i in range(3):
                self.wfile.write(f"data: event {i} at {time.time():.3f}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.3)
            self.close_connection = True
            return
        if path == "/ws":
            return self.websocket()
        if path == "/set-cookies":
            # What a hostile app would send to plant or overwrite the preview's token cookie
            # (on its own host, on the parent domain a sibling sandbox shares, nameless).
            self.send_response(200)
            for c in EVIL_COOKIES + ["app=1; Path=/"]:
                self.send_header("Set-Cookie", c)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")
            return
        if path == "/sleep":
            s = float(self.path.split("s=")[1].split("&")[0]) if "s=" in self.path else 1.0
            time.sleep(min(s, 600))
            return self.send_text(f"slept {s:g}\n")
        self.send_error(404)

    def do_POST(self):
        self.note()
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if n else b""
        self.send_text(body, "application/octet-stream")

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        if "evilcookie" in self.path:
            self.send_header("Set-Cookie", EVIL_COOKIES[0])
        self.end_headers()
        self.wfile.flush()
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                break
            op, ln = h[0] & 0x0F, h[1] & 0x7F
            if ln == 126:
                ln = struct.unpack(">H", r.read(2))[0]
            elif ln == 127:
                ln = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(ln)))
            if op == 8:  # close: answer it
                w.write(b"\x88\x00")
                w.flush()
                break
            if op in (1, 2):
                log(f"WS message {data[:60]!r}")
                hdr = bytes([0x80 | op])
                hdr += bytes([len(data)]) if len(data) < 126 else (b"\x7e" + struct.pack(">H", len(data)) if len(data) < 65536 else b"\x7f" + struct.pack(">Q", len(data)))
                w.write(hdr + data)
                w.flush()
        self.close_connection = True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


if __name__ == "__main__":
    log(f"listening on {BIND}:{PORT}")
    Server((BIND, PORT), Handler).serve_forever()

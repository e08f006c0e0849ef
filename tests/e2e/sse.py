#!/usr/bin/env python3
"""A small server-sent-events client for the e2e suite (streamed exec, process output).

Prints the answer's status line as {"status": N, "content_type": "..."} and then each event as
one JSON line: {"event", "id", "data" (parsed JSON), "t" (seconds since the request)}. A non-SSE
answer prints its body as {"body": ...}. Exits 0 when the stream ended, 2 on a time-out.

  sse.py --key KEY [--method POST] [--json BODY] [--header 'Accept: text/event-stream']
         [--timeout S] [--max-events N] [--then-close] URL
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--key", required=True)
    p.add_argument("--method", default="GET")
    p.add_argument("--json")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--max-events", type=int, default=0, help="leave after this many events (0: read to the end)")
    a = p.parse_args()
    u = urllib.parse.urlsplit(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=a.timeout)
    headers = {"Authorization": f"Bearer {a.key}"}
    body = None
    if a.json is not None:
        body = a.json.encode()
        headers["Content-Type"] = "application/json"
    for h in a.header:
        k, v = h.split(":", 1)
        headers[k.strip()] = v.strip()
    t0 = time.monotonic()
    conn.request(a.method, u.path + ("?" + u.query if u.query else ""), body=body, headers=headers)
    try:
        r = conn.getresponse()
    except TimeoutError:
        print(json.dumps({"error": "timeout before the answer"}), flush=True)
        return 2
    ct = r.getheader("Content-Type", "")
    print(json.dumps({"status": r.status, "content_type": ct, "t": round(time.monotonic() - t0, 4)}), flush=True)
    if not ct.startswith("text/event-stream"):
        print(json.dumps({"body": r.read().decode(errors="replace")}), flush=True)
        return 0
    n = 0
    ev = {"event": "message", "id": None, "data": []}
    try:
        while True:
            line = r.readline()
            if not line:
                return 0
            line = line.decode().rstrip("\r\n")
            if line == "":
                if ev["data"]:
                    raw = "\n".join(ev["data"])
                    try:
                        data = json.loads(raw)
                    except ValueError:
                        data = raw
                    print(json.dumps({"event": ev["event"], "id": ev["id"], "data": data,
                                      "t": round(time.monotonic() - t0, 4)}), flush=True)
                    n += 1
                    if a.max_events and n >= a.max_events:
                        return 0
                ev = {"event": "message", "id": None, "data": []}
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                ev["event"] = value
            elif field == "id":
                ev["id"] = value
            elif field == "data":
                ev["data"].append(value)
    except TimeoutError:
        print(json.dumps({"error": "timeout"}), flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())

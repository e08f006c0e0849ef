#!/usr/bin/env python3
"""Bad requests in E2B's wire format against b3osd (docs/e2b.md): each gets a typed error in
the shape the SDK reads (control plane and /files: {"code": HTTP status, "message"}; Connect
calls: {"code": "<connect code>", "message"}, or an end-of-stream envelope carrying it) and
changes nothing. Prints PASS/FAIL lines for tests/e2b/e2b.sh.

    wire_check.py URL E2B_KEY OTHER_PROJECT_KEY
"""
import base64
import http.client
import json
import struct
import sys
import time
import urllib.parse

URL, KEY, OTHER = sys.argv[1], sys.argv[2], sys.argv[3]
HOST = urllib.parse.urlparse(URL)
failed = 0


def result(ok, name, detail=""):
    global failed
    if not ok:
        failed += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"[:400]), flush=True)


def request(method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=timeout)
    h = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def declared_only(method, path, length, headers):
    """A request that declares a body of `length` bytes and sends only its head: what the
    server answers from the head alone (b3osd refuses an oversized body before reading it)."""
    import socket
    s = socket.create_connection((HOST.hostname, HOST.port), timeout=30)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(head.encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data:
            hdr, _, rest = data.partition(b"\r\n\r\n")
            n = next((int(line.split(b":", 1)[1]) for line in hdr.split(b"\r\n") if line.lower().startswith(b"content-length:")), None)
            if n is not None and len(rest) >= n:
                break
    s.close()
    hdr, _, body = data.partition(b"\r\n\r\n")
    status = int(hdr.split(b" ", 2)[1]) if hdr.startswith(b"HTTP/1.1 ") else 0
    if b"transfer-encoding: chunked" in hdr.lower():
        plain, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            plain, rest = plain + rest[:n], rest[n + 2:]
        body = plain
    return status, {}, body


def jbody(data):
    try:
        return json.loads(data)
    except ValueError:
        return None


def api(method, path, body=None, key=KEY, headers=None):
    h = {"X-API-Key": key} if key else {}
    h.update(headers or {})
    return request(method, path, body, h)


def envelope(flags, payload):
    return struct.pack(">BI", flags, len(payload)) + payload


def envelopes(data):
    out, i = [], 0
    while i + 5 <= len(data):
        flags, n = struct.unpack(">BI", data[i:i + 5])
        out.append((flags, data[i + 5:i + 5 + n]))
        i += 5 + n
    return out


def api_error(name, got, status):
    st, _, data = got
    b = jbody(data)
    result(st == status and isinstance(b, dict) and b.get("code") == status and isinstance(b.get("message"), str)
           and b["message"], name, f"HTTP {st} {data[:200]!r}")


# ---- the control plane ----
api_error("create.unknown_field_400", api("POST", "/v2/sandboxes", {"templateID": "base", "nope": 1}), 400)
api_error("create.wrong_type_400", api("POST", "/v2/sandboxes", {"templateID": "base", "timeout": "soon"}), 400)
api_error("create.metadata_not_strings_400", api("POST", "/v2/sandboxes", {"templateID": "base", "metadata": {"a": 1}}), 400)
# Nested 100,000 levels deep: refused before parsing (copying it would recurse off the stack).
deep = b'{"templateID": "base", "metadata": ' + b'[' * 100000 + b']' * 100000 + b'}'
api_error("create.too_deep_400", api("POST", "/v2/sandboxes", deep, headers={"Content-Type": "application/json"}), 400)
api_error("create.public_traffic_wrong_type_400",
          api("POST", "/v2/sandboxes", {"templateID": "base", "network": {"allowPublicTraffic": "yes"}}), 400)
api_error("create.network_rules_501", api("POST", "/v2/sandboxes", {"templateID": "base", "network": {"allowOut": ["1.2.3.4"]}}), 501)
api_error("create.no_template_400", api("POST", "/v2/sandboxes", {}), 400)
api_error("create.unknown_template_404", api("POST", "/v2/sandboxes", {"templateID": "no-such-template"}), 404)
api_error("create.not_json_400", api("POST", "/v2/sandboxes", b"{nope", headers={"Content-Type": "application/json"}), 400)
api_error("create.huge_body_413", declared_only("POST", "/v2/sandboxes", 2 << 20,
                                                {"X-API-Key": KEY, "Content-Type": "application/json"}), 413)
api_error("create.volumes_501", api("POST", "/v2/sandboxes", {"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]}), 501)
api_error("no_key_401", api("GET", "/v2/sandboxes", key=None), 401)
api_error("bad_key_401", api("GET", "/v2/sandboxes", key="e2b_" + "0" * 40), 401)
api_error("malformed_key_401", api("GET", "/v2/sandboxes", key="nope"), 401)
api_error("unknown_sandbox_404", api("GET", "/sandboxes/sbx_01m00000000000000000000000"), 404)
api_error("list.bad_state_400", api("GET", "/v2/sandboxes?state=sleeping"), 400)
api_error("list.order_asc_501", api("GET", "/v2/sandboxes?order=asc"), 501)
api_error("list.bad_started_after_400", api("GET", "/v2/sandboxes?startedAfter=yesterday"), 400)
api_error("list.bad_limit_400", api("GET", "/v2/sandboxes?limit=0"), 400)
api_error("templates_501", api("GET", "/templates"), 501)

st, _, data = api("POST", "/v2/sandboxes", {"templateID": "base", "timeout": 120, "metadata": {"wire": "check"}})
sbx = jbody(data) or {}
result(st == 201 and sbx.get("sandboxID", "").startswith("sbx_") and sbx.get("envdAccessToken"), "create.ok",
       f"HTTP {st} {data[:200]!r}")
SID, TOKEN = sbx.get("sandboxID", "sbx_x"), sbx.get("envdAccessToken", "")
api_error("other_project_get_404", api("GET", f"/sandboxes/{SID}", key=OTHER), 404)
api_error("other_project_delete_404", api("DELETE", f"/sandboxes/{SID}", key=OTHER), 404)
api_error("other_project_timeout_404", api("POST", f"/sandboxes/{SID}/timeout", {"timeout": 5}, key=OTHER), 404)
api_error("timeout.wrong_type_400", api("POST", f"/sandboxes/{SID}/timeout", {"timeout": -1}), 400)
st, _, data = api("GET", f"/sandboxes/{SID}")
result(st == 200 and jbody(data).get("state") == "running", "still_running_after_bad_calls", f"HTTP {st} {data[:200]!r}")

# ---- envd ----
ENVD = {"E2b-Sandbox-Id": SID, "X-Access-Token": TOKEN}


def connect_error(name, got, code, status):
    st, _, data = got
    b = jbody(data)
    result(st == status and isinstance(b, dict) and b.get("code") == code and b.get("message"), name,
           f"HTTP {st} {data[:200]!r}")


def unary(method, msg, headers=None):
    h = dict(ENVD)
    h.update(headers or {})
    return request("POST", f"/{method}", json.dumps(msg).encode() if not isinstance(msg, bytes) else msg,
                   {**h, "Content-Type": "application/json"})


def stream(method, payload, headers=None):
    h = dict(ENVD)
    h.update(headers or {})
    return request("POST", f"/{method}", payload, {**h, "Content-Type": "application/connect+json"})


def stream_error(name, got, code):
    st, _, data = got
    env = envelopes(data)
    last = env[-1] if env else (0, b"")
    err = (jbody(last[1]) or {}).get("error", {}) if last[0] & 2 else {}
    result(st == 200 and err.get("code") == code and err.get("message"), name, f"HTTP {st} {data[:200]!r}")


api_error("envd.no_token_401", request("POST", "/filesystem.Filesystem/Stat", b'{"path": "/"}',
                                       {"E2b-Sandbox-Id": SID, "Content-Type": "application/json"}), 401)
api_error("envd.wrong_token_401", unary("filesystem.Filesystem/Stat", {"path": "/"}, {"X-Access-Token": "x" * 32}), 401)
api_error("envd.unknown_sandbox_502",
          unary("filesystem.Filesystem/Stat", {"path": "/"}, {"E2b-Sandbox-Id": "sbx_01m00000000000000000000000"}), 502)
connect_error("envd.unknown_field_400", unary("filesystem.Filesystem/Stat", {"path": "/", "follow": True}),
              "invalid_argument", 400)
connect_error("envd.wrong_type_400", unary("filesystem.Filesystem/Stat", {"path": 5}), "invalid_argument", 400)
connect_error("envd.not_json_400", unary("filesystem.Filesystem/Stat", b"{"), "invalid_argument", 400)
connect_error("envd.missing_404", unary("filesystem.Filesystem/Stat", {"path": "/nope/nope"}), "not_found", 404)
stream_error("envd.watch_recursive_wrong_type", stream("filesystem.Filesystem/WatchDir",
             envelope(0, json.dumps({"path": "/tmp", "recursive": "yes"}).encode())), "invalid_argument")
stream_error("envd.too_deep_400", stream("process.Process/Start",
                                         envelope(0, b'{"process": ' + b'[' * 100000 + b']' * 100000 + b'}')), "invalid_argument")
connect_error("envd.depth_17_400", unary("filesystem.Filesystem/ListDir", {"path": "/", "depth": 17}), "invalid_argument", 400)
connect_error("envd.unknown_method_501", unary("filesystem.Filesystem/Format", {}), "unimplemented", 501)
connect_error("envd.unknown_service_501", unary("secrets.Vault/Open", {}), "unimplemented", 501)
connect_error("envd.binary_proto_refused",
              request("POST", "/filesystem.Filesystem/Stat", b"\x0a\x01/", {**ENVD, "Content-Type": "application/proto"}),
              "invalid_argument", 400)
connect_error("envd.bad_signal_400", unary("process.Process/SendSignal", {"process": {"pid": 1}, "signal": "SIGNAL_SIGHUP"}),
              "invalid_argument", 400)
connect_error("envd.unknown_pid_404", unary("process.Process/SendSignal", {"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}),
              "not_found", 404)
start = {"process": {"cmd": "/bin/true"}}
stream_error("envd.stream_two_envelopes", stream("process.Process/Start",
                                                 envelope(0, json.dumps(start).encode()) * 2), "invalid_argument")
stream_error("envd.stream_compressed", stream("process.Process/Start", envelope(1, b"x")), "invalid_argument")
st, _, data = declared_only("POST", "/process.Process/Start", 2 << 20,
                            {**ENVD, "Content-Type": "application/connect+json"})
stream_error("envd.stream_huge", (st, {}, data), "resource_exhausted")
stream_error("envd.stream_unknown_field", stream("process.Process/Start",
                                                 envelope(0, json.dumps({**start, "detach": True}).encode())), "invalid_argument")
stream_error("envd.stream_bad_env", stream("process.Process/Start",
                                           envelope(0, json.dumps({"process": {"cmd": "/bin/true", "envs": {"A": 1}}}).encode())),
             "invalid_argument")
st, _, data = request("POST", "/files?path=/tmp/x", b"--nope", {**ENVD, "Content-Type": "multipart/form-data"})
api_error("files.no_boundary_400", (st, _, data), 400)
api_error("files.no_path_400", request("GET", "/files", None, ENVD), 400)
api_error("files.missing_404", request("GET", "/files?path=/nope/nope", None, ENVD), 404)
api_error("files.gzip_415", request("POST", "/files?path=/tmp/g", b"x", {**ENVD, "Content-Type": "application/octet-stream",
                                                                           "Content-Encoding": "gzip"}), 415)
api_error("files.forged_signature_401", request("GET", "/files?path=/etc/hostname&signature=v1_forged",
                                                None, {"E2b-Sandbox-Id": SID}), 401)
# Forged URLs from one client: past its 20 scans a second, 429 with Retry-After (the node's
# other clients keep their own share); a second later it is heard again.
# Sent 25 at a time: one by one on a loaded machine they could come slower than the bucket
# refills (20 a second), and the check would then depend on the machine's speed.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(25) as pool:
    burst = list(pool.map(lambda _: request("GET", "/files?path=/etc/hostname&signature=v1_forged"), range(100)))
limited = [r for r in burst if r[0] == 429]
result(limited and all(r[1].get("Retry-After") == "1" for r in limited) and any(r[0] == 401 for r in burst)
       and all(r[0] in (401, 429) for r in burst),
       "files.forged_burst_429_per_client", f"statuses {sorted(set(r[0] for r in burst))}, {len(limited)} of 100 limited")
time.sleep(1.5)
api_error("files.after_burst_401", request("GET", "/files?path=/etc/hostname&signature=v1_forged"), 401)
# The signed message joins its fields with ':' (E2B's format): a user name holding one could
# make a read URL's signature sign another operation, so it is refused before any scan.
api_error("files.colon_username_401", request("GET", "/files?path=/etc/hostname&username=u:read&signature=v1_x",
                                              None, {"E2b-Sandbox-Id": SID}), 401)
api_error("files.expired_signature_401", request("GET", "/files?path=/etc/hostname&signature=v1_x&signature_expiration=1",
                                                 None, {"E2b-Sandbox-Id": SID}), 401)

# ---- what a sandbox's access token reaches: its own envd routes, nothing else ----
# A second sandbox of the same project: the first one's token must not drive it, through its
# envd, through MCP's tools, or through the REST and E2B control planes; nor spend from the
# model gateway (a budget made for the token would have no cap).
st, _, data = api("POST", "/v2/sandboxes", {"templateID": "base", "timeout": 120})
sbx2 = jbody(data) or {}
SID2, TOKEN2 = sbx2.get("sandboxID", "sbx_y"), sbx2.get("envdAccessToken", "")
result(st == 201 and SID2 != SID, "token_scope.second_sandbox", f"HTTP {st} {data[:200]!r}")
api_error("token_scope.other_sandbox_envd_401",
          unary("filesystem.Filesystem/Stat", {"path": "/"}, {"E2b-Sandbox-Id": SID2}), 401)
mcp_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sandbox_exec", "arguments": {"sandbox_id": SID2, "cmd": ["touch", "/tmp/pwned"]}}}
mcp_init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_H = {**ENVD, "Accept": "application/json, text/event-stream"}
for name, (method, path, body) in {
        "mcp_initialize": ("POST", "/mcp", mcp_init), "mcp_tools_call": ("POST", "/mcp", mcp_call),
        "infer_chat": ("POST", "/v1/infer/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "infer_models": ("GET", "/v1/infer/models", None),
        "rest_list": ("GET", "/v1/sandboxes", None),
        "rest_exec_other": ("POST", f"/v1/sandboxes/{SID2}/exec", {"cmd": ["touch", "/tmp/pwned"]}),
        "rest_exec_own": ("POST", f"/v1/sandboxes/{SID}/exec", {"cmd": ["true"]}),
        "e2b_list": ("GET", "/v2/sandboxes", None),
        "e2b_kill_other": ("DELETE", f"/sandboxes/{SID2}", None)}.items():
    for who, hdrs in (("own_header", MCP_H), ("other_header", {**MCP_H, "E2b-Sandbox-Id": SID2})):
        api_error(f"token_scope.{name}.{who}_401", request(method, path, body, hdrs), 401)
# With the token as a Bearer or X-API-Key and no sandbox header, it is no key at all.
st, _, data = request("GET", "/v1/sandboxes", None, {"Authorization": f"Bearer {TOKEN}"})
result(st == 401 and (jbody(data) or {}).get("error", {}).get("code") == "unauthorized", "token_scope.as_bearer_401",
       f"HTTP {st} {data[:200]!r}")
api_error("token_scope.as_api_key_401", request("GET", "/v2/sandboxes", None, {"X-API-Key": TOKEN}), 401)
st, _, data = unary("filesystem.Filesystem/Stat", {"path": "/tmp/pwned"}, {"E2b-Sandbox-Id": SID2, "X-Access-Token": TOKEN2})
connect_error("token_scope.other_sandbox_untouched", (st, _, data), "not_found", 404)
st, _, _ = api("DELETE", f"/sandboxes/{SID2}")
result(st == 204, "token_scope.second_deleted", f"HTTP {st}")

# A start that works, then every process and file of this check is gone.
st, _, data = stream("process.Process/Start", envelope(0, json.dumps({"process": {"cmd": "/bin/echo", "args": ["hi"]}}).encode()))
env = envelopes(data)
events = [jbody(p) for f, p in env if not f & 2]
out = "".join(base64.b64decode(e["event"]["data"]["stdout"]).decode() for e in events if "data" in e.get("event", {}))
result(st == 200 and events and "start" in events[0]["event"] and out == "hi\n" and "end" in events[-1]["event"]
       and env[-1][0] & 2, "envd.start_ok", f"HTTP {st} {data[:300]!r}")
# A silent command's stream carries keep-alives at the client's Keepalive-Ping-Interval.
st, _, data = stream("process.Process/Start", envelope(0, json.dumps(
    {"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 2.5; echo done"]}}).encode()), {"Keepalive-Ping-Interval": "1"})
events = [jbody(p) for f, p in envelopes(data) if not f & 2]
kinds = [next(iter(e.get("event", {"?": 0}))) for e in events]
result(st == 200 and kinds.count("keepalive") >= 1 and kinds[0] == "start" and kinds[-1] == "end",
       "envd.keepalive_while_silent", f"HTTP {st} events {kinds}")
# A listing bounded in directories (one agent call each): 1,100 of them are refused, not walked.
stream("process.Process/Start", envelope(0, json.dumps(
    {"process": {"cmd": "/bin/bash", "args": ["-c", "mkdir -p /tmp/many/d{1..1100}"]}}).encode()))
connect_error("envd.deep_listing_refused", unary("filesystem.Filesystem/ListDir", {"path": "/tmp/many", "depth": 2}),
              "invalid_argument", 400)
st, _, data = unary("filesystem.Filesystem/ListDir", {"path": "/tmp/many", "depth": 1})
result(st == 200 and len(jbody(data).get("entries", [])) == 1100, "envd.wide_listing_ok", f"HTTP {st} {data[:120]!r}")
st, _, data = unary("process.Process/List", {})
result(st == 200 and jbody(data) == {"processes": []}, "envd.nothing_running_after", f"HTTP {st} {data[:200]!r}")
st, _, _ = api("DELETE", f"/sandboxes/{SID}")
result(st == 204, "delete_204", f"HTTP {st}")
api_error("envd.after_delete_502", unary("filesystem.Filesystem/Stat", {"path": "/"}), 502)
print(f"# wire_check: {failed} failed", flush=True)
sys.exit(1 if failed else 0)

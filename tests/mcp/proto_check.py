#!/usr/bin/env python3
"""The MCP endpoint's protocol edges against a running b3osd (docs/mcp.md), with a plain HTTP
client so that every header and status is the test's own choice:

  proto_check.py URL KEY OTHER_KEY

auth and Origin, methods, version negotiation, sessions (missing, unknown, another key's, after
DELETE), batches and bad JSON, JSON-RPC errors (-32601, -32602, -32700, -32600), toolsets, 100
concurrent tool calls on one session, and a client that disconnects in the middle of a
sandbox_exec (the command is cancelled inside). Prints PASS/FAIL lines; exits 1 on a FAIL.
"""
import http.client
import json
import socket
import sys
import threading
import time
import urllib.parse

URL, KEY, OTHER = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlparse(URL)
HOST, PORT = u.hostname, u.port
failed = 0


def check(name, ok, detail=""):
    global failed
    if ok:
        print(f"PASS mcp.{name}")
    else:
        failed += 1
        print(f"FAIL mcp.{name}: {detail}")


def post(body, session=None, key=KEY, path="/mcp?toolsets=sandboxes", headers=None, method="POST", raw=None):
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    if session:
        h["Mcp-Session-Id"] = session
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    try:
        j = json.loads(text) if text else None
    except ValueError:
        j = None
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), j, text


def init(version="2025-11-25", key=KEY, path="/mcp?toolsets=sandboxes"):
    st, h, j, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "proto", "version": "1"}}},
                       key=key, path=path)
    sid = h.get("mcp-session-id")
    if sid:
        post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session=sid, key=key)
    return st, sid, j


def call(sid, rid, name, args, key=KEY):
    return post({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": args}}, session=sid, key=key)


def err_code(j):
    return (j or {}).get("error", {}).get("code")


# ---- auth, Origin, methods
st, h, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, key=None)
check("no_key_401", st == 401 and h.get("www-authenticate", "").startswith("Bearer"), f"{st} {h.get('www-authenticate')}")
st, h, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, key="b3os_sk_nope")
check("bad_key_401", st == 401, st)
st, _, j, t = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
                   headers={"Origin": "https://evil.example"})
check("bad_origin_403", st == 403, f"{st} {t[:200]}")
st, sid_o, _ = init()
st2, _, _, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid_o, headers={"Origin": "http://localhost:6274"})
check("loopback_origin_allowed", st2 == 200, st2)
st, h, _, _ = post(None, method="GET")
check("get_405", st == 405 and "POST" in h.get("allow", ""), f"{st} {h.get('allow')}")
st, _, j, _ = post(None, raw="{}", headers={"Content-Type": "text/plain"})
check("content_type_415", st == 415, st)

# ---- versions
st, sid, j = init("2025-03-26")
check("version_echoed", st == 200 and j["result"]["protocolVersion"] == "2025-03-26" and sid, f"{st} {j}")
st, sid_new, j = init("2024-11-05")
check("version_unknown_gets_latest", st == 200 and j["result"]["protocolVersion"] == "2025-11-25", f"{st} {j}")
check("initialize_result", j and j["result"]["serverInfo"]["name"] == "b3os" and "tools" in j["result"]["capabilities"], j)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid, headers={"MCP-Protocol-Version": "1999-01-01"})
check("bad_protocol_version_400", st == 400, st)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid, headers={"MCP-Protocol-Version": "2025-06-18"})
check("ping", st == 200 and j == {"jsonrpc": "2.0", "id": 1, "result": {}}, f"{st} {j}")

# ---- sessions
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
check("missing_session_400", st == 400, st)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session="0" * 32)
check("unknown_session_404", st == 404, st)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=sid, key=OTHER)
check("other_keys_session_404", st == 404, st)
st, _, _, _ = post(None, session=sid, method="DELETE")
check("delete_session", st == 200, st)
st, _, _, _ = post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid)
check("after_delete_404", st == 404, st)
st, _, _, _ = post(None, session=sid, method="DELETE")
check("delete_again_404", st == 404, st)

# ---- JSON-RPC errors
_, sid, _ = init()
st, _, j, _ = post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], session=sid)
check("batch_refused", st == 400 and err_code(j) == -32600, f"{st} {j}")
st, _, j, _ = post(None, session=sid, raw="{not json")
check("parse_error", st == 400 and err_code(j) == -32700, f"{st} {j}")
st, _, j, _ = post({"jsonrpc": "2.0", "id": 5, "method": "resources/list"}, session=sid)
check("unknown_method_32601", st == 200 and err_code(j) == -32601 and j["id"] == 5, f"{st} {j}")
st, _, j, _ = post({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {}}, session=sid)
check("call_without_name_32602", err_code(j) == -32602, j)
st, _, j, _ = call(sid, 7, "no_such_tool", {})
check("unknown_tool_32602", err_code(j) == -32602, j)
st, _, j, _ = call(sid, 8, "template_list", {})
check("tool_outside_toolset_32602", err_code(j) == -32602 and "toolset" in j["error"]["message"], j)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, session=sid)
names = [t["name"] for t in j["result"]["tools"]]
check("sandboxes_toolset_only", "sandbox_exec" in names and "template_list" not in names and "nextCursor" not in j["result"], names)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 10, "method": "tools/list", "params": {"cursor": "zz"}}, session=sid)
check("bad_cursor_32602", err_code(j) == -32602, j)
st, _, j, _ = call(sid, 11, "sandbox_get", {"sandbox_id": "sbx_00000000000000000000000000"})
check("tool_error_is_result", st == 200 and j["result"]["isError"] is True and "sandbox_not_found" in j["result"]["content"][0]["text"], j)
st, _, j, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
                   path="/mcp?toolsets=sandboxes,nope")
check("unknown_toolset_400", st == 400 and err_code(j) == -32602, f"{st} {j}")
st, sid_all, _ = init(path="/mcp?toolsets=all")
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=sid_all)
check("toolsets_all", {"template_list", "snapshot_list", "sandbox_exec"} <= {t["name"] for t in j["result"]["tools"]}, j)
st, sid_default, _ = init(path="/mcp")
st, _, j, _ = post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session=sid_default)
check("default_toolset_is_sandboxes", {t["name"] for t in j["result"]["tools"]} == set(names), j)

# ---- 100 concurrent tool calls on one session
st, _, j, _ = call(sid, 20, "sandbox_create", {"timeout_s": 600})
sbx = j["result"]["structuredContent"]["id"]
results = [None] * 100


def one(i):
    st, j, t = None, None, ""
    try:
        st, _, j, t = call(sid, 1000 + i, "sandbox_exec", {"sandbox_id": sbx, "cmd": ["echo", str(i)]})
        results[i] = (st, j["id"], j["result"]["structuredContent"]["stdout"])
    except Exception:  # noqa: BLE001
        results[i] = (st, t[:200], "")


threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
bad = [(i, r) for i, r in enumerate(results) if r != (200, 1000 + i, f"{i}\n")]
check("hundred_concurrent_calls", not bad, f"{len(bad)} wrong, e.g. {bad[:3]}")
print(f"# 100 concurrent sandbox_exec calls on one session: {time.time() - t0:.2f} s")

# ---- a client that disconnects in the middle of sandbox_exec: the command is cancelled


def running_sleeps():
    _, _, j, _ = call(sid, 30, "sandbox_exec", {"sandbox_id": sbx, "cmd": "pgrep -x sleep | wc -l"})
    return j["result"]["structuredContent"]["stdout"].strip()


s = socket.create_connection((HOST, PORT))
body = json.dumps({"jsonrpc": "2.0", "id": 31, "method": "tools/call",
                   "params": {"name": "sandbox_exec", "arguments": {"sandbox_id": sbx, "cmd": "sleep 60"}}})
s.sendall((f"POST /mcp HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\nMcp-Session-Id: {sid}\r\n"
           f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
# Until the sleep runs (it has started), not a fixed time.
during = "0"
for _ in range(100):
    during = running_sleeps()
    if during == "1":
        break
    time.sleep(0.1)
s.close()
after = "?"
for _ in range(50):
    after = running_sleeps()
    if after == "0":
        break
    time.sleep(0.1)
check("disconnect_cancels_exec", during == "1" and after == "0", f"sleeps running: {during} before the disconnect, {after} after")

# ---- the same with a command that prints without pause (its output never lets the wait go
# idle): it stamps a file as it runs; once cancelled, the stamp stops changing.


def stamp():
    _, _, j, _ = call(sid, 36, "sandbox_exec", {"sandbox_id": sbx, "cmd": "cat /tmp/alive 2>/dev/null || echo none"})
    return j["result"]["structuredContent"]["stdout"].strip()


s = socket.create_connection((HOST, PORT))
body = json.dumps({"jsonrpc": "2.0", "id": 35, "method": "tools/call",
                   "params": {"name": "sandbox_exec", "arguments": {"sandbox_id": sbx,
                              "cmd": "while true; do echo x; date +%s%N > /tmp/alive; sleep 0.01; done"}}})
s.sendall((f"POST /mcp HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\nMcp-Session-Id: {sid}\r\n"
           f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
# Wait for its first stamp (it has started) rather than a fixed time: on a busy machine the
# start may take longer than any guess.
t0 = time.time()
while stamp() == "none" and time.time() - t0 < 30:
    time.sleep(0.1)
started_after = time.time() - t0
# Running: the stamp moves (each stamp() is itself an exec, slow on a loaded machine; up to 5 s).
a = b = stamp()
t1 = time.time()
while a == b and a != "none" and time.time() - t1 < 5:
    time.sleep(0.1)
    b = stamp()
s.close()
stopped = False
for _ in range(20):
    x = stamp()
    time.sleep(0.4)
    if stamp() == x:
        stopped = True
        break
check("disconnect_cancels_chatty_exec", a != b and stopped,
      f"first stamp after {started_after:.1f} s ({a}); running before the disconnect: {a != b}; stopped after: {stopped}")

# ---- the file size limit (8 MiB by default), both ways, as isError results
st, _, j, _ = call(sid, 32, "sandbox_write_file", {"sandbox_id": sbx, "path": "big.txt", "content": "a" * ((8 << 20) + 1)})
check("write_over_limit_is_error", st == 200 and j["result"].get("isError") is True
      and j["result"]["content"][0]["text"].startswith("payload_too_large: "), f"{st} {str(j)[:300]}")
call(sid, 33, "sandbox_exec", {"sandbox_id": sbx, "cmd": "head -c 9000000 /dev/zero > /workspace/big.bin"})
st, _, j, _ = call(sid, 34, "sandbox_read_file", {"sandbox_id": sbx, "path": "big.bin"})
check("read_over_limit_is_error", st == 200 and j["result"].get("isError") is True
      and j["result"]["content"][0]["text"].startswith("payload_too_large: "), f"{st} {str(j)[:300]}")

# ---- at most 8 bodies over 1 MiB at once on the node: 8 held half-sent, the 9th refused at once
held = []
head = (f"POST /mcp HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\nMcp-Session-Id: {sid}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {2 << 20}\r\n\r\n").encode()
for _ in range(8):
    h = socket.create_connection((HOST, PORT))
    h.sendall(head + b'{"jsonrpc":"2.0","id":1,')
    held.append(h)
time.sleep(0.5)
t0 = time.time()
# The 9th is answered before its body is read and the connection closed: sent from a raw socket,
# since http.client gives up on the answer when the server stops reading first (a broken pipe).
s9 = socket.create_connection((HOST, PORT), timeout=30)
pad = b'{"jsonrpc":"2.0","id":2,"method":"ping","pad":"' + b"x" * (2 << 20) + b'"}'
try:
    s9.sendall((f"POST /mcp?toolsets=sandboxes HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {KEY}\r\n"
                f"Mcp-Session-Id: {sid}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {len(pad)}\r\n\r\n").encode() + pad)
except (BrokenPipeError, ConnectionResetError):
    pass
answer = b""
try:
    while b"\r\n\r\n" not in answer:
        d = s9.recv(65536)
        if not d:
            break
        answer += d
except OSError:
    pass
s9.close()
head9 = answer.split(b"\r\n\r\n", 1)[0].decode(errors="replace").split("\r\n")
st = int(head9[0].split(" ")[1]) if head9 and head9[0].startswith("HTTP/1.1 ") else 0
hd = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head9[1:])}
check("large_bodies_capped_503", st == 503 and hd.get("retry-after") == "1" and time.time() - t0 < 5, f"{st} {hd.get('retry-after')}")
for h in held:
    h.close()
ok = False
for _ in range(50):
    st, _, j, _ = post(None, session=sid, raw='{"jsonrpc":"2.0","id":3,"method":"ping","pad":"' + "x" * (2 << 20) + '"}')
    if st == 200:
        ok = True
        break
    time.sleep(0.1)
check("large_bodies_released", ok, st)

st, _, j, _ = call(sid, 40, "sandbox_delete", {"sandbox_id": sbx})
check("cleanup", j["result"]["structuredContent"]["status"] == "stopped", j)
for x in (sid, sid_all, sid_default, sid_new, sid_o):
    post(None, session=x, method="DELETE")
sys.exit(1 if failed else 0)

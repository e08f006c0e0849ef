#!/usr/bin/env python3
"""Walks b3osd's access table (`b3osd --print-access`, daemon/api/access.cc) against a running
b3osd: every route of the REST API, the model gateway, MCP, E2B's control plane and envd is
tried with every kind of credential a tenant could bring, and the outcome must be the table's:

  none, a malformed key, a revoked key     401 everywhere but /healthz
  sandbox B's envd token (naming A or B)    401 on every route but B's own envd routes
  another project's key                     A's sandbox answers as one that never existed; no list shows it
  the right key (GET routes)                not 401 or 403

The preview listener, the internal listener and the metrics listener have suites of their own
(tests/e2e/ports.sh xsite.* and tokens.*, tests/cluster/cluster.sh internal.*, operations.sh):
their rows are said SKIP here with where. Prints PASS/FAIL lines for tests/e2e/e2e.sh.

    access_walk.py URL TABLE_JSON KEY OTHER_KEY REVOKED_KEY SANDBOX_A SANDBOX_B
"""
import http.client
import json
import sys
import urllib.parse

URL, TABLE, KEY, OTHER, REVOKED, SBX_A, SBX_B = sys.argv[1:8]
HOST = urllib.parse.urlparse(URL)
failed = 0


def result(ok, name, detail=""):
    global failed
    if not ok:
        failed += 1
    print(f"{'PASS' if ok else 'FAIL'} access.{name}" + ("" if ok else f": {detail}"[:400]), flush=True)


def request(method, path, headers=None, body=None):
    c = http.client.HTTPConnection(HOST.hostname, HOST.port, timeout=60)
    h = dict(headers or {})
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def token_of(sbx):
    st, data = request("GET", f"/sandboxes/{sbx}", {"X-API-Key": KEY})
    return json.loads(data).get("envdAccessToken", "") if st == 200 else ""


TOKEN_A, TOKEN_B = token_of(SBX_A), token_of(SBX_B)
result(bool(TOKEN_A) and bool(TOKEN_B), "tokens_read", "no envdAccessToken for the walk's sandboxes")

CREDENTIALS = {
    "none": {},
    "malformed": {"Authorization": "Bearer nope"},
    "revoked": {"Authorization": f"Bearer {REVOKED}"},
    "b_token_naming_a": {"E2b-Sandbox-Id": SBX_A, "X-Access-Token": TOKEN_B},
    "b_token_naming_b": {"E2b-Sandbox-Id": SBX_B, "X-Access-Token": TOKEN_B},
    "a_token_as_bearer": {"Authorization": f"Bearer {TOKEN_A}"},
}
SUBST = {"{sbx}": SBX_A, "{tpl}": "base", "{bld}": "bld_" + "0" * 26, "{snp}": "snp_" + "0" * 26,
         "{proc}": "proc_1", "{port}": "8000"}
# A body that no route takes as a valid request: nothing is created or changed, whoever asks.
BAD_BODY = b'{"b3os_access_walk": true}'

rules = json.load(open(TABLE))["rules"]
seen_surfaces = set()
for rule in rules:
    surface, method, pattern, kinds = rule["surface"], rule["method"], rule["pattern"], rule["kinds"]
    seen_surfaces.add(surface)
    name = f"{surface}.{method}.{pattern}".replace("/", "_").replace("{", "").replace("}", "").replace("*", "any")
    if surface in ("preview", "internal", "metrics"):
        where = {"preview": "tests/e2e/ports.sh (tokens.*, xsite.*)", "internal": "tests/cluster/cluster.sh (internal.*)",
                 "metrics": "tests/e2e/operations.sh"}[surface]
        print(f"SKIP access.{name}: its listener's suite walks it: {where}", flush=True)
        continue
    if surface == "health":
        st, _ = request("GET", pattern)
        result(st == 200 and kinds == ["none"], name + ".none_200", f"HTTP {st}, kinds {kinds}")
        continue
    if surface == "envd":
        path = {"/files": "/files?path=/etc/hostname", "/health": "/health",
                "/{package.Service}/{Method}": "/filesystem.Filesystem/Stat"}[pattern]
        m = "GET" if pattern != "/{package.Service}/{Method}" else "POST"
        body = b'{"path": "/"}' if m == "POST" else None
        for cred, h in {"none": {"E2b-Sandbox-Id": SBX_A}, "api_key": {"E2b-Sandbox-Id": SBX_A, "X-API-Key": KEY},
                        "b_token_naming_a": CREDENTIALS["b_token_naming_a"]}.items():
            st, data = request(m, path, h, body)
            result(st == 401, f"{name}.{cred}_401", f"HTTP {st} {data[:160]!r}")
        st, data = request(m, path, {**CREDENTIALS["b_token_naming_b"], "Authorization": "Basic cm9vdDo="}, body)
        result(st in (200, 204), f"{name}.own_token_served", f"HTTP {st} {data[:160]!r}")
        continue
    path = pattern
    for k, v in SUBST.items():
        path = path.replace(k, v)
    if surface == "infer":
        path = "/v1/infer/models"
    elif surface == "e2b-control":
        path = "/v2/sandboxes"
    m = "GET" if method == "*" else method
    body = BAD_BODY if m in ("POST", "PUT", "PATCH") else None
    for cred, h in CREDENTIALS.items():
        st, data = request(m, path, h, body)
        result(st == 401, f"{name}.{cred}_401", f"HTTP {st} {data[:160]!r}")
    # Another project's key: project A's sandbox is exactly like one that never existed (the
    # same status and code, whatever the route checks first); a list never shows it.
    if "{sbx}" in pattern:
        st, data = request(m, path, {"Authorization": f"Bearer {OTHER}"}, body)
        never = path.replace(SBX_A, "sbx_" + "0" * 26)
        st0, data0 = request(m, never, {"Authorization": f"Bearer {OTHER}"}, body)
        code = lambda d: (json.loads(d).get("error") or {}).get("code") if d.startswith(b"{") else None
        result(st == st0 and st != 200 and code(data) == code(data0), f"{name}.other_project_as_never_existed",
               f"A: HTTP {st} {data[:120]!r}; never existed: HTTP {st0} {data0[:120]!r}")
    elif m == "GET":
        st, data = request(m, path, {"Authorization": f"Bearer {OTHER}"})
        result(SBX_A.encode() not in data, f"{name}.other_project_sees_nothing_of_a", f"HTTP {st} {data[:160]!r}")
    if m == "GET" and surface in ("rest", "infer", "e2b-control"):
        st, data = request(m, path, {"Authorization": f"Bearer {KEY}"})
        result(st not in (401, 403), f"{name}.key_served", f"HTTP {st} {data[:160]!r}")

# Sandbox A is untouched by all of it.
st, data = request("GET", f"/v1/sandboxes/{SBX_A}", {"Authorization": f"Bearer {KEY}"})
result(st == 200 and json.loads(data).get("status") == "running", "sandbox_a_untouched", f"HTTP {st} {data[:160]!r}")
for s in ("health", "rest", "infer", "mcp", "e2b-control", "envd", "preview", "internal", "metrics"):
    result(s in seen_surfaces, f"table_has_{s}", f"no row of surface {s} in the table")
print(f"# access_walk: {failed} failed", flush=True)
sys.exit(1 if failed else 0)

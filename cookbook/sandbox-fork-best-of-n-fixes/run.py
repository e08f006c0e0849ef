#!/usr/bin/env python3
"""Fork a sandbox and let a model try three fixes (the Python tab of the recipe).

Standard library only (urllib), Python 3.9+. One forkable sandbox (no network, allowed to call
the node's model) gets a buggy slug.py, its tests and fix.py. We run the tests once, fork the
sandbox into three copies, and in each copy fix.py asks the model for a fixed slug.py at its
own temperature. All four sandboxes are deleted at the end, and the outputs are printed as one
JSON object.

    B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... python3 run.py
"""
import json
import os
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

API = os.environ.get("B3OS_API_URL", "http://127.0.0.1:7070")
KEY = os.environ.get("B3OS_API_KEY")
HERE = Path(__file__).resolve().parent
TEMPERATURES = [0, 0.6, 1.0]


class ApiError(Exception):
    pass


def call(method, path, json_body=None, data=None, timeout=120):
    """One API request. Returns (parsed body, headers); raises ApiError on an HTTP error."""
    headers = {"Authorization": f"Bearer {KEY}"}
    if json_body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(json_body).encode()
    elif data is not None:
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(API + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null"), resp.headers
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", "replace")
        try:
            err = json.loads(text)["error"]
            detail = f"{err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            detail = text[:300]
        raise ApiError(f"{method} {path} answered HTTP {e.code}: {detail}") from None
    except urllib.error.URLError as e:
        raise ApiError(f"{method} {path}: cannot reach {API}: {e.reason}") from None


def last_json(stdout):
    """The last line of an exec's stdout, if it is a JSON object."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def server_timing(headers, phase):
    """The dur= of one Server-Timing phase, in ms ("restore;dur=90.5, total;dur=323.4")."""
    for entry in (headers.get("Server-Timing") or "").split(","):
        name, *params = [p.strip() for p in entry.split(";")]
        for p in params:
            if name == phase and p.startswith("dur="):
                return float(p[4:])
    return None


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def try_fix(fork_id, temperature, tests_total):
    """Runs fix.py in one fork at one temperature; returns its entry of `tries`."""
    try:
        r, _ = call("POST", f"/v1/sandboxes/{fork_id}/exec", timeout=90, json_body={
            "cmd": ["python3", "/workspace/fix.py"],
            "env": {"TEMPERATURE": str(temperature)},
            "timeout_ms": 58000,
        })
        report = last_json(r["stdout"])
        if r["exit_code"] == 0 and report:
            log(f"temperature {temperature}: {'passed' if report['passed'] else 'failed'} "
                f"({report['tests_passed']} of {tests_total} tests, {report['rounds']} round(s))")
            keys = ("passed", "tests_passed", "rounds", "model_ms", "tests_ms", "lines", "failing")
            return {"temperature": temperature, **{k: report[k] for k in keys}, "error": None}
        error = "fix.py timed out" if r["timed_out"] else f"fix.py exited {r['exit_code']}: {r['stderr'].strip()}"
    except ApiError as e:
        error = f"exec failed: {e}"
    log(f"temperature {temperature}: {error}")
    return {"temperature": temperature, "passed": False, "tests_passed": None, "rounds": None,
            "model_ms": None, "tests_ms": None, "lines": None, "failing": None, "error": error}


def main(ids):
    # 1. A forkable sandbox without network, allowed to call the node's model.
    sandbox, _ = call("POST", "/v1/sandboxes", json_body={
        "template": "base",
        "forkable": True,
        "timeout_s": 600,
        "egress": {"mode": "deny", "allow": []},
        "api": {"scopes": ["infer:run"], "spend_cap_usd": 0.25},
        "metadata": {"recipe": "sandbox-fork-best-of-n-fixes"},
    })
    src = sandbox["id"]
    ids.append(src)
    log(f"created {src}")

    # 2. The buggy code, its tests and the script that asks the model for a fix.
    for f in ("slug.py", "test_slug.py", "fix.py"):
        call("PUT", f"/v1/sandboxes/{src}/files?path=/workspace/{f}", data=(HERE / f).read_bytes())

    # 3. The tests before any fix: 7 tests, 5 failing.
    run, _ = call("POST", f"/v1/sandboxes/{src}/exec",
                  json_body={"cmd": ["python3", "/workspace/fix.py", "--tests-only"], "timeout_ms": 30000})
    before = last_json(run["stdout"])
    if not before:
        raise ApiError(f"fix.py --tests-only printed no JSON report: {run['stderr']}")
    total = before["tests_total"]
    log(f"before the fix: {total - before['tests_passed']} of {total} tests fail")

    # 4. Three copies of the sandbox, memory and disk included.
    fork, headers = call("POST", f"/v1/sandboxes/{src}/fork", json_body={"count": 3})
    forks = [s["id"] for s in fork["data"]]
    ids.extend(forks)
    fork_ms, restore_ms = server_timing(headers, "total"), server_timing(headers, "restore")
    log(f"forked {' '.join(forks)} in {fork_ms} ms (restore {restore_ms} ms)")

    # 5. In each fork, the model tries a fix at its own temperature (all three at once).
    with ThreadPoolExecutor(len(forks)) as pool:
        tries = list(pool.map(try_fix, forks, TEMPERATURES, [total] * len(forks)))

    # 6. Delete all four sandboxes.
    while ids:
        call("DELETE", f"/v1/sandboxes/{ids[0]}")
        ids.pop(0)
    log("deleted all 4 sandboxes")

    # 7. The outputs.
    winners = [t["temperature"] for t in tries if t["passed"]]
    print(json.dumps({
        "tests_total": total,
        "failing_before": total - before["tests_passed"],
        "forks": len(forks),
        "fork_ms": fork_ms,
        "fork_restore_ms": restore_ms,
        "passing": len(winners),
        "winner_temperature": min(winners) if winners else None,
        "tries": tries,
    }, indent=2))
    # Exit 1 when a try could not run (e.g. the model was unreachable); failed tests are a result.
    return 1 if any(t["error"] for t in tries) else 0


if __name__ == "__main__":
    if not KEY:
        log("set B3OS_API_KEY (e.g. $(cat /var/lib/b3os/admin.key))")
        sys.exit(2)
    created = []
    try:
        sys.exit(main(created))
    except ApiError as e:
        log(f"error: {e}")
        sys.exit(1)
    finally:
        # Whatever happened, leave no sandbox running.
        for sid in created:
            try:
                call("DELETE", f"/v1/sandboxes/{sid}")
            except ApiError:
                pass

#!/usr/bin/env python3
"""A model writes code, a sandbox runs its tests (the Python tab of the recipe).

Standard library only (urllib), Python 3.9+. One sandbox with no internet (egress deny) and an
"infer:run" grant capped at $1 gets agent.py, task.md and test_solution.py. We check that it
cannot reach example.com, then run agent.py: it asks the node's model for solution.py, runs
the tests and sends failures back, at most three times. The sandbox is deleted at the end,
whatever happened, and the outputs are printed as one JSON object (progress and the solution
kept go to stderr).

    B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... python3 run.py

Exit status 1 when a request failed, agent.py could not run to its report, or the sandbox
reached the internet; failing tests are a result, not an error.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

API = os.environ.get("B3OS_API_URL", "http://127.0.0.1:7070")
KEY = os.environ.get("B3OS_API_KEY")
HERE = Path(__file__).resolve().parent


class ApiError(Exception):
    pass


def call(method, path, json_body=None, data=None, timeout=120, raw=False):
    """One API request. Returns the parsed body (the bytes with raw); raises ApiError on an HTTP error."""
    headers = {"Authorization": f"Bearer {KEY}"}
    if json_body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(json_body).encode()
    elif data is not None:
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(API + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
            return body if raw else json.loads(body or b"null")
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
    """The last non-empty line of an exec's stdout, if it is a JSON object."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def main(ids):
    # 1. A sandbox without internet, allowed to call the node's model (at most $1 of it).
    sandbox = call("POST", "/v1/sandboxes", json_body={
        "template": "base",
        "timeout_s": 300,
        "egress": {"mode": "deny"},
        "api": {"scopes": ["infer:run"], "spend_cap_usd": 1},
        "metadata": {"recipe": "sandbox-model-writes-tested-code"},
    })
    sbx = sandbox["id"]
    ids.append(sbx)
    create_ms = (sandbox.get("timing") or {}).get("total_ms")
    log(f"created {sbx}")

    # 2. The agent, the task and the tests.
    for f in ("agent.py", "task.md", "test_solution.py"):
        call("PUT", f"/v1/sandboxes/{sbx}/files?path=/workspace/{f}", data=(HERE / f).read_bytes())

    # 3. No way out but the model: example.com must not answer.
    probe = call("POST", f"/v1/sandboxes/{sbx}/exec", json_body={
        "cmd": "curl -s -m 5 -o /dev/null https://example.com && echo reached || echo blocked",
    })["stdout"].strip()
    log(f"internet: {probe}")

    # 4. The agent asks the model, runs the tests, sends failures back (at most 3 attempts).
    start = time.monotonic()
    r = call("POST", f"/v1/sandboxes/{sbx}/exec", timeout=90,
             json_body={"cmd": ["python3", "/workspace/agent.py"], "timeout_ms": 58000})
    exec_ms = round((time.monotonic() - start) * 1000, 1)
    report = last_json(r["stdout"])
    error = None
    if r["exit_code"] != 0 or report is None:
        error = "agent.py timed out" if r["timed_out"] else f"agent.py exited {r['exit_code']}: {r['stderr'].strip()}"
        report = {}
        log(f"error: {error}")
    else:
        log(f"{report['tests_passed']} of {report['tests_total']} tests pass after {report['attempts']} attempt(s)")

    # 5. The solution the agent kept.
    try:
        solution = call("GET", f"/v1/sandboxes/{sbx}/files?path=/workspace/solution.py", raw=True)
        log(f"---- solution.py ----\n{solution.decode('utf-8', 'replace').rstrip()}\n---------------------")
    except ApiError as e:
        log(f"no solution.py ({e})")

    # 6. Delete the sandbox.
    call("DELETE", f"/v1/sandboxes/{sbx}")
    ids.remove(sbx)
    log("deleted the sandbox")

    # 7. The outputs. "internet" is "blocked" only if neither curl nor agent.py reached example.com.
    blocked = probe == "blocked" and report.get("internet") != "reached"
    outputs = {
        "model": report.get("model"),
        "internet": "blocked" if blocked else "reached",
        **{k: report.get(k) for k in ("attempts", "all_passed", "tests_total", "tests_passed", "model_ms",
                                      "completion_tokens", "tests_ms")},
        "create_ms": create_ms,
        "exec_ms": exec_ms,
        "solution_lines": report.get("solution_lines"),
        "solution_head": report.get("solution_head"),
        "error": error,
    }
    print(json.dumps(outputs, indent=2))
    return 0 if error is None and blocked else 1


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

#!/usr/bin/env python3
"""Ask a model to fix /workspace/slug.py until /workspace/test_slug.py passes (at most 2 rounds).

Runs inside a b3os sandbox (Python 3.11, standard library only).

  python3 /workspace/fix.py --tests-only   run the tests and report them
  python3 /workspace/fix.py                ask the model for a fixed slug.py, test it, and if
                                           tests still fail send the failures back once

Model settings come from the environment (set by the model gateway of a sandbox created with
the "infer:run" scope): OPENAI_BASE_URL, OPENAI_API_KEY (a placeholder is fine: the gateway
knows the sandbox), B3OS_MODEL; TEMPERATURE (default 0) is set per exec by the client.
B3OS_WORKSPACE (default /workspace) is where slug.py and test_slug.py are, for runs outside a
sandbox (tests); the recipe never sets it.

Human-readable lines go to stdout first; the LAST stdout line is always one JSON object:
  --tests-only: {"tests_total", "tests_passed", "failing", "tests_ms"}
  otherwise:    {"temperature", "passed", "tests_passed", "rounds", "model_ms", "tests_ms",
                 "lines", "failing", "completion_tokens"}
Exit status: 0 when the report was printed (whether or not the tests pass), 1 on a network
or HTTP error talking to the model, 2 when the environment is missing a setting.
"""
import ast
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

WORKSPACE = os.environ.get("B3OS_WORKSPACE", "").strip() or "/workspace"  # override for tests on a host
SOURCE = os.path.join(WORKSPACE, "slug.py")
TESTS = os.path.join(WORKSPACE, "test_slug.py")
MAX_ROUNDS = 2
TEST_TIMEOUT_S = 20
# The client gives each exec 58 s; stop asking the model in time to report.
BUDGET_S = float(os.environ.get("FIX_BUDGET_S", "52"))
RESULT_LINE = re.compile(r"^(test\w+) \(.*\) \.\.\. (.*)$")
CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.S)
ANY_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.S)


def test_names():
    """The test methods of test_slug.py, read without importing it."""
    with open(TESTS, encoding="utf-8") as f:
        tree = ast.parse(f.read(), TESTS)
    return [node.name for cls in tree.body if isinstance(cls, ast.ClassDef)
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]


def run_tests():
    """Runs the suite; returns (names that passed, names that did not, output, ms)."""
    names = test_names()
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "unittest", "-v", "test_slug"], cwd=WORKSPACE,
                              capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stderr or b""
        output = partial.decode("utf-8", "replace") if isinstance(partial, bytes) else partial
        output += f"\nthe tests did not finish within {TEST_TIMEOUT_S} s (an endless loop?)\n"
    ms = (time.monotonic() - start) * 1000
    ok = {m.group(1) for m in map(RESULT_LINE.match, output.splitlines()) if m and m.group(2) == "ok"}
    passed = [n for n in names if n in ok]
    failing = [n for n in names if n not in ok]  # failed, errored, or never ran (import error)
    return passed, failing, output, ms


def env(name, default=None):
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if default is not None:
        return default
    print(f"fix.py: {name} is not set: create the sandbox with \"api\": {{\"scopes\": [\"infer:run\"]}} "
          "and the model gateway sets OPENAI_BASE_URL, OPENAI_API_KEY and B3OS_MODEL in every exec.",
          file=sys.stderr)
    sys.exit(2)


def chat(base_url, api_key, model, temperature, messages, timeout):
    """One chat completion; returns (content, completion_tokens or None). Exits 1 on failure."""
    body = json.dumps({"model": model, "temperature": temperature, "messages": messages}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            reply = json.load(resp)
    except urllib.error.HTTPError as e:
        detail = e.read(500).decode("utf-8", "replace").strip()
        print(f"fix.py: the model answered HTTP {e.code} {e.reason}: {detail}", file=sys.stderr)
        sys.exit(1)
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        print(f"fix.py: cannot reach the model at {base_url}: {reason}", file=sys.stderr)
        sys.exit(1)
    except json.JSONDecodeError as e:
        print(f"fix.py: the model's answer is not JSON: {e}", file=sys.stderr)
        sys.exit(1)
    try:
        content = reply["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        print(f"fix.py: the model's answer has no choices[0].message.content: {str(reply)[:300]}",
              file=sys.stderr)
        sys.exit(1)
    tokens = (reply.get("usage") or {}).get("completion_tokens")
    return content, tokens if isinstance(tokens, int) else None


def extract_code(content):
    """The first ```python block of an answer (else the first ``` block), or None."""
    m = CODE_BLOCK.search(content) or ANY_BLOCK.search(content)
    return m.group(1) if m else None


def tests_only():
    passed, failing, output, ms = run_tests()
    print(output.rstrip())
    print(f"{len(passed)} of {len(passed) + len(failing)} tests pass" +
          (f"; failing: {', '.join(failing)}" if failing else ""))
    print(json.dumps({"tests_total": len(passed) + len(failing), "tests_passed": len(passed),
                      "failing": failing, "tests_ms": round(ms, 1)}))


def fix():
    base_url = env("OPENAI_BASE_URL")
    model = env("B3OS_MODEL")
    api_key = env("OPENAI_API_KEY", "b3os")
    try:
        temperature = float(env("TEMPERATURE", "0"))
    except ValueError:
        print(f"fix.py: TEMPERATURE must be a number, not {os.environ['TEMPERATURE']!r}", file=sys.stderr)
        sys.exit(2)
    deadline = time.monotonic() + BUDGET_S

    with open(SOURCE, encoding="utf-8") as f:
        source = f.read()
    with open(TESTS, encoding="utf-8") as f:
        tests = f.read()
    passed, failing, output, _ = run_tests()
    print(f"temperature {temperature}: {len(failing)} of {len(passed) + len(failing)} tests fail before the fix")

    messages = [
        {"role": "system", "content": "You fix bugs in Python code. Answer with the complete corrected "
                                      "file in a single ```python code block. Use only the standard library."},
        {"role": "user", "content": f"slug.py:\n```python\n{source}```\n\ntest_slug.py:\n```python\n{tests}```\n\n"
                                    f"`python3 -m unittest -v test_slug` fails:\n```\n{output}```\n\n"
                                    "Fix slug.py so that every test passes. Do not change the tests."},
    ]
    rounds, model_ms, tests_ms, tokens = 0, 0.0, 0.0, None
    while rounds < MAX_ROUNDS:
        remaining = deadline - time.monotonic()
        if remaining < 5:
            print(f"out of time after {rounds} round(s)")
            break
        rounds += 1
        start = time.monotonic()
        content, used = chat(base_url, api_key, model, temperature, messages, timeout=remaining)
        model_ms += (time.monotonic() - start) * 1000
        if used is not None:
            tokens = (tokens or 0) + used
        messages.append({"role": "assistant", "content": content})
        code = extract_code(content)
        if code is None:
            print(f"round {rounds}: the answer has no ```python code block")
            messages.append({"role": "user", "content": "Your answer had no ```python code block. "
                                                        "Send the whole fixed slug.py in one."})
            continue
        with open(SOURCE, "w", encoding="utf-8") as f:
            f.write(code)
        passed, failing, output, ms = run_tests()
        tests_ms += ms
        print(f"round {rounds}: {len(passed)} of {len(passed) + len(failing)} tests pass" +
              (f"; failing: {', '.join(failing)}" if failing else ""))
        if not failing:
            break
        messages.append({"role": "user", "content": f"The tests still fail:\n```\n{output}```\n"
                                                    "Send the whole corrected slug.py again."})

    with open(SOURCE, encoding="utf-8") as f:
        lines = len(f.read().splitlines())
    print(json.dumps({"temperature": temperature, "passed": not failing, "tests_passed": len(passed),
                      "rounds": rounds, "model_ms": round(model_ms, 1), "tests_ms": round(tests_ms, 1),
                      "lines": lines, "failing": failing, "completion_tokens": tokens}))


if __name__ == "__main__":
    if sys.argv[1:] == ["--tests-only"]:
        tests_only()
    elif sys.argv[1:]:
        print("usage: fix.py [--tests-only]", file=sys.stderr)
        sys.exit(2)
    else:
        fix()

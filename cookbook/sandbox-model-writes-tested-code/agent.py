#!/usr/bin/env python3
"""Ask the node's model to write /workspace/solution.py until /workspace/test_solution.py passes.

Runs inside a b3os sandbox (Python 3.11, standard library only):

  python3 /workspace/agent.py

1. Checks that the sandbox cannot reach the internet (an HTTPS request to example.com must
   fail): prints "internet: blocked" (or "internet: reached").
2. Sends task.md to the model, writes the first ```python block of its answer to solution.py
   and runs `python3 -m unittest -v test_solution`.
3. When a test fails, sends the failures back in the same conversation and tries again, at
   most 3 attempts in all (and never past its time budget).

Model settings come from the environment, which the b3os model gateway sets in every exec of a
sandbox created with "api": {"scopes": ["infer:run"]}: OPENAI_BASE_URL (chat completions are
POSTed to {OPENAI_BASE_URL}/chat/completions), OPENAI_API_KEY (a placeholder: the gateway knows
the sandbox; "b3os" when unset) and B3OS_MODEL.

Optional settings (for tests and local runs; the recipe sets none of them):
  B3OS_WORKSPACE     the directory with task.md and test_solution.py (default /workspace)
  AGENT_PROBE_URL    what the internet check requests (default https://example.com;
                     empty: skip the check and report "unchecked")
  AGENT_BUDGET_S     seconds before it stops asking the model (default 52: the recipe gives
                     the exec 58 s and the report must still be printed)
  AGENT_MAX_TOKENS   max_tokens of each model call (default 4096)

Human-readable lines go to stdout first; the LAST stdout line is always one JSON object:
  {"model", "internet", "attempts", "all_passed", "tests_total", "tests_passed", "failing",
   "model_ms", "completion_tokens", "tests_ms", "solution_lines", "solution_head"}
model_ms is the time spent waiting for the model over all attempts, tests_ms the last test
run, completion_tokens the sum of the answers' usage.completion_tokens (null if the model
reported none), solution_head the first 400 characters of the solution.py kept.

Exit status: 0 when the report was printed (whether or not the tests pass), 1 when the model
could not be reached or answered an HTTP error (or something that is not a chat completion),
2 when OPENAI_BASE_URL or B3OS_MODEL is missing, or task.md or test_solution.py is.
"""
import ast
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

WORKSPACE = os.environ.get("B3OS_WORKSPACE", "").strip() or "/workspace"
TASK = os.path.join(WORKSPACE, "task.md")
TESTS = os.path.join(WORKSPACE, "test_solution.py")
SOLUTION = os.path.join(WORKSPACE, "solution.py")
MAX_ATTEMPTS = 3
TEST_TIMEOUT_S = 20
FEEDBACK_CHARS = 6000  # the part of a failing test run sent back to the model
HEAD_CHARS = 400
RESULT_LINE = re.compile(r"^(test\w+) \(.*\) \.\.\. (.*)$")
FAILED_HEADER = re.compile(r"^(?:FAIL|ERROR): (test\w+) ")
THINKING = re.compile(r"<think>.*?</think>", re.S)
CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.S)
ANY_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.S)

SYSTEM_PROMPT = ("You are a careful Python programmer. Answer with the complete file solution.py "
                 "in a single ```python code block. Use only the Python standard library.")


def fail(status, message):
    print(f"agent.py: {message}", file=sys.stderr)
    sys.exit(status)


def setting(name, default=None):
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if default is not None:
        return default
    fail(2, f"{name} is not set: create the sandbox with \"api\": {{\"scopes\": [\"infer:run\"]}} and "
            "b3os sets OPENAI_BASE_URL, OPENAI_API_KEY and B3OS_MODEL in every exec.")


def number_setting(name, default, kind=float):
    raw = setting(name, str(default))
    try:
        return kind(raw)
    except ValueError:
        fail(2, f"{name} must be a number, not {raw!r}")


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail(2, f"cannot read {path}: {e.strerror} (upload it to {WORKSPACE} first)")


def internet_check(url):
    """'blocked' when a request to url gets no answer within 5 s, 'reached' when anything answers."""
    if not url:
        return "unchecked"
    answer = []

    def probe():
        try:
            with urllib.request.urlopen(url, timeout=5):
                answer.append("reached")
        except urllib.error.HTTPError:
            answer.append("reached")  # an HTTP error status is still an answer from the outside
        except (urllib.error.URLError, OSError, ValueError):
            answer.append("blocked")

    # In a thread, because a name lookup that hangs is not bounded by urlopen's timeout.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(6)
    return answer[0] if answer else "blocked"


def test_names():
    """The test methods of test_solution.py, read without importing it."""
    tree = ast.parse(read(TESTS), TESTS)
    return [node.name for cls in tree.body if isinstance(cls, ast.ClassDef)
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]


def run_tests():
    """Runs the suite; returns (names that passed, names that did not, output, ms)."""
    names = test_names()
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "unittest", "-v", "test_solution"], cwd=WORKSPACE,
                              capture_output=True, text=True, timeout=TEST_TIMEOUT_S)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stderr or b""
        output = partial.decode("utf-8", "replace") if isinstance(partial, bytes) else partial
        output += f"\nthe tests did not finish within {TEST_TIMEOUT_S} s (an endless loop?)\n"
    ms = (time.monotonic() - start) * 1000
    lines = output.splitlines()
    ok = {m.group(1) for m in map(RESULT_LINE.match, lines) if m and m.group(2) == "ok"}
    # A test whose subtests failed is listed under FAIL:/ERROR: even if its own line says ok.
    bad = {m.group(1) for m in map(FAILED_HEADER.match, lines) if m}
    passed = [n for n in names if n in ok and n not in bad]
    failing = [n for n in names if n not in passed]  # failed, errored, or never ran
    return passed, failing, output, ms


def chat(base_url, api_key, model, messages, max_tokens, timeout):
    """One chat completion; returns (content, completion_tokens or None). Exits 1 on failure."""
    body = json.dumps({"model": model, "messages": messages, "temperature": 0,
                       "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            reply = json.load(resp)
    except urllib.error.HTTPError as e:
        detail = e.read(500).decode("utf-8", "replace").strip()
        fail(1, f"the model answered HTTP {e.code} {e.reason}: {detail}")
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        fail(1, f"cannot reach the model at {base_url}: {getattr(e, 'reason', e)}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(1, f"the model's answer is not JSON: {e}")
    try:
        content = reply["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        fail(1, f"the model's answer has no choices[0].message.content: {str(reply)[:300]}")
    tokens = (reply.get("usage") or {}).get("completion_tokens")
    return content, tokens if isinstance(tokens, int) else None


def extract_code(content):
    """The first ```python block of an answer (else its first ``` block), or None."""
    content = THINKING.sub("", content)
    m = CODE_BLOCK.search(content) or ANY_BLOCK.search(content)
    return m.group(1) if m else None


def shorten(output):
    if len(output) <= FEEDBACK_CHARS:
        return output
    return output[:FEEDBACK_CHARS // 2] + "\n[... cut ...]\n" + output[-FEEDBACK_CHARS // 2:]


def main():
    if sys.argv[1:]:
        fail(2, "usage: agent.py (no arguments; settings come from the environment)")
    base_url = setting("OPENAI_BASE_URL")
    model = setting("B3OS_MODEL")
    api_key = setting("OPENAI_API_KEY", "b3os")
    budget_s = number_setting("AGENT_BUDGET_S", 52)
    max_tokens = number_setting("AGENT_MAX_TOKENS", 4096, int)
    deadline = time.monotonic() + budget_s
    task = read(TASK)
    total = len(test_names())

    internet = internet_check(os.environ.get("AGENT_PROBE_URL", "https://example.com").strip())
    print(f"internet: {internet}")

    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{task.rstrip()}\n\nThe tests (test_solution.py):\n```python\n"
                                    f"{read(TESTS)}```\n\nWrite solution.py."},
    ]
    attempts, model_ms, tests_ms, tokens, wrote = 0, 0.0, None, None, False
    passed, failing = [], test_names()
    while attempts < MAX_ATTEMPTS:
        remaining = deadline - time.monotonic()
        if remaining < 5:
            print(f"out of time after {attempts} attempt(s)")
            break
        attempts += 1
        start = time.monotonic()
        content, used = chat(base_url, api_key, model, messages, max_tokens, timeout=remaining)
        model_ms += (time.monotonic() - start) * 1000
        if used is not None:
            tokens = (tokens or 0) + used
        messages.append({"role": "assistant", "content": content})
        code = extract_code(content)
        if code is None:
            print(f"attempt {attempts}: the answer has no ```python code block")
            messages.append({"role": "user", "content": "Your answer had no ```python code block. "
                                                        "Send the whole solution.py in one."})
            continue
        with open(SOLUTION, "w", encoding="utf-8") as f:
            f.write(code)
        wrote = True
        passed, failing, output, tests_ms = run_tests()
        print(f"attempt {attempts}: {len(passed)} of {total} tests pass" +
              (f"; failing: {', '.join(failing)}" if failing else ""))
        if not failing:
            break
        messages.append({"role": "user", "content": "`python3 -m unittest -v test_solution` fails with your "
                                                    f"solution.py:\n```\n{shorten(output)}```\n"
                                                    "Send the whole corrected solution.py."})

    solution = read(SOLUTION) if wrote else ""
    print(json.dumps({
        "model": model,
        "internet": internet,
        "attempts": attempts,
        "all_passed": not failing,
        "tests_total": total,
        "tests_passed": len(passed),
        "failing": failing,
        "model_ms": round(model_ms, 1),
        "completion_tokens": tokens,
        "tests_ms": None if tests_ms is None else round(tests_ms, 1),
        "solution_lines": len(solution.splitlines()),
        "solution_head": solution[:HEAD_CHARS],
    }))


if __name__ == "__main__":
    main()

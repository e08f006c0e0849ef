#!/usr/bin/env bash
# A model writes code, a sandbox runs its tests (the curl tab of the recipe).
#
# One sandbox with no internet (egress deny) and an "infer:run" grant capped at $1 gets
# agent.py, task.md and test_solution.py. We check that it cannot reach example.com, then run
# agent.py: it asks the node's model for solution.py, runs the tests and sends failures back,
# at most three times. The sandbox is deleted at the end, whatever happened, and the outputs
# are printed as one JSON object.
#
#   B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... ./run.sh
#
# Needs curl and jq. Progress (and the solution kept) goes to stderr, the outputs JSON to stdout.
# Exit status 1 when a request failed, agent.py could not run to its report, or the sandbox
# reached the internet; failing tests are a result, not an error.
set -euo pipefail

API=${B3OS_API_URL:-http://127.0.0.1:7070}
AUTH="Authorization: Bearer ${B3OS_API_KEY:?set B3OS_API_KEY (e.g. \$(cat /var/lib/b3os/admin.key))}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

TMP=$(mktemp -d)
SBX=
cleanup() {
  [ -z "$SBX" ] || curl -sS -o /dev/null -X DELETE "$API/v1/sandboxes/$SBX" -H "$AUTH" || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# call NAME METHOD PATH [curl args...]: one API request; the body goes to $TMP/NAME.json and
# the seconds it took to $TMP/NAME.time. Stops the script on an HTTP error, showing the API's error.
call() {
  local name=$1 method=$2 path=$3
  shift 3
  local out status
  out=$(curl -sS -o "$TMP/$name.json" -w '%{http_code} %{time_total}' -X "$method" "$API$path" -H "$AUTH" "$@") ||
    out="000 0"
  status=${out%% *}
  echo "${out#* }" >"$TMP/$name.time"
  if [ "$status" = 000 ]; then
    echo "error: $method $path: cannot reach $API" >&2
    exit 1
  elif [ "${status:0:1}" != 2 ]; then
    echo "error: $method $path answered HTTP $status: $(jq -r '.error | "\(.code): \(.message)"' \
      "$TMP/$name.json" 2>/dev/null || head -c 300 "$TMP/$name.json")" >&2
    exit 1
  fi
}

# 1. A sandbox without internet, allowed to call the node's model (at most $1 of it).
call create POST /v1/sandboxes -H 'Content-Type: application/json' -d @- <<'EOF'
{
  "template": "base",
  "timeout_s": 300,
  "egress": {"mode": "deny"},
  "api": {"scopes": ["infer:run"], "spend_cap_usd": 1},
  "metadata": {"recipe": "sandbox-model-writes-tested-code"}
}
EOF
SBX=$(jq -r .id "$TMP/create.json")
CREATE_MS=$(jq '.timing.total_ms // null' "$TMP/create.json")
echo "created $SBX" >&2

# 2. The agent, the task and the tests.
for f in agent.py task.md test_solution.py; do
  call "upload-$f" PUT "/v1/sandboxes/$SBX/files?path=/workspace/$f" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$HERE/$f"
done

# 3. No way out but the model: example.com must not answer.
call probe POST "/v1/sandboxes/$SBX/exec" -H 'Content-Type: application/json' \
  -d '{"cmd": "curl -s -m 5 -o /dev/null https://example.com && echo reached || echo blocked"}'
PROBE=$(jq -r '.stdout | rtrimstr("\n")' "$TMP/probe.json")
echo "internet: $PROBE" >&2

# 4. The agent asks the model, runs the tests, sends failures back (at most 3 attempts).
call agent POST "/v1/sandboxes/$SBX/exec" -H 'Content-Type: application/json' \
  -d '{"cmd": ["python3", "/workspace/agent.py"], "timeout_ms": 58000}'
EXEC_MS=$(awk '{ printf "%.1f", $1 * 1000 }' "$TMP/agent.time")
REPORT=$(jq -r '.stdout' "$TMP/agent.json" | sed '/^$/d' | tail -n1 | jq -c 'select(type == "object")' 2>/dev/null || true)
ERROR=null
if [ "$(jq -r .exit_code "$TMP/agent.json")" != 0 ] || [ -z "$REPORT" ]; then
  ERROR=$(jq 'if .timed_out then "agent.py timed out"
    else "agent.py exited \(.exit_code): \(.stderr | rtrimstr("\n"))" end' "$TMP/agent.json")
  REPORT='{}'
  echo "error: $(jq -r . <<<"$ERROR")" >&2
else
  jq -r '"\(.tests_passed) of \(.tests_total) tests pass after \(.attempts) attempt(s)"' <<<"$REPORT" >&2
fi

# 5. The solution the agent kept.
status=$(curl -sS -o "$TMP/solution.py" -w '%{http_code}' "$API/v1/sandboxes/$SBX/files?path=/workspace/solution.py" -H "$AUTH")
if [ "$status" = 200 ]; then
  { echo "---- solution.py ----"; cat "$TMP/solution.py"; echo "---------------------"; } >&2
else
  echo "no solution.py (HTTP $status)" >&2
fi

# 6. Delete the sandbox.
call delete DELETE "/v1/sandboxes/$SBX"
SBX=
echo "deleted the sandbox" >&2

# 7. The outputs. "internet" is "blocked" only if neither curl nor agent.py reached example.com.
jq -n --argjson r "$REPORT" --arg probe "$PROBE" --argjson create_ms "$CREATE_MS" \
  --argjson exec_ms "$EXEC_MS" --argjson error "$ERROR" '{
    model: $r.model,
    internet: (if $probe == "blocked" and ($r.internet // "blocked") != "reached" then "blocked" else "reached" end),
    attempts: $r.attempts,
    all_passed: $r.all_passed,
    tests_total: $r.tests_total,
    tests_passed: $r.tests_passed,
    model_ms: $r.model_ms,
    completion_tokens: $r.completion_tokens,
    tests_ms: $r.tests_ms,
    create_ms: $create_ms,
    exec_ms: $exec_ms,
    solution_lines: $r.solution_lines,
    solution_head: $r.solution_head,
    error: $error
  }' | tee "$TMP/outputs.json"
jq -e '.error == null and .internet == "blocked"' "$TMP/outputs.json" >/dev/null

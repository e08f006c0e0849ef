#!/usr/bin/env bash
# Fork a sandbox and let a model try three fixes (the curl tab of the recipe).
#
# One forkable sandbox (no network, allowed to call the node's model) gets a buggy slug.py, its
# tests and fix.py. We run the tests once, fork the sandbox into three copies, and in each copy
# fix.py asks the model for a fixed slug.py at its own temperature (0, 0.6, 1.0). All four
# sandboxes are deleted at the end, and the outputs are printed as one JSON object.
#
#   B3OS_API_URL=http://127.0.0.1:7070 B3OS_API_KEY=b3os_sk_... ./run.sh
#
# Needs curl and jq. Progress goes to stderr, the outputs JSON to stdout.
set -euo pipefail

API=${B3OS_API_URL:-http://127.0.0.1:7070}
AUTH="Authorization: Bearer ${B3OS_API_KEY:?set B3OS_API_KEY (e.g. \$(cat /var/lib/b3os/admin.key))}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPERATURES=(0 0.6 1.0)

TMP=$(mktemp -d)
IDS=()
cleanup() {
  for id in ${IDS[@]+"${IDS[@]}"}; do
    curl -sS -o /dev/null -X DELETE "$API/v1/sandboxes/$id" -H "$AUTH" || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# call NAME METHOD PATH [curl args...]: one API request; the body goes to $TMP/NAME.json and
# the headers to $TMP/NAME.headers. Stops the script on an HTTP error, showing the API's error.
call() {
  local name=$1 method=$2 path=$3
  shift 3
  local status
  status=$(curl -sS -o "$TMP/$name.json" -D "$TMP/$name.headers" -w '%{http_code}' \
    -X "$method" "$API$path" -H "$AUTH" "$@")
  if [ "${status:0:1}" != 2 ]; then
    echo "error: $method $path answered HTTP $status: $(jq -r '.error | "\(.code): \(.message)"' \
      "$TMP/$name.json" 2>/dev/null || head -c 300 "$TMP/$name.json")" >&2
    exit 1
  fi
}

# last_json FILE: the last line of an exec's stdout, if it is a JSON object (else nothing).
last_json() {
  jq -r '.stdout' "$1" | sed '/^$/d' | tail -n1 | jq -c 'select(type == "object")' 2>/dev/null || true
}

# server_timing FILE PHASE: the dur= of one Server-Timing phase, in ms.
server_timing() {
  grep -i '^server-timing:' "$1" | tr ',' '\n' | sed 's/^[^:]*: *//; s/^ *//' |
    grep "^$2;" | head -n1 | sed 's/.*dur=\([0-9.]*\).*/\1/'
}

# 1. A forkable sandbox without network, allowed to call the node's model.
call create POST /v1/sandboxes -H 'Content-Type: application/json' -d @- <<'EOF'
{
  "template": "base",
  "forkable": true,
  "timeout_s": 600,
  "egress": {"mode": "deny", "allow": []},
  "api": {"scopes": ["infer:run"], "spend_cap_usd": 0.25},
  "metadata": {"recipe": "sandbox-fork-best-of-n-fixes"}
}
EOF
SRC=$(jq -r .id "$TMP/create.json")
IDS+=("$SRC")
echo "created $SRC" >&2

# 2. The buggy code, its tests and the script that asks the model for a fix.
for f in slug.py test_slug.py fix.py; do
  call "upload-$f" PUT "/v1/sandboxes/$SRC/files?path=/workspace/$f" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$HERE/$f"
done

# 3. The tests before any fix: 7 tests, 5 failing.
call before POST "/v1/sandboxes/$SRC/exec" -H 'Content-Type: application/json' \
  -d '{"cmd": ["python3", "/workspace/fix.py", "--tests-only"], "timeout_ms": 30000}'
BEFORE=$(last_json "$TMP/before.json")
if [ -z "$BEFORE" ]; then
  echo "error: fix.py --tests-only printed no JSON report: $(jq -r '.stderr' "$TMP/before.json")" >&2
  exit 1
fi
echo "before the fix: $(jq -r '"\(.tests_total - .tests_passed) of \(.tests_total) tests fail"' <<<"$BEFORE")" >&2

# 4. Three copies of the sandbox, memory and disk included.
call fork POST "/v1/sandboxes/$SRC/fork" -H 'Content-Type: application/json' -d '{"count": 3}'
mapfile -t FORKS < <(jq -r '.data[].id' "$TMP/fork.json")
IDS+=("${FORKS[@]}")
FORK_MS=$(server_timing "$TMP/fork.headers" total)
RESTORE_MS=$(server_timing "$TMP/fork.headers" restore)
echo "forked ${FORKS[*]} in ${FORK_MS} ms (restore ${RESTORE_MS} ms)" >&2

# 5. In each fork, the model tries a fix at its own temperature (all three at once).
for i in "${!FORKS[@]}"; do
  call "try-$i" POST "/v1/sandboxes/${FORKS[$i]}/exec" -H 'Content-Type: application/json' \
    -d "{\"cmd\": [\"python3\", \"/workspace/fix.py\"], \"env\": {\"TEMPERATURE\": \"${TEMPERATURES[$i]}\"}, \"timeout_ms\": 58000}" &
done
wait

TRIES=()
for i in "${!FORKS[@]}"; do
  t=${TEMPERATURES[$i]}
  report=$(last_json "$TMP/try-$i.json")
  code=$(jq -r '.exit_code' "$TMP/try-$i.json")
  if [ "$code" = 0 ] && [ -n "$report" ]; then
    TRIES+=("$(jq -c --argjson t "$t" '{temperature: $t, passed, tests_passed, rounds, model_ms, tests_ms,
      lines, failing, error: null}' <<<"$report")")
    echo "temperature $t: $(jq -r --argjson n "$(jq .tests_total <<<"$BEFORE")" \
      'if .passed then "passed" else "failed" end + " (\(.tests_passed) of \($n) tests, \(.rounds) round(s))"' <<<"$report")" >&2
  else
    err=$(jq -r 'if .error then "exec failed: \(.error.code): \(.error.message)"
      elif .timed_out then "fix.py timed out"
      else "fix.py exited \(.exit_code): \(.stderr | rtrimstr("\n"))" end' "$TMP/try-$i.json" 2>/dev/null ||
      echo "exec failed: no answer")
    TRIES+=("$(jq -nc --argjson t "$t" --arg e "$err" '{temperature: $t, passed: false, tests_passed: null,
      rounds: null, model_ms: null, tests_ms: null, lines: null, failing: null, error: $e}')")
    echo "temperature $t: $err" >&2
  fi
done

# 6. Delete all four sandboxes.
for id in "${IDS[@]}"; do
  call delete DELETE "/v1/sandboxes/$id"
done
IDS=()
echo "deleted all 4 sandboxes" >&2

# 7. The outputs.
printf '%s\n' "${TRIES[@]}" | jq -s --argjson before "$BEFORE" --argjson forks "${#FORKS[@]}" \
  --argjson fork_ms "${FORK_MS:-null}" --argjson restore_ms "${RESTORE_MS:-null}" '{
    tests_total: $before.tests_total,
    failing_before: ($before.tests_total - $before.tests_passed),
    forks: $forks,
    fork_ms: $fork_ms,
    fork_restore_ms: $restore_ms,
    passing: map(select(.passed)) | length,
    winner_temperature: (map(select(.passed) | .temperature) | min),
    tries: .
  }'
# Exit 1 when a try could not run (e.g. the model was unreachable); failed tests are a result.
printf '%s\n' "${TRIES[@]}" | jq -se 'all(.error == null)' >/dev/null

#!/usr/bin/env bash
# End-to-end test of the model gateway's guarantees against a private b3osd and the scripted
# model server (tests/fixtures/scripted_model.py, a TEST FIXTURE on 127.0.0.1):
#   - 50 calls from inside a sandbox racing for the last dollar never pass its cap (ledger);
#   - a source and its forks share one grant, one ledger and one cap;
#   - a sandbox without infer:run cannot reach the model;
#   - the upstream key reaches the upstream and nowhere else (sandbox, responses, log, store);
#   - slow and dead upstreams give clear errors within the call's time-out;
#   - /v1/infer from outside: streaming, the key's own cap, projects that may not use it;
#   - the ledger survives a SIGKILL restart of b3osd.
# Network: only 127.0.0.1; the sandboxes have egress deny (no network at all).
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/gateway.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
# shellcheck disable=SC2016 # single-quoted $VAR and $(...) are for jq or the sandbox's shell
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
FIXTURE=$ROOT/tests/fixtures/scripted_model.py
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
UPSTREAM_KEY=upstream-secret-$RANDOM$RANDOM

e2e_begin gateway python3

PIDS=()
on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  e2e_aborted "$rc"
  cleanup_everything
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [ "$(count_results FAIL)" != 0 ]; then
    echo "# ---- last 30 lines of the b3osd log ----"
    tail -n 30 "$T/daemon.log" 2>/dev/null | sed 's/^/# /'
  fi
  [ "${B3OS_E2E_KEEP:-0}" = 1 ] && echo "# kept $T" || rm -rf "$T"
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

jqe() { jq -e "$@" >/dev/null; }
running_count() { curl -s -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes?status=running&limit=100" | jq '.data | length'; }
# start_fixture NAME ARGS...: a scripted model on a free port; sets FIXTURE_PORT.
start_fixture() {
  local name=$1
  shift
  python3 "$FIXTURE" --port 0 --port-file "$T/$name.port" --calls-file "$T/$name.calls.json" --quiet "$@" \
    >"$T/$name.out" 2>"$T/$name.log" </dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    [ -s "$T/$name.port" ] && break
    sleep 0.1
  done
  [ -s "$T/$name.port" ] || die "the scripted model $name did not start: $(tail -n 5 "$T/$name.log")"
  FIXTURE_PORT=$(cat "$T/$name.port")
}
# spend ID: the budget's ledger as JSON, read from the store with the CLI.
spend() { "$B3OS_BIN/b3os" keys --data-dir "$T/data" spend --json "$1"; }

# ---- setup: three upstreams and b3osd ---------------------------------------------------------

# A normal one that needs the upstream key and answers after 300 ms (so racing calls overlap),
# one that never answers, and a port where nothing listens. Prices are high on purpose: $1000
# and $2000 per million tokens make each call cost cents, so a cap of a dollar is reachable.
start_fixture good --api-key "$UPSTREAM_KEY" --delay-ms 300 --models scripted --strict-models
GOOD=$FIXTURE_PORT
start_fixture slow --hang
SLOW=$FIXTURE_PORT
start_fixture broken --break-stream
BROKEN=$FIXTURE_PORT
DEAD=$(free_port)
export B3OS_E2E_UPSTREAM_KEY=$UPSTREAM_KEY
B3OS_E2E_DAEMON_ARGS="--model b3os/pricey=http://127.0.0.1:$GOOD/v1,upstream=scripted,in=1000,out=2000,key-env=B3OS_E2E_UPSTREAM_KEY,default"
B3OS_E2E_DAEMON_ARGS+=" --model b3os/slow=http://127.0.0.1:$SLOW/v1,timeout=2 --model b3os/dead=http://127.0.0.1:$DEAD/v1"
B3OS_E2E_DAEMON_ARGS+=" --model b3os/broken=http://127.0.0.1:$BROKEN/v1"
export B3OS_E2E_DAEMON_ARGS
start_private_daemon
unset B3OS_E2E_UPSTREAM_KEY
info "b3osd pid $(daemon_pid) on $URL; upstreams good :$GOOD, slow :$SLOW, dead :$DEAD"

# The racer (a test fixture): N threads call the model at once from inside a sandbox; prints
# the statuses.
cp "$ROOT/tests/fixtures/model_racer.py" "$T/racer.py"
upload_racer() {
  api PUT "/v1/sandboxes/$1/files?path=/opt/racer.py" -H 'Content-Type: application/octet-stream' --data-binary "@$T/racer.py"
}

# ---- 1. fifty calls racing for the last dollar ------------------------------------------------

create_sandbox '{"api": {"scopes": ["infer:run"], "spend_cap_usd": 1}}'
check race.create_201 "$(snip)" okj 201 '.api.scopes == ["infer:run"] and .api.spend_cap_usd == 1 and (.api.budget_id | startswith("grt_"))'
RACE=$CID
RACE_BUDGET=$(j .api.budget_id)
upload_racer "$RACE"
run_exec "$RACE" '{"cmd": ["python3", "/opt/racer.py", "50"], "timeout_ms": 60000}'
j '.stdout' >"$T/race.json"
info "race: $(jq -c 'group_by(.status) | map({status: .[0].status, n: length})' "$T/race.json" 2>/dev/null)"
check race.some_admitted_some_refused "$(jq -c 'map(.status)' "$T/race.json" 2>/dev/null)" \
  jqe 'map(.status) | (index(200) != null) and (index(402) != null) and all(.[]; . == 200 or . == 402)' "$T/race.json"
check race.refusals_openai_shaped "$(jq -c '[.[] | select(.status == 402)][0]' "$T/race.json")" \
  jqe '[.[] | select(.status == 402)] | all(.[]; .body.error.type == "insufficient_quota" and .body.error.code == "spend_cap_reached")' "$T/race.json"
spend "$RACE_BUDGET" >"$T/race.spend.json"
check race.ledger_within_cap "$(jq -c '{cap_usd, spent_usd, calls: (.calls | length), sum: ([.calls[].cost_usd] | add)}' "$T/race.spend.json")" \
  jqe '([.calls[].cost_usd] | add) as $sum | $sum <= 1 and ($sum - .spent_usd | fabs) < 1e-9 and .cap_usd == 1' "$T/race.spend.json"
check race.ledger_has_each_admitted_call "ledger $(jq '.calls | length' "$T/race.spend.json"), admitted $(jq '[.[] | select(.status == 200)] | length' "$T/race.json")" \
  test "$(jq '.calls | length' "$T/race.spend.json")" = "$(jq '[.[] | select(.status == 200)] | length' "$T/race.json")"
api GET "/v1/sandboxes/$RACE"
check race.sandbox_shows_spend "$(snip)" jt --slurpfile s "$T/race.spend.json" '(.api.spent_usd - $s[0].spent_usd | fabs) < 1e-9 and .api.spent_usd > 0'

# ---- 2. a source and its forks share one cap --------------------------------------------------

create_sandbox '{"forkable": true, "api": {"scopes": ["infer:run"], "spend_cap_usd": 0.5}}'
SRC=$CID
SRC_BUDGET=$(j .api.budget_id)
upload_racer "$SRC"
apij POST "/v1/sandboxes/$SRC/fork" '{"count": 2}'
check forks.fork_201 "$(snip)" okj 201 '.data | length == 2'
mapfile -t FORKS < <(j '.data[].id')
for f in "${FORKS[@]}"; do echo "$f" >>"$T/ids"; done
check forks.same_grant "$(j -c '[.data[].api]')" jt --arg b "$SRC_BUDGET" 'all(.data[]; .api.budget_id == $b and .api.spend_cap_usd == 0.5)'
# One call from a fork and one from the source before the race, so the shared budget surely
# holds charges of two sandboxes (in the race one sandbox's racers may take every admission:
# seen once, the fork's call and all three winners from the same fork).
apij POST "/v1/sandboxes/${FORKS[0]}/exec" "$(jq -nc '{cmd: ["python3", "/opt/racer.py", "1"], timeout_ms: 60000}')"
apij POST "/v1/sandboxes/$SRC/exec" "$(jq -nc '{cmd: ["python3", "/opt/racer.py", "1"], timeout_ms: 60000}')"
racers=()
for s in "$SRC" "${FORKS[@]}"; do
  exec_json=$(jq -nc '{cmd: ["python3", "/opt/racer.py", "20"], timeout_ms: 60000}')
  (curl -s -X POST "$URL/v1/sandboxes/$s/exec" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "$exec_json" | jq -r .stdout >"$T/fork.$s.json") &
  racers+=($!)
done
wait "${racers[@]}"
cat "$T"/fork.*.json | jq -s 'add' >"$T/forks.json"
info "forks: $(jq -c 'group_by(.status) | map({status: .[0].status, n: length})' "$T/forks.json" 2>/dev/null)"
spend "$SRC_BUDGET" >"$T/forks.spend.json"
check forks.one_cap_for_all "$(jq -c '{spent_usd, calls: (.calls | length), sandboxes: ([.calls[].sandbox_id] | unique)}' "$T/forks.spend.json")" \
  jqe '([.calls[].cost_usd] | add) <= 0.5 and ([.calls[].sandbox_id] | unique | length) >= 2' "$T/forks.spend.json"
check forks.refused_past_cap "$(jq -c 'map(.status)' "$T/forks.json")" jqe 'map(.status) | index(402) != null' "$T/forks.json"
api GET "/v1/sandboxes/${FORKS[0]}"
check forks.spend_visible_in_each "$(snip)" jt --slurpfile s "$T/forks.spend.json" '(.api.spent_usd - $s[0].spent_usd | fabs) < 1e-9'

# ---- 3. no scope, no model ----------------------------------------------------------------------

create_sandbox '{}'
NOPE=$CID
run_exec "$NOPE" '{"cmd": "echo base=${OPENAI_BASE_URL:-unset} model=${B3OS_MODEL:-unset}; curl -s -X POST http://127.0.0.1:7700/v1/infer/chat/completions -H content-type:application/json -d \"{\\\"messages\\\":[{\\\"role\\\":\\\"user\\\",\\\"content\\\":\\\"x\\\"}]}\""}'
check noscope.no_env "$(snip)" jt '.stdout | startswith("base=unset model=unset\n")'
check noscope.forbidden "$(snip)" jt '.stdout | split("\n")[1] | fromjson | .error.code == "forbidden"'

# ---- 4. slow and dead upstreams ---------------------------------------------------------------

t0=$(now_ms)
run_exec "$RACE" '{"cmd": ["python3", "/opt/racer.py", "1", "b3os/slow"], "timeout_ms": 30000}'
slow_ms=$(($(now_ms) - t0))
check upstream.slow_504_in_time "${slow_ms} ms; $(snip)" bash -c "jq -e '.stdout | fromjson | .[0].status == 504 and .[0].body.error.code == \"upstream_timeout\"' '$RESP' >/dev/null && [ $slow_ms -lt 6000 ]"
t0=$(now_ms)
run_exec "$RACE" '{"cmd": ["python3", "/opt/racer.py", "1", "b3os/dead"], "timeout_ms": 30000}'
dead_ms=$(($(now_ms) - t0))
check upstream.dead_502_at_once "${dead_ms} ms; $(snip)" bash -c "jq -e '.stdout | fromjson | .[0].status == 502 and .[0].body.error.code == \"upstream_unavailable\"' '$RESP' >/dev/null && [ $dead_ms -lt 3000 ]"

# ---- 5. /v1/infer from outside ----------------------------------------------------------------

curl -sN "$URL/v1/infer/chat/completions" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model": "b3os/pricey", "stream": true, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}' >"$T/stream.txt"
check outside.stream "$(head -c 300 "$T/stream.txt")" bash -c "grep -q '^data: {' '$T/stream.txt' && tail -n 2 '$T/stream.txt' | grep -q '^data: \[DONE\]'"
apij POST /v1/infer/chat/completions '{"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
check outside.completion "$(snip)" okj 200 '.model == "b3os/pricey" and .usage.completion_tokens > 0'
api GET /v1/infer/models
check outside.models "$(snip)" okj 200 '[.data[].id] == ["b3os/pricey", "b3os/slow", "b3os/dead", "b3os/broken"]'
# A stream the upstream breaks must not look complete: the chunked body is cut, curl fails.
rc=0
curl -sSN "$URL/v1/infer/chat/completions" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model": "b3os/broken", "stream": true, "messages": [{"role": "user", "content": "hi"}]}' >"$T/broken.txt" 2>"$T/broken.err" || rc=$?
check outside.broken_stream_cut "curl exit $rc: $(head -c 200 "$T/broken.err"); body: $(head -c 200 "$T/broken.txt")" \
  bash -c "[ $rc != 0 ] && ! grep -q '\[DONE\]' '$T/broken.txt'"
CAPPED=$("$B3OS_BIN/b3os" keys --data-dir "$T/data" create --project capped --spend-cap-usd 0.05 2>"$T/capped.err")
CAPPED_ID=$(sed -n 's/.*key id \(key_[0-9a-z]*\).*/\1/p' "$T/capped.err")
ALL_KEYS+=("$CAPPED")
KEY=$CAPPED apij POST /v1/infer/chat/completions '{"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}'
check outside.key_cap_402 "$(snip)" okj 402 '.error.code == "spend_cap_reached"'
"$B3OS_BIN/b3os" keys --data-dir "$T/data" set-cap "$CAPPED_ID" 0.5 2>/dev/null
KEY=$CAPPED apij POST /v1/infer/chat/completions '{"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}'
check outside.key_cap_raised "$(snip)" okj 200 '.usage.completion_tokens > 0'
check outside.key_ledger "$(spend "$CAPPED_ID" | head -c 300)" bash -c "'$B3OS_BIN/b3os' keys --data-dir '$T/data' spend --json '$CAPPED_ID' | jq -e '.calls | length == 1 and .[0].key_id == \"$CAPPED_ID\"' >/dev/null"
"$B3OS_BIN/b3os" projects --data-dir "$T/data" set-infer capped off 2>/dev/null
KEY=$CAPPED apij POST /v1/infer/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}'
check outside.project_off_403 "$(snip)" okj 403 '.error.code == "forbidden"'
KEY=$CAPPED apij POST /v1/sandboxes '{"api": {"scopes": ["infer:run"]}}'
check outside.project_off_no_grant "$(snip)" okj 403 '.error.code == "forbidden"'

# ---- 6. the upstream key goes upstream only ---------------------------------------------------

check key.used_upstream "$(jq -c '[.requests[].authorization] | unique' "$T/good.calls.json")" \
  jqe --arg k "Bearer $UPSTREAM_KEY" '[.requests[].authorization] | unique == [$k]' "$T/good.calls.json"
run_exec "$RACE" '{"cmd": "env; cat /proc/1/environ 2>/dev/null | tr \"\\0\" \"\\n\""}'
check key.not_in_sandbox "$(j .stdout | grep -c "$UPSTREAM_KEY" || true) matches" bash -c "! jq -r .stdout '$RESP' | grep -q '$UPSTREAM_KEY'"
check key.not_in_responses "" bash -c "! grep -rq '$UPSTREAM_KEY' '$T/race.json' '$T/forks.json' '$T/stream.txt' '$T/race.spend.json'"
check key.not_in_log "" bash -c "! grep -q '$UPSTREAM_KEY' '$T/daemon.log'"
check key.not_in_store "" bash -c "! grep -rqa '$UPSTREAM_KEY' '$T/data'"

# ---- 7. the ledger survives a restart -----------------------------------------------------------

before=$(spend "$RACE_BUDGET" | jq -c '{spent_usd, n: (.calls | length)}')
stop_daemon KILL
B3OS_E2E_UPSTREAM_KEY=$UPSTREAM_KEY start_daemon || die "b3osd did not restart"
after=$(spend "$RACE_BUDGET" | jq -c '{spent_usd, n: (.calls | length)}')
check restart.ledger_kept "before $before, after $after" test "$before" = "$after"
api GET "/v1/sandboxes/$RACE"
check restart.sandbox_spend_kept "$(snip)" jt --argjson b "$before" '(.api.spent_usd - $b.spent_usd | fabs) < 1e-9'
run_exec "$RACE" '{"cmd": ["python3", "/opt/racer.py", "1"], "timeout_ms": 30000}'
check restart.cap_still_holds "$(snip)" jt '.stdout | fromjson | .[0].status == 200 or .[0].status == 402'

# ---- the end: nothing left ----------------------------------------------------------------------

for id in $(sort -u "$T/ids"); do delete_sandbox "$id" >/dev/null || true; done
nothing_left_now() { test "$(running_count)-$(runsc_list | wc -l)" = "0-0"; }
eventually 30 nothing_left_now || true  # a delete's release comes just after its answer
check cleanup.nothing_left "running: $(running_count), runsc: $(runsc_list | tr '\n' ' ')" nothing_left_now

# Every response the suite received, against docs/openapi.yaml.
check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
echo "passed $P, failed $F, skipped $S in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$F" = 0 ] || exit 1

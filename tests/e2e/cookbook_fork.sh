#!/usr/bin/env bash
# End-to-end test of the cookbook recipe cookbook/sandbox-fork-best-of-n-fixes ("Fork a sandbox
# and let a model try three fixes") against a private b3osd, driven with curl and jq like the
# recipe's curl tab (run.sh).
#
# This b3osd has no model configured, so it checks the recipe's fork mechanics: the recipe's
# own create body (with its infer:run grant), `fix.py --tests-only` in the source and in three
# forks, files written in one fork invisible to the others; fix.py's model path against a
# stand-in model served inside a fork (loopback only, egress stays deny); and the three clients
# as published, which must run the whole flow and report the gateway's 503 for each try.
# The recipe with a model (scripted upstream behind the real gateway) is
# tests/e2e/cookbook_model.sh.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/cookbook_fork.sh
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR (default /var/lib/b3os/templates), B3OS_E2E_KEEP=1.
#
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
# shellcheck disable=SC2016 # single-quoted $VAR and $(...) are for jq or the sandbox's shell
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"

ROOT=$(cd "$HERE/../.." && pwd)
RECIPE=$ROOT/cookbook/sandbox-fork-best-of-n-fixes
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}

e2e_begin cookbook-fork python3 cmp

on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  e2e_aborted "$rc"
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

# last_json FILE: the last non-empty line of an exec answer's stdout, compact, if it is a JSON
# object (fix.py's report); else nothing.
last_json() {
  jq -r '.stdout // ""' "$1" 2>/dev/null | sed '/^$/d' | tail -n1 | jq -c 'select(type == "object")' 2>/dev/null || true
}
# timing_ms PHASE: the dur= of one phase in the last response's Server-Timing header ("" when
# it has none: a failed fork; the grep then finds nothing, and its status must not end the
# suite at the assignment before flow.fork_ms_positive says so).
timing_ms() {
  header Server-Timing | tr ',' '\n' | sed 's/^ *//' | grep "^$1;" | head -n1 | sed -n 's/.*dur=\([0-9.]*\).*/\1/p' || true
}
# jqe ARGS...: jq -e without its output (for check).
jqe() { jq -e "$@" >/dev/null; }
positive() { awk -v x="$1" 'BEGIN { exit !(x ~ /^[0-9]+(\.[0-9]+)?$/ && x > 0) }'; }
running_count() { curl -s -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes?status=running&limit=100" | jq '.data | length'; }
# exec_json ID JSON OUT: POST .../exec with plain curl (safe in parallel); the body goes to OUT.
exec_json() {
  curl -sS -o "$3" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    --data-binary "$2" "$URL/v1/sandboxes/$1/exec" >"$3.status" 2>>"$T/curl.err" || echo 000 >"$3.status"
}

# ---- setup --------------------------------------------------------------------------------

for f in slug.py test_slug.py fix.py run.sh run.mjs run.py README.md; do
  [ -f "$RECIPE/$f" ] || die "$RECIPE/$f is missing"
done
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, temp dir $T"

# The recipe's create body, taken from run.sh so the two cannot drift apart.
RECIPE_BODY=$(sed -n '/^call create POST/,/^EOF$/p' "$RECIPE/run.sh" | sed '1d;$d')
check recipe.create_body_has_grant "run.sh's create body: $RECIPE_BODY" \
  jqe '.forkable == true and .egress.mode == "deny" and .api.scopes == ["infer:run"]' <<<"$RECIPE_BODY"

# ---- 1. the recipe's grant: the sandbox gets the model settings -----------------------------

apij POST /v1/sandboxes "$RECIPE_BODY"
check recipe.create_with_infer_grant_201 "$(snip)" okj 201 '.api.scopes == ["infer:run"] and .api.spent_usd == 0'
GID=$(j .id)
echo "$GID" >>"$T/ids"
run_exec "$GID" '{"cmd": "echo $OPENAI_BASE_URL; test -n \"$OPENAI_API_KEY\" && echo key-set; echo model=${B3OS_MODEL:-none}"}'
check recipe.grant_env "$(snip)" jt '.stdout == "http://127.0.0.1:7700/v1/infer\nkey-set\nmodel=b3os/unconfigured\n"'
run_exec "$GID" '{"cmd": "curl -s -X POST http://127.0.0.1:7700/v1/infer/chat/completions -d {}"}'
check recipe.no_model_503 "$(snip)" jt '.stdout | fromjson | .error.code == "product_unavailable"'
delete_sandbox "$GID" || true

# ---- 2. the curl flow ------------------------------------------------------------------------

BODY=$RECIPE_BODY
info "no model on this b3osd: running fix.py --tests-only (cookbook_model.sh runs it with one)"
create_sandbox "$BODY"
SRC=$CID
[ -n "$SRC" ] || {
  fail flow.create_201 "$(snip)"
  exit 1
}
check flow.create_201 "$(snip)" okj 201 '.forkable == true and .egress == {"mode": "deny", "allow": []} and .status == "running"'

bad=""
for f in slug.py test_slug.py fix.py; do
  api PUT "/v1/sandboxes/$SRC/files?path=/workspace/$f" -H 'Content-Type: application/octet-stream' \
    --data-binary "@$RECIPE/$f"
  okj 201 ".size == $(stat -c %s "$RECIPE/$f")" || bad="$bad $f: $(snip);"
done
check flow.upload_three_files "$bad" test -z "$bad"

run_exec "$SRC" '{"cmd": ["python3", "/workspace/fix.py", "--tests-only"], "timeout_ms": 30000}'
BEFORE=$(last_json "$RESP")
check flow.source_tests_only_ran "$(snip)" okj 200 '.exit_code == 0 and .timed_out == false'
check flow.source_tests_total_7 "report: $BEFORE" jqe '.tests_total == 7' <<<"${BEFORE:-null}"
check flow.source_failing_before_5 "report: $BEFORE" \
  jqe '(.tests_total - .tests_passed) == 5 and (.failing | length) == 5 and (.failing | index("test_accents"))' <<<"${BEFORE:-null}"
check flow.source_tests_ms "report: $BEFORE" jqe '(.tests_ms | type) == "number" and .tests_ms > 0' <<<"${BEFORE:-null}"

apij POST "/v1/sandboxes/$SRC/fork" '{"count": 3}'
mapfile -t FORKS < <(j '.data[]?.id')
for f in ${FORKS[@]+"${FORKS[@]}"}; do echo "$f" >>"$T/ids"; done
check flow.fork_201_three "$(snip)" okj 201 '.object == "list" and (.data | length) == 3 and
  all(.data[]; .status == "running" and .forkable == true and (.id | startswith("sbx_")))'
FORK_MS=$(timing_ms total)
RESTORE_MS=$(timing_ms restore)
check flow.fork_ms_positive "Server-Timing: $(header Server-Timing)" positive "$FORK_MS"
check flow.fork_restore_ms_positive "Server-Timing: $(header Server-Timing)" positive "$RESTORE_MS"
info "fork of 3: total ${FORK_MS} ms, restore ${RESTORE_MS} ms"
[ "${#FORKS[@]}" = 3 ] || exit 1

# Each fork runs fix.py --tests-only with its temperature, all three at once like the recipe.
TEMPERATURES=(0 0.6 1.0)
for i in 0 1 2; do
  exec_json "${FORKS[$i]}" "{\"cmd\": [\"python3\", \"/workspace/fix.py\", \"--tests-only\"],
    \"env\": {\"TEMPERATURE\": \"${TEMPERATURES[$i]}\"}, \"timeout_ms\": 58000}" "$T/try-$i.json" &
done
wait
for i in 0 1 2; do
  report=$(last_json "$T/try-$i.json")
  check "flow.fork$i.tests_only_7_tests_5_failing" \
    "HTTP $(cat "$T/try-$i.json.status") $(head -c 300 "$T/try-$i.json"); report: $report" \
    jqe --argjson before "${BEFORE:-null}" '.tests_total == 7 and .tests_passed == 2 and .failing == $before.failing' \
    <<<"${report:-null}"
done

# A change in one fork is in that fork only: edit slug.py and add a file in fork 0.
run_exec "${FORKS[0]}" '{"cmd": "echo \"# edited in fork 0\" >> /workspace/slug.py && echo mine > /workspace/fork0.txt"}'
check isolation.edit_in_fork0 "$(snip)" okj 200 '.exit_code == 0'
api GET "/v1/sandboxes/${FORKS[0]}/files?path=/workspace/slug.py"
check isolation.fork0_sees_its_edit "$(snip)" grep -q '^# edited in fork 0$' "$RESP"
for who in source fork1 fork2; do
  case $who in
    source) id=$SRC ;;
    fork1) id=${FORKS[1]} ;;
    fork2) id=${FORKS[2]} ;;
  esac
  api GET "/v1/sandboxes/$id/files?path=/workspace/slug.py"
  check "isolation.$who.slug_py_unchanged" "$(snip)" bash -c "[ '$ST' = 200 ] && cmp -s '$RESP' '$RECIPE/slug.py'"
  api GET "/v1/sandboxes/$id/files?path=/workspace/fork0.txt"
  expect_error "isolation.$who.no_fork0_file" 404 file_not_found
done
run_exec "$SRC" '{"cmd": ["python3", "/workspace/fix.py", "--tests-only"]}'
report=$(last_json "$RESP")
check isolation.source_still_5_failing "$(snip)" jqe '.tests_passed == 2 and (.failing | length) == 5' <<<"${report:-null}"

# ---- 3. fix.py's model path, against a stand-in model inside fork 2 ---------------------------

# An OpenAI-style /chat/completions on 127.0.0.1 in the fork (egress stays deny). It answers
# round 1 with a partial fix (lowercase only) and round 2 with the same, so fix.py must send the
# failures back once and then stop after 2 rounds. It logs each request as one JSON line.
cat >"$T/standin.py" <<'EOF'
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PARTIAL = "import re\n\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]', '-', text.lower())\n"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open("/tmp/standin.log", "a") as log:
            log.write(json.dumps({"path": self.path, "auth": self.headers.get("Authorization"), **req}) + "\n")
        content = "The slug is not lowercased:\n```python\n" + PARTIAL + "```\n"
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}],
                          "usage": {"completion_tokens": 17}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF
F2=${FORKS[2]}
api PUT "/v1/sandboxes/$F2/files?path=/opt/standin.py" -H 'Content-Type: application/octet-stream' --data-binary "@$T/standin.py"
run_exec "$F2" '{"cmd": "nohup python3 /opt/standin.py 8411 >/tmp/standin.err 2>&1 & for i in $(seq 50); do python3 -c \"import socket; socket.create_connection((\\\"127.0.0.1\\\", 8411), 1)\" 2>/dev/null && exit 0; sleep 0.1; done; cat /tmp/standin.err; exit 1"}'
check model.standin_started "$(snip)" okj 200 '.exit_code == 0'
run_exec "$F2" '{"cmd": "B3OS_MODEL=stand-in exec python3 /workspace/fix.py", "env": {"OPENAI_BASE_URL": "http://127.0.0.1:8411/v1", "TEMPERATURE": "1.0"}, "timeout_ms": 58000}'
report=$(last_json "$RESP")
check model.fix_two_rounds "$(snip); report: $report" jqe '.temperature == 1 and .passed == false and .rounds == 2
  and .tests_passed == 3 and .failing == ["test_accents", "test_collapse_separators", "test_no_edge_dashes", "test_title"]
  and .lines == 5 and .completion_tokens == 34 and .model_ms > 0 and .tests_ms > 0' <<<"${report:-null}"
check model.fix_exit_0 "$(snip)" okj 200 '.exit_code == 0'
api GET "/v1/sandboxes/$F2/files?path=/tmp/standin.log"
jq -s . "$RESP" >"$T/standin.log.json" 2>/dev/null || echo null >"$T/standin.log.json"
check model.requests "$(head -c 600 "$T/standin.log.json")" jqe 'length == 2
  and all(.[]; .path == "/v1/chat/completions" and .model == "stand-in" and .temperature == 1
                and .auth == "Bearer b3os-sandbox-no-key-needed")
  and (.[0].messages | length) == 2 and (.[1].messages | length) == 4
  and (.[0].messages[1].content | contains("def slugify") and contains("FAIL: test_accents"))
  and .[1].messages[2].role == "assistant"
  and (.[1].messages[3].content | contains("FAIL: test_title") and (contains("FAIL: test_lowercase") | not))' \
  "$T/standin.log.json"
run_exec "$F2" '{"cmd": "env -u OPENAI_BASE_URL python3 /workspace/fix.py"}'
check model.no_base_url_exit_2 "$(snip)" okj 200 '.exit_code == 2 and (.stderr | contains("OPENAI_BASE_URL is not set"))'
run_exec "$F2" '{"cmd": "B3OS_MODEL=stand-in exec python3 /workspace/fix.py", "env": {"OPENAI_BASE_URL": "http://127.0.0.1:8412/v1"}}'
check model.unreachable_exit_1 "$(snip)" okj 200 '.exit_code == 1 and (.stderr | contains("cannot reach the model"))'

# ---- 4. delete all four ---------------------------------------------------------------------

bad=""
for id in "$SRC" "${FORKS[@]}"; do
  delete_sandbox "$id" && jt '.status == "stopped" and .stop_reason == "deleted"' || bad="$bad $id: $(snip);"
done
check flow.delete_all_four "$bad" test -z "$bad"
no_container() { [ -z "$(runsc_list)" ]; }
eventually 30 no_container || true  # a delete's release comes just after its answer
left=$(runsc_list | tr '\n' ' ')
check flow.no_runsc_container_left "runsc list: $left" test -z "${left// /}"
check flow.none_running "running: $(running_count)" test "$(running_count)" = 0

# ---- 5. the recipe's clients -------------------------------------------------------------------

export B3OS_API_URL=$URL B3OS_API_KEY=$KEY
# The published clients run the whole flow: 7 tests, 5 failing, 3 forks with timings, then
# each try reports the gateway's 503 (no model on this b3osd), and the client exits 1.
NODE_OK=0
if command -v node >/dev/null && [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then NODE_OK=1; fi
for client in run.sh run.mjs run.py; do
  name=${client//./_}
  case $client in
    run.sh) cmd=(bash) ;;
    run.mjs) cmd=(node) ;;
    run.py) cmd=(python3) ;;
  esac
  if [ "$client" = run.mjs ] && [ "$NODE_OK" = 0 ]; then
    skip "client.$name" "node 20 or newer is not installed"
    continue
  fi
  rc=0
  timeout 240 "${cmd[@]}" "$RECIPE/$client" >"$T/$name.out" 2>"$T/$name.err" || rc=$?
  check "client.$name.outputs" "exit $rc; stdout: $(tr -s ' \n' ' ' <"$T/$name.out" | head -c 400); stderr: $(tail -n 2 "$T/$name.err" | tr '\n' ' ' | head -c 300)" \
    jqe '.tests_total == 7 and .failing_before == 5 and .forks == 3 and .fork_ms > 0 and .fork_restore_ms > 0
      and .passing == 0 and .winner_temperature == null and ([.tries[].temperature] == [0, 0.6, 1])
      and all(.tries[]; .passed == false and (.error | contains("503")))' "$T/$name.out"
  check "client.$name.exit_1" "exit $rc" test "$rc" = 1
  eventually 30 no_container || true
  check "client.$name.leaves_nothing" "running: $(running_count), runsc: $(runsc_list | tr '\n' ' ')" \
    test "$(running_count)-$(runsc_list | wc -l)" = "0-0"
  info "$client: $(jq -c '{fork_ms, fork_restore_ms}' "$T/$name.out" 2>/dev/null)"
done

# Every response the suite received, against docs/openapi.yaml.
check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
echo "passed $P, failed $F, skipped $S in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$F" = 0 ] || exit 1

#!/usr/bin/env bash
# End-to-end test of what an operator sees of b3osd (docs/operations.md), against a private b3osd:
#   - the configuration file: read (a setting only the file gives shows in the metrics), flags
#     win over it, --check-config accepts a good file and refuses a misspelt key, a bad value,
#     a bad model and a bad address with exit 2, starting nothing and creating no directory;
#   - JSON logs: every line b3osd writes is one JSON object; the log lines a request causes
#     carry the X-Request-Id of its answer, which every answer has (errors, streams, /healthz);
#     a client's plain id is kept, a forged one replaced;
#   - GET /metrics: valid for `promtool check metrics`, a create counted under its route and
#     as an operation with its phases, a client's random paths never grow the series, the
#     listener serves nothing else, and a port that is taken stops b3osd with a clear message;
#   - Debian's real Prometheus scraping b3osd: a PromQL query through its HTTP API sees the
#     create counted, and the example alert rules (docs/prometheus/b3os-alerts.yml) load;
#   - `b3os status`: health, capacity, pools, templates; exit 1 when the node is unreachable.
# Network: only 127.0.0.1 (b3osd's listeners and Prometheus); the sandboxes have egress deny.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/operations.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
RULES=$ROOT/docs/prometheus/b3os-alerts.yml

e2e_begin operations python3 prometheus promtool

PROM_PID=
on_exit() {
  local rc=$?
  [ -z "$PROM_PID" ] || kill "$PROM_PID" 2>/dev/null || true
  e2e_aborted "$rc"
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

# ---- --check-config ----------------------------------------------------------------------

# check_config NAME WANT_RC WORD FILE_TEXT [flags...]: b3osd --check-config on a file with
# FILE_TEXT; PASS when it exits WANT_RC, says WORD, and created nothing under $T/cc.
check_config() {
  local name=$1 want=$2 word=$3 text=$4 rc=0 out
  shift 4
  printf '%s\n' "$text" >"$T/cc.conf"
  out=$("$B3OS_BIN/b3osd" --check-config --config "$T/cc.conf" --data-dir "$T/cc/data" --run-dir "$T/cc/run" "$@" 2>&1) || rc=$?
  if [ "$rc" != "$want" ]; then
    fail "config.$name" "exit $rc, want $want: $out"
  elif [[ $out != *"$word"* ]]; then
    fail "config.$name" "the output does not say '$word': $out"
  elif [ -e "$T/cc" ]; then
    fail "config.$name" "--check-config created $T/cc"
  else
    pass "config.$name"
  fi
}
check_config good 0 "configuration OK" $'# a comment\nlisten = "127.0.0.1:7999"\nwarm-pool = 1\nmodel = ["m=http://127.0.0.1:9/v1,default"]\nlog-format = "json"'
check_config misspelt_key 2 "warm-pol" 'warm-pol = 1'
check_config bad_value 2 "warm-pool" 'warm-pool = "many"'
check_config bad_choice 2 "log-format" 'log-format = "xml"'
check_config bad_model 2 "model" 'model = ["m=ftp://x"]'
check_config bad_metrics_address 2 "metrics-listen" 'metrics-listen = "nowhere"'
check_config bad_uplinks 2 "net-uplinks" 'net-uplinks = "10.0.0.0/30"'
check_config flag_checked_beside_file 2 "warm-pool" 'warm-pool = 1' --warm-pool nope
rc=0
out=$("$B3OS_BIN/b3osd" --check-config --config "$T/none.conf" 2>&1) || rc=$?
check config.missing_named_file "exit $rc: $out" test "$rc" = 2 -a -n "$out"
check config.version "$("$B3OS_BIN/b3osd" --version 2>&1)" bash -c "'$B3OS_BIN/b3osd' --version | grep -qE '^b3osd [0-9]+\.[0-9]+\.[0-9]+$'"

# ---- a daemon configured by a file --------------------------------------------------------

METRICS_PORT=$(free_port) || die "no free TCP port found"
METRICS=http://127.0.0.1:$METRICS_PORT
# The file sets what the suite's flags leave alone (the node's maximum, JSON logs, the access
# log) and a warm pool that the suite's --warm-pool 0 overrides.
cat >"$T/b3osd.conf" <<'CONF'
# b3osd's configuration for tests/e2e/operations.sh
max-sandboxes-per-node = 9
warm-pool = 3
log-format = "json"
access-log = true
rate = 100000
burst = 100000
CONF
export B3OS_E2E_DAEMON_ARGS="--config $T/b3osd.conf"
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, metrics on $METRICS"

scrape() { curl -sS -m 10 "$METRICS/metrics" >"$T/metrics" 2>"$T/curl.err"; }
# metric LINE_PREFIX: the value of the first sample line starting with LINE_PREFIX ("" if none).
metric() { awk -v p="$1" 'index($0, p) == 1 { print $NF; exit }' "$T/metrics"; }

scrape
check config.file_read "max is $(metric 'b3os_node_capacity{kind="max"}')" test "$(metric 'b3os_node_capacity{kind="max"}')" = 9
check config.flags_win "warm target $(metric 'b3os_pool_target{pool="warm"}')" test "$(metric 'b3os_pool_target{pool="warm"}')" = 0

# ---- request ids and JSON logs ----------------------------------------------------------

create_sandbox '{"template": "base", "timeout_s": 300}'
expect create.created 201
SBX=$CID
RID=$(header X-Request-Id)
check rid.on_create "no X-Request-Id: $(cat "$RESPH")" test -n "$RID"
# The log lines the create caused: the sandbox running, and the access line, both with its id.
# log_has FILTER [jq args...]: some line of the log satisfies the jq FILTER.
log_has() {
  local f=$1
  shift
  jq -c "$@" "select($f)" "$T/daemon.log" 2>/dev/null | grep -q .
}
ok_rid_lines() {
  log_has '.request_id == $r and (.msg | contains($s + ": running"))' --arg r "$RID" --arg s "$SBX" &&
    log_has '.request_id == $r and (.msg | startswith("api POST /v1/sandboxes 201"))' --arg r "$RID"
}
check rid.in_log_lines "no log line with request_id $RID naming $SBX" eventually 5 ok_rid_lines

run_exec "$SBX" '{"cmd": ["true"]}'
expect exec.ok 200
check rid.on_exec "" test -n "$(header X-Request-Id)"
api PUT "/v1/sandboxes/$SBX/files?path=/workspace/f" -H 'Content-Type: application/octet-stream' --data-binary 'hello'
api GET "/v1/sandboxes/$SBX/files?path=/workspace/f"
check rid.on_stream "HTTP $ST, headers: $(tr -d '\r' <"$RESPH" | tr '\n' ' ')" test "$ST" = 200 -a -n "$(header X-Request-Id)"
KEY=b3os_sk_notakey api GET /v1/sandboxes
check rid.on_401 "HTTP $ST" test "$ST" = 401 -a -n "$(header X-Request-Id)"
api GET /v1/nowhere
check rid.on_404 "HTTP $ST" test "$ST" = 404 -a -n "$(header X-Request-Id)"
KEY='' api GET /healthz
check rid.on_healthz "" test -n "$(header X-Request-Id)"
api GET /v1/sandboxes -H 'X-Request-Id: trace-7.op:x_y'
check rid.client_id_kept "got $(header X-Request-Id)" test "$(header X-Request-Id)" = "trace-7.op:x_y"
check rid.client_id_in_log "" eventually 5 log_has '.request_id == "trace-7.op:x_y"'
api GET /v1/sandboxes -H 'X-Request-Id: x","level":"critical'
check rid.forged_id_replaced "got $(header X-Request-Id)" bash -c "[[ '$(header X-Request-Id)' == req_* ]]"
# Every line b3osd wrote is one JSON object with time, level and msg (the test's wrapper adds
# one plain line when b3osd exits; none has yet).
check logs.all_json "$(grep -v '^{' "$T/daemon.log" | head -n 3)" \
  bash -c "jq -e -s 'length > 5 and all(.[]; has(\"time\") and has(\"level\") and has(\"msg\"))' '$T/daemon.log' >/dev/null"

# An MCP tool call counts as its REST twin does, under interface="mcp".
mcp_post() {
  curl -sS -D "$T/mcp.h" -o "$T/mcp.out" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' ${MCP_SID:+-H "Mcp-Session-Id: $MCP_SID"} \
    ${MCP_SID:+-H 'MCP-Protocol-Version: 2025-06-18'} --data-binary "$1" "$URL/mcp"
}
MCP_SID=
mcp_post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ops","version":"1"}}}'
MCP_SID=$(awk 'tolower($1) == "mcp-session-id:" { sub(/\r$/, "", $2); print $2 }' "$T/mcp.h")
mcp_post '{"jsonrpc":"2.0","method":"notifications/initialized"}'
mcp_post "$(jq -nc --arg id "$SBX" '{jsonrpc: "2.0", id: 2, method: "tools/call", params: {name: "sandbox_exec", arguments: {sandbox_id: $id, cmd: ["true"]}}}')"
check rid.on_mcp "$(head -c 200 "$T/mcp.out")" bash -c "grep -qi '^x-request-id: ' '$T/mcp.h' && grep -q exit_code '$T/mcp.out'"

# ---- /metrics --------------------------------------------------------------------------

scrape
check metrics.promtool_valid "$(promtool check metrics <"$T/metrics" 2>&1 | head -n 5)" bash -c "promtool check metrics <'$T/metrics' >/dev/null 2>&1"
check metrics.create_counted "" test "$(metric 'b3os_http_requests_total{listener="api",route="/v1/sandboxes",method="POST",status="201"}')" = 1
check metrics.create_operation "" test "$(metric 'b3os_operation_duration_seconds_count{operation="create",interface="rest",outcome="ok"}')" = 1
check metrics.create_phases "" grep -q '^b3os_operation_phase_seconds_count{operation="create",phase="' "$T/metrics"
check metrics.exec_counted "" test "$(metric 'b3os_operation_duration_seconds_count{operation="exec",interface="rest",outcome="ok"}')" = 1
check metrics.mcp_exec_counted "" test "$(metric 'b3os_operation_duration_seconds_count{operation="exec",interface="mcp",outcome="ok"}')" = 1
check metrics.sandboxes_by_state "" test "$(metric 'b3os_sandboxes{state="running",template="base"}')" = 1
check metrics.unauthorized_counted "" test -n "$(metric 'b3os_http_requests_total{listener="api",route="/v1/sandboxes",method="GET",status="401"}')"
check metrics.ready "" test "$(metric 'b3os_ready')" = 1
check metrics.build_info "" grep -q '^b3os_build_info{version="' "$T/metrics"
for f in b3os_runsc_failures_total b3os_sandbox_failures_total b3os_channel_reconnects_total b3os_gateway_calls_total \
  b3os_gateway_tokens_total b3os_gateway_spend_micros_total b3os_pool_claims_total b3os_pool_size b3os_template_checkpoint; do
  check "metrics.family.$f" "no # TYPE line" grep -q "^# TYPE $f " "$T/metrics"
done
# A client's paths never become label values: 300 random ones add no series.
before=$(grep -c '^b3os_http_requests_total' "$T/metrics")
for i in $(seq 300); do curl -s -o /dev/null -H "Authorization: Bearer $KEY" "$URL/v1/r$RANDOM$i/x$i"; done
curl -s -o /dev/null -X BREW -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes"
scrape
after=$(grep -c '^b3os_http_requests_total' "$T/metrics")
check metrics.no_series_from_clients "series $before -> $after" test "$after" -le $((before + 3))
check metrics.unmatched_counted "" test "$(metric 'b3os_http_requests_total{listener="api",route="unmatched",method="GET",status="404"}')" -ge 300
code=$(curl -s -o /dev/null -w '%{http_code}' "$METRICS/v1/sandboxes")
check metrics.listener_only_metrics "HTTP $code" test "$code" = 404
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$METRICS/metrics")
check metrics.listener_post_405 "HTTP $code" test "$code" = 405
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/metrics" -H "Authorization: Bearer $KEY")
check metrics.not_on_the_api "HTTP $code" test "$code" = 404
# A metrics port that is taken: the second b3osd says so and exits 1.
rc=0
timeout 60 "$B3OS_BIN/b3osd" --config /dev/null --listen 127.0.0.1:0 --preview-listen "127.0.0.1:$(free_port)" \
  --metrics-listen "127.0.0.1:$METRICS_PORT" --data-dir "$T/second/data" --run-dir "$T/second/run" \
  --runsc-root "$T/second/run/runsc" --templates-dir "$TEMPLATES" --network off --warm-pool 0 --fork-pool 0 \
  --template-checkpoints off --quiet-key >"$T/second.log" 2>&1 || rc=$?
check metrics.port_taken_refused "exit $rc: $(tail -n 2 "$T/second.log")" \
  bash -c "[ $rc = 1 ] && grep -q 'the metrics listener (--metrics-listen' '$T/second.log'"
check metrics.port_taken_left_nothing "containers: $(runsc --root "$T/second/run/runsc" list -quiet 2>/dev/null)" \
  test -z "$(runsc --root "$T/second/run/runsc" list -quiet 2>/dev/null)"

# ---- Prometheus, the real thing ----------------------------------------------------------

PROM_PORT=$(free_port) || die "no free TCP port found"
PROM=http://127.0.0.1:$PROM_PORT
cp "$RULES" "$T/b3os-alerts.yml"
cat >"$T/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [$T/b3os-alerts.yml]
scrape_configs:
  - job_name: b3osd
    static_configs:
      - targets: ["127.0.0.1:$METRICS_PORT"]
YML
check prometheus.config_valid "$(promtool check config "$T/prometheus.yml" 2>&1 | tail -n 3)" promtool check config "$T/prometheus.yml"
prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prom" --web.listen-address="127.0.0.1:$PROM_PORT" \
  >"$T/prometheus.log" 2>&1 &
PROM_PID=$!
prom_ready() { curl -sf -o /dev/null "$PROM/-/ready"; }
check prometheus.ready "$(tail -n 3 "$T/prometheus.log")" eventually 30 prom_ready
# promql QUERY: the first result's value of an instant query through Prometheus' HTTP API.
promql() { curl -s -G "$PROM/api/v1/query" --data-urlencode "query=$1" | jq -r '.data.result[0].value[1] // empty'; }
sees_create() {
  [ "$(promql 'sum(b3os_http_requests_total{job="b3osd",route="/v1/sandboxes",method="POST",status="201"})')" = 1 ]
}
check prometheus.sees_create "query answered '$(promql 'b3os_http_requests_total{route="/v1/sandboxes",status="201"}')'" eventually 30 sees_create
check prometheus.target_up "" test "$(promql 'up{job="b3osd"}')" = 1
check prometheus.create_latency "" test -n "$(promql 'histogram_quantile(0.5, sum by (le) (b3os_operation_duration_seconds_bucket{operation="create"}))')"
rules_ok() {
  curl -s "$PROM/api/v1/rules" | jq -e '[.data.groups[].rules[]] | length == 10 and all(.[]; .health == "ok")' >/dev/null
}
check prometheus.alert_rules_loaded "$(curl -s "$PROM/api/v1/rules" | head -c 300)" eventually 15 rules_ok
kill "$PROM_PID" 2>/dev/null || true
wait "$PROM_PID" 2>/dev/null || true
PROM_PID=

# ---- b3os status -------------------------------------------------------------------------

rc=0
B3OS_API_URL=$URL "$B3OS_BIN/b3os" status --metrics-url "$METRICS" >"$T/status" 2>&1 || rc=$?
sed 's/^/# status: /' "$T/status"
check status.ready "exit $rc" bash -c "[ $rc = 0 ] && head -n1 '$T/status' | grep -q ': ready'"
check status.capacity "" grep -qE '^capacity: .* of 9 sandboxes' "$T/status"
check status.sandboxes "" grep -q '^sandboxes: running 1 (base 1)' "$T/status"
check status.pools "" grep -qE '^pools: +warm off +fork off' "$T/status"
check status.templates "" grep -q '^templates: base (checkpoint off)' "$T/status"
rc=0
B3OS_API_URL=http://127.0.0.1:1 "$B3OS_BIN/b3os" status --metrics-url http://127.0.0.1:1 >"$T/status2" 2>&1 || rc=$?
check status.unreachable_exit_1 "exit $rc: $(cat "$T/status2")" bash -c "[ $rc = 1 ] && grep -q unreachable '$T/status2'"

check delete.ok "" delete_sandbox "$SBX"

echo
echo "operations: $(count_results PASS) passed, $(count_results FAIL) failed, $(count_results SKIP) skipped"
[ "$(count_results FAIL)" = 0 ]

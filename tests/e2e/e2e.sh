#!/usr/bin/env bash
# End-to-end test of b3osd through its HTTP API (docs/api.md), as a user would drive it: curl,
# jq and the b3os CLI against a private b3osd with its own data, run and runsc directories.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/e2e.sh
# Env:
#   B3OS_BIN             directory of b3osd, b3os, b3os-shim, b3os-agent (default: build/bin)
#   B3OS_TEMPLATES_DIR   template root (default /var/lib/b3os/templates; base must be built)
#   B3OS_E2E_BIG=0       skip the 1 GiB upload/download (default 1: run it when >= 6 GiB free)
#   B3OS_E2E_CYCLES=N    create/delete cycles of the leak check (default 50)
#   B3OS_E2E_KEEP=1      keep the temp directory (daemon log, data) afterwards
#
# Prints one line per check (PASS name / FAIL name: detail / SKIP name: reason) and lines
# starting with "#" for information, then the counts. Exits 1 if any check failed.
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
BIG=${B3OS_E2E_BIG:-1}
CYCLES=${B3OS_E2E_CYCLES:-50}

e2e_begin e2e cmp dd pgrep

on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  cleanup_everything
  if [ "$rc" != 0 ] || [ "$(count_results FAIL)" != 0 ]; then
    echo "# ---- last 40 lines of the b3osd log ($T/daemon.log) ----"
    tail -n 40 "$T/daemon.log" 2>/dev/null | sed 's/^/# /'
  fi
  if [ "${B3OS_E2E_KEEP:-0}" = 1 ]; then
    echo "# kept $T"
  else
    rm -rf "$T"
  fi
  exit "$rc"
}
trap on_exit EXIT
SECTION_PID=
on_signal() {
  echo "# interrupted; cleaning up" >&2
  [ -z "$SECTION_PID" ] || kill -TERM "$SECTION_PID" 2>/dev/null || true
  exit 130
}
trap on_signal INT TERM

# run_section FN: runs one group of checks in a subshell with errexit, so an unexpected error
# ends that group (reported as a FAIL) and the suite goes on with the next. The subshell runs
# in the background and is waited for, so INT/TERM reach the traps at once.
run_section() {
  local fn=$1 rc
  # E2E_SECTIONS="s_fork s_pause" runs only those (development); the suite runs them all.
  if [ -n "${E2E_SECTIONS:-}" ] && [[ " $E2E_SECTIONS " != *" $fn "* ]]; then
    echo "# SKIP $fn: not in E2E_SECTIONS"
    return 0
  fi
  set +e
  (
    set -eE
    trap - INT TERM
    level=$BASH_SUBSHELL
    trap '[ "$BASH_SUBSHELL" != "$level" ] || echo "# $fn: unexpected error at line $LINENO: $BASH_COMMAND" >&2' ERR
    "$fn"
  ) &
  SECTION_PID=$!
  wait "$SECTION_PID"
  rc=$?
  SECTION_PID=
  set -e
  [ "$rc" = 0 ] || fail "$fn" "the section stopped at an unexpected error (exit $rc); see the line above"
  # The daemon must survive every section (s_restart kills it on purpose and starts it again).
  if ! daemon_alive; then
    fail "$fn.daemon_alive" "b3osd died during $fn: $(grep 'b3osd exited with status' "$T/daemon.log" | tail -n1)"
    start_daemon || die "b3osd does not start again; see $T/daemon.log"
  fi
  return 0
}

# ---- setup --------------------------------------------------------------------------------

PORT=$(free_port) || die "no free TCP port found"
URL=http://127.0.0.1:$PORT
mkdir -p "$T/data" "$T/run"
start_daemon || {
  tail -n 20 "$T/daemon.log" >&2
  die "b3osd did not start (log above)"
}
ADMIN=$(cat "$T/data/admin.key")
OTHER=$("$B3OS_BIN/b3os" keys create --project other --data-dir "$T/data" 2>/dev/null)
SAME=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
[[ $ADMIN == b3os_sk_* && $OTHER == b3os_sk_* && $SAME == b3os_sk_* ]] || die "could not read/create API keys"
ALL_KEYS=("$ADMIN" "$OTHER")
KEY=$ADMIN
info "b3osd pid $(daemon_pid) on $URL, temp dir $T"

# ---- 1. create ------------------------------------------------------------------------------

# jq: the names of the sandbox object's fields that are missing (spec: docs/api.md).
JQ_MISSING='
  def o(x): if (x|type) == "object" then x else {} end;
  . as $d
  | [ ("id","object","status","host_id","template","snapshot","vcpu","memory_mib","disk_gib",
       "timeout_s","on_idle","expires_at","env","secret_names","ports","api","egress","forkable",
       "created_at","started_at","paused_at","stopped_at","stop_reason","stop_message","usage",
       "metadata") | select(. as $f | $d | has($f) | not) ]
  + [ ("id","name") | select(. as $f | o($d.template) | has($f) | not) | "template." + . ]
  + [ ("scopes","spend_cap_usd","connections") | select(. as $f | o($d.api) | has($f) | not) | "api." + . ]
  + [ ("mode","allow") | select(. as $f | o($d.egress) | has($f) | not) | "egress." + . ]
  + [ ("vcpu_ms","gib_ms") | select(. as $f | o($d.usage) | has($f) | not) | "usage." + . ]
  | join(" ")'

# jq: the fields of a fresh default sandbox whose values are wrong.
JQ_BAD_VALUES='
  def t: sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601;
  def ts: type == "string" and test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$");
  [ {k: "id", ok: (.id | type == "string" and test("^sbx_[0-9a-z]{26}$"))},
    {k: "object", ok: (.object == "sandbox")},
    {k: "status", ok: (.status == "running")},
    {k: "host_id", ok: (.host_id | type == "string" and length > 0)},
    {k: "template", ok: (.template == {"id": "tpl_base", "name": "base"})},
    {k: "snapshot", ok: (.snapshot == null)},
    {k: "vcpu", ok: (.vcpu == 1)},
    {k: "memory_mib", ok: (.memory_mib == 512)},
    {k: "disk_gib", ok: (.disk_gib == 1)},
    {k: "timeout_s", ok: (.timeout_s == 300)},
    {k: "on_idle", ok: (.on_idle == "stop")},
    {k: "env", ok: (.env == {})},
    {k: "secret_names", ok: (.secret_names == [])},
    {k: "ports", ok: (.ports == [])},
    {k: "api", ok: (.api == {"scopes": [], "spend_cap_usd": null, "connections": [], "spent_usd": 0})},
    {k: "egress", ok: (.egress == {"mode": "deny", "allow": []})},
    {k: "forkable", ok: (.forkable == false)},
    {k: "created_at", ok: (.created_at | ts)},
    {k: "started_at", ok: (.started_at | ts)},
    {k: "expires_at", ok: ((.expires_at | ts) and ((.expires_at | t) - (.created_at | t) | . >= 299 and . <= 301))},
    {k: "paused_at", ok: (.paused_at == null)},
    {k: "stopped_at", ok: (.stopped_at == null)},
    {k: "stop_reason", ok: (.stop_reason == null)},
    {k: "stop_message", ok: (.stop_message == null)},
    {k: "usage", ok: ((.usage.vcpu_ms | type) == "number" and (.usage.gib_ms | type) == "number")},
    {k: "metadata", ok: (.metadata == {})} ]
  | map(select(.ok | not) | .k) | join(" ")'

create_sandbox '{"template":"base"}'
SBX=$CID
if [ -z "$SBX" ]; then
  fail create.status "want 201, got $(snip)"
  die "cannot go on without a sandbox"
fi
pass create.status
missing=$(j "$JQ_MISSING")
check create.fields "missing: $missing" [ -z "$missing" ] 
check create.timing "no numeric timing.total_ms: $(snip)" jt '(.timing.total_ms | type) == "number"'
bad=$(j "$JQ_BAD_VALUES")
check create.values "wrong: $bad; $(snip)" [ -z "$bad" ]
check create.server_timing "Server-Timing: $(header Server-Timing)" \
  grep -qiE '^Server-Timing:.*total;dur=[0-9.]+' "$RESPH"
api GET /v1/templates
check templates.base_ready "$(snip)" okj 200 '.object == "list" and
  any(.data[]; .id == "tpl_base" and .name == "base" and .object == "template" and .status == "ready")'
api GET "/v1/sandboxes/$SBX"
missing=$(j "$JQ_MISSING")
check get.fields "HTTP $ST, missing: $missing" [ "$ST" = 200 -a -z "$missing" -a "$(j .id)" = "$SBX" -a "$(j .status)" = running ]

# ---- 2-5. exec ------------------------------------------------------------------------------

s_exec() {
  run_exec "$SBX" '{"cmd":["python3","-c","print(6*7)"]}'
  check exec.argv "$(snip)" okj 200 '.stdout == "42\n" and .exit_code == 0 and .timed_out == false and .stderr == ""'
  check exec.reply_fields "$(snip)" okj 200 'has("exit_code") and has("stdout") and has("stderr") and has("timed_out")
    and (.duration_ms | type) == "number" and .stdout_truncated == false and .stderr_truncated == false
    and (.timing.total_ms | type) == "number"'
  run_exec "$SBX" '{"cmd":"echo $((6*7))"}'
  check exec.string_under_sh "$(snip)" okj 200 '.stdout == "42\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":"pwd"}'
  check exec.default_cwd "$(snip)" okj 200 '.stdout == "/workspace\n"'
  run_exec "$SBX" '{"cmd":"echo \"$FOO\"; pwd","env":{"FOO":"bar baz"},"cwd":"/tmp"}'
  check exec.env_cwd "$(snip)" okj 200 '.stdout == "bar baz\n/tmp\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":["tr","a-z","A-Z"],"stdin":"hello\nworld\n"}'
  check exec.stdin "$(snip)" okj 200 '.stdout == "HELLO\nWORLD\n" and .exit_code == 0'
  # 900 KiB of stdin (the JSON body limit is 1 MiB), streamed to the command through the channel.
  head -c $((900 * 1024)) /dev/zero | tr '\0' x | jq -Rsc '{cmd: "wc -c", stdin: .}' >"$T/stdin.json"
  api POST "/v1/sandboxes/$SBX/exec" -H 'Content-Type: application/json' --data-binary @"$T/stdin.json"
  check exec.stdin_900KiB "$(snip)" okj 200 '.stdout == "921600\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":"echo out; echo err >&2; exit 3"}'
  check exec.exit_code "$(snip)" okj 200 '.exit_code == 3 and .stdout == "out\n" and .stderr == "err\n" and .timed_out == false'
  run_exec "$SBX" '{"cmd":"kill -TERM $$"}'
  check exec.killed_by_signal_143 "$(snip)" okj 200 '.exit_code == 143 and .timed_out == false'
  run_exec "$SBX" '{"cmd":["/no/such/program"]}'
  check exec.missing_program_127 "$(snip)" okj 200 '.exit_code == 127 and (.stderr | length) > 0'
  run_exec "$SBX" '{"cmd":"pwd","cwd":"/no/such/dir"}'
  expect_error exec.missing_cwd_400 400 invalid_request cwd
  run_exec "$SBX" '{"cmd":"printf '"'"'a\\377b'"'"'"}'
  check exec.non_utf8_replaced "$(snip)" okj 200 '.stdout == "a\ufffdb"'
  run_exec "$SBX" '{}'
  expect_error exec.no_cmd_400 400 invalid_request cmd
  run_exec "$SBX" '{"cmd":[]}'
  expect_error exec.empty_argv_400 400 invalid_request cmd
  run_exec "$SBX" '{"cmd":"true","timeout_ms":0}'
  expect_error exec.timeout_ms_0_400 400 invalid_request timeout_ms
  run_exec "$SBX" '{"cmd":"true","shell":true}'
  expect_error exec.unknown_field_400 400 invalid_request shell
}

s_exec_timeout() {
  run_exec "$SBX" '{"cmd":"sleep 1000 & sleep 30","timeout_ms":500}'
  check exec_timeout.timed_out "$(snip)" okj 200 '.timed_out == true'
  check exec_timeout.returns_fast "took ${TIME}s" awk -v t="$TIME" 'BEGIN { exit !(t < 3) }'
  run_exec "$SBX" '{"cmd":"pgrep -c sleep || true"}'
  check exec_timeout.group_killed "sleep processes left: $(j .stdout)" okj 200 '.stdout == "0\n"'
}

s_exec_truncation() {
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stdout.write(\"a\" * (3 << 20)); sys.stderr.write(\"small\")"]}'
  local n
  n=$(jq -j .stdout "$RESP" 2>/dev/null | wc -c)
  check exec_truncation.stdout_1MiB "stdout has $n bytes, HTTP $ST" [ "$n" = 1048576 ]
  check exec_truncation.flags "$(jq -c 'del(.stdout)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stdout_truncated == true and .stderr_truncated == false and .stderr == "small" and .exit_code == 0'
  # The boundary: exactly 1 MiB is kept whole; one byte more is truncated.
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stdout.write(\"b\" * (1 << 20))"]}'
  check exec_truncation.exactly_1MiB_not_truncated "$(jq -c 'del(.stdout)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stdout_truncated == false and (.stdout | length) == 1048576'
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stderr.write(\"c\" * ((1 << 20) + 1))"]}'
  check exec_truncation.stderr_1MiB_plus_1 "$(jq -c 'del(.stderr)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stderr_truncated == true and (.stderr | length) == 1048576 and .stdout_truncated == false'
}

s_exec_concurrent() {
  local i start elapsed bad=""
  start=$(now_ms)
  for i in 1 2 3 4 5 6 7 8; do
    curl -s -o "$T/conc.$i" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
      -H 'Content-Type: application/json' -d "{\"cmd\":\"sleep 1; echo out-$i\"}" \
      "$URL/v1/sandboxes/$SBX/exec" >"$T/conc.$i.status" &
  done
  wait
  elapsed=$(($(now_ms) - start))
  for i in 1 2 3 4 5 6 7 8; do
    if [ "$(cat "$T/conc.$i.status")" != 200 ] ||
      ! jq -e --arg want "out-$i"$'\n' '.stdout == $want and .exit_code == 0' "$T/conc.$i" >/dev/null 2>&1; then
      bad="$bad #$i: HTTP $(cat "$T/conc.$i.status") $(head -c 200 "$T/conc.$i")"
    fi
  done
  check exec_concurrent.own_outputs "$bad" [ -z "$bad" ]
  # Sequentially they would take at least 8 s.
  check exec_concurrent.parallel "8 x sleep 1 took ${elapsed} ms" [ "$elapsed" -lt 6000 ]
}

# ---- 6. files -------------------------------------------------------------------------------

s_files() {
  head -c 5M /dev/urandom >"$T/x.bin"
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/x.bin" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$T/x.bin"
  check files.upload_201 "$(snip)" okj 201 '.path == "/workspace/x.bin" and .size == 5242880'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  check files.download_exact "HTTP $ST, $(wc -c <"$RESP") bytes" cmp -s "$T/x.bin" "$RESP"
  check files.download_headers "Content-Length '$(header Content-Length)', Content-Type '$(header Content-Type)'" \
    [ "$(header Content-Length)" = 5242880 -a "$(header Content-Type)" = application/octet-stream ]
  api GET "/v1/sandboxes/$SBX/files/list?path=/workspace"
  check files.list "$(snip)" okj 200 '.object == "list" and .path == "/workspace" and
    ([.data[] | select(.name == "x.bin" and .path == "/workspace/x.bin" and .type == "file" and .size == 5242880 and .mode == 420 and (.modified_at | type) == "string")] | length) == 1'
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  check files.delete "$(snip)" [ "$ST" = 200 -a "$(j .deleted)" = true -a "$(j .path)" = /workspace/x.bin ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  expect_error files.deleted_404 404 file_not_found
  # A relative path is under /workspace; parents are created.
  api PUT "/v1/sandboxes/$SBX/files?path=rel/dir/r.txt" -H 'Content-Type: application/octet-stream' --data-binary 'hello'
  check files.relative_path "$(snip)" [ "$ST" = 201 -a "$(j .path)" = /workspace/rel/dir/r.txt -a "$(j .size)" = 5 ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/rel/dir/r.txt"
  check files.relative_readback "$(snip)" [ "$ST" = 200 -a "$(cat "$RESP")" = hello ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/rel"
  expect_error files.get_directory_400 400 invalid_request
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/t.txt" -H 'Content-Type: text/plain' --data-binary 'hello'
  expect_error files.upload_wrong_type_415 415 unsupported_media_type
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/empty" -H 'Content-Type: application/octet-stream' --data-binary ''
  check files.upload_empty "$(snip)" okj 201 '.size == 0'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/empty"
  check files.download_empty "HTTP $ST, $(wc -c <"$RESP") bytes, Content-Length '$(header Content-Length)'" \
    [ "$ST" = 200 -a ! -s "$RESP" -a "$(header Content-Length)" = 0 ]
  # From a pipe curl sends the body chunked (no Content-Length).
  head -c 300K /dev/urandom >"$T/chunked.bin"
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/chunked.bin" -H 'Content-Type: application/octet-stream' -T - <"$T/chunked.bin"
  check files.upload_chunked "$(snip)" okj 201 '.size == 307200'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/chunked.bin"
  check files.chunked_readback "HTTP $ST" cmp -s "$T/chunked.bin" "$RESP"
  api GET "/v1/sandboxes/$SBX/files/list?path=/no/such/dir"
  expect_error files.list_missing_404 404 file_not_found
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/no-such-file"
  expect_error files.delete_missing_404 404 file_not_found
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/../etc/passwd"
  expect_error files.dotdot_400 400 invalid_request path
  api GET "/v1/sandboxes/$SBX/files"
  expect_error files.no_path_400 400 invalid_request path
  # An upload announcing more than --max-upload-bytes (default 16 GiB) is refused before its body.
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/huge.bin" -m 20 -H 'Content-Type: application/octet-stream' \
    -H 'Content-Length: 20000000000' --data-binary 'abc'
  expect_error files.upload_over_limit_413 413 payload_too_large
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/rel&recursive=true"
  check files.delete_recursive "$(snip)" okj 200 '.deleted == true and .path == "/workspace/rel"'
}

s_files_big() {
  if [ "$BIG" != 1 ]; then
    skip files_big "B3OS_E2E_BIG=$BIG"
    return 0
  fi
  local avail
  avail=$(mem_available_kb)
  if [ "$avail" -lt $((6 * 1024 * 1024)) ]; then
    skip files_big "only $((avail / 1024)) MiB of memory available, the 1 GiB round trip needs 6 GiB"
    return 0
  fi
  local pid id up down peak
  pid=$(daemon_pid)
  create_sandbox '{"memory_mib":2048}'
  id=$CID
  [ -n "$id" ] || { fail files_big.create "$(snip)"; return 0; }
  dd if=/dev/urandom of="$T/big.bin" bs=1M count=1024 status=none
  echo 0 >"$T/big.peak"
  rm -f "$T/big.stop"
  (
    peak=0
    while [ ! -e "$T/big.stop" ]; do
      r=$(rss_kb "$pid")
      if [ "$r" -gt "$peak" ]; then peak=$r; echo "$peak" >"$T/big.peak"; fi
      sleep 0.1
    done
  ) &
  local mon=$!
  # During the upload another stream (an exec) must still get through: one big file may not
  # starve the channel.
  (
    sleep 3
    curl -s -o "$T/big.exec" -w '%{http_code} %{time_total}' -m 60 -H "Authorization: Bearer $ADMIN" \
      -H 'Content-Type: application/json' -d '{"cmd":"echo alive"}' "$URL/v1/sandboxes/$id/exec" >"$T/big.exec.status"
  ) &
  local side=$!
  # curl -T streams the file; --data-binary @file would read 1 GiB into curl's memory.
  api PUT "/v1/sandboxes/$id/files?path=/workspace/big.bin" -H 'Content-Type: application/octet-stream' -T "$T/big.bin"
  up=$TIME
  check files_big.upload "$(snip)" [ "$ST" = 201 -a "$(j .size)" = 1073741824 ]
  wait "$side" || true
  check files_big.exec_during_upload "exec answered '$(cat "$T/big.exec.status" 2>/dev/null || true)' $(head -c 200 "$T/big.exec" 2>/dev/null || true)" \
    awk '{ exit !($1 == 200 && $2 < 5) }' "$T/big.exec.status"
  api GET "/v1/sandboxes/$id/files?path=/workspace/big.bin"
  down=$TIME
  touch "$T/big.stop"
  wait "$mon" || true
  peak=$(cat "$T/big.peak")
  check files_big.download_exact "HTTP $ST, $(stat -c %s "$RESP") bytes" cmp -s "$T/big.bin" "$RESP"
  check files_big.daemon_rss_below_200MB "b3osd peak VmRSS $((peak / 1024)) MiB" [ "$peak" -gt 0 -a "$peak" -lt 200000 ]
  info "1 GiB upload ${up}s, download ${down}s, b3osd peak RSS $((peak / 1024)) MiB"
  rm -f "$T/big.bin" "$RESP"
  delete_sandbox "$id" || fail files_big.delete "$(snip)"
}

# ---- 7. errors ------------------------------------------------------------------------------

s_errors() {
  KEY='' api GET /v1/sandboxes
  expect_error errors.no_auth_401 401 unauthorized
  check errors.no_auth_www_authenticate "WWW-Authenticate: '$(header WWW-Authenticate)'" \
    grep -qiE '^WWW-Authenticate: *Bearer' "$RESPH"
  KEY=b3os_sk_00000000000000000000000000000000 api GET /v1/sandboxes
  expect_error errors.unknown_key_401 401 unauthorized
  check errors.unknown_key_www_authenticate "WWW-Authenticate: '$(header WWW-Authenticate)'" \
    grep -qiE '^WWW-Authenticate: *Bearer' "$RESPH"
  KEY=not-a-key api GET /v1/sandboxes
  expect_error errors.malformed_key_401 401 unauthorized
  api GET /v1/sandboxes/sbx_00000000000000000000000000
  expect_error errors.unknown_sandbox_404 404 sandbox_not_found
  check errors.server_timing_on_errors "Server-Timing: '$(header Server-Timing)'" \
    grep -qiE '^Server-Timing:.*total;dur=[0-9.]+' "$RESPH"
  api GET /v1/sandboxes/not-an-id
  expect_error errors.malformed_sandbox_id_404 404 sandbox_not_found
  KEY=$OTHER api GET "/v1/sandboxes/$SBX"
  expect_error errors.other_project_get_404 404 sandbox_not_found
  KEY=$OTHER run_exec "$SBX" '{"cmd":"true"}'
  expect_error errors.other_project_exec_404 404 sandbox_not_found
  KEY=$OTHER api GET "/v1/sandboxes/$SBX/files?path=/etc/hostname"
  expect_error errors.other_project_file_404 404 sandbox_not_found
  KEY=$OTHER api DELETE "/v1/sandboxes/$SBX"
  expect_error errors.other_project_delete_404 404 sandbox_not_found
  KEY=$OTHER api GET /v1/sandboxes
  check errors.other_project_list "$(snip)" okj 200 'any(.data[]; .id == "'"$SBX"'") | not'
  api GET "/v1/sandboxes/$SBX"
  check errors.other_project_changed_nothing "$(snip)" [ "$(j .status)" = running ]

  # A deleted sandbox cannot run commands.
  local gone
  create_sandbox '{}'
  gone=$CID
  if [ -n "$gone" ] && delete_sandbox "$gone"; then
    run_exec "$gone" '{"cmd":"true"}'
    expect_error errors.exec_deleted_409 409 sandbox_not_running
  else
    fail errors.exec_deleted_409 "could not create and delete a sandbox: $(snip)"
  fi

  # Bad creates change nothing: no record, no container.
  local before_ids before_runsc after_ids after_runsc
  api GET '/v1/sandboxes?limit=100'
  before_ids=$(j '[.data[].id] | sort | join(",")')
  before_runsc=$(runsc_list | sort | tr '\n' ,)

  apij POST /v1/sandboxes '{"template": "base",'
  expect_error errors.invalid_json_400 400 invalid_request
  apij POST /v1/sandboxes '["base"]'
  expect_error errors.non_object_400 400 invalid_request
  apij POST /v1/sandboxes '{"template":"base","bogus_field":1}'
  expect_error errors.unknown_field_400 400 invalid_request bogus_field
  apij POST /v1/sandboxes '{"timeout_s":0}'
  expect_error errors.timeout_s_0_400 400 invalid_request timeout_s
  apij POST /v1/sandboxes '{"vcpu":9}'
  expect_error errors.vcpu_9_400 400 invalid_request vcpu
  apij POST /v1/sandboxes '{"env":{"B3OS_X":"1"}}'
  expect_error errors.env_reserved_400 400 invalid_request B3OS_
  local md17 long
  md17=$(jq -nc '[range(17) | {key: "k\(.)", value: "v"}] | from_entries | {metadata: .}')
  apij POST /v1/sandboxes "$md17"
  expect_error errors.metadata_17_keys_400 400 invalid_request metadata
  apij POST /v1/sandboxes '{"metadata":{"a b":"x"}}'
  expect_error errors.metadata_key_space_400 400 invalid_request metadata
  long=$(head -c 501 /dev/zero | tr '\0' x)
  apij POST /v1/sandboxes "{\"metadata\":{\"k\":\"$long\"}}"
  expect_error errors.metadata_value_501_400 400 invalid_request metadata
  api POST /v1/sandboxes -H 'Content-Type: text/plain' --data-binary '{"template":"base"}'
  expect_error errors.text_plain_415 415 unsupported_media_type
  {
    printf '{"metadata":{"k":"'
    head -c $((1100 * 1024)) /dev/zero | tr '\0' x
    printf '"}}'
  } >"$T/huge.json"
  api POST /v1/sandboxes -H 'Content-Type: application/json' --data-binary @"$T/huge.json"
  expect_error errors.json_over_1MiB_413 413 payload_too_large
  apij POST /v1/sandboxes '{"template":"no-such-template"}'
  expect_error errors.unknown_template_404 404 template_not_found
  apij POST /v1/sandboxes '{"egress":{"mode":"public"}}'
  expect_error errors.egress_public_501 501 not_implemented egress
  apij POST /v1/sandboxes '{"api":{"scopes":["infer:write"]}}'
  expect_error errors.api_unknown_scope_400 400 invalid_request api.scopes
  apij POST /v1/sandboxes '{"api":{"scopes":["infer:run"],"spend_cap_usd":-1}}'
  expect_error errors.api_negative_cap_400 400 invalid_request api.spend_cap_usd
  apij POST /v1/sandboxes '{"api":{"scopes":["root:all"]}}'
  expect_error errors.api_unknown_scope_400 400 invalid_request root:all
  apij POST /v1/sandboxes '{"ports":[{"port":8080,"public":true}]}'
  expect_error errors.ports_501 501 not_implemented ports
  apij POST /v1/sandboxes '{"egress":{"mode":"allowlist","allow":["192.0.2.0/24"]}}'
  expect_error errors.egress_allowlist_501 501 not_implemented egress
  apij POST /v1/sandboxes '{"snapshot":"snp_00000000000000000000000000"}'
  expect_error errors.snapshot_unknown_404 404 snapshot_not_found

  apij POST "/v1/sandboxes/$SBX/fork" '{}'
  expect_error errors.fork_409 409 fork_unavailable
  apij POST "/v1/sandboxes/$SBX/fork" '{"count":0}'
  expect_error errors.fork_count_0_400 400 invalid_request count
  KEY=$OTHER apij POST "/v1/sandboxes/$SBX/fork" '{}'
  expect_error errors.other_project_fork_404 404 sandbox_not_found
  KEY=$OTHER api POST "/v1/sandboxes/$SBX/pause"
  expect_error errors.other_project_pause_404 404 sandbox_not_found
  KEY=$OTHER api POST "/v1/sandboxes/$SBX/snapshot"
  expect_error errors.other_project_snapshot_404 404 sandbox_not_found
  api POST /v1/sandboxes/sbx_00000000000000000000000000/pause
  expect_error errors.pause_unknown_404 404 sandbox_not_found
  api GET /v1/snapshots/snp_00000000000000000000000000
  expect_error errors.snapshot_get_unknown_404 404 snapshot_not_found
  apij POST /v1/infer/chat/completions '{"messages":[{"role":"user","content":"hi"}]}'
  expect_error errors.infer_no_model_503 503 product_unavailable "--model"
  api GET /mcp
  expect_error errors.mcp_501 501 not_implemented
  run_exec sbx_00000000000000000000000000 '{"cmd":"true"}'
  expect_error errors.exec_unknown_404 404 sandbox_not_found
  api GET /v1/no-such-route
  expect_error errors.unknown_route_404 404 not_found
  api PATCH /v1/sandboxes
  expect_error errors.wrong_method_405 405 method_not_allowed
  check errors.wrong_method_allow_header "Allow: '$(header Allow)'" grep -qi '^Allow: .*POST' "$RESPH"
  api PUT "/v1/sandboxes/$SBX"
  expect_error errors.wrong_method_sandbox_405 405 method_not_allowed

  api GET '/v1/sandboxes?limit=100'
  after_ids=$(j '[.data[].id] | sort | join(",")')
  after_runsc=$(runsc_list | sort | tr '\n' ,)
  check errors.no_new_sandbox "before [$before_ids] after [$after_ids]" [ -n "$after_ids" -a "$before_ids" = "$after_ids" ]
  check errors.no_new_container "before [$before_runsc] after [$after_runsc]" [ "$before_runsc" = "$after_runsc" ]
  check errors.only_expected_containers "runsc list: [$after_runsc], want [$SBX,]" [ "$after_runsc" = "$SBX," ]
}

# ---- 8. idempotency -------------------------------------------------------------------------

s_idempotency() {
  local body='{"metadata":{"test":"idem"}}' k="e2e-idem-$$" first second other
  # The first request runs in the background; the same key while it runs is a conflict.
  curl -s -o "$T/idem.first" -D "$T/idem.first.headers" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $k" --data-binary "$body" \
    "$URL/v1/sandboxes" >"$T/idem.first.status" &
  local bg=$!
  sleep 0.2
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $k"
  expect_error idem.in_flight_409 409 idempotency_key_conflict
  wait "$bg" || true
  first=$(jq -r '.id // empty' "$T/idem.first" 2>/dev/null || true)
  [ -z "$first" ] || echo "$first" >>"$T/ids"
  check idem.first_201 "HTTP $(cat "$T/idem.first.status") $(head -c 200 "$T/idem.first")" \
    [ "$(cat "$T/idem.first.status")" = 201 -a -n "$first" ]
  check idem.first_not_replayed "the first answer has Idempotent-Replayed" not grep -qi '^Idempotent-Replayed:' "$T/idem.first.headers"
  create_sandbox "$body" -H "Idempotency-Key: $k"
  second=$CID
  check idem.replay_same_id "first $first, second $second ($(snip))" [ -n "$first" -a "$first" = "$second" ]
  check idem.replay_header "Idempotent-Replayed: '$(header Idempotent-Replayed)'" [ "$(header Idempotent-Replayed)" = true ]
  apij POST /v1/sandboxes '{"metadata":{"test":"idem-other-body"}}' -H "Idempotency-Key: $k"
  expect_error idem.other_body_409 409 idempotency_key_conflict
  KEY=$OTHER create_sandbox "$body" -H "Idempotency-Key: $k"
  other=$CID
  check idem.other_project_fresh "$(snip)" [ -n "$other" -a "$other" != "$first" -a -z "$(header Idempotent-Replayed)" ]
  KEY=$SAME apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $k"
  expect_error idem.other_key_same_project_409 409 idempotency_key_conflict
  api GET '/v1/sandboxes?metadata[test]=idem'
  check idem.one_sandbox "$(snip)" [ "$(j '.data | length')" = 1 ]
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $(head -c 256 /dev/zero | tr '\0' k)"
  expect_error idem.key_too_long_400 400 invalid_request Idempotency-Key
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: a b"
  expect_error idem.key_with_space_400 400 invalid_request Idempotency-Key
  # The same key on another path is a conflict.
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"true"}' -H "Idempotency-Key: $k"
  expect_error idem.other_path_409 409 idempotency_key_conflict
  # A 4xx answer is stored too (only 5xx are not): the retry is a replay of the 400.
  apij POST /v1/sandboxes '{"timeout_s":0}' -H "Idempotency-Key: $k-bad"
  apij POST /v1/sandboxes '{"timeout_s":0}' -H "Idempotency-Key: $k-bad"
  check idem.4xx_replayed "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
    [ "$ST" = 400 -a "$(header Idempotent-Replayed)" = true -a "$(j .error.code)" = invalid_request ]
  if [ -n "$first" ]; then
    api DELETE "/v1/sandboxes/$first" -H "Idempotency-Key: $k-delete"
    api DELETE "/v1/sandboxes/$first" -H "Idempotency-Key: $k-delete"
    check idem.delete_replayed "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
      [ "$ST" = 200 -a "$(header Idempotent-Replayed)" = true -a "$(j .status)" = stopped ]
  fi
  [ -z "$other" ] || KEY=$OTHER delete_sandbox "$other" || fail idem.cleanup_other "$(snip)"
}

# ---- rate limit ----------------------------------------------------------------------------

s_rate_limit() {
  # 150 requests at once on a fresh key (bucket: 50/s, burst 100) must meet some 429s.
  local k i codes
  k=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
  for i in $(seq 1 150); do
    printf 'url = "%s/v1/sandboxes/sbx_00000000000000000000000000"\noutput = "/dev/null"\n' "$URL"
  done >"$T/rate.curl"
  curl -s -K "$T/rate.curl" -H "Authorization: Bearer $k" -w '%{http_code} %header{retry-after}\n' >"$T/rate.out" || true
  codes=$(awk '{print $1}' "$T/rate.out" | sort | uniq -c | tr '\n' ' ')
  check rate_limit.429 "status counts: $codes" grep -q '^429 [0-9]' "$T/rate.out"
  check rate_limit.burst_served "status counts: $codes" [ "$(grep -c '^404' "$T/rate.out")" -ge 90 ]
  api GET /v1/sandboxes/sbx_00000000000000000000000000
  check rate_limit.per_key "another key got $(snip)" [ "$ST" = 404 ]
}

# ---- 9. list (also starts the sandbox of the timeout check) --------------------------------

s_list() {
  create_sandbox '{"timeout_s":2}'
  echo "$CID" >"$T/timeout.id"
  now_ms >"$T/timeout.ms"
  check timeout.create "$(snip)" [ -n "$CID" -a "$(j .timeout_s)" = 2 ]
  # A second sandbox with timeout_s 2 is kept busy (an exec every 0.5 s, in the background)
  # until s_timeout looks: activity postpones its stop.
  create_sandbox '{"timeout_s":2}'
  echo "$CID" >"$T/timeout.busy"
  if [ -n "$CID" ]; then
    (
      for _ in $(seq 1 240); do
        [ -d "$T" ] && [ ! -e "$T/timeout.busy.stop" ] || break
        curl -s -o /dev/null -m 10 -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
          -d '{"cmd":"true"}' "$URL/v1/sandboxes/$CID/exec" || true
        sleep 0.5
      done
    ) &
  fi

  local b1 b2 b3 cursor long
  # b1 also carries a 500-character value (counted in characters: "é" is 2 bytes in UTF-8).
  long=$(printf 'é%.0s' $(seq 1 500))
  create_sandbox "{\"metadata\":{\"batch\":\"e2e\",\"long\":\"$long\"}}"
  b1=$CID
  check list.metadata_500_chars "$(snip)" okj 201 '.metadata.long | length == 500'
  create_sandbox '{"metadata":{"batch":"e2e","q":"a b&c=d/é"}}'
  b2=$CID
  create_sandbox '{"metadata":{"batch":"e2e","team.name:x-y":"v"}}'
  b3=$CID
  check list.create_3 "$(snip)" [ -n "$b1" -a -n "$b2" -a -n "$b3" ]
  api GET '/v1/sandboxes?limit=2&metadata[batch]=e2e'
  cursor=$(j '.next_cursor // empty')
  check list.page1 "want [$b3,$b2] and a cursor; $(snip)" \
    [ "$ST" = 200 -a "$(j .object)" = list -a "$(j '[.data[].id] | join(",")')" = "$b3,$b2" -a -n "$cursor" ]
  api GET "/v1/sandboxes?limit=2&metadata[batch]=e2e&cursor=$cursor"
  check list.page2 "want [$b1] and next_cursor null; $(snip)" \
    [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b1" -a "$(j '.next_cursor')" = null ]
  api GET '/v1/sandboxes?metadata[q]=a%20b%26c%3Dd%2F%C3%A9'
  check list.metadata_urlencoded "want [$b2]; $(snip)" [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b2" ]
  api GET '/v1/sandboxes?metadata[team.name:x-y]=v'
  check list.metadata_key_chars "want [$b3]; $(snip)" [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b3" ]
  api GET '/v1/sandboxes?metadata[batch]=e2e&metadata[nope]=x'
  check list.metadata_and "$(snip)" [ "$ST" = 200 -a "$(j '.data | length')" = 0 ]
  delete_sandbox "$b3" || fail list.delete "$(snip)"
  api GET '/v1/sandboxes?status=running&metadata[batch]=e2e'
  check list.status_running "want [$b2,$b1]; $(snip)" [ "$(j '[.data[].id] | join(",")')" = "$b2,$b1" ]
  api GET '/v1/sandboxes?status=stopped&metadata[batch]=e2e'
  check list.status_stopped "want [$b3]; $(snip)" [ "$(j '[.data[].id] | join(",")')" = "$b3" ]
  api GET '/v1/sandboxes?limit=0'
  expect_error list.limit_0_400 400 invalid_request limit
  api GET '/v1/sandboxes?limit=101'
  expect_error list.limit_101_400 400 invalid_request limit
  api GET '/v1/sandboxes?status=sleeping'
  expect_error list.bad_status_400 400 invalid_request status
  api GET '/v1/sandboxes?cursor=bogus'
  expect_error list.bad_cursor_400 400 invalid_request cursor
  api GET '/v1/sandboxes?colour=blue'
  expect_error list.unknown_param_400 400 invalid_request colour
  delete_sandbox "$b1" || fail list.delete "$(snip)"
  delete_sandbox "$b2" || fail list.delete "$(snip)"
}

# ---- 10. idle timeout -----------------------------------------------------------------------

s_timeout() {
  local id since
  id=$(cat "$T/timeout.id")
  [ -n "$id" ] || { fail timeout.stopped "no sandbox was created"; return 0; }
  local busy
  busy=$(cat "$T/timeout.busy")
  since=$(($(now_ms) - $(cat "$T/timeout.ms")))
  [ "$since" -ge 4000 ] || sleep "$(awk -v ms=$((4000 - since)) 'BEGIN { printf "%.3f", ms / 1000 }')"
  api GET "/v1/sandboxes/$id"
  check timeout.stopped "$(snip)" okj 200 '.status == "stopped" and .stop_reason == "timeout" and (.stopped_at | type) == "string"'
  check timeout.container_gone "runsc list: $(runsc_list | tr '\n' ' ')" not runsc_has "$id"
  check timeout.cgroup_gone "left: $(cgroup_dirs "$id")" [ -z "$(cgroup_dirs "$id")" ]
  run_exec "$id" '{"cmd":"true"}'
  expect_error timeout.exec_409 409 sandbox_not_running
  api GET "/v1/sandboxes/$id/files?path=/etc/hostname"
  expect_error timeout.download_409 409 sandbox_not_running
  api PUT "/v1/sandboxes/$id/files?path=/workspace/a" -H 'Content-Type: application/octet-stream' --data-binary 'x'
  expect_error timeout.upload_409 409 sandbox_not_running
  api GET "/v1/sandboxes/$id/files/list?path=/workspace"
  expect_error timeout.list_409 409 sandbox_not_running
  if [ -n "$busy" ]; then
    api GET "/v1/sandboxes/$busy"
    check timeout.activity_keeps_alive "$(snip)" okj 200 '.status == "running" and
      (.expires_at | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) > now'
    touch "$T/timeout.busy.stop"
    delete_sandbox "$busy" || fail timeout.delete_busy "$(snip)"
  else
    fail timeout.activity_keeps_alive "no busy sandbox was created"
  fi
}

# ---- 11. usage and resource limits ----------------------------------------------------------

s_usage() {
  local id v1 g1 v2 g2 quota limit
  # Also: a template may be named by its id, and a charset parameter on the media type is fine.
  create_sandbox '{"template":"tpl_base","vcpu":2,"memory_mib":1024}' -H 'Content-Type: application/json; charset=utf-8'
  id=$CID
  [ -n "$id" ] || { fail usage.create "$(snip)"; return 0; }
  check usage.reported_size "$(snip)" okj 201 '.vcpu == 2 and .memory_mib == 1024 and .template.name == "base"'
  quota=$(cat "/sys/fs/cgroup/cpu/b3os/$id/cpu.cfs_quota_us" 2>/dev/null || echo missing)
  limit=$(cat "/sys/fs/cgroup/memory/b3os/$id/memory.limit_in_bytes" 2>/dev/null || echo missing)
  check usage.cgroup_cpu_quota "cpu.cfs_quota_us $quota, want 200000" [ "$quota" = 200000 ]
  check usage.cgroup_memory_limit "memory.limit_in_bytes $limit, want $(((1024 + 256) << 20))" [ "$limit" = $(((1024 + 256) << 20)) ]
  sleep 2
  api GET "/v1/sandboxes/$id"
  v1=$(j .usage.vcpu_ms)
  g1=$(j .usage.gib_ms)
  check usage.positive "usage $(j -c .usage)" okj 200 '.usage.vcpu_ms > 0 and .usage.gib_ms > 0'
  # 2 vCPU and 1 GiB for ~2 s: vcpu_ms about 4000, gib_ms about 2000.
  check usage.plausible "usage $(j -c .usage) after ~2 s" \
    okj 200 '.usage.vcpu_ms >= 3000 and .usage.vcpu_ms <= 60000 and .usage.gib_ms >= 1500 and .usage.gib_ms <= 30000'
  sleep 1
  api GET "/v1/sandboxes/$id"
  v2=$(j .usage.vcpu_ms)
  g2=$(j .usage.gib_ms)
  check usage.grows "vcpu_ms $v1 -> $v2, gib_ms $g1 -> $g2" [ "${v2:-0}" -gt "${v1:-0}" -a "${g2:-0}" -gt "${g1:-0}" ]
  delete_sandbox "$id" || fail usage.delete "$(snip)"
  v1=$(j .usage.vcpu_ms)
  sleep 1
  api GET "/v1/sandboxes/$id"
  check usage.frozen_after_delete "vcpu_ms $v1 at delete, $(j .usage.vcpu_ms) a second later" [ "$(j .usage.vcpu_ms)" = "$v1" ]
  check usage.cgroup_removed "left: $(cgroup_dirs "$id")" [ -z "$(cgroup_dirs "$id")" ]
}

# ---- 12. secrets ----------------------------------------------------------------------------

s_secrets() {
  local id leaks=""
  create_sandbox '{"secrets":{"TOKEN":"s3cr3t"},"env":{"PLAIN":"visible"}}'
  id=$CID
  [ -n "$id" ] || { fail secrets.create "$(snip)"; return 0; }
  check secrets.names "$(snip)" okj 201 '.secret_names == ["TOKEN"] and .env == {"PLAIN": "visible"}'
  grep -q s3cr3t "$RESP" && leaks="$leaks create"
  api GET "/v1/sandboxes/$id"
  grep -q s3cr3t "$RESP" && leaks="$leaks get"
  api GET /v1/sandboxes
  grep -q s3cr3t "$RESP" && leaks="$leaks list"
  run_exec "$id" '{"cmd":"echo $TOKEN $PLAIN"}'
  check secrets.in_exec_env "$(snip)" okj 200 '.stdout == "s3cr3t visible\n"'
  check secrets.not_in_run_dir "the value is in: $(grep -rl s3cr3t "$T/run" 2>/dev/null | head -n 3 | tr '\n' ' ' || true)" \
    not grep -rqs s3cr3t "$T/run"
  delete_sandbox "$id" || fail secrets.delete "$(snip)"
  grep -q s3cr3t "$RESP" && leaks="$leaks delete"
  api GET "/v1/sandboxes/$id"
  grep -q s3cr3t "$RESP" && leaks="$leaks get-after-delete"
  check secrets.not_in_responses "the value appears in:$leaks" [ -z "$leaks" ]
  check secrets.not_in_daemon_log "the value is in $T/daemon.log" not grep -q s3cr3t "$T/daemon.log"
}

# ---- 13. daemon restart ---------------------------------------------------------------------

s_restart() {
  local a b c0 c1 c2
  create_sandbox '{"metadata":{"test":"restart"}}'
  a=$CID
  create_sandbox '{"metadata":{"test":"restart-killed"}}'
  b=$CID
  local d act
  create_sandbox '{"timeout_s":60,"metadata":{"test":"restart-activity"}}'
  d=$CID
  [ -n "$a" ] && [ -n "$b" ] || { fail restart.create "$(snip)"; return 0; }
  echo "$a" >"$T/restart.id"
  printf 'import os, time\nn = 0\nwhile True:\n    n += 1\n    open("/tmp/count.t", "w").write(str(n))\n    os.replace("/tmp/count.t", "/tmp/count")\n    time.sleep(0.05)\n' >"$T/counter.py"
  api PUT "/v1/sandboxes/$a/files?path=/workspace/counter.py" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$T/counter.py"
  run_exec "$a" '{"cmd":"nohup python3 /workspace/counter.py >/dev/null 2>&1 &"}'
  sleep 0.5
  run_exec "$a" '{"cmd":"cat /tmp/count"}'
  c0=$(j .stdout)
  check restart.counter_runs "$(snip)" [ "${c0:-0}" -gt 0 ]

  # Activity on d shortly before the crash moves its expiry; the restart must keep that.
  local d_expires=""
  sleep 1.5
  act=$(now_ms)
  if [ -n "$d" ]; then
    run_exec "$d" '{"cmd":"true"}'
    api GET "/v1/sandboxes/$d"
    d_expires=$(j .expires_at)
  fi
  # A stored idempotent answer must survive the restart.
  run_exec "$a" '{"cmd":"echo stored"}' -H "Idempotency-Key: restart-exec-$$"
  # A create still in flight when b3osd dies.
  curl -s -o "$T/crash.create" -m 30 -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    -H "Idempotency-Key: crash-$$" -d '{"metadata":{"test":"crash"}}' "$URL/v1/sandboxes" &
  local crash=$!
  sleep 0.3
  stop_daemon KILL
  wait "$crash" || true
  runsc --root "$T/run/runsc" kill --all "$b" KILL >/dev/null 2>&1 || true
  runsc --root "$T/run/runsc" delete --force "$b" >/dev/null 2>&1 || true
  if ! start_daemon; then
    fail restart.daemon_starts "b3osd did not come back; see the log"
    return 0
  fi
  pass restart.daemon_starts
  if [ -n "$d" ]; then
    api GET "/v1/sandboxes/$d"
    # expires_at has millisecond precision; allow 0.5 s.
    check restart.keeps_last_activity "expires_at was $d_expires before the kill (last exec at $(date -u -d @$((act / 1000)) +%T), timeout_s 60), $(j .expires_at) after the restart" \
      okj 200 'def ms: capture("^(?<s>[^.]+)(\\.(?<f>[0-9]{3}))?Z$") | ((.s + "Z" | fromdateiso8601) * 1000 + ((.f // "0") | tonumber));
        .status == "running" and (.expires_at | ms) + 500 >= ("'"$d_expires"'" | ms)'
    delete_sandbox "$d" || true
  fi
  api GET "/v1/sandboxes/$a"
  check restart.still_running "$(snip)" okj 200 '.status == "running" and .stop_reason == null'
  run_exec "$a" '{"cmd":"cat /tmp/count"}'
  c1=$(j .stdout)
  check restart.exec_works "$(snip)" [ "$ST" = 200 -a "$(j .exit_code)" = 0 ]
  sleep 1
  run_exec "$a" '{"cmd":"cat /tmp/count"}'
  c2=$(j .stdout)
  check restart.counter_increases "counter $c0 -> $c1 -> $c2" [ "${c1:-0}" -ge "${c0:-0}" -a "${c2:-0}" -gt "${c1:-0}" ]
  api GET "/v1/sandboxes/$SBX"
  check restart.others_running "$(snip)" [ "$(j .status)" = running ]
  run_exec "$SBX" '{"cmd":"echo ok"}'
  check restart.others_exec "$(snip)" [ "$(j .stdout)" = ok ]
  api GET "/v1/sandboxes/$b"
  check restart.killed_is_failed "$(snip)" \
    okj 200 '.status == "failed" and .stop_reason == "failed" and (.stop_message | type == "string" and length > 0) and (.stopped_at | type) == "string"'
  check restart.killed_cleaned "processes: $(pgrep -f "$b" | tr '\n' ' ' || true), dir: $(ls -d "$T/run/sandboxes/$b" 2>/dev/null || true)" \
    [ -z "$(pgrep -f "$b" || true)" -a ! -e "$T/run/sandboxes/$b" ]
  run_exec "$b" '{"cmd":"true"}'
  expect_error restart.killed_exec_409 409 sandbox_not_running

  local running containers
  api GET '/v1/sandboxes?status=running&limit=100'
  running=$(j '[.data[].id] | sort | join(" ")')
  containers=$(runsc_list | sort | tr '\n' ' ' | sed 's/ $//')
  check restart.containers_match_records "running records [$running], containers [$containers]" \
    [ -n "$running" -a "$running" = "$containers" ]
  run_exec "$a" '{"cmd":"echo stored"}' -H "Idempotency-Key: restart-exec-$$"
  check restart.idempotency_replay_survives "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
    [ "$ST" = 200 -a "$(header Idempotent-Replayed)" = true -a "$(j .stdout)" = stored ]
  # The create cut short by the crash is not running any more, so its key must not be
  # "still in progress" (docs/api.md: 409 only while the first request is still running).
  create_sandbox '{"metadata":{"test":"crash"}}' -H "Idempotency-Key: crash-$$"
  check restart.idempotency_key_after_crash "retry of the interrupted create: want 201, got $(snip)" [ "$ST" = 201 ]
  [ -z "$CID" ] || delete_sandbox "$CID" || true
}

# ---- 14. delete -----------------------------------------------------------------------------

s_delete() {
  local id first
  id=$(cat "$T/restart.id" 2>/dev/null || true)
  if [ -z "$id" ]; then
    create_sandbox '{}'
    id=$CID
  fi
  # A command still running when its sandbox is deleted must not keep its caller waiting.
  curl -s -o "$T/del.exec" -w '%{http_code} %{time_total}' -m 60 -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' -d '{"cmd":"sleep 30"}' "$URL/v1/sandboxes/$id/exec" >"$T/del.exec.status" &
  local bg=$!
  sleep 1
  api DELETE "/v1/sandboxes/$id"
  cp "$RESP" "$T/del.resp"
  cp "$RESPH" "$T/del.resph"
  local dst=$ST
  wait "$bg" || true
  check delete.running_exec_ends "exec answered '$(cat "$T/del.exec.status")' $(head -c 200 "$T/del.exec")" \
    awk '{ exit !($1 != "000" && $2 < 10) }' "$T/del.exec.status"
  info "an exec cut short by DELETE answered HTTP $(cat "$T/del.exec.status") $(head -c 150 "$T/del.exec")"
  cp "$T/del.resp" "$RESP"
  cp "$T/del.resph" "$RESPH"
  ST=$dst
  check delete.stops "$(snip)" [ "$ST" = 200 -a "$(j .status)" = stopped -a "$(j .stop_reason)" = deleted -a "$(j .stopped_at)" != null ]
  first=$(j -c '{id, status, stop_reason, stopped_at}')
  check delete.container_gone "runsc list: $(runsc_list | tr '\n' ' ')" not runsc_has "$id"
  check delete.cgroup_gone "left: $(cgroup_dirs "$id")" [ -z "$(cgroup_dirs "$id")" ]
  api DELETE "/v1/sandboxes/$id"
  check delete.again_200_same "first $first, again $(j -c '{id, status, stop_reason, stopped_at}') (HTTP $ST)" \
    [ "$ST" = 200 -a "$(j -c '{id, status, stop_reason, stopped_at}')" = "$first" ]
  api GET "/v1/sandboxes/$id"
  check delete.record_stays "$(snip)" [ "$ST" = 200 -a "$(j .status)" = stopped -a "$(j .stop_reason)" = deleted ]
}

# ---- 16. the CLI ----------------------------------------------------------------------------

s_cli() {
  local b3os=$B3OS_BIN/b3os id out rc
  export B3OS_API_URL=$URL B3OS_API_KEY=$ADMIN
  id=$("$b3os" create 2>"$T/cli.err" || true)
  [[ $id == sbx_* ]] && echo "$id" >>"$T/ids"
  check cli.create "output '$id' $(head -c 200 "$T/cli.err")" grep -Eqx 'sbx_[0-9a-z]{26}' <<<"$id"
  [[ $id == sbx_* ]] || return 0
  out=$("$b3os" list 2>&1 || true)
  check cli.list "$out" grep -q "$id.*running" <<<"$out"
  rc=0
  out=$("$b3os" exec "$id" -- python3 -c 'print(1)' 2>&1) || rc=$?
  check cli.exec "exit $rc, output '$out'" [ "$rc" = 0 -a "$out" = 1 ]
  rc=0
  out=$("$b3os" exec "$id" -- python3 -c 'import sys; sys.exit(7)' 2>&1) || rc=$?
  check cli.exec_exit_code "exit $rc, want 7; output '$out'" [ "$rc" = 7 ]
  rc=0
  out=$("$b3os" exec "$id" --timeout-ms 300 -- 'sleep 5' 2>&1) || rc=$?
  check cli.exec_timeout_124 "exit $rc, want 124; output '$out'" [ "$rc" = 124 ]
  rc=0
  out=$("$b3os" exec "$id" -- 'echo $((2+3)); exit 5' 2>&1) || rc=$?
  check cli.exec_shell_string "exit $rc, output '$out'" [ "$rc" = 5 -a "$out" = 5 ]
  head -c 3M /dev/urandom >"$T/cli.bin"
  rc=0
  out=$("$b3os" upload "$id" "$T/cli.bin" /workspace/cli.bin 2>&1) || rc=$?
  check cli.upload "exit $rc, output '$out'" [ "$rc" = 0 ]
  rc=0
  out=$("$b3os" download "$id" /workspace/cli.bin "$T/cli.back" 2>&1) || rc=$?
  check cli.download_exact "exit $rc, output '$out'" cmp -s "$T/cli.bin" "$T/cli.back"
  rc=0
  out=$("$b3os" rm "$id" 2>&1) || rc=$?
  check cli.rm "exit $rc, output '$out'" [ "$rc" = 0 -a "$out" = "$id" ]
  api GET "/v1/sandboxes/$id"
  check cli.rm_stopped "$(snip)" [ "$(j .status)" = stopped -a "$(j .stop_reason)" = deleted ]
  rc=0
  out=$("$b3os" exec "$id" -- true 2>&1) || rc=$?
  check cli.exec_on_stopped_fails "exit $rc, output '$out'" [ "$rc" != 0 ]
}

# ---- 15. leak check -------------------------------------------------------------------------

s_leaks() {
  local i start ms ok=0 ids_file=$T/leak.ids left
  : >"$ids_file"
  start=$(now_ms)
  for i in $(seq 1 "$CYCLES"); do
    create_sandbox '{"metadata":{"batch":"leak"}}'
    if [ -z "$CID" ]; then
      fail leaks.cycle "create #$i: $(snip)"
      continue
    fi
    echo "$CID" >>"$ids_file"
    if delete_sandbox "$CID"; then ok=$((ok + 1)); else fail leaks.cycle "delete #$i: $(snip)"; fi
  done
  ms=$(($(now_ms) - start))
  info "$CYCLES create/delete cycles took $((ms / 1000)).$(printf %03d $((ms % 1000))) s ($((ms / CYCLES)) ms per cycle)"
  check leaks.cycles "$ok of $CYCLES cycles succeeded" [ "$ok" = "$CYCLES" ]

  left=$(runsc_list | tr '\n' ' ')
  check leaks.no_containers "runsc list: $left" [ -z "${left// /}" ]
  left=""
  while read -r id; do
    left="$left$(pgrep -f "$id" | tr '\n' ' ' || true)"
  done <"$ids_file"
  check leaks.no_processes "processes naming the ids: $left" [ -z "${left// /}" ]
  left="$(pgrep -f "b3os-shim $T/" | tr '\n' ' ' || true)$(pgrep -f -- "--root $T/run/runsc" | tr '\n' ' ' || true)"
  check leaks.no_shim_or_runsc "processes of this run: $left" [ -z "${left// /}" ]
  left=""
  while read -r id; do left="$left$(cgroup_dirs "$id" | tr '\n' ' ')"; done <"$ids_file"
  check leaks.no_cgroups "left: $left" [ -z "${left// /}" ]
  left=$(grep -F -f "$ids_file" /proc/mounts | head -n 3 || true)
  check leaks.no_mounts "$left" [ -z "$left" ]
  left=$(ls -A "$T/run/sandboxes" 2>/dev/null | tr '\n' ' ')
  check leaks.run_dir_empty "$T/run/sandboxes: $left" [ -z "${left// /}" ]
}

# ---- run ------------------------------------------------------------------------------------

# ---- fork ------------------------------------------------------------------------------------

s_fork() {
  create_sandbox '{"forkable":true,"env":{"E":"e1"},"secrets":{"S":"s1"}}'
  check fork.create_forkable_201 "$(snip)" okj 201 '.forkable == true'
  local src=$CID
  # A counter in a running Python process and a file written before the fork.
  run_exec "$src" '{"cmd":"echo before > /workspace/f; nohup python3 -c \"import os, time\ni=0\nwhile True:\n  i+=1; open(\u0027/workspace/c.t\u0027,\u0027w\u0027).write(str(i)); os.replace(\u0027/workspace/c.t\u0027,\u0027/workspace/c\u0027); time.sleep(0.05)\" >/dev/null 2>&1 & sleep 0.3"}'
  check fork.setup "$(snip)" okj 200 '.exit_code == 0'
  apij POST "/v1/sandboxes/$src/fork" '{"count":3,"metadata":{"role":"fork"}}'
  check fork.count3_201 "$(snip)" okj 201 '.object == "list" and (.data | length) == 3'
  check fork.server_timing_restore "$(header Server-Timing)" bash -c "header() { :; }; grep -qi 'restore;dur=' '$RESPH' && grep -qi 'snapshot;dur=' '$RESPH' && grep -qi 'total;dur=' '$RESPH'"
  # The spec's four phases while the source is held, in its order; base and export take no time here.
  check fork.spec_phases "$(header Server-Timing)" grep -Eqi 'pause;dur=[0-9.]+, base;dur=0\.000, snapshot;dur=[0-9.]+, export;dur=0\.000, ' "$RESPH"
  check fork.timing_spec_phases "$(snip)" jt '.timing | (.pause_ms >= 0 and .base_ms == 0 and .snapshot_ms > 0 and .export_ms == 0 and .restore_ms > 0)'
  local forks
  forks=$(j '.data[].id')
  for f in $forks; do echo "$f" >>"$T/ids"; done
  check fork.fields "$(snip)" jt 'all(.data[]; .status == "running" and .forkable == true and .env.E == "e1" and .secret_names == ["S"] and .metadata.role == "fork")'
  local hosts="" mids="" rands="" n=0
  for f in $forks; do
    run_exec "$f" '{"cmd":"cat /workspace/f; a=$(cat /workspace/c); sleep 0.4; b=$(cat /workspace/c); [ $b -gt $a ] && echo counting; hostname; cat /etc/machine-id; echo $E $S; head -c 16 /dev/urandom | od -An -tx1 | tr -d \" \\n\"; echo; python3 -c \"import random; print(random.random())\"; echo $HOSTNAME-only > /workspace/mine"}'
    n=$((n + 1))
    check "fork.$n.memory_disk_processes" "$(snip)" jt '.exit_code == 0 and (.stdout | startswith("before\ncounting\n"))'
    check "fork.$n.env_secrets" "$(snip)" jt '(.stdout | split("\n"))[4] == "e1 s1"'
    hosts="$hosts $(j '.stdout | split("\n")[2]')"
    mids="$mids $(j '.stdout | split("\n")[3]')"
    rands="$rands $(j '.stdout | split("\n")[5]') $(j '.stdout | split("\n")[6]')"
  done
  check fork.distinct_hostnames "$hosts" test "$(echo "$hosts" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" = 3
  check fork.distinct_machine_ids "$mids" test "$(echo "$mids" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" = 3
  check fork.distinct_entropy "$rands" test "$(echo "$rands" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" = 6
  # A file written in one fork is in that fork only.
  run_exec "$src" '{"cmd":"ls /workspace; cat /workspace/c"}'
  check fork.source_runs_on_without_fork_files "$(snip)" jt '.exit_code == 0 and (.stdout | contains("mine") | not)'
  local first
  first=$(echo "$forks" | head -n1)
  # A fork of a fork.
  apij POST "/v1/sandboxes/$first/fork" '{"count":1}'
  check fork.fork_of_fork "$(snip)" okj 201 '(.data | length) == 1'
  local grand
  grand=$(j '.data[0].id')
  echo "$grand" >>"$T/ids"
  run_exec "$grand" '{"cmd":"cat /workspace/mine"}'
  check fork.fork_of_fork_has_parent_files "$(snip)" jt '.exit_code == 0 and (.stdout | endswith("-only\n"))'
  # A non-forkable source: 409, nothing made.
  create_sandbox '{}'
  local plain=$CID before
  before=$(runsc_list | wc -l)
  apij POST "/v1/sandboxes/$plain/fork" '{"count":2}'
  expect_error fork.not_forkable_409 409 fork_unavailable
  check fork.not_forkable_nothing_made "runsc list changed" test "$(runsc_list | wc -l)" = "$before"
  # Over the project's concurrency limit: 429 before any work.
  apij POST "/v1/sandboxes/$src/fork" '{"count":16}'
  expect_error fork.concurrency_429 429 concurrency_limited
  check fork.concurrency_nothing_made "runsc list changed" test "$(runsc_list | wc -l)" = "$before"
  # Twenty forks of one source in a row, each deleted: nothing accumulates.
  local k made=0
  for k in $(seq 1 20); do
    apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
    if [ "$ST" = 201 ]; then
      made=$((made + 1))
      delete_sandbox "$(j '.data[0].id')" || true
    fi
  done
  check fork.twenty_in_a_row "$made of 20 forks made" test "$made" = 20
  check fork.twenty_no_containers_left "$(runsc_list | wc -l) containers, want $before" test "$(runsc_list | wc -l)" = "$before"
  check fork.twenty_no_dirs_left "$(ls "$T/run/sandboxes" | wc -l) dirs" test "$(ls "$T/run/sandboxes" | wc -l)" = "$before"
  run_exec "$src" '{"cmd":"cat /workspace/f"}'
  check fork.source_alive_after_twenty "$(snip)" jt '.stdout == "before\n"'
  # Two fork requests of one source at once: both are made, and once both images are gone the
  # source's memory limit is its own again (the raise during a checkpoint is shared).
  local cf1 cf2
  for n in 1 2; do
    curl -sS -o "$T/cfork$n.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
      -H 'Content-Type: application/json' --data-binary '{"count":1}' -X POST \
      "$URL/v1/sandboxes/$src/fork" >"$T/cfork$n.code" 2>/dev/null &
    if [ "$n" = 1 ]; then cf1=$!; else cf2=$!; fi
  done
  wait "$cf1" "$cf2"
  check fork.concurrent_both_201 "$(cat "$T/cfork1.code") $(cat "$T/cfork2.code")" \
    test "$(cat "$T/cfork1.code") $(cat "$T/cfork2.code")" = "201 201"
  for n in 1 2; do
    local cid
    cid=$(jq -r '.data[0].id // empty' "$T/cfork$n.json")
    [ -n "$cid" ] && { echo "$cid" >>"$T/ids"; delete_sandbox "$cid" || true; }
  done
  local lim want=$(( (512 + 256) * 1024 * 1024 ))
  lim=$(cat "/sys/fs/cgroup/memory/b3os/$src/memory.limit_in_bytes" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$src/memory.max")
  check fork.concurrent_limit_set_back "$lim, want $want" test "$lim" = "$want"
  for id in $src $forks $grand $plain; do delete_sandbox "$id" || true; done
  local left=0
  for id in $src $forks $grand $plain; do runsc_has "$id" && left=$((left + 1)); [ -n "$(cgroup_dirs "$id")" ] && left=$((left + 1)); done
  check fork.delete_leaves_nothing "$left containers or cgroups left" test "$left" = 0
  check fork.no_images_left "$(ls "$T/data/fork-images" 2>/dev/null)" test -z "$(ls "$T/data/fork-images" 2>/dev/null)"
}

# ---- pause and resume ------------------------------------------------------------------------

s_pause() {
  create_sandbox '{"timeout_s":600}'
  local id=$CID
  run_exec "$id" '{"cmd":"nohup python3 -c \"import os, time\ni=0\nwhile True:\n  i+=1; open(\u0027/workspace/c.t\u0027,\u0027w\u0027).write(str(i)); os.replace(\u0027/workspace/c.t\u0027,\u0027/workspace/c\u0027); time.sleep(0.05)\" >/dev/null 2>&1 & sleep 0.3"}'
  api POST "/v1/sandboxes/$id/pause"
  check pause.200 "$(snip)" okj 200 '.status == "paused" and (.paused_at | type) == "string"'
  local frozen_cpu
  frozen_cpu=$(cat "/sys/fs/cgroup/cpuacct/b3os/$id/cpuacct.usage" 2>/dev/null || echo 0)
  api GET "/v1/sandboxes/$id"
  local v1
  v1=$(j .usage.vcpu_ms)
  sleep 1
  api GET "/v1/sandboxes/$id"
  check pause.vcpu_not_metered "vcpu_ms $v1 -> $(j .usage.vcpu_ms)" test "$(j .usage.vcpu_ms)" = "$v1"
  check pause.no_cpu_used "cpuacct moved $(( ($(cat "/sys/fs/cgroup/cpuacct/b3os/$id/cpuacct.usage" 2>/dev/null || echo 0) - frozen_cpu) / 1000000 )) ms in 1 s" test "$(cat "/sys/fs/cgroup/cpuacct/b3os/$id/cpuacct.usage" 2>/dev/null || echo 0)" -le "$((frozen_cpu + 5000000))"
  run_exec "$id" '{"cmd":"true"}'
  expect_error pause.exec_409 409 sandbox_not_running paused
  api POST "/v1/sandboxes/$id/pause"
  check pause.again_200 "$(snip)" okj 200 '.status == "paused"'
  api POST "/v1/sandboxes/$id/resume"
  check resume.200 "$(snip)" okj 200 '.status == "running" and .paused_at == null'
  run_exec "$id" '{"cmd":"a=$(cat /workspace/c); sleep 0.4; b=$(cat /workspace/c); [ $b -gt $a ] && echo counting"}'
  check resume.same_process_continues "$(snip)" jt '.stdout == "counting\n"'
  # on_idle: pause pauses an idle sandbox instead of stopping it.
  create_sandbox '{"timeout_s":1,"on_idle":"pause"}'
  local idle=$CID
  sleep 3
  api GET "/v1/sandboxes/$idle"
  check on_idle_pause.paused "$(snip)" okj 200 '.status == "paused" and .stop_reason == null'
  api POST "/v1/sandboxes/$idle/resume"
  run_exec "$idle" '{"cmd":"echo alive"}'
  check on_idle_pause.resumes "$(snip)" jt '.stdout == "alive\n"'
  api POST "/v1/sandboxes/$idle/pause"
  delete_sandbox "$idle"
  check pause.delete_paused "$(snip)" jt '.status == "stopped" and .stop_reason == "deleted"'
  check pause.delete_paused_leaves_nothing "container left" not runsc_has "$idle"
  delete_sandbox "$id" || true
}

# ---- snapshots --------------------------------------------------------------------------------

s_snapshot() {
  create_sandbox '{"env":{"E":"e1"},"secrets":{"S":"s1"}}'
  local id=$CID
  run_exec "$id" '{"cmd":"echo kept > /workspace/k; nohup python3 -c \"import os, time\ni=0\nwhile True:\n  i+=1; open(\u0027/workspace/c.t\u0027,\u0027w\u0027).write(str(i)); os.replace(\u0027/workspace/c.t\u0027,\u0027/workspace/c\u0027); time.sleep(0.05)\" >/dev/null 2>&1 & sleep 0.3"}'
  api POST "/v1/sandboxes/$id/snapshot"
  check snapshot.201 "$(snip)" okj 201 '.object == "snapshot" and (.id | startswith("snp_")) and .sandbox_id == "'"$id"'" and .size_bytes > 0 and .secret_names == ["S"]'
  local snp
  snp=$(j .id)
  check snapshot.no_secret_values "$(snip)" not grep -q s1 "$RESP"
  run_exec "$id" '{"cmd":"echo after > /workspace/k"}'
  delete_sandbox "$id" || true
  api GET /v1/snapshots
  check snapshot.listed "$(snip)" okj 200 '[.data[].id] | index("'"$snp"'") != null'
  KEY=$OTHER api GET "/v1/snapshots/$snp"
  expect_error snapshot.other_project_404 404 snapshot_not_found
  # It outlives its sandbox and a restart of b3osd.
  kill -9 "$(daemon_pid)" 2>/dev/null || true
  sleep 0.5
  start_daemon
  create_sandbox '{"snapshot":"'"$snp"'","metadata":{"from":"snapshot"},"timeout_s":120}'
  check snapshot.create_from_201 "$(snip)" okj 201 '.snapshot == "'"$snp"'" and .env.E == "e1" and .secret_names == ["S"] and .metadata.from == "snapshot"'
  local restored=$CID
  run_exec "$restored" '{"cmd":"cat /workspace/k; a=$(cat /workspace/c); sleep 0.4; b=$(cat /workspace/c); [ $b -gt $a ] && echo counting; echo $E $S"}'
  check snapshot.memory_disk_processes "$(snip)" jt '.stdout == "kept\ncounting\ne1 s1\n"'
  delete_sandbox "$restored" || true
  # A restore that fails (a damaged image) leaves nothing half-made.
  local before_ids before_list before_dirs
  before_list=$(runsc_list | sort | tr '\n' ' ')
  before_dirs=$(ls "$T/run/sandboxes" | sort | tr '\n' ' ')
  api GET /v1/sandboxes?limit=100
  before_ids=$(j '[.data[].id] | length')
  cp "$T/data/snapshots/$snp/checkpoint.img" "$T/checkpoint.img.saved"
  head -c 4096 /dev/urandom >"$T/data/snapshots/$snp/checkpoint.img"
  create_sandbox '{"snapshot":"'"$snp"'"}'
  check snapshot.damaged_image_500 "$(snip)" okj 500 '.error.code == "internal" and (.error.message | test("restore"))'
  check snapshot.damaged_nothing_left "runsc list: $(runsc_list | tr '\n' ' ')" test "$(runsc_list | sort | tr '\n' ' ')" = "$before_list"
  api GET /v1/sandboxes?limit=100
  check snapshot.damaged_no_record "$(snip)" test "$(j '[.data[].id] | length')" = "$before_ids"
  check snapshot.damaged_no_dir "$(ls "$T/run/sandboxes" | tr '\n' ' ')" test "$(ls "$T/run/sandboxes" | sort | tr '\n' ' ')" = "$before_dirs"
  cp "$T/checkpoint.img.saved" "$T/data/snapshots/$snp/checkpoint.img"
  api DELETE "/v1/snapshots/$snp"
  check snapshot.delete_200 "$(snip)" okj 200 '.deleted == true'
  api GET "/v1/snapshots/$snp"
  expect_error snapshot.gone_404 404 snapshot_not_found
  check snapshot.files_removed "$(ls "$T/data/snapshots")" test -z "$(ls "$T/data/snapshots" 2>/dev/null)"
  create_sandbox '{"snapshot":"'"$snp"'"}'
  expect_error snapshot.create_from_deleted_404 404 snapshot_not_found
}

# ---- warm pool -------------------------------------------------------------------------------

s_warm_pool() {
  stop_daemon TERM
  E2E_WARM_POOL=2 E2E_FORK_POOL=2 start_daemon
  local before_pool n=0
  before_pool=$(runsc_list | wc -l)
  # The pool fills in the background: two more containers than the sandboxes we know of.
  api GET /v1/sandboxes?status=running\&limit=100
  local known
  known=$(j '.data | length')
  for _ in $(seq 1 60); do
    n=$(runsc_list | wc -l)
    [ "$n" -ge $((known + 4)) ] && break
    sleep 0.5
  done
  check pool.fills "$n containers for $known running sandboxes" test "$n" -ge $((known + 4))
  api GET /v1/sandboxes?status=running\&limit=100
  check pool.not_listed "$(j '.data | length') running listed, $known before the pool filled" test "$(j '.data | length')" = "$known"
  create_sandbox '{"vcpu":2,"memory_mib":1024,"env":{"E":"pooled"},"secrets":{"S":"p1"},"metadata":{"from":"pool"}}'
  check pool.claim_201 "$(snip)" okj 201 '.timing.claim_ms != null and .vcpu == 2 and .memory_mib == 1024 and .metadata.from == "pool"'
  local id=$CID
  check pool.cgroup_cpu "quota $(cat "/sys/fs/cgroup/cpu/b3os/$id/cpu.cfs_quota_us" 2>/dev/null)" test "$(cat "/sys/fs/cgroup/cpu/b3os/$id/cpu.cfs_quota_us" 2>/dev/null)" = 200000
  check pool.cgroup_memory "limit $(cat "/sys/fs/cgroup/memory/b3os/$id/memory.limit_in_bytes" 2>/dev/null)" test "$(cat "/sys/fs/cgroup/memory/b3os/$id/memory.limit_in_bytes" 2>/dev/null)" = $(((1024 + 256) << 20))
  run_exec "$id" '{"cmd":"echo $E $S; hostname"}'
  check pool.claimed_works "$(snip)" jt '.exit_code == 0 and (.stdout | startswith("pooled p1\nsbx-"))'
  create_sandbox '{"forkable":true}'
  # Forkable creates are not claimed from the warm pool: they boot in a container created
  # ahead of time (a `pooled_container` phase, no `create`).
  check pool.forkable_not_claimed "$(snip)" okj 201 '.timing.claim_ms == null and .timing.pooled_container_ms != null and .timing.create_ms == null and .forkable == true'
  local fk=$CID
  # A fork restores into a container created ahead of time too.
  run_exec "$fk" '{"cmd":"echo pooled-fork > /workspace/pf"}'
  apij POST "/v1/sandboxes/$fk/fork" '{"count":1}'
  check pool.fork_claims_precreated "$(header Server-Timing)" bash -c "grep -qi 'pooled_container;dur=' '$RESPH' && ! grep -qi 'create;dur=' '$RESPH'"
  local child
  child=$(j '.data[0].id')
  echo "$child" >>"$T/ids"
  run_exec "$child" '{"cmd":"cat /workspace/pf"}'
  check pool.fork_works "$(snip)" jt '.stdout == "pooled-fork\n"'
  delete_sandbox "$child" || true
  delete_sandbox "$id" || true
  delete_sandbox "$fk" || true
  # SIGTERM removes the pool's containers; then back to no pool for the other sections.
  stop_daemon TERM
  check pool.removed_at_stop "$(runsc_list | wc -l) containers, want at most $known" test "$(runsc_list | wc -l)" -le "$known"
  start_daemon
}

# Template checkpoints: with "on", a create restores the base template's checkpoint instead
# of booting, and each such sandbox still gets its own identity.
s_template_checkpoint() {
  stop_daemon TERM
  local before
  before=$(runsc_list | wc -l)
  E2E_TEMPLATE_CHECKPOINTS=on start_daemon
  local st=""
  for _ in $(seq 1 100); do
    api GET /v1/templates
    st=$(j '.data[] | select(.name == "base") | .checkpoint.status')
    [ "$st" = building ] || break
    sleep 0.2
  done
  check tplck.ready "$(snip)" jt '.data[] | select(.name == "base") | .checkpoint.status == "ready" and .checkpoint.creates == "restore" and .checkpoint.boot_ms > 0 and .checkpoint.restore_ms > 0'
  check tplck.builder_gone "$(runsc_list | wc -l) containers, $before before" test "$(runsc_list | wc -l)" = "$before"
  create_sandbox '{"env":{"E":"restored"}}'
  check tplck.create_restores "$(snip)" okj 201 '.timing.restore_ms != null and .timing.start_ms == null'
  local a=$CID
  create_sandbox '{"forkable":true}'
  check tplck.forkable_restores "$(snip)" okj 201 '.timing.restore_ms != null'
  local b=$CID
  local ida idb
  run_exec "$a" '{"cmd":"echo $E; hostname; cat /etc/machine-id; python3 -c \"import random; print(random.random())\""}'
  check tplck.exec_works "$(snip)" jt '.exit_code == 0 and (.stdout | startswith("restored\nsbx-"))'
  ida=$(j '.stdout | split("\n")[1:4] | join(" ")')
  run_exec "$b" '{"cmd":"echo $E; hostname; cat /etc/machine-id; python3 -c \"import random; print(random.random())\""}'
  idb=$(j '.stdout | split("\n")[1:4] | join(" ")')
  check tplck.own_identity "a: $ida; b: $idb" bash -c '
    read -r ha ma ra <<<"$1"; read -r hb mb rb <<<"$2"
    [ "$ha" != "$hb" ] && [ "$ma" != "$mb" ] && [ "$ra" != "$rb" ] && [ "$ha" = "sbx-${3:4:12}" ]' _ "$ida" "$idb" "$a"
  apij POST "/v1/sandboxes/$b/fork" '{"count":1}'
  check tplck.fork_201 "$(snip)" okj 201 '.data | length == 1'
  local child
  child=$(j '.data[0].id')
  echo "$child" >>"$T/ids"
  delete_sandbox "$child" || true
  delete_sandbox "$a" || true
  delete_sandbox "$b" || true
  stop_daemon TERM
  check tplck.nothing_left "$(runsc_list | wc -l) containers, $before before" test "$(runsc_list | wc -l)" = "$before"
  start_daemon
}

# A checkpoint that really fails (the image directory is a 256 KiB tmpfs, so runsc runs out of
# space mid-write): the fork answers 500, the source runs on, and nothing is left behind.
s_fork_failure() {
  create_sandbox '{"forkable":true}'
  local src=$CID
  run_exec "$src" '{"cmd":"echo before > /workspace/f"}'
  stop_daemon TERM
  mkdir -p "$T/data/fork-images"
  if ! mount -t tmpfs -o size=256k b3os-e2e-tiny "$T/data/fork-images"; then
    skip forkfail.all "cannot mount a small tmpfs to make the checkpoint fail"
    start_daemon
    return 0
  fi
  start_daemon
  local before_n before_c
  api GET /v1/sandboxes?limit=100
  before_n=$(j '.data | length')
  before_c=$(runsc_list | wc -l)
  apij POST "/v1/sandboxes/$src/fork" '{"count":2}'
  check forkfail.500 "$(snip)" okj 500 '.error.code == "internal" and (.error.message | contains("fork"))'
  api GET /v1/sandboxes?limit=100
  check forkfail.no_record "$(j '.data | length') sandboxes, $before_n before" test "$(j '.data | length')" = "$before_n"
  check forkfail.no_container "$(runsc_list | wc -l) containers, $before_c before" test "$(runsc_list | wc -l)" = "$before_c"
  check forkfail.no_image "$(ls -A "$T/data/fork-images")" test -z "$(ls -A "$T/data/fork-images")"
  run_exec "$src" '{"cmd":"cat /workspace/f"}'
  check forkfail.source_runs_on "$(snip)" jt '.exit_code == 0 and .stdout == "before\n"'
  stop_daemon TERM
  umount "$T/data/fork-images"
  start_daemon
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  check forkfail.fork_after_works "$(snip)" okj 201 '.data | length == 1'
  echo "$(j '.data[0].id')" >>"$T/ids"
  delete_sandbox "$(j '.data[0].id')" || true
  delete_sandbox "$src" || true
}

# A fork of a sandbox using most of its memory, with the image directory on a tmpfs (as RUN_DIR
# often is): the image's pages are charged to the source's memory cgroup, so its limit must be
# raised while the image exists (else the source is killed mid-checkpoint), and the fork's
# pre-created container must get the source's memory limit before the restore fills it
# (the pool creates containers with the default 512 MiB + overhead).
s_fork_big() {
  create_sandbox '{"forkable":true,"memory_mib":1024}'
  local src=$CID
  run_exec "$src" '{"cmd":"nohup python3 -c \"import os,time\nb=bytearray(os.urandom(1<<20))*800\nopen(\u0027/tmp/filled\u0027,\u0027w\u0027).write(str(b[12345]))\ntime.sleep(3600)\" >/dev/null 2>&1 & for i in $(seq 300); do [ -f /tmp/filled ] && break; sleep 0.2; done; cat /tmp/filled"}'
  check forkbig.filled "$(snip)" jt '.exit_code == 0 and (.stdout | length) > 0'
  local byte
  byte=$(j '.stdout')
  stop_daemon TERM
  mkdir -p "$T/data/fork-images"
  if ! mount -t tmpfs -o size=2g b3os-e2e-images "$T/data/fork-images"; then
    skip forkbig.all "cannot mount a tmpfs for the fork images"
    start_daemon
    delete_sandbox "$src" || true
    return 0
  fi
  start_daemon
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  check forkbig.201 "$(snip)" okj 201 '.data | length == 1'
  local f
  f=$(j '.data[0].id')
  echo "$f" >>"$T/ids"
  api GET "/v1/sandboxes/$src"
  check forkbig.source_running "$(snip)" okj 200 '.status == "running"'
  run_exec "$src" '{"cmd":"pgrep -f bytearray >/dev/null && cat /tmp/filled"}'
  check forkbig.source_keeps_its_memory "$(snip)" jt ".exit_code == 0 and .stdout == \"$byte\""
  run_exec "$f" '{"cmd":"pgrep -f bytearray >/dev/null && cat /tmp/filled"}'
  check forkbig.fork_has_the_memory "$(snip)" jt ".exit_code == 0 and .stdout == \"$byte\""
  local want=$(( (1024 + 256) * 1024 * 1024 )) lim_src lim_fork
  lim_src=$(cat "/sys/fs/cgroup/memory/b3os/$src/memory.limit_in_bytes" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$src/memory.max")
  lim_fork=$(cat "/sys/fs/cgroup/memory/b3os/$f/memory.limit_in_bytes" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$f/memory.max")
  check forkbig.source_limit_set_back "$lim_src, want $want" test "$lim_src" = "$want"
  check forkbig.fork_limit "$lim_fork, want $want" test "$lim_fork" = "$want"
  check forkbig.no_image "$(ls -A "$T/data/fork-images")" test -z "$(ls -A "$T/data/fork-images")"
  delete_sandbox "$f" || true
  delete_sandbox "$src" || true
  stop_daemon TERM
  umount "$T/data/fork-images"
  start_daemon
}

run_section s_exec
run_section s_exec_timeout
run_section s_exec_truncation
run_section s_exec_concurrent
run_section s_files
run_section s_errors
run_section s_idempotency
run_section s_rate_limit
run_section s_list
run_section s_timeout
run_section s_usage
run_section s_secrets
run_section s_restart
run_section s_delete
run_section s_cli
run_section s_fork
run_section s_fork_failure
run_section s_fork_big
run_section s_pause
run_section s_snapshot
run_section s_files_big
run_section s_warm_pool
run_section s_template_checkpoint
delete_sandbox "$SBX" || fail delete.main "$(snip)"
run_section s_leaks

# b3osd ends cleanly on SIGTERM (daemon/main.cc: it logs "signal 15, stopping" and exits 0;
# sandboxes would keep running).
pid=$(daemon_pid)
kill -TERM "$pid"
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
sleep 0.2
exit_line=$(grep 'b3osd exited with status' "$T/daemon.log" | tail -n1 || true)
check shutdown.sigterm_exit_0 "after SIGTERM: '$exit_line'" grep -q 'exited with status 0 ' <<<"$exit_line"
check shutdown.sigterm_logged "no 'signal 15, stopping' line in the log" grep -q 'signal 15, stopping' "$T/daemon.log"
kill -0 "$pid" 2>/dev/null || rm -f "$T/daemon.pid"

# Every response the suite received, against docs/openapi.yaml.
check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
ELAPSED=$(($(now_ms) - SUITE_START))
echo "passed $P, failed $F, skipped $S in $((ELAPSED / 1000)) s"
[ "$F" = 0 ] || exit 1

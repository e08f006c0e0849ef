# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: a sandbox's life: the idle timeout (of the sandboxes s_list started), usage
# and resource limits, secrets, and delete (of the sandbox s_restart left in $T/restart.id).

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
  check timeout.container_gone "runsc list: $(runsc_list | tr '\n' ' ')" eventually 15 not runsc_has "$id"
  check timeout.cgroup_gone "left: $(cgroup_dirs "$id")" eventually 15 no_cgroup "$id"
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
    # A new timeout, counted from now (E2B's setTimeout); out of range is 400.
    api PATCH "/v1/sandboxes/$busy" -H 'Content-Type: application/json' -d '{"timeout_s": 600}'
    check timeout.patched "$(snip)" okj 200 '.timeout_s == 600 and
      ((.expires_at | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) - now) > 590'
    api PATCH "/v1/sandboxes/$busy" -H 'Content-Type: application/json' -d '{"timeout_s": 0}'
    expect_error timeout.patch_0_400 400 invalid_request
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
  # An ended record keeps no env or secret values: nothing runs with them again, and ended
  # records are kept for days, up to 10,000 a project.
  check secrets.ended_record_keeps_no_values "$(snip)" okj 200 '.status == "stopped" and .env == {} and .secret_names == []'
  if [ -z "${B3OS_STORE:-}" ]; then
    check secrets.ended_row_keeps_no_values "$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT env, secrets FROM sandboxes WHERE id = ?", (sys.argv[2],)).fetchone())' "$T/data/b3os.db" "$id" 2>&1)" \
      python3 -c 'import sqlite3, sys; sys.exit(0 if sqlite3.connect(sys.argv[1]).execute("SELECT env, secrets FROM sandboxes WHERE id = ?", (sys.argv[2],)).fetchone() == ("{}", "{}") else 1)' "$T/data/b3os.db" "$id"
  else
    skip secrets.ended_row_keeps_no_values "the store is Postgres here; the SQLite runs read the row (the Postgres codec is the same, row_codec.h)"
  fi
  check secrets.not_in_daemon_log "the value is in $T/daemon.log" not grep -q s3cr3t "$T/daemon.log"
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
  # Released behind the answer: stopped at once (frozen, unreachable), gone soon after.
  check delete.container_gone "runsc list: $(runsc_list | tr '\n' ' ')" eventually 15 not runsc_has "$id"
  check delete.cgroup_gone "left: $(cgroup_dirs "$id")" eventually 15 no_cgroup "$id"
  api DELETE "/v1/sandboxes/$id"
  check delete.again_200_same "first $first, again $(j -c '{id, status, stop_reason, stopped_at}') (HTTP $ST)" \
    [ "$ST" = 200 -a "$(j -c '{id, status, stop_reason, stopped_at}')" = "$first" ]
  api GET "/v1/sandboxes/$id"
  check delete.record_stays "$(snip)" [ "$ST" = 200 -a "$(j .status)" = stopped -a "$(j .stop_reason)" = deleted ]
}

# ---- ended sandboxes are forgotten in time ---------------------------------------------------

# status_of ID [KEY]: the sandbox's status, or the HTTP status when it is not 200.
status_of() {
  local key=${2:-$KEY}
  KEY=$key api GET "/v1/sandboxes/$1"
  if [ "$ST" = 200 ]; then j .status; else echo "$ST $(j .error.code)"; fi
}

# Creating and deleting sandboxes for ever must not grow the database: a project keeps its
# --ended-max-per-project newest ended sandboxes, each for --ended-retention-hours; older records
# are forgotten (404 sandbox_not_found after), running ones never, and each project counts its own.
s_forget_ended() {
  local a b c r o id forget forget2
  # Two projects of their own: no other section's sandbox ends in them meanwhile.
  forget=$("$B3OS_BIN/b3os" keys create --project forget --data-dir "$T/data" 2>/dev/null)
  forget2=$("$B3OS_BIN/b3os" keys create --project forget2 --data-dir "$T/data" 2>/dev/null)
  [[ $forget == b3os_sk_* && $forget2 == b3os_sk_* ]] || die "could not create the forget projects' keys"
  ALL_KEYS+=("$forget" "$forget2")
  local KEY=$forget
  for id in a b c; do
    create_sandbox '{}'
    printf -v "$id" '%s' "$CID"
  done
  create_sandbox '{}'
  r=$CID
  KEY=$forget2 create_sandbox '{}'
  o=$CID
  for id in "$a" "$b" "$c"; do delete_sandbox "$id" >/dev/null; done
  KEY=$forget2 delete_sandbox "$o" >/dev/null
  restart_with --ended-max-per-project 2
  check forget.oldest_past_the_count "$a: $(status_of "$a")" eventually 10 bash -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $KEY' '$URL/v1/sandboxes/$a')\" = 404 ]"
  api GET "/v1/sandboxes/$a"
  expect_error forget.get_404 404 sandbox_not_found
  api DELETE "/v1/sandboxes/$a"
  expect_error forget.delete_404 404 sandbox_not_found
  check forget.newest_two_kept "$b: $(status_of "$b"), $c: $(status_of "$c")" \
    test "$(status_of "$b") $(status_of "$c")" = "stopped stopped"
  check forget.running_kept "$r: $(status_of "$r")" test "$(status_of "$r")" = running
  check forget.other_project_own_count "$o: $(status_of "$o" "$forget2")" test "$(status_of "$o" "$forget2")" = stopped
  check forget.logged "$(grep -o 'forgot [0-9]* ended sandboxes[^"]*' "$T/daemon.log" | tail -n1)" \
    grep -q 'forgot [0-9]* ended sandboxes' "$T/daemon.log"
  # A retention of about a second: every ended one goes, the running one stays.
  restart_with --ended-retention-hours 0.0003
  check forget.past_their_time "$b: $(status_of "$b"), $c: $(status_of "$c"), the other project's $o: $(status_of "$o" "$forget2")" \
    eventually 10 bash -c "for u in '$b' '$c'; do [ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $KEY' '$URL/v1/sandboxes/'\$u)\" = 404 ] || exit 1; done; [ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $forget2' '$URL/v1/sandboxes/$o')\" = 404 ]"
  api GET '/v1/sandboxes?status=stopped&limit=100'
  check forget.none_listed "$(snip)" okj 200 '.data == []'
  check forget.running_kept_always "$r: $(status_of "$r")" test "$(status_of "$r")" = running
  run_exec "$r" '{"cmd":"echo alive"}'
  check forget.running_runs "$(snip)" jt '.stdout == "alive\n"'
  restart_with
  delete_sandbox "$r" || true
}

# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: b3osd killed (SIGKILL) and started again: sandboxes, their processes, expiry,
# idempotency records and the clean-up of a container killed meanwhile. Leaves the id of a
# running sandbox in $T/restart.id for s_delete (lifecycle.sh).

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
  thaw "$b"  # idle, so frozen by b3osd: a runsc kill by hand would wait for ever
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

  # Orphans (and sandboxes deleted just before the kill) are released behind the API.
  local running containers
  api GET '/v1/sandboxes?status=running&limit=100'
  running=$(j '[.data[].id] | sort | join(" ")')
  containers_are() { [ -n "$1" ] && [ "$1" = "$(runsc_list | sort | tr '\n' ' ' | sed 's/ $//')" ]; }
  eventually 20 containers_are "$running" || true
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

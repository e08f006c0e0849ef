#!/usr/bin/env bash
# Hostile sandboxes against a private b3osd: code inside floods its stderr (a host file once),
# writes garbage at the agent's channel, floods stdout, fork-bombs, fills its memory and its
# disk, and holds thousands of files open. Only that sandbox may suffer: during each attack a
# victim sandbox keeps answering exec and /healthz keeps answering, and afterwards b3osd is
# alive, its RSS bounded, and the attacker either runs on or is `failed` with a message that
# says why.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build-dev/bin tests/reliability/hostile.sh
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
VICTIM_BOUND_S=5    # an exec of `true` in the victim, while another sandbox attacks
HEALTH_BOUND_S=1    # /healthz, meanwhile
LOG_CAP_BYTES=$((3 << 20))  # sandbox.log and its one rotation (1 MiB each) with slack

e2e_begin hostile curl jq python3

trap 'finish_private_suite $?' EXIT
trap 'exit 130' INT TERM
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, temp dir $T"

create_sandbox '{"template":"base","timeout_s":900}'
VICTIM=$CID
[ -n "$VICTIM" ] || die "could not create the victim sandbox: $(snip)"
RSS0=$(rss_kb "$(daemon_pid)")

# while_attacking NAME PID: until PID (the attack's request) ends, the victim answers exec and
# the node answers /healthz within their bounds; the worst of each is reported.
while_attacking() {
  local name=$1 pid=$2 worst_exec=0 worst_health=0 t rounds=0
  while kill -0 "$pid" 2>/dev/null && [ "$rounds" -lt 60 ]; do
    t=$(curl -s -o /dev/null -w '%{time_total}' -m 30 -X POST "$URL/v1/sandboxes/$VICTIM/exec" \
      -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d '{"cmd":["true"]}')
    worst_exec=$(python3 -c "print(max($worst_exec, $t))")
    t=$(curl -s -o /dev/null -w '%{time_total}' -m 30 "$URL/healthz")
    worst_health=$(python3 -c "print(max($worst_health, $t))")
    rounds=$((rounds + 1))
    sleep 0.5
  done
  info "$name: victim exec worst ${worst_exec}s, /healthz worst ${worst_health}s over $rounds rounds"
  check "$name.victim_served" "victim exec took ${worst_exec}s (bound ${VICTIM_BOUND_S}s)" \
    python3 -c "import sys; sys.exit(0 if $worst_exec <= $VICTIM_BOUND_S else 1)"
  check "$name.health_served" "/healthz took ${worst_health}s (bound ${HEALTH_BOUND_S}s)" \
    python3 -c "import sys; sys.exit(0 if $worst_health <= $HEALTH_BOUND_S else 1)"
}

# attack NAME SANDBOX JSON: runs an exec in SANDBOX in the background (its answer in
# $T/NAME.json) while checking the victim; returns when the exec has answered.
attack() {
  local name=$1 id=$2 body=$3
  curl -s -m 120 -o "$T/$name.json" -w '%{http_code}' -X POST "$URL/v1/sandboxes/$id/exec" \
    -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -d "$body" >"$T/$name.status" &
  local pid=$!
  while_attacking "$name" "$pid"
  wait "$pid" || true
}

# after NAME ID [running]: the daemon is alive and the attacker is running, or failed with a
# message (only running, with a third argument: an attack the sandbox must live through).
after() {
  local name=$1 id=$2 must_run=${3:-}
  check "$name.daemon_alive" "b3osd died" daemon_alive
  api GET "/v1/sandboxes/$id"
  local status msg
  status=$(j .status)
  msg=$(j '.stop_message // empty')
  if [ "$status" = running ] || { [ -z "$must_run" ] && [ "$status" = failed ] && [ -n "$msg" ]; }; then
    pass "$name.attacker_state"
    info "$name: attacker is $status${msg:+ ($msg)}"
  else
    local want="running, or failed with a stop_message"
    [ -z "$must_run" ] || want="running (it must live through this)"
    fail "$name.attacker_state" "want $want; got $(snip)"
  fi
}

s_stderr_flood() {
  create_sandbox '{"template":"base"}'
  local id=$CID
  attack stderr_flood "$id" '{"cmd":"timeout 10 sh -c \"head -c 1200000000 /dev/zero > /proc/1/fd/2\"; echo done","timeout_ms":30000}'
  local size
  # No sandbox.log* at all when the flood failed the sandbox and its run dir went with it: the
  # glob is then left as it is, cat fails, and pipefail would end the section before after()
  # says how the attacker ended.
  size=$({ cat "$T/run/sandboxes/$id"/sandbox.log* 2>/dev/null || true; } | wc -c)
  check stderr_flood.log_capped "sandbox.log grew to $size bytes (cap $LOG_CAP_BYTES)" test "$size" -le "$LOG_CAP_BYTES"
  after stderr_flood "$id" running
  run_exec "$id" '{"cmd":"echo alive"}'
  check stderr_flood.still_serves "exec after the flood: $(snip)" okj 200 '.stdout == "alive\n"'
}

s_channel_garbage() {
  create_sandbox '{"template":"base"}'
  local id=$CID
  attack channel_garbage "$id" '{"cmd":"head -c 2000000 /dev/urandom > /proc/1/fd/1; head -c 2000000 /dev/urandom > /proc/1/fd/0; echo rc=$?","timeout_ms":30000}'
  # The channel is a host socket only PID 1 holds: opening it again inside is refused.
  check channel_garbage.refused "want both opens refused (ENXIO), got $(head -c 300 "$T/channel_garbage.json")" \
    jq -e '[.stderr | scan("No such device or address")] | length == 2' "$T/channel_garbage.json"
  after channel_garbage "$id" running
  # Nor can root inside take the agent over to write frames of its own: tracing it, writing
  # its memory or copying its fds are each refused (tests/reliability/agent_takeover.py).
  local body
  body=$(jq -nc --rawfile s "$HERE/agent_takeover.py" '{cmd: "python3 /dev/stdin", user: "root", stdin: $s, timeout_ms: 30000}')
  attack agent_takeover "$id" "$body"
  check agent_takeover.every_way_refused "$(head -c 400 "$T/agent_takeover.json")" \
    jq -e '.exit_code == 0 and (.stdout | fromjson | (length == 6) and (to_entries | all(.value != "allowed")))' "$T/agent_takeover.json"
  after agent_takeover "$id" running
  run_exec "$id" '{"cmd":"echo alive"}'
  check agent_takeover.still_serves "exec after: $(snip)" okj 200 '.stdout == "alive\n"'
}

s_stdout_flood() {
  create_sandbox '{"template":"base"}'
  local id=$CID
  attack stdout_flood "$id" '{"cmd":"cat /dev/zero","timeout_ms":8000}'
  local st
  st=$(cat "$T/stdout_flood.status")
  check stdout_flood.answered "want 200 with stdout cut at the cap, got HTTP $st $(head -c 200 "$T/stdout_flood.json")" \
    jq -e '.stdout_truncated == true and .timed_out == true' "$T/stdout_flood.json"
  after stdout_flood "$id" running
}

s_fork_bomb() {
  create_sandbox '{"template":"base"}'
  local id=$CID
  attack fork_bomb "$id" '{"cmd":"bomb() { bomb | bomb & }; bomb; sleep 20","timeout_ms":25000}'
  after fork_bomb "$id"
}

# Processes without end, each costing about two host pids (gVisor's systrap stubs): the sandbox
# stops at its pids cgroup's limit (256 + 2 per MiB, 768 here), named as the cause, and the
# node's process ids stay with the node: others create, exec and fork meanwhile and after.
s_process_flood() {
  create_sandbox '{"template":"base","memory_mib":256}'
  local id=$CID limit peak=0 n
  limit=$(cat "/sys/fs/cgroup/pids/b3os/$id/pids.max" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$id/pids.max" 2>/dev/null || echo "?")
  check process_flood.limit_by_memory "pids.max of a 256 MiB sandbox: $limit" test "$limit" = 768
  attack process_flood "$id" '{"cmd":"while :; do sleep 1000 & done","timeout_ms":60000}'
  api GET "/v1/sandboxes/$id"
  check process_flood.stopped_naming_the_limit "$(snip)" okj 200 '.status == "failed" and (.stop_message | test("limit of 768 host processes"))'
  after process_flood "$id"
  create_sandbox '{"template":"base","forkable":true}'
  local other=$CID
  check process_flood.others_create "$(snip)" test -n "$other"
  run_exec "$other" '{"cmd":"echo still here"}'
  check process_flood.others_exec "$(snip)" okj 200 '.stdout == "still here\n"'
  apij POST "/v1/sandboxes/$other/fork" '{"count": 1}'
  check process_flood.others_fork "$(snip)" okj 201 '(.data // .forks // []) | length == 1'
  for n in $(j -r '(.data // .forks // [])[].id'); do delete_sandbox "$n" || true; done
  delete_sandbox "$other" || true
}

s_memory() {
  create_sandbox '{"template":"base","memory_mib":256}'
  local id=$CID
  attack memory "$id" '{"cmd":["python3","-c","a = bytearray(700 << 20)\nfor i in range(0, len(a), 4096): a[i] = 1"],"timeout_ms":30000}'
  check memory.named "want 409 sandbox_not_running naming memory, got $(head -c 300 "$T/memory.json")" \
    jq -e '.error.code == "sandbox_not_running" and (.error.message | test("memory"))' "$T/memory.json"
  after memory "$id"
}

s_disk() {
  create_sandbox '{"template":"base","disk_gib":1}'
  local id=$CID
  attack disk "$id" '{"cmd":"dd if=/dev/zero of=/root/fill bs=1M count=1500 2>&1 | grep -o \"No space left on device\" | head -n 1; sync","timeout_ms":60000}'
  check disk.enospc "want dd to stop at No space left on device, got $(head -c 300 "$T/disk.json")" \
    jq -e '.stdout | test("No space left")' "$T/disk.json"
  after disk "$id" running
  run_exec "$id" '{"cmd":"rm -f /root/fill; echo freed"}'
  check disk.still_serves "exec after the disk filled: $(snip)" okj 200 '.stdout == "freed\n"'
}

s_many_files() {
  create_sandbox '{"template":"base"}'
  local id=$CID
  run_exec "$id" '{"cmd":"nohup python3 -c \"import os, time\nfs = [open(\\\"/tmp/f%d\\\" % i, \\\"w\\\") for i in range(20000)]\ntime.sleep(600)\" >/dev/null 2>&1 & sleep 8; ls /tmp | wc -l","timeout_ms":30000}'
  check many_files.opened "want 20000 files held open, got $(snip)" okj 200 '.stdout | test("^2000[0-9]")'
  attack many_files "$id" '{"cmd":"ls /proc/*/fd 2>/dev/null | wc -l; echo alive","timeout_ms":30000}'
  check many_files.still_serves "exec while 20000 files are open: $(head -c 300 "$T/many_files.json")" \
    jq -e '.stdout | test("alive")' "$T/many_files.json"
  after many_files "$id" running
}

run_section s_stderr_flood
run_section s_channel_garbage
run_section s_stdout_flood
run_section s_fork_bomb
run_section s_process_flood
run_section s_memory
run_section s_disk
run_section s_many_files

RSS1=$(rss_kb "$(daemon_pid)")
info "b3osd RSS ${RSS0} kB before, ${RSS1} kB after the attacks"
check daemon.rss_bounded "b3osd RSS grew from ${RSS0} to ${RSS1} kB" test "$RSS1" -le $((RSS0 + 131072))
run_exec "$VICTIM" '{"cmd":"echo fine"}'
check victim.unharmed "victim exec after every attack: $(snip)" okj 200 '.stdout == "fine\n"'

echo "# hostile: $(count_results PASS) passed, $(count_results FAIL) failed, $(count_results SKIP) skipped"
[ "$(count_results FAIL)" = 0 ]

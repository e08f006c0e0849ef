#!/usr/bin/env bash
# shellcheck disable=SC2016,SC2034,SC2010,SC2012,SC2015 # $VAR in single quotes are for the sandbox or jq; lib.sh reads TEMPLATES, RESPH, ALL_KEYS
# Faults against a private b3osd, each followed by the same checks: b3osd answers, every
# record says what happened, a fork is all there or not there, and once b3osd has settled
# nothing of a sandbox that is not live is left on the host (containers, shims, runsc
# processes, cgroups, run dirs, disks, loop devices, mounts, fork images, snapshot images).
#
# Parts (FAULTS_PARTS picks some, in this order):
#   daemon_kill  SIGKILL of b3osd in the middle of a create, a large upload, a fork of 3 and
#                a snapshot, at FAULTS_KILL_POINTS points each (delays spread over 20-800 ms
#                after the request is sent, denser early), then b3osd started again on the
#                same dirs
#   runtime_kill SIGKILL of a sandbox's runsc sandbox process, of its gofer, of its b3os-shim,
#                and `kill -9 1` of the agent from inside
#   sqlite_busy  another process holds BEGIN EXCLUSIVE on DATA_DIR/b3os.db while requests run
#   disk_full    a daemon whose DATA_DIR is a small ext4 the test makes; filled so a snapshot
#                cannot be written
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build-dev/bin tests/reliability/faults.sh
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir;
#   FAULTS_KILL_POINTS (3) kill points per operation (more: longer, by hand);
#   FAULTS_PARTS ("daemon_kill runtime_kill sqlite_busy disk_full");
#   FAULTS_SETTLE_S (30) how long b3osd may take to release what a dead sandbox held;
#   FAULTS_HEALTHZ_S (20) how long after a restart /healthz may take to answer 200.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
KILL_POINTS=${FAULTS_KILL_POINTS:-3}
PARTS=${FAULTS_PARTS:-daemon_kill runtime_kill sqlite_busy disk_full}
SETTLE_S=${FAULTS_SETTLE_S:-30}
HEALTHZ_S=${FAULTS_HEALTHZ_S:-20}
MIB=$((1 << 20))
OVERHEAD_MIB=256   # b3osd's --memory-overhead-mib default: the cgroup limit is memory_mib + this

e2e_begin faults python3 losetup mkfs.ext4 pgrep
ROOT=$T
: >"$ROOT/runs"

# ---- one private b3osd per "run" (a directory with data/, run/, its log and its port) ------

# use_run DIR: points lib.sh's helpers ($T, $URL, the pid file, the response files) at the
# b3osd of DIR (made on first use).
use_run() {
  T=$1
  mkdir -p "$T/data" "$T/run"
  : >>"$T/ids"
  grep -qx "$T" "$ROOT/runs" || echo "$T" >>"$ROOT/runs"
  export B3OS_E2E_PIDFILE=$T/daemon.pid
  RESP=$T/resp
  RESPH=$T/resp.headers
  [ -s "$T/port" ] || free_port >"$T/port" || die "no free TCP port found"
  PORT=$(cat "$T/port")
  URL=http://127.0.0.1:$PORT
  KEY=$(cat "$T/data/admin.key" 2>/dev/null || true)
  ALL_KEYS=()
  [ -z "$KEY" ] || ALL_KEYS=("$KEY")
}

# first_start: starts the run's b3osd for the first time and reads its admin key.
first_start() {
  start_daemon || {
    tail -n 20 "$T/daemon.log" >&2
    die "b3osd did not start (log above)"
  }
  KEY=$(cat "$T/data/admin.key")
  ALL_KEYS=("$KEY")
  ADMIN=$KEY
  info "b3osd pid $(daemon_pid) on $URL, temp dir $T"
}

on_exit() {
  local rc=$? r
  set +e
  trap - EXIT
  e2e_aborted "$rc"
  while read -r r; do
    [ -n "$r" ] || continue
    use_run "$r"
    cleanup_everything
    if mountpoint -q "$r/data"; then umount -l "$r/data" 2>/dev/null || true; fi
  done <"$ROOT/runs"
  T=$ROOT
  local fails
  fails=$(count_results FAIL)
  echo "# faults: $(count_results PASS) passed, ${fails:-0} failed, $(count_results SKIP) skipped in $((($(now_ms) - SUITE_START) / 1000)) s"
  if [ "$rc" != 0 ] || [ "${fails:-0}" != 0 ]; then
    while read -r r; do
      echo "# ---- last 40 lines of the b3osd log ($r/daemon.log) ----"
      tail -n 40 "$r/daemon.log" 2>/dev/null | sed 's/^/# /'
    done <"$ROOT/runs"
    [ "$rc" != 0 ] || rc=1
  fi
  if [ "${B3OS_E2E_KEEP:-0}" = 1 ]; then echo "# kept $ROOT"; else rm -rf "$ROOT"; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- helpers --------------------------------------------------------------------------------

ms_sleep() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# kill_delays: the FAULTS_KILL_POINTS delays in ms, spread geometrically over 20-800 (20, 126,
# 800 for 3): most of an operation's steps happen early (a create takes ~300 ms when the
# machine is quiet), so the points are denser there.
kill_delays() {
  local n=$KILL_POINTS
  if [ "$n" -le 1 ]; then echo 130; return; fi
  awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) printf "%d\n", 20 * exp(log(40) * i / (n - 1)) + 0.5 }'
}

# all_records: every sandbox record of the admin project (all statuses, every page) as one
# JSON array in $T/records.json. Returns 1 if b3osd did not answer.
all_records() {
  local cursor="" out=$T/records.json
  echo '[]' >"$out"
  for _ in $(seq 1 100); do
    api GET "/v1/sandboxes?limit=100${cursor:+&cursor=$cursor}"
    [ "$ST" = 200 ] || return 1
    jq -s '.[0] + .[1].data' "$out" "$RESP" >"$out.tmp" && mv "$out.tmp" "$out"
    cursor=$(j '.next_cursor // empty')
    [ -n "$cursor" ] || return 0
  done
}

# all_snapshots: every snapshot id of the admin project, one a line, in $T/snapshots.ids.
all_snapshots() {
  local cursor="" out=$T/snapshots.ids
  : >"$out"
  for _ in $(seq 1 100); do
    api GET "/v1/snapshots?limit=100${cursor:+&cursor=$cursor}"
    [ "$ST" = 200 ] || return 1
    j '.data[].id' >>"$out"
    cursor=$(j '.next_cursor // empty')
    [ -n "$cursor" ] || return 0
  done
}

# remember_ids: every sandbox id this run has seen (records, the log, dirs, containers) into
# $T/seen.ids, so that cgroups (under the host-wide /sys/fs/cgroup/*/b3os/) are looked up only
# for this run's sandboxes.
remember_ids() {
  {
    cat "$T/seen.ids" 2>/dev/null || true
    jq -r '.[].id' "$T/records.json" 2>/dev/null || true
    grep -oE 'sbx_[0-9a-z]+' "$T/daemon.log" 2>/dev/null || true
    ls "$T/run/sandboxes" 2>/dev/null | grep -E '^sbx_' || true
    ls "$T/data/disks" 2>/dev/null | grep -E '^sbx_' || true
    runsc_list
  } | sort -u >"$T/seen.ids.tmp"
  mv "$T/seen.ids.tmp" "$T/seen.ids"
}

# leftovers: prints one line per thing on the host that belongs to a sandbox without a live
# (running or paused) record, or a snapshot image without a record; nothing when clean.
leftovers() {
  if ! all_records; then
    echo "GET /v1/sandboxes: $(snip)"
    return 0
  fi
  jq -r '.[] | select(.status == "running" or .status == "paused") | .id' "$T/records.json" | sort >"$T/live.ids"
  remember_ids
  local id pid d live=$T/live.ids
  is_live() { grep -qx "$1" "$live"; }
  for id in $(runsc_list); do is_live "$id" || echo "runsc container $id"; done
  for pid in $(pgrep -f "b3os-shim $T/run/sandboxes/" 2>/dev/null || true); do
    id=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -oE 'sbx_[0-9a-z]+' | head -n1 || true)
    [ -z "$id" ] || is_live "$id" || echo "b3os-shim pid $pid of $id"
  done
  # runsc processes (sandbox, gofer, CLI) of this run's runsc root
  for pid in $(pgrep -f -- "$T/run/runsc" 2>/dev/null || true); do
    id=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -oE 'sbx_[0-9a-z]+' | tail -n1 || true)
    [ -z "$id" ] || is_live "$id" || echo "runsc process $pid of $id: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80)"
  done
  while read -r id; do
    [ -n "$id" ] || continue
    is_live "$id" && continue
    for d in $(cgroup_dirs "$id"); do echo "cgroup $d"; done
  done <"$T/seen.ids"
  for d in $(ls -A "$T/run/sandboxes" 2>/dev/null || true); do is_live "$d" || echo "run dir $T/run/sandboxes/$d"; done
  for d in $(ls -A "$T/data/disks" 2>/dev/null || true); do is_live "$d" || echo "disk dir $T/data/disks/$d"; done
  awk -v p="$T/data/disks/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | while read -r d; do
    id=$(echo "$d" | grep -oE 'sbx_[0-9a-z]+' || true)
    [ -n "$id" ] && is_live "$id" || echo "mount $d"
  done
  { losetup -a 2>/dev/null || true; } | { grep -F "$T/data/disks/" || true; } | while read -r d; do
    id=$(echo "$d" | grep -oE 'sbx_[0-9a-z]+' | head -n1 || true)
    [ -n "$id" ] && is_live "$id" || echo "loop device $d"
  done
  d=$(ls -A "$T/data/fork-images" 2>/dev/null | tr '\n' ' ')
  [ -z "$d" ] || echo "fork images $d"
  if all_snapshots; then
    for d in $(ls -A "$T/data/snapshots" 2>/dev/null || true); do
      grep -qx "$d" "$T/snapshots.ids" || echo "snapshot image $T/data/snapshots/$d without a record"
    done
    while read -r d; do
      [ -z "$d" ] || [ -e "$T/data/snapshots/$d/checkpoint.img" ] || echo "snapshot record $d without an image"
    done <"$T/snapshots.ids"
  else
    echo "GET /v1/snapshots: $(snip)"
  fi
}

# check_settled NAME: every record says what happened (a status of the API; failed ones with a
# stop_message), and within SETTLE_S seconds nothing is left of sandboxes that are not live.
check_settled() {
  local name=$1 bad left="" deadline
  if ! all_records; then
    fail "$name.records" "GET /v1/sandboxes: $(snip)"
    return 0
  fi
  bad=$(jq -r '.[] | select((.status | IN("running", "paused", "stopped", "failed") | not)
      or (.status == "failed" and ((.stop_message // "") | length) == 0)
      or ((.status == "stopped" or .status == "failed") and .stopped_at == null))
    | "\(.id) status \(.status) stop_message \(.stop_message)"' "$T/records.json" | tr '\n' ';')
  check "$name.records_say_what_happened" "$bad" [ -z "$bad" ]
  deadline=$(($(now_ms) + SETTLE_S * 1000))
  while :; do
    left=$(leftovers | head -n 12 | tr '\n' ';') || true
    [ -n "$left" ] && [ "$(now_ms)" -lt "$deadline" ] || break
    sleep 1
  done
  check "$name.no_orphans" "after ${SETTLE_S} s: $left" [ -z "$left" ]
}

# restart_daemon NAME: starts b3osd again on the same dirs; checks /healthz answers 200 in time.
restart_daemon() {
  local name=$1 t0 ms
  t0=$(now_ms)
  if ! start_daemon; then
    fail "$name.daemon_restarts" "b3osd did not answer /healthz within 30 s: $(tail -n 3 "$T/daemon.log" | tr '\n' ' ')"
    start_daemon || die "b3osd does not start again; see $T/daemon.log"
    return 0
  fi
  ms=$(($(now_ms) - t0))
  check "$name.healthz_after_restart" "/healthz answered 200 after $ms ms (want <= ${HEALTHZ_S} s)" \
    [ "$ms" -le $((HEALTHZ_S * 1000)) ]
}

# kill_mid NAME DELAY_MS OUT CURL_ARGS...: sends a request with curl in the background (status
# and body to OUT), SIGKILLs b3osd DELAY_MS later, then starts it again.
kill_mid() {
  local name=$1 delay=$2 out=$3 c
  shift 3
  curl -sS -m 120 -o "$out.body" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "$@" >"$out" 2>/dev/null &
  c=$!
  ms_sleep "$delay"
  stop_daemon KILL
  wait "$c" || true
  info "$name: killed b3osd ${delay} ms after the request; the client got HTTP $(cat "$out" 2>/dev/null || echo '?')"
  restart_daemon "$name"
}

# answers ID NAME: the sandbox is running and runs a command.
# shim_of ID: the pid of the b3os-shim serving sandbox ID (empty when none).
shim_of() { pgrep -f "b3os-shim $T/run/sandboxes/$1/" | head -n1 || true; }

answers() {
  local id=$1 name=$2
  run_exec "$id" '{"cmd":"echo ok"}'
  check "$name" "exec in $id: $(snip)" okj 200 '.stdout == "ok\n"'
}

# limit_is_normal ID NAME: the sandbox's memory cgroup limit is its own again
# (memory_mib + overhead), not raised for an image that no checkpoint is writing any more.
limit_is_normal() {
  local id=$1 name=$2 mib want got
  api GET "/v1/sandboxes/$id"
  mib=$(j .memory_mib)
  want=$(((mib + OVERHEAD_MIB) * MIB))
  got=$(memory_limit "$id" 2>/dev/null || echo none)
  check "$name" "memory limit of $id is $got, want $want (${mib} + ${OVERHEAD_MIB} MiB)" [ "$got" = "$want" ]
}

wait_status() { # wait_status ID STATUS SECONDS: polls GET until the status is STATUS
  local end=$(($(now_ms) + $3 * 1000))
  while :; do
    api GET "/v1/sandboxes/$1"
    [ "$(j .status)" != "$2" ] || return 0
    [ "$(now_ms)" -lt "$end" ] || return 1
    sleep 0.3
  done
}

# ---- 1. SIGKILL of b3osd mid-operation --------------------------------------------------------

p_daemon_kill() {
  local delays i d id n ok
  mapfile -t delays < <(kill_delays)
  info "daemon_kill: kill points ${delays[*]} ms"

  # create
  for i in "${!delays[@]}"; do
    d=${delays[$i]}
    kill_mid "kill.create.$d" "$d" "$T/k.create" -X POST -H 'Content-Type: application/json' \
      -H "Idempotency-Key: faults-create-$i-$$" -d '{"metadata":{"attempt":"create-'"$i"'"}}' "$URL/v1/sandboxes"
    all_records || true
    n=$(jq '[.[] | select(.metadata.attempt == "create-'"$i"'")] | length' "$T/records.json")
    id=$(jq -r '[.[] | select(.metadata.attempt == "create-'"$i"'")][0].id // empty' "$T/records.json")
    check "kill.create.$d.at_most_one" "$n records of the interrupted create" [ "$n" -le 1 ]
    if [ -n "$id" ]; then
      api GET "/v1/sandboxes/$id"
      check "kill.create.$d.record_running" "the create's record: $(snip)" okj 200 '.status == "running"'
      answers "$id" "kill.create.$d.sandbox_answers"
    fi
    # The retried create: the same sandbox when one was made (no duplicate), else a new one.
    create_sandbox '{"metadata":{"attempt":"create-'"$i"'"}}' -H "Idempotency-Key: faults-create-$i-$$"
    if [ -n "$id" ]; then
      check "kill.create.$d.retry_same_sandbox" "retry with the same Idempotency-Key: want 201 with $id, got $(snip)" \
        okj 201 '.id == "'"$id"'"'
    else
      check "kill.create.$d.retry_creates" "retry with the same Idempotency-Key: want 201, got $(snip)" [ "$ST" = 201 ]
    fi
    check_settled "kill.create.$d"
    for id in $(jq -r '.[] | select(.metadata.attempt == "create-'"$i"'") | .id' "$T/records.json"); do
      delete_sandbox "$id" || true
    done
  done

  # upload: a large streaming PUT (rate-limited so that it lasts ~2 s)
  create_sandbox '{"metadata":{"role":"upload-target"}}'
  local up=$CID size=$((256 * MIB))
  [ -n "$up" ] || { fail kill.upload.setup "create: $(snip)"; return 0; }
  truncate -s "$size" "$T/big.bin"
  for d in "${delays[@]}"; do
    kill_mid "kill.upload.$d" "$d" "$T/k.upload" -X PUT -H 'Content-Type: application/octet-stream' \
      --limit-rate 128M --data-binary @"$T/big.bin" "$URL/v1/sandboxes/$up/files?path=/workspace/big.bin"
    api GET "/v1/sandboxes/$up"
    check "kill.upload.$d.target_running" "$(j '"\(.status) (\(.stop_reason // "-")): \(.stop_message // "")"') $(snip)" \
      okj 200 '.status == "running"'
    answers "$up" "kill.upload.$d.target_answers"
    run_exec "$up" '{"cmd":"stat -c %s /workspace/big.bin 2>/dev/null || echo absent; ls -a /workspace | grep -c b3os-tmp || true"}'
    check "kill.upload.$d.file_whole_or_absent" "want the whole file ($size bytes) or none, and no temp file: $(snip)" \
      okj 200 '(.stdout | split("\n")) as $l | ($l[0] == "absent" or $l[0] == "'"$size"'") and $l[1] == "0"'
    run_exec "$up" '{"cmd":"rm -f /workspace/big.bin"}'
    check_settled "kill.upload.$d"
  done
  delete_sandbox "$up" || true
  rm -f "$T/big.bin"

  # fork (count 3) and snapshot, of one forkable source
  create_sandbox '{"forkable":true,"metadata":{"role":"fork-source"}}'
  local src=$CID
  [ -n "$src" ] || { fail kill.fork.setup "create: $(snip)"; return 0; }
  run_exec "$src" '{"cmd":"echo before > /workspace/f"}'
  for i in "${!delays[@]}"; do
    d=${delays[$i]}
    kill_mid "kill.fork.$d" "$d" "$T/k.fork" -X POST -H 'Content-Type: application/json' \
      -d '{"count":3,"metadata":{"attempt":"fork-'"$i"'"}}' "$URL/v1/sandboxes/$src/fork"
    all_records || true
    n=$(jq '[.[] | select(.metadata.attempt == "fork-'"$i"'")] | length' "$T/records.json")
    ok=$(jq '[.[] | select(.metadata.attempt == "fork-'"$i"'" and .status == "running")] | length' "$T/records.json")
    check "kill.fork.$d.all_or_nothing" "$n fork records ($ok running): want 0, or 3 running: $(jq -c '[.[] | select(.metadata.attempt == "fork-'"$i"'") | {id, status, stop_message}]' "$T/records.json")" \
      [ "$n" = 0 -o "$ok" = 3 ]
    for id in $(jq -r '.[] | select(.metadata.attempt == "fork-'"$i"'" and .status == "running") | .id' "$T/records.json"); do
      run_exec "$id" '{"cmd":"cat /workspace/f"}'
      check "kill.fork.$d.fork_answers" "fork $id: $(snip)" okj 200 '.stdout == "before\n"'
    done
    api GET "/v1/sandboxes/$src"
    check "kill.fork.$d.source_running" "$(snip)" okj 200 '.status == "running"'
    answers "$src" "kill.fork.$d.source_answers"
    limit_is_normal "$src" "kill.fork.$d.source_limit_set_back"
    check_settled "kill.fork.$d"
    for id in $(jq -r '.[] | select(.metadata.attempt == "fork-'"$i"'") | .id' "$T/records.json"); do
      delete_sandbox "$id" || true
    done
  done
  for d in "${delays[@]}"; do
    kill_mid "kill.snapshot.$d" "$d" "$T/k.snap" -X POST "$URL/v1/sandboxes/$src/snapshot"
    api GET "/v1/sandboxes/$src"
    check "kill.snapshot.$d.source_running" "$(snip)" okj 200 '.status == "running"'
    answers "$src" "kill.snapshot.$d.source_answers"
    limit_is_normal "$src" "kill.snapshot.$d.source_limit_set_back"
    check_settled "kill.snapshot.$d"   # includes: no snapshot image without a record, and back
  done
  # A snapshot recorded before a kill is whole: a sandbox is created from it.
  all_snapshots || true
  local snp
  snp=$(tail -n1 "$T/snapshots.ids")
  if [ -n "$snp" ]; then
    create_sandbox '{"snapshot":"'"$snp"'","metadata":{"role":"from-snapshot"}}'
    check kill.snapshot.recorded_one_restores "create from $snp: $(snip)" okj 201 '.status == "running"'
    if [ -n "$CID" ]; then
      run_exec "$CID" '{"cmd":"cat /workspace/f"}'
      check kill.snapshot.restored_has_files "$(snip)" okj 200 '.stdout == "before\n"'
      delete_sandbox "$CID" || true
    fi
  else
    skip kill.snapshot.recorded_one_restores "no snapshot was recorded before any kill point (each kill came before the snapshot finished)"
  fi
  while read -r snp; do [ -z "$snp" ] || api DELETE "/v1/snapshots/$snp"; done <"$T/snapshots.ids"
  delete_sandbox "$src" || true
  check_settled kill.end
}

# ---- 2. runtime processes killed ---------------------------------------------------------------

# state_pid ID FIELD: a pid from runsc's state file of the container (.sandbox.pid, .goferPid).
state_pid() {
  jq -r "$2 // empty" "$T/run/runsc/$1_sandbox:$1.state" 2>/dev/null || true
}

p_runtime_kill() {
  local id pid msg
  # the sandbox process (runsc-sandbox, the sentry)
  create_sandbox '{"metadata":{"fault":"sandbox-process"}}'
  id=$CID
  pid=$(state_pid "$id" .sandbox.pid)
  if [ -z "$id" ] || [ -z "$pid" ]; then
    fail runtime.sandbox_process.setup "create: $(snip); pid from $T/run/runsc/${id}_sandbox:$id.state: '$pid'"
  else
    kill -KILL "$pid"
    wait_status "$id" failed 20 || true
    msg=$(j .stop_message)
    check runtime.sandbox_process.failed "want failed within 20 s: $(snip)" okj 200 '.status == "failed" and .stop_reason == "failed"'
    check runtime.sandbox_process.message_names_kill "stop_message: $msg" \
      grep -qiE 'runtime process was killed.*signal 9' <<<"$msg"
    run_exec "$id" '{"cmd":"true"}'
    expect_error runtime.sandbox_process.exec_409 409 sandbox_not_running
    check_settled runtime.sandbox_process
  fi

  # the gofer (serves the template's rootfs to the sandbox)
  create_sandbox '{"metadata":{"fault":"gofer"}}'
  id=$CID
  pid=$(state_pid "$id" .goferPid)
  if [ -z "$id" ] || [ -z "$pid" ]; then
    fail runtime.gofer.setup "create: $(snip); gofer pid: '$pid'"
  else
    kill -KILL "$pid"
    sleep 1
    # Reading files of the rootfs that were not read before needs the gofer.
    run_exec "$id" '{"cmd":"cat /usr/share/common-licenses/GPL-3 | wc -c; python3 -c \"import json, email; print(1)\"","timeout_ms":20000}' -m 40
    info "runtime.gofer: exec after the gofer was killed: $(snip)"
    wait_status "$id" failed 10 || true
    api GET "/v1/sandboxes/$id"
    msg=$(j .stop_message)
    if [ "$(j .status)" = failed ]; then
      check runtime.gofer.message_names_gofer "failed, stop_message: '$msg'" grep -qi 'gofer' <<<"$msg"
    else
      answers "$id" runtime.gofer.running_sandbox_answers
    fi
    check_settled runtime.gofer
    delete_sandbox "$id" || true
  fi

  # the shim (holds a copy of b3osd's end of the agent channel, drains the sandbox's log):
  # b3osd starts another when it is gone, and hands it the channel and the log pipe; the
  # sandbox then outlives a SIGKILL restart of b3osd, and a shim killed after that restart
  # (b3osd took both back from the new shim) is started again too.
  create_sandbox '{"metadata":{"fault":"shim"}}'
  id=$CID
  pid=$(shim_of "$id")
  if [ -z "$id" ] || [ -z "$pid" ]; then
    fail runtime.shim.setup "create: $(snip); shim pid: '$pid'"
  else
    local round
    for round in 1 2; do
      kill -KILL "$pid"
      new_shim() { local p; p=$(shim_of "$id"); [ -n "$p" ] && [ "$p" != "$pid" ]; }
      check "runtime.shim.started_again_$round" "shim pid $pid killed; now: '$(shim_of "$id")'" eventually 10 new_shim
      pid=$(shim_of "$id")
      answers "$id" "runtime.shim.sandbox_answers_$round"
      # The sandbox's stderr (the agent's /proc/1/fd/2) still reaches its log, drained by the new shim.
      run_exec "$id" "{\"cmd\":\"echo shim-log-$round >/proc/1/fd/2\"}"
      logged() { grep -q "shim-log-$round" "$T/run/sandboxes/$id/sandbox.log" 2>/dev/null; }
      check "runtime.shim.log_drained_$round" "exec: $(snip); log: $(tail -c 300 "$T/run/sandboxes/$id/sandbox.log" 2>/dev/null | tr '\n' ' ')" eventually 10 logged
      if [ "$round" = 1 ]; then
        stop_daemon KILL
        restart_daemon runtime.shim
        api GET "/v1/sandboxes/$id"
        check runtime.shim.running_after_restart "$(snip)" okj 200 '.status == "running"'
        answers "$id" runtime.shim.after_restart_answers
        pid=$(shim_of "$id")
      fi
    done
    local murl
    murl=$(grep -o 'metrics on http://[^ ]*' "$T/daemon.log" | tail -n1 | cut -d' ' -f3)
    local metric
    metric=$(curl -s "$murl" | awk '$1 == "b3os_shim_restarts_total{outcome=\"ok\"}" {print $2}')
    check runtime.shim.counted "b3os_shim_restarts_total{outcome=\"ok\"} = '$metric' (the restart reset it; want 1)" test "$metric" = 1
    check_settled runtime.shim
    delete_sandbox "$id" || true
    # Once its sandbox is deleted, no shim of it is left or started.
    no_shim() { [ -z "$(shim_of "$id")" ]; }
    check runtime.shim.none_after_delete "shim: '$(shim_of "$id")'" eventually 10 no_shim
  fi

  # the agent (PID 1), from inside
  create_sandbox '{"metadata":{"fault":"agent"}}'
  id=$CID
  if [ -z "$id" ]; then
    fail runtime.agent.setup "create: $(snip)"
  else
    run_exec "$id" '{"cmd":"kill -9 1; echo sent","timeout_ms":10000}' -m 30
    info "runtime.agent: exec of kill -9 1: $(snip)"
    wait_status "$id" failed 10 || true
    msg=$(j .stop_message)
    if [ "$(j .status)" = failed ]; then
      check runtime.agent.message_names_agent "stop_message: '$msg'" grep -qiE 'agent' <<<"$msg"
    else
      # PID 1 does not get signals it has no handler for from inside its namespace (kill(2));
      # SIGKILL included: the sandbox must run on.
      answers "$id" runtime.agent.kill_ignored_sandbox_answers
    fi
    check_settled runtime.agent
    delete_sandbox "$id" || true
  fi
}

# ---- 4. SQLite busy ---------------------------------------------------------------------------

# hold_db SECONDS: another process takes SQLite's write lock on the store (BEGIN EXCLUSIVE),
# holds it SECONDS, and commits; returns once the lock is held ($HOLDER is its pid).
hold_db() {
  python3 - "$T/data/b3os.db" "$1" >"$T/holder.out" 2>&1 <<'EOF' &
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
c.execute("COMMIT")
print("released", flush=True)
EOF
  HOLDER=$!
  for _ in $(seq 1 100); do
    grep -q locked "$T/holder.out" && return 0
    sleep 0.1
  done
  return 1
}

# timed NAME CURL_ARGS...: one request in the background; "status seconds retry-after" to
# $T/busy.NAME, the body to $T/busy.NAME.body.
timed() {
  local name=$1
  shift
  (
    out=$(curl -sS -m 120 -o "$T/busy.$name.body" -D "$T/busy.$name.h" -w '%{http_code} %{time_total}' \
      -H "Authorization: Bearer $ADMIN" "$@" 2>/dev/null) || out="000 120"
    ra=$(grep -i '^retry-after:' "$T/busy.$name.h" 2>/dev/null | tr -d '\r' | awk '{print $2}') || true
    echo "$out ${ra:--}" >"$T/busy.$name"
  ) &
}

p_sqlite_busy() {
  local a b hold bound r name st secs ra
  create_sandbox '{"metadata":{"role":"busy-a"}}'
  a=$CID
  [ -n "$a" ] || { fail busy.setup "create: $(snip)"; return 0; }
  for hold in 3 20; do
    create_sandbox '{"metadata":{"role":"busy-b"}}'
    b=$CID
    [ -n "$b" ] || { fail "busy.$hold.setup" "create: $(snip)"; continue; }
    rm -f "$T"/busy.*
    if ! hold_db "$hold"; then
      fail "busy.$hold.lock" "python3 could not lock the store: $(cat "$T/holder.out")"
      continue
    fi
    info "busy.$hold: the store is locked by pid $HOLDER for $hold s (b3osd waits up to 5 s: daemon/store/store.cc busy_timeout)"
    timed get "$URL/v1/sandboxes/$a"
    timed list "$URL/v1/sandboxes?limit=5"
    timed exec -X POST -H 'Content-Type: application/json' -d '{"cmd":"echo ok"}' "$URL/v1/sandboxes/$a/exec"
    timed create -X POST -H 'Content-Type: application/json' -d '{"metadata":{"attempt":"busy-'"$hold"'"}}' "$URL/v1/sandboxes"
    timed idem -X POST -H 'Content-Type: application/json' -H "Idempotency-Key: busy-$hold-$$" \
      -d '{"cmd":"echo idem"}' "$URL/v1/sandboxes/$a/exec"
    timed delete -X DELETE "$URL/v1/sandboxes/$b"
    timed healthz "$URL/healthz"
    wait
    # Bounded: the lock's hold (or busy_timeout) plus generous slack for a loaded machine.
    bound=$((hold + 25))
    for name in get list exec create idem delete healthz; do
      read -r st secs ra <"$T/busy.$name" || { st=000 secs=0 ra=-; }
      info "busy.$hold.$name: HTTP $st in $secs s, Retry-After $ra: $(head -c 160 "$T/busy.$name.body" 2>/dev/null | tr '\n' ' ')"
      check "busy.$hold.$name.bounded" "HTTP $st after $secs s (want an answer within $bound s)" \
        awk -v s="$secs" -v b="$bound" -v st="$st" 'BEGIN { exit !(st != "000" && s <= b) }'
      case $st in
        2??) pass "busy.$hold.$name.documented_status" ;;
        503) check "busy.$hold.$name.documented_status" "503 without Retry-After" [ "$ra" != - ] ;;
        *) fail "busy.$hold.$name.documented_status" "want 2xx, or 503 with Retry-After; got HTTP $st: $(head -c 200 "$T/busy.$name.body")" ;;
      esac
    done
    # What the answers said is what the records say.
    read -r st _ <"$T/busy.delete"
    api GET "/v1/sandboxes/$b"
    if [ "$st" = 200 ]; then
      check "busy.$hold.delete_recorded" "the delete answered 200; the record: $(snip)" okj 200 '.status == "stopped" and .stop_reason == "deleted"'
    else
      check "busy.$hold.undeleted_runs" "the delete answered $st; the record: $(snip)" okj 200 '.status == "running"'
      delete_sandbox "$b" || true
    fi
    read -r st _ <"$T/busy.create"
    all_records || true
    r=$(jq -c '[.[] | select(.metadata.attempt == "busy-'"$hold"'") | {id, status}]' "$T/records.json")
    if [ "$st" = 201 ]; then
      check "busy.$hold.create_recorded" "the create answered 201; records: $r" \
        [ "$(jq '[.[] | select(.metadata.attempt == "busy-'"$hold"'" and .status == "running")] | length' "$T/records.json")" = 1 ]
    else
      check "busy.$hold.failed_create_left_nothing" "the create answered $st; records: $r" [ "$r" = "[]" ]
    fi
    wait "$HOLDER" 2>/dev/null || true
    check "busy.$hold.holder_released" "$(cat "$T/holder.out")" grep -q released "$T/holder.out"
    r=$(python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("PRAGMA integrity_check").fetchone()[0])' \
      "$T/data/b3os.db" 2>&1) || true
    check "busy.$hold.store_intact" "PRAGMA integrity_check: $r" [ "$r" = ok ]
    answers "$a" "busy.$hold.after_release_exec"
    create_sandbox '{"metadata":{"role":"busy-after"}}'
    check "busy.$hold.after_release_create" "$(snip)" okj 201 '.status == "running"'
    [ -z "$CID" ] || { delete_sandbox "$CID" || true; }
    for r in $(jq -r '.[] | select(.metadata.attempt == "busy-'"$hold"'") | .id' "$T/records.json"); do
      delete_sandbox "$r" || true
    done
    check_settled "busy.$hold"
  done
  delete_sandbox "$a" || true
}

# ---- 3. the data disk full during a snapshot --------------------------------------------------

p_disk_full() {
  local img=$ROOT/small.img fs_mib=600 id free need size msg
  use_run "$ROOT/small"
  if [ ! -e /dev/loop-control ]; then
    skip disk_full "no /dev/loop-control: cannot make the small filesystem"
    return 0
  fi
  truncate -s "${fs_mib}M" "$img"
  mkfs.ext4 -q -F -m 0 "$img" >/dev/null
  mount -o loop "$img" "$T/data"
  info "disk_full: DATA_DIR $T/data is a ${fs_mib} MiB ext4 ($(df -h --output=avail "$T/data" | tail -n1 | tr -d ' ') free)"
  # No reserve (--disk-reserve-gib would refuse every snapshot on so small a disk before it is
  # written): this part is about a disk that fills anyway, under runsc's own write.
  # The sandboxes' disks live on the host's own disk: admission promises no disk_gib past the
  # free space of the disks' filesystem, and a 600 MiB one holds no 1 GiB disk.
  mkdir -p "$ROOT/disks"
  local B3OS_E2E_DAEMON_ARGS="${B3OS_E2E_DAEMON_ARGS:-} --disk-reserve-gib 0 --disks-dir $ROOT/disks"
  first_start
  create_sandbox '{"metadata":{"role":"diskfull"}}'
  id=$CID
  [ -n "$id" ] || { fail disk_full.setup "create: $(snip)"; return 0; }
  run_exec "$id" '{"cmd":"nohup sh -c \"while :; do date +%s%N > /dev/shm/now; sleep 0.2; done\" >/dev/null 2>&1 & echo ok"}'
  # How large an image is: one snapshot with room, removed again.
  api POST "/v1/sandboxes/$id/snapshot"
  if [ "$ST" != 201 ]; then
    fail disk_full.setup "a snapshot with room failed: $(snip)"
    return 0
  fi
  size=$(j .size_bytes)
  api DELETE "/v1/snapshots/$(j .id)"
  sync
  # Fill the filesystem, leaving an eighth of an image free: the snapshot cannot be written.
  free=$(($(stat -f -c '%a * %S' "$T/data")))
  need=$((size / 8 < 8 * MIB ? size / 8 : 8 * MIB))
  info "disk_full: an image is $((size / MIB)) MiB; filling $(((free - need) / MIB)) of $((free / MIB)) MiB free"
  if [ $((free - need)) -le 0 ]; then
    skip disk_full.snapshot "the image ($((size / MIB)) MiB) does not fit the small filesystem in the first place"
    return 0
  fi
  fallocate -l $((free - need)) "$T/data/fill" || dd if=/dev/zero of="$T/data/fill" bs=1M count=$(((free - need) / MIB)) status=none || true
  info "disk_full: $(df -h --output=avail "$T/data" | tail -n1 | tr -d ' ') left"
  api POST "/v1/sandboxes/$id/snapshot" -m 120
  msg=$(j .error.message)
  info "disk_full: snapshot on a full disk: $(snip)"
  check disk_full.snapshot_fails_503 "want 503 capacity_unavailable with Retry-After, got $(snip)" \
    okj 503 '.error.code == "capacity_unavailable"'
  check disk_full.message_says_disk_full "error.message: '$msg'" \
    eval 'grep -qiE "no space|disk is full|ENOSPC" <<<"$msg" && ! grep -q goroutine <<<"$msg"'
  check disk_full.retry_after "Retry-After: '$(header Retry-After)'" [ -n "$(header Retry-After)" ]
  all_snapshots || true
  check disk_full.no_snapshot_record "snapshots listed: $(tr '\n' ' ' <"$T/snapshots.ids")" [ ! -s "$T/snapshots.ids" ]
  check disk_full.no_snapshot_image "left in $T/data/snapshots: $(ls -A "$T/data/snapshots" 2>/dev/null | tr '\n' ' ')" \
    [ -z "$(ls -A "$T/data/snapshots" 2>/dev/null)" ]
  api GET "/v1/sandboxes/$id"
  check disk_full.sandbox_running "$(snip)" okj 200 '.status == "running"'
  # The clock is written by a loop that starts processes; on a loaded machine one tick can take
  # longer than any fixed wait: wait up to 5 s for it to move.
  run_exec "$id" '{"cmd":"a=$(cat /dev/shm/now); for i in $(seq 50); do sleep 0.1; b=$(cat /dev/shm/now); [ \"$a\" != \"$b\" ] && { echo ticking; break; }; done"}'
  check disk_full.sandbox_runs_on "$(snip)" okj 200 '.stdout == "ticking\n"'
  limit_is_normal "$id" disk_full.limit_set_back
  check_settled disk_full
  # With room again, snapshots work.
  rm -f "$T/data/fill"
  api POST "/v1/sandboxes/$id/snapshot" -m 120
  check disk_full.snapshot_after_room "$(snip)" okj 201 '.object == "snapshot"'
  [ "$ST" != 201 ] || api DELETE "/v1/snapshots/$(j .id)"
  delete_sandbox "$id" || true
  check_settled disk_full.end
  cleanup_everything
  umount -l "$T/data" 2>/dev/null || true
}

# ---- run ---------------------------------------------------------------------------------------

use_run "$ROOT/main"
first_start
for part in $PARTS; do
  case $part in
    daemon_kill | runtime_kill | sqlite_busy | disk_full) ;;
    *) die "unknown part '$part' in FAULTS_PARTS" ;;
  esac
  info "---- $part ($((($(now_ms) - SUITE_START) / 1000)) s) ----"
  # disk_full starts a b3osd of its own (and ends it); the main one idles meanwhile.
  run_section "p_$part"
done
use_run "$ROOT/main"
[ "$(count_results FAIL)" = 0 ]

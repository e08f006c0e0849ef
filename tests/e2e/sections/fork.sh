# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: forks: memory, disk, processes and identity of each copy, limits, a failing
# checkpoint, and a fork of a sandbox using most of its memory.

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
  check fork.concurrency_retry_after "Retry-After: '$(header Retry-After)'" grep -qiE '^Retry-After: [0-9]+' "$RESPH"
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
  # Deleted sandboxes are released behind the answer (delete.container_gone): wait for them.
  containers_back() { [ "$(runsc_list | wc -l)" = "$before" ]; }
  dirs_back() { [ "$(ls "$T/run/sandboxes" | wc -l)" = "$before" ]; }
  eventually 15 containers_back || true
  eventually 15 dirs_back || true
  check fork.twenty_no_containers_left "$(runsc_list | wc -l) containers, want $before" containers_back
  check fork.twenty_no_dirs_left "$(ls "$T/run/sandboxes" | wc -l) dirs" dirs_back
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
  lim=$(memory_limit "$src")
  check fork.concurrent_limit_set_back "$lim, want $want" test "$lim" = "$want"
  for id in $src $forks $grand $plain; do delete_sandbox "$id" || true; done
  # Released behind each delete's answer: wait for it.
  leftovers() {
    local id n=0
    for id in $src $forks $grand $plain; do runsc_has "$id" && n=$((n + 1)); [ -n "$(cgroup_dirs "$id")" ] && n=$((n + 1)); done
    echo "$n"
  }
  none_left() { [ "$(leftovers)" = 0 ]; }
  eventually 15 none_left || true
  check fork.delete_leaves_nothing "$(leftovers) containers or cgroups left" none_left
  check fork.no_images_left "$(ls "$T/data/fork-images" 2>/dev/null)" test -z "$(ls "$T/data/fork-images" 2>/dev/null)"
}

# ---- fork-ahead: a quiet sandbox's fork is a claim (daemon/sandbox/fork_ahead.h) ------------

# The rest of the suite runs b3osd with --fork-ahead 0 (it counts containers, and `runsc list`
# waits for ever on a frozen spare): this section restarts it with spares on, and looks at
# spares through the metrics and the sandboxes' directories.
no_dir() { [ ! -e "$T/run/sandboxes/$1" ]; }
# spares_ready N: at least N spares wait (b3os_pool_size{pool="fork_ahead"} on the metrics
# listener the daemon's log names; a directory appears before its spare is ready).
spares_ready() {
  local m n
  m=$(grep -o 'metrics on http://[^ ]*' "$T/daemon.log" | tail -n1 | cut -d' ' -f3)
  n=$(curl -s "$m" | awk '/^b3os_pool_size\{pool="fork_ahead"\}/ {print $2}')
  [ "${n%.*}" -ge "$1" ] 2>/dev/null
}
s_fork_ahead() {
  local saved=${B3OS_E2E_DAEMON_ARGS:-}
  stop_daemon TERM
  E2E_FORK_AHEAD=1 B3OS_E2E_DAEMON_ARGS="$saved --fork-ahead-min-free-mib 0"
  start_daemon || die "b3osd did not start with --fork-ahead 1"
  local baseline
  baseline=" $(ls "$T/run/sandboxes" 2>/dev/null | tr '\n' ' ') "
  local listed0
  api GET /v1/sandboxes?limit=100
  listed0=$(j '.data | length')
  create_sandbox '{"forkable":true,"env":{"E":"e1"}}'
  check forkahead.create "$(snip)" okj 201 '.forkable == true'
  local src=$CID
  run_exec "$src" '{"cmd":"echo before > /workspace/f; hostname; cat /etc/machine-id"}'
  check forkahead.setup "$(snip)" okj 200 '.exit_code == 0'
  local src_host src_mid
  src_host=$(j '.stdout | split("\n")[0]')
  src_mid=$(j '.stdout | split("\n")[1]')
  check forkahead.spare_made "no spare ready" eventually 30 spares_ready 1
  api GET /v1/sandboxes?limit=100
  check forkahead.spare_not_listed "$(snip)" okj 200 ".data | length == $listed0 + 1"
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  check forkahead.fork_201 "$(snip)" okj 201 '.data | length == 1'
  check forkahead.claimed "$(header Server-Timing)" grep -qi 'claim;dur=' "$RESPH"
  check forkahead.spec_phases_zero "$(header Server-Timing)" grep -Eqi 'pause;dur=0\.000, base;dur=0\.000, snapshot;dur=0\.000, export;dur=0\.000' "$RESPH"
  local f
  f=$(j '.data[0].id')
  echo "$f" >>"$T/ids"
  run_exec "$f" '{"cmd":"cat /workspace/f; hostname; cat /etc/machine-id; echo $E; echo mine > /workspace/mine"}'
  check forkahead.fork_has_source_disk_env "$(snip)" jt '.exit_code == 0 and (.stdout | split("\n")) as $o | $o[0] == "before" and $o[3] == "e1"'
  check forkahead.own_hostname "$(j '.stdout | split("\n")[1]') vs $src_host" test "$(j '.stdout | split("\n")[1]')" != "$src_host"
  check forkahead.own_machine_id "$(j '.stdout | split("\n")[2]') vs $src_mid" test "$(j '.stdout | split("\n")[2]')" != "$src_mid"
  run_exec "$src" '{"cmd":"ls /workspace"}'
  check forkahead.fork_files_not_in_source "$(snip)" jt '.exit_code == 0 and (.stdout | contains("mine") | not)'
  delete_sandbox "$f" || true
  # One byte written just before the fork, while a spare of the source as it was waits: the
  # fork has it.
  check forkahead.spare_again "a spare of the source" eventually 30 spares_ready 1
  printf 'Z' >"$T/byte"
  api PUT "/v1/sandboxes/$src/files?path=/workspace/byte" -H 'Content-Type: application/octet-stream' --data-binary @"$T/byte"
  expect forkahead.byte_written 201
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  check forkahead.changed_fork_201 "$(snip)" okj 201 '.data | length == 1'
  check forkahead.changed_fork_not_claimed "$(header Server-Timing)" bash -c "! grep -qi 'claim;dur=' '$RESPH'"
  local g
  g=$(j '.data[0].id')
  echo "$g" >>"$T/ids"
  run_exec "$g" '{"cmd":"cat /workspace/byte"}'
  check forkahead.changed_fork_has_the_byte "$(snip)" jt '.exit_code == 0 and .stdout == "Z"'
  delete_sandbox "$g" || true
  # SIGKILL with a spare waiting: the next b3osd (fork-ahead off) removes it as an orphan.
  eventually 30 spares_ready 1 || true
  local known spare=""
  api GET /v1/sandboxes?limit=100
  known=$(j '[.data[] | select(.status == "running") | .id] | join(" ")')
  for d in "$T"/run/sandboxes/*; do
    d=$(basename "$d")
    [[ " $known $f $g " == *" $d "* ]] || spare=$d
  done
  check forkahead.spare_found "spare '$spare' beside $known" test -n "$spare"
  stop_daemon KILL
  E2E_FORK_AHEAD=0 B3OS_E2E_DAEMON_ARGS=$saved
  start_daemon || die "b3osd did not start again after SIGKILL"
  check forkahead.killed_spares_removed "$spare still there" eventually 60 no_dir "$spare"
  run_exec "$src" '{"cmd":"cat /workspace/f"}'
  check forkahead.source_alive_after_kill "$(snip)" jt '.stdout == "before\n"'
  # Deleting the source ends its spares: nothing of either is left.
  stop_daemon TERM
  E2E_FORK_AHEAD=1 B3OS_E2E_DAEMON_ARGS="$saved --fork-ahead-min-free-mib 0"
  start_daemon || die "b3osd did not start with --fork-ahead 1"
  check forkahead.spare_after_restart "no spare after the restart" eventually 30 spares_ready 1
  delete_sandbox "$src" || true
  # shellcheck disable=SC2317 # called through eventually
  only_baseline() {
    local d
    for d in "$T"/run/sandboxes/*; do
      [ -e "$d" ] || continue
      [[ "$baseline" == *" $(basename "$d") "* ]] || return 1
    done
  }
  check forkahead.delete_leaves_nothing "$(ls "$T/run/sandboxes" | tr '\n' ' '), before: $baseline" eventually 30 only_baseline
  check forkahead.no_images_left "$(ls "$T/data/fork-images" 2>/dev/null)" test -z "$(ls "$T/data/fork-images" 2>/dev/null)"
  stop_daemon TERM
  E2E_FORK_AHEAD=0 B3OS_E2E_DAEMON_ARGS=$saved
  start_daemon || die "b3osd did not start again"
}

# A checkpoint that really fails (the image directory is a 256 KiB tmpfs, so runsc runs out of
# space mid-write): the fork answers 503 capacity_unavailable saying the disk is full, the
# source runs on, and nothing is left behind.
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
  check forkfail.503_disk_full "$(snip)" okj 503 '.error.code == "capacity_unavailable" and (.error.message | contains("fork")) and (.error.message | contains("full"))'
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
  lim_src=$(memory_limit "$src")
  lim_fork=$(memory_limit "$f")
  check forkbig.source_limit_set_back "$lim_src, want $want" test "$lim_src" = "$want"
  check forkbig.fork_limit "$lim_fork, want $want" test "$lim_fork" = "$want"
  check forkbig.no_image "$(ls -A "$T/data/fork-images")" test -z "$(ls -A "$T/data/fork-images")"
  delete_sandbox "$f" || true
  delete_sandbox "$src" || true
  stop_daemon TERM
  umount "$T/data/fork-images"
  start_daemon
}

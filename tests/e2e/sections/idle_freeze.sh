# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: idle freezing. A running sandbox with nothing but its agent alive is frozen with
# the cgroup freezer once the grace (--idle-freeze-ms, 1.5 s by default) has passed, shows
# `running`, and is thawed for the next call; one with a background process is never frozen;
# a b3osd killed while a sandbox is frozen finds it again.

# freezer_state ID: FROZEN, FREEZING or THAWED (cgroup v1), or 1/0 (v2), "" when unknown.
freezer_state() {
  cat "/sys/fs/cgroup/freezer/b3os/$1/freezer.state" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$1/cgroup.freeze" 2>/dev/null || true
}
is_frozen() { case "$(freezer_state "$1")" in FROZEN | 1) return 0 ;; *) return 1 ;; esac; }
# wait_frozen ID SECONDS: waits up to SECONDS for the freezer to freeze ID.
wait_frozen() {
  local i
  for i in $(seq 1 $(($2 * 10))); do
    is_frozen "$1" && return 0
    sleep 0.1
  done
  return 1
}

s_idle_freeze() {
  create_sandbox '{"timeout_s":600,"metadata":{"test":"idle-freeze"}}'
  local id=$CID
  [ -n "$id" ] || { fail idle_freeze.create "$(snip)"; return 0; }
  if [ -z "$(freezer_state "$id")" ]; then
    skip idle_freeze "no freezer cgroup for $id"
    delete_sandbox "$id" || true
    return 0
  fi
  run_exec "$id" '{"cmd":"true"}'
  check idle_freeze.thawed_right_after_exec "state $(freezer_state "$id")" not is_frozen "$id"
  check idle_freeze.frozen_after_grace "state $(freezer_state "$id") 4 s after the exec" wait_frozen "$id" 4
  api GET "/v1/sandboxes/$id"
  check idle_freeze.shows_running "$(snip)" okj 200 '.status == "running"'
  local cpu0 cpu1
  cpu0=$(cat "/sys/fs/cgroup/cpuacct/b3os/$id/cpuacct.usage" 2>/dev/null || echo 0)
  sleep 1
  cpu1=$(cat "/sys/fs/cgroup/cpuacct/b3os/$id/cpuacct.usage" 2>/dev/null || echo 0)
  check idle_freeze.no_cpu_used "cpuacct moved $(((cpu1 - cpu0) / 1000000)) ms in 1 s" test "$cpu1" -le "$((cpu0 + 1000000))"
  run_exec "$id" '{"cmd":"echo awake"}'
  check idle_freeze.exec_thaws "$(snip)" okj 200 '.stdout == "awake\n" and .exit_code == 0'
  api GET "/v1/sandboxes/$id/files?path=/etc/hostname"
  check idle_freeze.files_after_freeze "$(snip)" [ "$ST" = 200 ]

  # A process left behind keeps it thawed, however long it is idle otherwise.
  check idle_freeze.frozen_again "state $(freezer_state "$id")" wait_frozen "$id" 4
  run_exec "$id" '{"cmd":"nohup sleep 600 >/dev/null 2>&1 &"}'
  check idle_freeze.background_exec "$(snip)" okj 200 '.exit_code == 0'
  sleep 3.5
  check idle_freeze.background_stays_thawed "state $(freezer_state "$id") with sleep 600 left behind" not is_frozen "$id"
  run_exec "$id" '{"cmd":"pkill -x sleep; for i in $(seq 50); do pgrep -x sleep >/dev/null || exit 0; sleep 0.1; done; exit 1"}'
  check idle_freeze.background_killed "$(snip)" okj 200 '.exit_code == 0'
  check idle_freeze.frozen_once_gone "state $(freezer_state "$id")" wait_frozen "$id" 4

  # b3osd killed while the sandbox is frozen: the next one thaws it, reaches its agent, and
  # freezes it again once idle.
  stop_daemon KILL
  check idle_freeze.still_frozen_without_b3osd "state $(freezer_state "$id")" is_frozen "$id"
  start_daemon || { fail idle_freeze.restart "b3osd did not start again"; return 0; }
  api GET "/v1/sandboxes/$id"
  check idle_freeze.reattached "$(snip)" okj 200 '.status == "running"'
  run_exec "$id" '{"cmd":"echo back"}'
  check idle_freeze.exec_after_restart "$(snip)" okj 200 '.stdout == "back\n"'
  check idle_freeze.frozen_after_restart "state $(freezer_state "$id")" wait_frozen "$id" 4
  delete_sandbox "$id"
  check idle_freeze.delete_frozen "$(snip)" jt '.status == "stopped"'
  check idle_freeze.delete_leaves_nothing "container left" eventually 15 not runsc_has "$id"
}

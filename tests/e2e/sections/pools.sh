# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: the warm pool and the fork pool, and template checkpoints. Each restarts b3osd
# with its options and leaves it running without them.

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

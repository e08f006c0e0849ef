# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: pause and resume (and on_idle: pause), snapshots and creates from them.

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
  check pause.delete_paused_leaves_nothing "container left" eventually 15 not runsc_has "$idle"
  delete_sandbox "$id" || true
}

# ---- snapshots --------------------------------------------------------------------------------

s_snapshot() {
  # The secret's value is one no id or figure can hold (ids are lowercase base32 and held
  # "s1" by chance: snp_...ys1y... failed the check below once).
  create_sandbox '{"env":{"E":"e1"},"secrets":{"S":"SECRET-Value"}}'
  local id=$CID
  run_exec "$id" '{"cmd":"echo kept > /workspace/k; nohup python3 -c \"import os, time\ni=0\nwhile True:\n  i+=1; open(\u0027/workspace/c.t\u0027,\u0027w\u0027).write(str(i)); os.replace(\u0027/workspace/c.t\u0027,\u0027/workspace/c\u0027); time.sleep(0.05)\" >/dev/null 2>&1 & sleep 0.3"}'
  api POST "/v1/sandboxes/$id/snapshot"
  check snapshot.201 "$(snip)" okj 201 '.object == "snapshot" and (.id | startswith("snp_")) and .sandbox_id == "'"$id"'" and .size_bytes > 0 and .secret_names == ["S"]'
  local snp
  snp=$(j .id)
  check snapshot.no_secret_values "$(snip)" not grep -q SECRET-Value "$RESP"
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
  check snapshot.memory_disk_processes "$(snip)" jt '.stdout == "kept\ncounting\ne1 SECRET-Value\n"'
  delete_sandbox "$restored" || true
  eventually 15 not runsc_has "$restored" || true  # released behind the delete's answer
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

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

# ---- what a project may keep as snapshots ---------------------------------------------------

# snapshot_dirs: the images under DATA_DIR/snapshots, one line.
snapshot_dirs() { { ls "$T/data/snapshots" 2>/dev/null || true; } | sort | tr '\n' ' '; }

# A snapshot outlives its sandbox, so a project that takes them in a loop would fill the node's
# disk: --snapshots-max-per-project and --snapshots-max-gib-per-project bound what one project
# keeps (429 quota_exceeded), --disk-reserve-gib keeps free space for running sandboxes (503).
# Each refusal names its limit, holds nothing (the sandbox is never paused, its process runs on)
# and leaves no image or record; the limits are each project's own.
s_snapshot_quota() {
  restart_with --snapshots-max-per-project 2
  create_sandbox '{"timeout_s":600}'
  local id=$CID before kept st n201 n429 i
  run_exec "$id" '{"cmd":"nohup sh -c \"while :; do date +%s%N > /workspace/now; sleep 0.1; done\" >/dev/null 2>&1 & sleep 0.3"}'
  before=$(snapshot_dirs)
  # Four at once against a limit of two: the two under way count, so two are refused.
  for i in 1 2 3 4; do
    curl -sS -o "$T/snapq.$i" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
      "$URL/v1/sandboxes/$id/snapshot" >"$T/snapq.$i.st" 2>/dev/null &
  done
  wait
  n201=0 n429=0
  for i in 1 2 3 4; do
    st=$(cat "$T/snapq.$i.st")
    [ "$st" = 201 ] && n201=$((n201 + 1))
    [ "$st" = 429 ] && [ "$(jq -r .error.code "$T/snapq.$i")" = quota_exceeded ] && n429=$((n429 + 1))
  done
  check snapquota.count_held_at_once "4 at once, limit 2: $n201 x 201, $n429 x 429 quota_exceeded ($(cat "$T"/snapq.*.st | tr '\n' ' '))" \
    test "$n201:$n429" = "2:2"
  kept=$(jq -r 'select(.id) | .id' "$T"/snapq.[1-4] | sort | tr '\n' ' ')
  api POST "/v1/sandboxes/$id/snapshot"
  expect_error snapquota.count_429 429 quota_exceeded "--snapshots-max-per-project"
  check snapquota.count_message "$(j .error.message)" grep -q "keeps 2 snapshots" "$RESP"
  api GET /v1/snapshots
  check snapquota.count_listed "listed: $(j '[.data[].id] | sort | join(" ")'), kept: $kept" \
    test "$(j '[.data[].id] | sort | join(" ")') " = "$kept"
  check snapquota.count_no_image "images: $(snapshot_dirs), before: $before, kept: $kept" \
    test "$(snapshot_dirs)" = "$(printf '%s\n' $before $kept | sort -u | tr '\n' ' ')"
  api GET "/v1/sandboxes/$id"
  check snapquota.count_not_paused "$(snip)" okj 200 '.status == "running"'
  # The limit is the project's: another project's sandbox is not refused.
  KEY=$OTHER create_sandbox '{}'
  local other=$CID
  KEY=$OTHER api POST "/v1/sandboxes/$other/snapshot"
  check snapquota.other_project "$(snip)" okj 201 '.object == "snapshot"'
  local other_snp
  other_snp=$(j .id)
  # Deleting one makes room for one; a refusal is not kept for its Idempotency-Key (the retry
  # runs again once there is room).
  api POST "/v1/sandboxes/$id/snapshot" -H "Idempotency-Key: snapq-$id"
  expect_error snapquota.keyed_429 429 quota_exceeded
  api DELETE "/v1/snapshots/${kept%% *}"
  api POST "/v1/sandboxes/$id/snapshot" -H "Idempotency-Key: snapq-$id"
  check snapquota.room_after_delete "$(snip)" okj 201 '.object == "snapshot"'
  check snapquota.refusal_not_replayed "Idempotent-Replayed: '$(header Idempotent-Replayed)'" test -z "$(header Idempotent-Replayed)"

  # Bytes: a limit that a new image (counted as the sandbox's memory_mib until written) fits
  # alone, but not beside half of what the kept images hold: refused while they are kept,
  # taken once they are deleted.
  local mem kept_bytes limit
  api GET "/v1/sandboxes/$id"
  mem=$(j .memory_mib)
  api GET /v1/snapshots
  kept_bytes=$(j '[.data[].size_bytes] | add')
  limit=$(python3 -c "import sys; print((int(sys.argv[1]) * 2**20 + int(sys.argv[2]) // 2) / 2**30)" "$mem" "$kept_bytes")
  restart_with --snapshots-max-gib-per-project "$limit"
  before=$(snapshot_dirs)
  api POST "/v1/sandboxes/$id/snapshot"
  expect_error snapquota.bytes_429 429 quota_exceeded "--snapshots-max-gib-per-project"
  check snapquota.bytes_no_image "images: $(snapshot_dirs), before: $before" test "$(snapshot_dirs)" = "$before"
  api GET /v1/snapshots
  for i in $(j -r '.data[].id'); do api DELETE "/v1/snapshots/$i"; done
  api POST "/v1/sandboxes/$id/snapshot"
  check snapquota.bytes_room_after_delete "limit $limit GiB, kept $kept_bytes bytes before: $(snip)" okj 201 '.object == "snapshot"'
  before=$(snapshot_dirs)

  # The disk's reserve: more than any disk has free.
  restart_with --disk-reserve-gib 1000000
  api GET /v1/snapshots
  local listed
  listed=$(j '[.data[].id] | sort | join(" ")')
  api POST "/v1/sandboxes/$id/snapshot"
  expect_error snapquota.reserve_503 503 capacity_unavailable "--disk-reserve-gib"
  check snapquota.reserve_retry_after "Retry-After: '$(header Retry-After)'" test -n "$(header Retry-After)"
  check snapquota.reserve_no_image "images: $(snapshot_dirs), before: $before" test "$(snapshot_dirs)" = "$before"
  api GET /v1/snapshots
  check snapquota.reserve_no_record "listed: $(j '[.data[].id] | sort | join(" ")'), before: $listed" \
    test "$(j '[.data[].id] | sort | join(" ")')" = "$listed"
  run_exec "$id" '{"cmd":"a=$(cat /workspace/now); for i in $(seq 50); do sleep 0.1; b=$(cat /workspace/now); [ \"$a\" != \"$b\" ] && { echo ticking; break; }; done"}'
  check snapquota.sandbox_runs_on "$(snip)" okj 200 '.stdout == "ticking\n"'

  restart_with
  api GET /v1/snapshots
  for i in $(j -r '.data[].id'); do api DELETE "/v1/snapshots/$i"; done
  KEY=$OTHER api DELETE "/v1/snapshots/$other_snp"
  check snapquota.all_deleted "images: $(snapshot_dirs)" test -z "$(snapshot_dirs)"
  KEY=$OTHER delete_sandbox "$other" || true
  delete_sandbox "$id" || true
}

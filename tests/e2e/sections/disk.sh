# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: the root filesystem's writes on a disk of each sandbox's own (docs/design.md,
# "Disk"): a 1.5 GB file (three times its memory) in a 512 MiB sandbox, byte-exact in a fork and a snapshot restore;
# disk_gib as a hard limit (ENOSPC, the sandbox runs on); the disk across a b3osd SIGKILL;
# nothing left after delete (directory, mount, loop device).

DISK_BIG_BYTES=1500000000  # what the file holds at least (23 x 64 MiB and numbers): 3x the memory
# The 1.5 GB file lives in the source, the fork, the snapshot's image, the restored sandbox and
# (for a moment) the fork's image: about 8 GB of the data directory's disk.
DISK_NEED_KB=$((9 * 1024 * 1024))

# disk_left ID: what is left on the host of the disk of ID (directory, mount, loop device).
disk_left() {
  local left=""
  [ ! -e "$T/data/disks/$1" ] || left="dir $T/data/disks/$1; "
  ! grep -q "$T/data/disks/$1/" /proc/mounts || left="${left}mount; "
  ! losetup -a 2>/dev/null | grep -q "$T/data/disks/$1/" || left="${left}loop device; "
  echo "$left"
}
no_disk_left() { [ -z "$(disk_left "$1")" ]; }
# disk_mounted ID: the disk of ID is mounted where gVisor put the overlay's file.
disk_mounted() { grep -q " $T/data/disks/$1/mnt ext4 " /proc/mounts; }

s_disk_big() {
  local avail
  avail=$(df -Pk "$T/data" | awk 'NR==2 {print $4}')
  if [ "${avail:-0}" -lt "$DISK_NEED_KB" ]; then
    skip disk.big "only $((avail / 1024 / 1024)) GiB free under $T/data; the 1.5 GB file test needs 9 GiB"
    return 0
  fi
  if [ "${E2E_ROOT_OVERLAY:-disk}" = memory ]; then
    skip disk.big "b3osd runs with --root-overlay memory"
    return 0
  fi
  create_sandbox '{"memory_mib":512,"disk_gib":4,"forkable":true,"timeout_s":600}'
  check disk.big_create "$(snip)" okj 201 '.disk_gib == 4'
  local src=$CID sum t0
  [ -n "$src" ] || return 0
  check disk.big_mounted "no ext4 mount at $T/data/disks/$src/mnt" disk_mounted "$src"
  t0=$(now_ms)
  # 64 MiB of random bytes, written 23 times each behind its number: every page of the 1.5 GB
  # differs (the chunks shift against page boundaries), at the cost of writing, not of urandom.
  run_exec "$src" '{"cmd":"head -c 67108864 /dev/urandom > /tmp/r && for i in $(seq 1 23); do echo $i; cat /tmp/r; done > /workspace/big && rm /tmp/r && stat -c %s /workspace/big >&2 && sha256sum /workspace/big | cut -c1-64","timeout_ms":600000}'
  info "1.5 GB written and summed in $(( ($(now_ms) - t0) / 1000 )) s"
  check disk.big_written "$(snip)" jt '.exit_code == 0 and (.stdout | length) == 65 and (.stderr | tonumber) > 1500000000'
  sum=$(j .stdout)
  api GET "/v1/sandboxes/$src"
  check disk.big_512mib_running "$(snip)" okj 200 '.status == "running" and .memory_mib == 512'
  # The file is on the host's disk, not in the sandbox's memory.
  local used_kb
  used_kb=$(du -k "$T/data/disks/$src/disk.img" | cut -f1)
  check disk.big_on_host_disk "disk.img holds ${used_kb} kB" test "$used_kb" -gt $((DISK_BIG_BYTES / 1024 * 9 / 10))

  t0=$(now_ms)
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  info "fork of a sandbox with 1.5 GB on its disk: $(( $(now_ms) - t0 )) ms"
  check disk.big_fork_201 "$(snip)" okj 201 '.data | length == 1'
  local f
  f=$(j '.data[0].id')
  echo "$f" >>"$T/ids"
  check disk.big_fork_own_disk "no ext4 mount at $T/data/disks/$f/mnt" disk_mounted "$f"
  run_exec "$f" '{"cmd":"sha256sum /workspace/big | cut -c1-64 && echo fork-only > /workspace/mine","timeout_ms":300000}'
  check disk.big_fork_byte_exact "$(snip)" jt ".exit_code == 0 and .stdout == \"$sum\n\""
  run_exec "$src" '{"cmd":"test ! -e /workspace/mine && echo isolated"}'
  check disk.big_fork_isolated "$(snip)" jt '.stdout == "isolated\n"'

  apij POST "/v1/sandboxes/$src/snapshot" '{}'
  check disk.big_snapshot_201 "$(snip)" okj 201 '.size_bytes > 1500000000'
  local snp r
  snp=$(j .id)
  create_sandbox '{"snapshot":"'"$snp"'","timeout_s":600}'
  check disk.big_restore_201 "$(snip)" okj 201 '.disk_gib == 4'
  r=$CID
  if [ -n "$r" ]; then
    check disk.big_restore_own_disk "no ext4 mount at $T/data/disks/$r/mnt" disk_mounted "$r"
    run_exec "$r" '{"cmd":"sha256sum /workspace/big | cut -c1-64; test ! -e /workspace/mine && echo isolated","timeout_ms":300000}'
    check disk.big_restore_byte_exact "$(snip)" jt ".exit_code == 0 and .stdout == \"$sum\nisolated\n\""
  fi
  api DELETE "/v1/snapshots/$snp"
  local id
  for id in "$f" "$r" "$src"; do
    [ -n "$id" ] || continue
    delete_sandbox "$id" || fail disk.big_delete "$id: $(snip)"
    check "disk.big_nothing_left" "$id: $(disk_left "$id")" eventually 20 no_disk_left "$id"
  done
}

s_disk_limit() {
  if [ "${E2E_ROOT_OVERLAY:-disk}" = memory ]; then
    skip disk.limit "b3osd runs with --root-overlay memory"
    return 0
  fi
  create_sandbox '{"memory_mib":512,"disk_gib":1}'
  check disk.limit_create "$(snip)" okj 201 '.disk_gib == 1'
  local id=$CID
  [ -n "$id" ] || return 0
  # 2 GB into a 1 GiB disk: ENOSPC near 1 GiB.
  run_exec "$id" '{"cmd":"head -c 2000000000 /dev/zero > /workspace/fill; echo rc=$?; stat -c %s /workspace/fill","timeout_ms":300000}'
  check disk.limit_enospc "$(snip)" jt '(.stderr | test("No space left on device")) and (.stdout | startswith("rc=1\n"))'
  local size
  size=$(j '.stdout' | sed -n 2p)
  check disk.limit_about_1gib "wrote $size bytes" test "${size:-0}" -gt 900000000 -a "${size:-0}" -le 1073741824
  api GET "/v1/sandboxes/$id"
  check disk.limit_still_running "$(snip)" okj 200 '.status == "running"'
  run_exec "$id" '{"cmd":"rm /workspace/fill && echo kept > /workspace/small && cat /workspace/small"}'
  check disk.limit_exec_after "$(snip)" jt '.exit_code == 0 and .stdout == "kept\n"'

  # b3osd killed: the disk stays mounted under the running sandbox, and is reattached.
  stop_daemon KILL
  start_daemon
  check disk.restart_mounted "no ext4 mount at $T/data/disks/$id/mnt" disk_mounted "$id"
  run_exec "$id" '{"cmd":"cat /workspace/small"}'
  check disk.restart_file_kept "$(snip)" jt '.exit_code == 0 and .stdout == "kept\n"'
  delete_sandbox "$id" || fail disk.limit_delete "$(snip)"
  check disk.limit_nothing_left "$(disk_left "$id")" eventually 20 no_disk_left "$id"
  local left
  left=$(ls -A "$T/data/disks" 2>/dev/null | grep -vx "$SBX" | tr '\n' ' ' || true)
  check disk.no_other_disk_dirs "$T/data/disks: $left" [ -z "${left// /}" ]
}

# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: the b3os CLI against the private b3osd (create, list, exec, upload, download, rm).

# ---- 16. the CLI ----------------------------------------------------------------------------

s_cli() {
  local b3os=$B3OS_BIN/b3os id out rc
  export B3OS_API_URL=$URL B3OS_API_KEY=$ADMIN
  id=$("$b3os" create 2>"$T/cli.err" || true)
  [[ $id == sbx_* ]] && echo "$id" >>"$T/ids"
  check cli.create "output '$id' $(head -c 200 "$T/cli.err")" grep -Eqx 'sbx_[0-9a-z]{26}' <<<"$id"
  [[ $id == sbx_* ]] || return 0
  out=$("$b3os" list 2>&1 || true)
  check cli.list "$out" grep -q "$id.*running" <<<"$out"
  rc=0
  out=$("$b3os" exec "$id" -- python3 -c 'print(1)' 2>&1) || rc=$?
  check cli.exec "exit $rc, output '$out'" [ "$rc" = 0 -a "$out" = 1 ]
  rc=0
  out=$("$b3os" exec "$id" -- python3 -c 'import sys; sys.exit(7)' 2>&1) || rc=$?
  check cli.exec_exit_code "exit $rc, want 7; output '$out'" [ "$rc" = 7 ]
  rc=0
  out=$("$b3os" exec "$id" --timeout-ms 300 -- 'sleep 5' 2>&1) || rc=$?
  check cli.exec_timeout_124 "exit $rc, want 124; output '$out'" [ "$rc" = 124 ]
  rc=0
  out=$("$b3os" exec "$id" -- 'echo $((2+3)); exit 5' 2>&1) || rc=$?
  check cli.exec_shell_string "exit $rc, output '$out'" [ "$rc" = 5 -a "$out" = 5 ]
  head -c 3M /dev/urandom >"$T/cli.bin"
  rc=0
  out=$("$b3os" upload "$id" "$T/cli.bin" /workspace/cli.bin 2>&1) || rc=$?
  check cli.upload "exit $rc, output '$out'" [ "$rc" = 0 ]
  rc=0
  out=$("$b3os" download "$id" /workspace/cli.bin "$T/cli.back" 2>&1) || rc=$?
  check cli.download_exact "exit $rc, output '$out'" cmp -s "$T/cli.bin" "$T/cli.back"
  rc=0
  out=$("$b3os" rm "$id" 2>&1) || rc=$?
  check cli.rm "exit $rc, output '$out'" [ "$rc" = 0 -a "$out" = "$id" ]
  api GET "/v1/sandboxes/$id"
  check cli.rm_stopped "$(snip)" [ "$(j .status)" = stopped -a "$(j .stop_reason)" = deleted ]
  rc=0
  out=$("$b3os" exec "$id" -- true 2>&1) || rc=$?
  check cli.exec_on_stopped_fails "exit $rc, output '$out'" [ "$rc" != 0 ]
}

# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: the b3os CLI against the private b3osd (create, list, exec, upload, download, rm;
# templates build, list, get, logs, builds, rm).

# ---- 16. the CLI ----------------------------------------------------------------------------

s_cli() {
  s_cli_sandboxes
  s_cli_templates
}

s_cli_sandboxes() {
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

# `b3os templates`: a spec without packages (a context directory, a run line, a start command
# with ready), followed to the end; list, get, builds, logs; a sandbox from it; a build that
# fails (exit 1, its step and exit code); rm.
s_cli_templates() {
  local b3os=$B3OS_BIN/b3os out rc tid bid id name=cli-web
  export B3OS_API_URL=$URL B3OS_API_KEY=$ADMIN
  mkdir -p "$T/cli-ctx/sub"
  echo 'from the context' >"$T/cli-ctx/sub/hello.txt"
  cat >"$T/cli-web.json" <<JSON
{"name": "$name", "context": {"dest": "/srv/ctx"},
 "run": ["cp /srv/ctx/sub/hello.txt /srv/answer"],
 "workdir": "/srv", "start": "cd /srv && python3 -m http.server 8000",
 "ready": {"port": 8000, "timeout_s": 60}}
JSON
  rc=0
  out=$("$b3os" templates build "$T/cli-web.json" --context "$T/cli-ctx" -f 2>"$T/cli-tpl.err") || rc=$?
  check cli.templates_build_follow "exit $rc, output '$(tail -c 400 <<<"$out")' $(tail -c 400 "$T/cli-tpl.err")" \
    [ "$rc" = 0 ]
  tid=$(sed -n 's/^template: *//p' <<<"$out")
  bid=$(sed -n 's/^build: *\(bld_[0-9a-z]*\).*/\1/p' <<<"$out")
  check cli.templates_build_prints_ids "output '$(head -c 300 <<<"$out")'" \
    grep -Eq "^tpl_[0-9a-z]+ $name 1 bld_[0-9a-z]+\$" <<<"$tid $(sed -n 's/^name: *//p' <<<"$out") $(sed -n 's/^version: *//p' <<<"$out") $bid"
  check cli.templates_build_log_streamed "output '$(tail -c 400 <<<"$out")'" grep -q -- '-- run\[0\]' <<<"$out"
  check cli.templates_context_uploaded "stderr '$(head -c 300 "$T/cli-tpl.err")'" grep -q 'as upl_' "$T/cli-tpl.err"
  [[ $tid == tpl_* && $bid == bld_* ]] || return 0

  out=$("$b3os" templates list 2>&1 || true)
  check cli.templates_list "$out" grep -Eq "^$name +$tid +ready +1 " <<<"$out"
  check cli.templates_list_builtin_first "$out" [ "$(sed -n 2p <<<"$out" | cut -d' ' -f1)" = base ]
  out=$("$b3os" templates get "$name" 2>&1 || true)
  check cli.templates_get "$out" grep -q "^build: *$bid (version 1, ready)" <<<"$out"
  rc=0
  out=$("$b3os" templates get "$tid" --json 2>&1) || rc=$?
  check cli.templates_get_json "exit $rc, $(head -c 300 <<<"$out")" \
    [ "$(jq -r '.name + " " + .defaults.workdir' <<<"$out" 2>/dev/null)" = "$name /srv" ]
  out=$("$b3os" templates builds "$name" 2>&1 || true)
  check cli.templates_builds "$out" grep -Eq "^1 +$bid +ready " <<<"$out"
  rc=0
  out=$("$b3os" templates logs -f "$name" 2>&1) || rc=$?
  check cli.templates_logs_follow_ended "exit $rc, $(tail -c 300 <<<"$out")" [ "$rc" = 0 ]
  check cli.templates_logs_has_steps "$(tail -c 300 <<<"$out")" grep -q -- '-- context' <<<"$out"
  out=$("$b3os" templates logs "$name" "$bid" 2>&1 || true)
  check cli.templates_logs_by_build "$(tail -c 300 <<<"$out")" grep -q -- '-- run\[0\]' <<<"$out"

  id=$("$b3os" create --template "$name" 2>"$T/cli.err" || true)
  [[ $id == sbx_* ]] && echo "$id" >>"$T/ids"
  check cli.templates_create_from_it "output '$id' $(head -c 200 "$T/cli.err")" grep -Eqx 'sbx_[0-9a-z]{26}' <<<"$id"
  if [[ $id == sbx_* ]]; then
    out=$("$b3os" exec "$id" -- 'cat answer; curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8000/ctx/sub/hello.txt' 2>&1 || true)
    check cli.templates_sandbox_has_context_and_start "output '$out'" [ "$out" = "from the context
200" ]
    rc=0
    out=$("$b3os" templates rm "$name" 2>&1) || rc=$?
    check cli.templates_rm_in_use_fails "exit $rc, output '$out'" [ "$rc" = 1 ]
    check cli.templates_rm_in_use_says_why "$out" grep -q 'conflict' <<<"$out"
    "$b3os" rm "$id" >/dev/null 2>&1 || true
  fi

  printf '{"name": "cli-bad", "run": ["echo about to fail", "exit 3"]}' >"$T/cli-bad.json"
  rc=0
  out=$("$b3os" templates build "$T/cli-bad.json" --follow 2>&1) || rc=$?
  check cli.templates_failed_build_exit_1 "exit $rc, $(tail -c 300 <<<"$out")" [ "$rc" = 1 ]
  check cli.templates_failed_build_says_step "$(tail -c 400 <<<"$out")" \
    grep -q 'failed at step run\[1\] (exit code 3)' <<<"$out"
  rc=0
  out=$("$b3os" templates logs -f cli-bad 2>&1) || rc=$?
  check cli.templates_logs_follow_failed_exit_1 "exit $rc, $(tail -c 300 <<<"$out")" [ "$rc" = 1 ]

  rc=0
  out=$("$b3os" templates rm "$name" --force 2>&1) || rc=$?
  check cli.templates_rm "exit $rc, output '$out'" [ "$rc" = 0 -a "$out" = "$tid" ]
  "$b3os" templates rm cli-bad >/dev/null 2>&1 || true
  rc=0
  out=$("$b3os" templates get "$name" 2>&1) || rc=$?
  check cli.templates_get_after_rm "exit $rc, output '$out'" [ "$rc" = 1 ]
  check cli.templates_get_after_rm_says_why "$out" grep -q '^error: template_not_found: ' <<<"$out"
  rc=0
  out=$("$b3os" templates build 2>&1) || rc=$?
  check cli.templates_build_usage "exit $rc, output '$out'" [ "$rc" = 2 ]
}

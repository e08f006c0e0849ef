# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: running commands (argv and shell strings, env, cwd, stdin, exit codes and
# signals, timeouts, output truncation, concurrent execs, other users) in the main sandbox $SBX.

# ---- 2-5. exec ------------------------------------------------------------------------------

s_exec() {
  run_exec "$SBX" '{"cmd":["python3","-c","print(6*7)"]}'
  check exec.argv "$(snip)" okj 200 '.stdout == "42\n" and .exit_code == 0 and .timed_out == false and .stderr == ""'
  check exec.reply_fields "$(snip)" okj 200 'has("exit_code") and has("stdout") and has("stderr") and has("timed_out")
    and (.duration_ms | type) == "number" and .stdout_truncated == false and .stderr_truncated == false
    and (.timing.total_ms | type) == "number"'
  run_exec "$SBX" '{"cmd":"echo $((6*7))"}'
  check exec.string_under_sh "$(snip)" okj 200 '.stdout == "42\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":"pwd"}'
  check exec.default_cwd "$(snip)" okj 200 '.stdout == "/workspace\n"'
  run_exec "$SBX" '{"cmd":"echo \"$FOO\"; pwd","env":{"FOO":"bar baz"},"cwd":"/tmp"}'
  check exec.env_cwd "$(snip)" okj 200 '.stdout == "bar baz\n/tmp\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":["tr","a-z","A-Z"],"stdin":"hello\nworld\n"}'
  check exec.stdin "$(snip)" okj 200 '.stdout == "HELLO\nWORLD\n" and .exit_code == 0'
  # 900 KiB of stdin (the JSON body limit is 1 MiB), streamed to the command through the channel.
  head -c $((900 * 1024)) /dev/zero | tr '\0' x | jq -Rsc '{cmd: "wc -c", stdin: .}' >"$T/stdin.json"
  api POST "/v1/sandboxes/$SBX/exec" -H 'Content-Type: application/json' --data-binary @"$T/stdin.json"
  check exec.stdin_900KiB "$(snip)" okj 200 '.stdout == "921600\n" and .exit_code == 0'
  run_exec "$SBX" '{"cmd":"echo out; echo err >&2; exit 3"}'
  check exec.exit_code "$(snip)" okj 200 '.exit_code == 3 and .stdout == "out\n" and .stderr == "err\n" and .timed_out == false'
  run_exec "$SBX" '{"cmd":"kill -TERM $$"}'
  check exec.killed_by_signal_143 "$(snip)" okj 200 '.exit_code == 143 and .timed_out == false'
  run_exec "$SBX" '{"cmd":["/no/such/program"]}'
  check exec.missing_program_127 "$(snip)" okj 200 '.exit_code == 127 and (.stderr | length) > 0'
  run_exec "$SBX" '{"cmd":"pwd","cwd":"/no/such/dir"}'
  expect_error exec.missing_cwd_400 400 invalid_request cwd
  run_exec "$SBX" '{"cmd":"printf '"'"'a\\377b'"'"'"}'
  check exec.non_utf8_replaced "$(snip)" okj 200 '.stdout == "a\ufffdb"'
  run_exec "$SBX" '{}'
  expect_error exec.no_cmd_400 400 invalid_request cmd
  run_exec "$SBX" '{"cmd":[]}'
  expect_error exec.empty_argv_400 400 invalid_request cmd
  run_exec "$SBX" '{"cmd":"true","timeout_ms":0}'
  expect_error exec.timeout_ms_0_400 400 invalid_request timeout_ms
  run_exec "$SBX" '{"cmd":"true","shell":true}'
  expect_error exec.unknown_field_400 400 invalid_request shell
}

s_exec_timeout() {
  run_exec "$SBX" '{"cmd":"sleep 1000 & sleep 30","timeout_ms":500}'
  check exec_timeout.timed_out "$(snip)" okj 200 '.timed_out == true'
  check exec_timeout.returns_fast "took ${TIME}s" awk -v t="$TIME" 'BEGIN { exit !(t < 3) }'
  run_exec "$SBX" '{"cmd":"pgrep -c sleep || true"}'
  check exec_timeout.group_killed "sleep processes left: $(j .stdout)" okj 200 '.stdout == "0\n"'
}

s_exec_truncation() {
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stdout.write(\"a\" * (3 << 20)); sys.stderr.write(\"small\")"]}'
  local n
  n=$(jq -j .stdout "$RESP" 2>/dev/null | wc -c)
  check exec_truncation.stdout_1MiB "stdout has $n bytes, HTTP $ST" [ "$n" = 1048576 ]
  check exec_truncation.flags "$(jq -c 'del(.stdout)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stdout_truncated == true and .stderr_truncated == false and .stderr == "small" and .exit_code == 0'
  # The boundary: exactly 1 MiB is kept whole; one byte more is truncated.
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stdout.write(\"b\" * (1 << 20))"]}'
  check exec_truncation.exactly_1MiB_not_truncated "$(jq -c 'del(.stdout)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stdout_truncated == false and (.stdout | length) == 1048576'
  run_exec "$SBX" '{"cmd":["python3","-c","import sys; sys.stderr.write(\"c\" * ((1 << 20) + 1))"]}'
  check exec_truncation.stderr_1MiB_plus_1 "$(jq -c 'del(.stderr)' "$RESP" 2>/dev/null | head -c 300)" \
    okj 200 '.stderr_truncated == true and (.stderr | length) == 1048576 and .stdout_truncated == false'
}

s_exec_concurrent() {
  local i start elapsed bad=""
  start=$(now_ms)
  for i in 1 2 3 4 5 6 7 8; do
    curl -s -o "$T/conc.$i" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
      -H 'Content-Type: application/json' -d "{\"cmd\":\"sleep 1; echo out-$i\"}" \
      "$URL/v1/sandboxes/$SBX/exec" >"$T/conc.$i.status" &
  done
  wait
  elapsed=$(($(now_ms) - start))
  for i in 1 2 3 4 5 6 7 8; do
    if [ "$(cat "$T/conc.$i.status")" != 200 ] ||
      ! jq -e --arg want "out-$i"$'\n' '.stdout == $want and .exit_code == 0' "$T/conc.$i" >/dev/null 2>&1; then
      bad="$bad #$i: HTTP $(cat "$T/conc.$i.status") $(head -c 200 "$T/conc.$i")"
    fi
  done
  check exec_concurrent.own_outputs "$bad" [ -z "$bad" ]
  # Sequentially they would take at least 8 s.
  check exec_concurrent.parallel "8 x sleep 1 took ${elapsed} ms" [ "$elapsed" -lt 6000 ]
}

# exec's `user`: a user the sandbox made itself, a numeric uid it does not know, a name it does
# not have.
s_exec_user() {
  run_exec "$SBX" '{"cmd":"id -u alice >/dev/null 2>&1 || useradd -m alice"}'
  check exec_user.useradd "$(snip)" okj 200 '.exit_code == 0'
  run_exec "$SBX" '{"cmd":"id -un; echo $HOME; id -G; echo $USER $LOGNAME","user":"alice","cwd":"/home/alice"}'
  check exec_user.by_name "$(snip)" okj 200 '.exit_code == 0 and
    (.stdout | split("\n")) as $l | $l[0] == "alice" and $l[1] == "/home/alice" and ($l[2] | length) > 0
    and $l[3] == "alice alice"'
  run_exec "$SBX" '{"cmd":"echo hi > f; stat -c %U:%u f","user":"alice","cwd":"/home/alice"}'
  check exec_user.owns_her_file "$(snip)" okj 200 '.exit_code == 0 and (.stdout | startswith("alice:"))'
  run_exec "$SBX" '{"cmd":"stat -c %U /home/alice/f"}'
  check exec_user.owner_seen_by_root "$(snip)" okj 200 '.stdout == "alice\n"'
  run_exec "$SBX" '{"cmd":"id -u; id -g; echo $HOME; touch /root/x","user":"1234:1234"}'
  check exec_user.numeric "$(snip)" okj 200 '(.stdout == "1234\n1234\n/\n") and .exit_code != 0
    and (.stderr | test("Permission denied"))'
  run_exec "$SBX" '{"cmd":"id -u","user":"nobody-here"}'
  expect_error exec_user.unknown_400 400 invalid_request 'no user "nobody-here"'
  run_exec "$SBX" '{"cmd":"id -u","user":"-rf"}'
  expect_error exec_user.malformed_400 400 invalid_request user
  run_exec "$SBX" '{"cmd":"pwd","user":"alice","cwd":"/root"}'
  expect_error exec_user.cwd_denied_400 400 invalid_request cwd
  run_exec "$SBX" '{"cmd":"id -u; echo $HOME"}'
  check exec_user.default_still_root "$(snip)" okj 200 '.stdout == "0\n/root\n"'
}

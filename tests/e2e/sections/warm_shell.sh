# shellcheck shell=bash
# shellcheck disable=SC2016 # single-quoted $VAR are for the sandbox's shell or jq
# e2e section: the login shells started ahead (agent/warm_shell.h, docs/e2b.md). Once a
# `/bin/bash -l -c CMD` process has come twice, the agent keeps such a shell waiting, and more
# after commands back to back; the next command like them runs in one, with what `bash -l -c`
# gives (fds, $0, $BASH_EXECUTION_STRING, $LINENO, $SECONDS, the profile's output first). A
# profile changed since the shell read it is read again, a directory made again is entered
# again; waiting shells are not processes of the API and do not keep the sandbox from being
# idle, while a process left behind still does.

# login_proc ID CMD [CWD]: runs CMD as ["/bin/bash","-l","-c",CMD] through the processes API, waits
# for it, and leaves its stdout in OUT and its pid in LPID ("" when it did not start or end).
login_proc() {
  OUT= LPID=
  apij POST "/v1/sandboxes/$1/processes" "$(jq -cn --arg c "$2" --arg d "${3:-}" '{cmd: ["/bin/bash", "-l", "-c", $c]} + (if $d == "" then {} else {cwd: $d} end)')"
  [ "$ST" = 201 ] || return 0
  local p
  p=$(j .id)
  LPID=$(j .pid)
  apij POST "/v1/sandboxes/$1/processes/$p/wait" '{"timeout_ms":20000}'
  jt '.exited == true' || return 0
  api GET "/v1/sandboxes/$1/processes/$p/output"
  OUT=$(jq -j '[.chunks[] | select(.stream == "stdout") | .data] | add // ""' "$RESP")
}

# warm_shells ID: the pids of the login shells waiting in the sandbox (their command line names
# the stub), one per line.
warm_shells() {
  run_exec "$1" '{"cmd":"pgrep -f \"[_]_b3os_cmd\" || true"}'
  j .stdout | sed '/^$/d'
}

one_waiting() { [ "$(warm_shells "$1" | wc -l)" = 1 ]; }
some_waiting() { [ "$(warm_shells "$1" | wc -l)" -ge "$2" ]; }

# none_left ID PIDS: none of PIDS (one per line) is still a waiting shell.
none_left() { ! grep -qxF -f <(printf '%s\n' "$2") <(warm_shells "$1"); }

# burst ID N: N login shell commands (`true`) back to back, each started as soon as the last
# has ended, from one client on one connection (a shell's curl and jq between calls take long
# enough on a busy machine for a shell to be made ready at leisure).
burst() {
  python3 - "$URL" "$KEY" "$1" "$2" <<'PY'
import http.client, json, sys, urllib.parse
url, key, sbx, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
u = urllib.parse.urlsplit(url)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
h = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
def post(path, body):
    c.request("POST", path, json.dumps(body), h)
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")
for _ in range(n):
    st, p = post(f"/v1/sandboxes/{sbx}/processes", {"cmd": ["/bin/bash", "-l", "-c", "true"]})
    if st != 201:
        sys.exit(f"start: {st} {p}")
    post(f"/v1/sandboxes/{sbx}/processes/{p['id']}/wait", {"timeout_ms": 20000})
PY
}

s_warm_shell() {
  create_sandbox '{"timeout_s":600,"forkable":true,"metadata":{"test":"warm-shell"}}'
  local id=$CID
  [ -n "$id" ] || { fail warm_shell.create "$(snip)"; return 0; }
  login_proc "$id" 'echo one'
  login_proc "$id" 'echo two'
  check warm_shell.cold_runs "stdout [$OUT]" [ "$OUT" = "two" ]
  check warm_shell.one_waits "[$(warm_shells "$id")] waiting" eventually 10 one_waiting "$id"
  # What bash -l -c gives: only fds 0-2, $0, the command as BASH_EXECUTION_STRING, line 1, and
  # the stub's variable gone.
  local cmd='echo /proc/$$/fd/*; echo "$0|$BASH_EXECUTION_STRING|$LINENO|${__b3os_cmd-unset}"' waiting want
  waiting=$(warm_shells "$id")
  login_proc "$id" "$cmd"
  check warm_shell.taken "waiting shell [$waiting], the command's pid [$LPID]" [ "$waiting" = "${LPID:-none}" ]
  # The same command started the usual way (exec always starts its process).
  run_exec "$id" "$(jq -cn --arg c "$cmd" '{cmd: ["/bin/bash", "-l", "-c", $c]}')"
  want=$(j .stdout | sed 's#/proc/[0-9]*/##g')
  check warm_shell.as_bash_c "warm [$OUT], started [$want]" [ "$(sed 's#/proc/[0-9]*/##g' <<<"$OUT")" = "$want" ]
  check warm_shell.bash_c_vars "warm [$OUT]" grep -qxF "/bin/bash|$cmd|1|unset" <<<"$OUT"
  # A profile changed after the shell read it: the command sees the new one, and what the
  # profile prints comes before the command's output.
  check warm_shell.waits_again "no shell waiting" eventually 10 one_waiting "$id"
  run_exec "$id" '{"cmd":"printf \"export WARM_T=fresh\\necho from-profile\\n\" >> /root/.bashrc"}'
  login_proc "$id" 'echo "t=$WARM_T"'
  check warm_shell.profile_changed "stdout [$OUT]" [ "$OUT" = "$(printf 'from-profile\nt=fresh')" ]
  login_proc "$id" 'exit 3'
  api GET "/v1/sandboxes/$id/processes"
  check warm_shell.not_listed "$(snip)" okj 200 '(.data | length) == 5 and all(.data[]; .status == "exited")'
  # SECONDS counts from the command, not from the shell's start.
  check warm_shell.waits_for_seconds "no shell waiting" eventually 10 one_waiting "$id"
  # bash counts SECONDS in whole seconds of the clock: 0 or 1 just after it is set, 2 or more
  # in a shell that has waited 2.2 s.
  sleep 2.2
  login_proc "$id" 'echo "s=$SECONDS"'
  check warm_shell.seconds_from_command "stdout [$OUT]" grep -qxE 's=[01]' <<<"$(sed 1d <<<"$OUT")"
  check warm_shell.seconds_profile_first "stdout [$OUT]" [ "$(head -1 <<<"$OUT")" = from-profile ]
  # A directory removed and made again is another one: the command runs in the new one. Four
  # commands in /tmp/wd: three pass the waiting shell of the other directory and end it, and one
  # of /tmp/wd is then kept waiting (a fifth command runs in it), in the directory as it was.
  run_exec "$id" '{"cmd":"mkdir -p /tmp/wd"}'
  for _ in 1 2 3 4; do login_proc "$id" 'pwd' /tmp/wd; done
  check warm_shell.cwd_shell_waits "no shell waiting" eventually 10 some_waiting "$id" 1
  waiting=$(warm_shells "$id" | head -1)
  login_proc "$id" 'pwd' /tmp/wd
  check warm_shell.cwd_shell_taken "oldest waiting [$waiting], the command's pid [$LPID]" [ "$waiting" = "$LPID" ]
  check warm_shell.cwd_shell_runs_there "stdout [$OUT]" [ "$OUT" = "$(printf 'from-profile\n/tmp/wd')" ]
  check warm_shell.cwd_shell_waits_again "no shell waiting" eventually 10 some_waiting "$id" 1
  waiting=$(warm_shells "$id")
  run_exec "$id" '{"cmd":"rm -rf /tmp/wd && mkdir /tmp/wd && touch /tmp/wd/made-again"}'
  login_proc "$id" 'ls' /tmp/wd
  check warm_shell.cwd_made_again "stdout [$OUT]" [ "$OUT" = "$(printf 'from-profile\nmade-again')" ]
  check warm_shell.cwd_stale_shell_not_used "waiting [$(tr '\n' ' ' <<<"$waiting")], the command's pid [$LPID]" \
    not grep -qxF "${LPID:-none}" <<<"$waiting"
  # Commands back to back: more shells are kept waiting for the next burst (one more each time
  # a command found none ready), all ended by a command of another kind... three in a row.
  run_exec "$id" '{"cmd":"sed -i /from-profile/d /root/.bashrc"}'
  burst "$id" 10 || fail warm_shell.burst "the burst's client failed"
  check warm_shell.burst_grows_the_pool "[$(warm_shells "$id" | tr '\n' ' ')] waiting" eventually 15 some_waiting "$id" 3
  local before
  before=$(warm_shells "$id" | head -1)
  login_proc "$id" 'echo "$BASHPID:$$"'
  check warm_shell.pool_oldest_first "oldest waiting [$before], ran in [$LPID], stdout [$OUT]" [ "$OUT" = "$before:$before" ]
  # A profile that ends the shell before the command (here while /tmp/die exists): the shells
  # started for the next commands end at once, and are not started again in a loop while more
  # are wanted (the pool grew above).
  run_exec "$id" '{"cmd":"echo \"[ -e /tmp/die ] && exit 0\" >> /root/.bashrc; touch /tmp/die"}'
  login_proc "$id" 'echo x'
  login_proc "$id" 'echo x'
  run_exec "$id" "$(jq -cn '{cmd: ["bash", "-c", "a=$(bash -c '"'"'echo $BASHPID'"'"'); sleep 1.5; b=$(bash -c '"'"'echo $BASHPID'"'"'); echo $((b - a))"]}')"
  check warm_shell.dying_profile_not_restarted "pids used in 1.5 s: [$(j .stdout)]" [ "$(j .stdout)" -lt 10 ]
  run_exec "$id" '{"cmd":"rm /tmp/die"}'
  login_proc "$id" 'echo y'
  login_proc "$id" 'echo y'
  check warm_shell.waits_once_the_profile_is_mended "no shell waiting" eventually 10 some_waiting "$id" 1
  before=$(warm_shells "$id")
  for cmd in 'echo a' 'echo b' 'echo c'; do login_proc "$id" "$cmd" /tmp; done
  check warm_shell.passed_over_ends_all "waiting before [$(tr '\n' ' ' <<<"$before")], now [$(warm_shells "$id" | tr '\n' ' ')]" \
    eventually 10 none_left "$id" "$before"
  check warm_shell.passed_over_then_one_of_the_new_kind "[$(warm_shells "$id" | tr '\n' ' ')] waiting" eventually 10 one_waiting "$id"
  # Waiting shells killed from inside are not started again in a loop: none until a command of
  # their kind ends. (Killed twice: a shell being started as the first kill ran is not one
  # started again.)
  run_exec "$id" '{"cmd":"pkill -KILL -f \"[_]_b3os_cmd\"; sleep 0.3; pkill -KILL -f \"[_]_b3os_cmd\"; sleep 1.5; pgrep -fc \"[_]_b3os_cmd\" || true"}'
  check warm_shell.killed_not_restarted "shells waiting 1.5 s after they were killed: [$(j .stdout)]" [ "$(j .stdout)" = 0 ]
  login_proc "$id" 'echo back' /tmp
  check warm_shell.killed_then_command "stdout [$OUT]" [ "$OUT" = back ]
  check warm_shell.started_again_after_a_command "no shell waiting" eventually 10 some_waiting "$id" 1
  # An /etc/profile.d too large to watch: commands run as usual, no shell is kept waiting.
  run_exec "$id" '{"cmd":"for i in $(seq 300); do : > /etc/profile.d/zz$i.sh; done"}'
  login_proc "$id" 'echo many' /tmp
  login_proc "$id" 'echo many' /tmp
  sleep 0.5
  check warm_shell.huge_profile_d_runs "stdout [$OUT]" [ "$OUT" = many ]
  check warm_shell.huge_profile_d_no_shell "[$(warm_shells "$id" | tr '\n' ' ')] waiting" [ -z "$(warm_shells "$id")" ]
  run_exec "$id" '{"cmd":"rm -f /etc/profile.d/zz*.sh"}'
  login_proc "$id" 'echo few' /tmp
  login_proc "$id" 'echo few' /tmp

  # Idle with a shell waiting; a process left behind by a command keeps it busy.
  if [ -z "$(freezer_state "$id")" ]; then
    skip warm_shell.idle "no freezer cgroup for $id"
  else
    check warm_shell.waiting_and_idle "[$(warm_shells "$id")] waiting" eventually 10 some_waiting "$id" 1
    check warm_shell.frozen_while_waiting "state $(freezer_state "$id")" wait_frozen "$id" 4
    login_proc "$id" 'nohup sleep 600 >/dev/null 2>&1 & echo left'
    check warm_shell.left_behind "stdout [$OUT]" [ "$OUT" = left ]
    sleep 3.5
    check warm_shell.left_behind_stays_thawed "state $(freezer_state "$id")" not is_frozen "$id"
    run_exec "$id" '{"cmd":"pkill -x sleep; for i in $(seq 50); do pgrep -x sleep >/dev/null || exit 0; sleep 0.1; done; exit 1"}'
    check warm_shell.frozen_once_gone "state $(freezer_state "$id")" wait_frozen "$id" 4
  fi
  # A fork carries the waiting shell, with the source's environment: it ends at the fork's new
  # identity, and the fork's commands see the fork's own.
  check warm_shell.waiting_before_fork "[$(warm_shells "$id")] waiting" eventually 10 some_waiting "$id" 1
  apij POST "/v1/sandboxes/$id/fork" '{"count":1}'
  local fork
  fork=$(j '.data[0].id // empty')
  if [ -z "$fork" ]; then
    fail warm_shell.fork "$(snip)"
  else
    check warm_shell.fork_has_none_waiting "[$(warm_shells "$fork")] waiting in the fork" [ -z "$(warm_shells "$fork")" ]
    login_proc "$fork" 'echo "$B3OS_SANDBOX_ID"'
    check warm_shell.fork_identity "stdout [$OUT], fork $fork" [ "$OUT" = "$fork" ]
    delete_sandbox "$fork"
  fi
  delete_sandbox "$id"
  check warm_shell.delete_leaves_nothing "container left" eventually 15 not runsc_has "$id"
}

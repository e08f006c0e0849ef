# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: streamed exec (server-sent events) and background processes (start, list, get,
# stdin, signal, wait, output from an offset, follow, forget) in the main sandbox $SBX, and a
# background process carried by a fork.

# sse [sse.py args...] URL-PATH: the events of one request, one JSON line each, into $T/sse.out.
sse() {
  local path=${*: -1}
  python3 "$HERE/sse.py" --key "$KEY" "${@:1:$#-1}" "$URL$path" >"$T/sse.out" 2>"$T/sse.err" || true
}
# sse_jq FILTER: jq -s over the events of the last sse call.
sse_jq() { jq -s -e "$1" "$T/sse.out" >/dev/null 2>&1; }
sse_snip() { head -c 600 "$T/sse.out" | tr '\n' ' '; }
# The bytes of one stream of the last sse call (base64 chunks decoded), as a JSON string.
sse_bytes() {
  python3 -c '
import base64, json, sys
out = b""
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == sys.argv[2]:
        d = e["data"]
        out += base64.b64decode(d["data"]) if d.get("encoding") == "base64" else d["data"].encode()
print(json.dumps(out.decode("utf-8", "backslashreplace")))' "$T/sse.out" "$1"
}

s_exec_stream() {
  sse --method POST --json '{"cmd":"echo one; sleep 0.6; echo two >&2; exit 3","stream":true}' "/v1/sandboxes/$SBX/exec"
  check exec_stream.events "$(sse_snip)" sse_jq '.[0].status == 200 and (.[0].content_type | startswith("text/event-stream"))
    and .[1].event == "start" and (.[1].data.pid | type) == "number"
    and ([.[] | select(.event == "stdout") | .data.data] | add) == "one\n"
    and ([.[] | select(.event == "stderr") | .data.data] | add) == "two\n"
    and .[-1].event == "exit" and .[-1].data.exit_code == 3 and .[-1].data.timed_out == false'
  # Output comes as it is written, not at the end: "one" arrives while the command still sleeps.
  check exec_stream.as_it_comes "$(sse_snip)" sse_jq '([.[] | select(.event == "stdout")][0].t) + 0.3 < ([.[] | select(.event == "exit")][0].t)'
  sse --method POST --json '{"cmd":"echo via-accept"}' --header 'Accept: text/event-stream' "/v1/sandboxes/$SBX/exec"
  check exec_stream.accept_header "$(sse_snip)" sse_jq '.[1].event == "start" and ([.[] | select(.event == "stdout") | .data.data] | add) == "via-accept\n" and .[-1].data.exit_code == 0'
  # Bytes that are not UTF-8 come as base64, exact; a character cut between two writes is joined.
  sse --method POST --json '{"cmd":"printf \"a\\377\\376b\"; sleep 0.3; printf \"\\342\\202\"; sleep 0.3; printf \"\\254!\" >&1","stream":true}' "/v1/sandboxes/$SBX/exec"
  check exec_stream.bytes_exact "$(sse_snip)" test "$(sse_bytes stdout)" = '"a\\xff\\xfeb\u20ac!"'
  check exec_stream.base64_only_where_needed "$(sse_snip)" sse_jq '[.[] | select(.event == "stdout") | .data] |
    (map(select(.encoding == "base64")) | length) == 1 and any(.[]; .data == "\u20ac!")'
  # 20 MB of output, all of it (the 1 MiB cap of a plain exec does not apply to a stream).
  sse --timeout 120 --method POST --json '{"cmd":"head -c 20000000 /dev/urandom | base64 -w 0","stream":true,"timeout_ms":120000}' "/v1/sandboxes/$SBX/exec"
  local n
  n=$(jq -rs '[.[] | select(.event == "stdout") | .data.data | length] | add' "$T/sse.out" 2>/dev/null)
  check exec_stream.20MB_whole "stdout $n bytes; last: $(tail -n1 "$T/sse.out" | head -c 200)" \
    bash -c "[ '$n' = 26666668 ] && tail -n1 '$T/sse.out' | jq -e '.event == \"exit\" and .data.exit_code == 0' >/dev/null"
  # Errors before the command starts are ordinary answers.
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"pwd","cwd":"/no/such/dir","stream":true}'
  expect_error exec_stream.bad_cwd_400 400 invalid_request cwd
  apij POST /v1/sandboxes/sbx_00000000000000000000000000/exec '{"cmd":"true","stream":true}'
  expect_error exec_stream.no_sandbox_404 404 sandbox_not_found
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"true","stream":"yes"}'
  expect_error exec_stream.stream_not_bool_400 400 invalid_request stream
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"true","stream":true}' -H 'Idempotency-Key: stream-1'
  expect_error exec_stream.idempotency_400 400 invalid_request Idempotency-Key
  # A client that leaves after the start cancels the command (its process group is killed).
  sse --max-events 1 --method POST --json '{"cmd":"exec sleep 31.5","stream":true}' "/v1/sandboxes/$SBX/exec"
  check exec_stream.left_started "$(sse_snip)" sse_jq '.[1].event == "start"'
  check exec_stream.leaving_cancels "a sleep 31.5 is still running" eventually 10 bash -c "curl -s -H 'Authorization: Bearer $KEY' -H 'Content-Type: application/json' \
    -d '{\"cmd\":\"pgrep -f \\\"sleep 3[1].5\\\" | wc -l\"}' '$URL/v1/sandboxes/$SBX/exec' | jq -e '.stdout == \"0\\n\"' >/dev/null"
}

# start_proc JSON: POST .../processes on $SBX; PROC is the new process's id ("" when not 201).
start_proc() {
  apij POST "/v1/sandboxes/$SBX/processes" "$1"
  PROC=
  [ "$ST" = 201 ] && PROC=$(j .id)
  return 0
}

s_processes() {
  start_proc '{"cmd":"for i in 1 2 3; do echo line$i; sleep 0.2; done; echo err >&2; exit 4","tag":"counter"}'
  check processes.start_201 "$(snip)" okj 201 '.object == "process" and (.id | startswith("proc_")) and (.pid | type) == "number"
    and .status == "running" and .exit_code == null and .tag == "counter" and (.started_at | type) == "string"'
  local p1=$PROC pid1
  pid1=$(j .pid)
  apij POST "/v1/sandboxes/$SBX/processes/$p1/wait" '{"timeout_ms":20000}'
  check processes.wait_exited "$(snip)" okj 200 '.exited == true and .process.status == "exited" and .process.exit_code == 4'
  api GET "/v1/sandboxes/$SBX/processes/$p1"
  check processes.get "$(snip)" okj 200 '.id == "'"$p1"'" and .exit_code == 4 and .signal == 0 and (.exited_at | type) == "string"'
  api GET "/v1/sandboxes/$SBX/processes/$pid1"
  check processes.get_by_pid "$(snip)" okj 200 '.id == "'"$p1"'"'
  api GET "/v1/sandboxes/$SBX/processes/$p1/output"
  check processes.output_json "$(snip)" okj 200 '.object == "process_output" and .from == 0 and .dropped == 0 and .next == 22
    and ([.chunks[] | select(.stream == "stdout") | .data] | add) == "line1\nline2\nline3\n"
    and ([.chunks[] | select(.stream == "stderr") | .data] | add) == "err\n" and .running == false and .exit_code == 4'
  api GET "/v1/sandboxes/$SBX/processes/$p1/output?since=6"
  check processes.output_since "$(snip)" okj 200 '.chunks[0].offset == 6 and (.chunks[0].data | startswith("line2"))'
  api GET "/v1/sandboxes/$SBX/processes/$p1/output?since=23"
  expect_error processes.output_past_end_400 400 invalid_request since
  api GET "/v1/sandboxes/$SBX/processes"
  check processes.list "$(snip)" okj 200 '.object == "list" and any(.data[]; .id == "'"$p1"'" and .status == "exited")'

  # Follow: events as they come, ids are offsets, the end says the exit.
  start_proc '{"cmd":"echo a; sleep 1; echo b"}'
  local p2=$PROC
  sse "/v1/sandboxes/$SBX/processes/$p2/output?follow=true"
  check processes.follow "$(sse_snip)" sse_jq '.[0].status == 200 and ([.[] | select(.event == "stdout") | .data.data] | add) == "a\nb\n"
    and ([.[] | select(.event == "stdout") | .id] == ["2", "4"]) and .[-1].event == "exit" and .[-1].data.exit_code == 0 and .[-1].data.next == 4'
  sse --header 'Last-Event-ID: 2' "/v1/sandboxes/$SBX/processes/$p2/output?follow=true"
  check processes.last_event_id_resumes "$(sse_snip)" sse_jq '([.[] | select(.event == "stdout") | .data.data] | add) == "b\n"'

  # Stdin: written, then closed; base64 too.
  start_proc '{"cmd":"cat","stdin":true}'
  local p3=$PROC
  apij POST "/v1/sandboxes/$SBX/processes/$p3/stdin" '{"data":"hello\n"}'
  check processes.stdin_write "$(snip)" okj 200 '.written == 6 and .process.stdin_open == true'
  apij POST "/v1/sandboxes/$SBX/processes/$p3/stdin" '{"data":"w6kK","encoding":"base64","eof":true}'
  check processes.stdin_base64_eof "$(snip)" okj 200 '.written == 3'
  apij POST "/v1/sandboxes/$SBX/processes/$p3/wait" '{"timeout_ms":10000}'
  check processes.stdin_eof_ends_cat "$(snip)" okj 200 '.exited == true and .process.exit_code == 0'
  api GET "/v1/sandboxes/$SBX/processes/$p3/output"
  check processes.stdin_echoed "$(snip)" okj 200 '([.chunks[].data] | add) == "hello\n\u00e9\n" and all(.chunks[]; has("encoding") | not)'
  apij POST "/v1/sandboxes/$SBX/processes/$p3/stdin" '{"data":"more"}'
  expect_error processes.stdin_closed_409 409 conflict stdin
  apij POST "/v1/sandboxes/$SBX/processes/$p1/stdin" '{"data":"x"}'
  expect_error processes.stdin_never_opened_409 409 conflict stdin
  apij POST "/v1/sandboxes/$SBX/processes/$p3/stdin" '{"data":"x","encoding":"hex"}'
  expect_error processes.stdin_bad_encoding_400 400 invalid_request encoding

  # Signals: by name to the group; out of range and unknown names are 400.
  start_proc '{"cmd":"sleep 1000"}'
  local p4=$PROC
  apij POST "/v1/sandboxes/$SBX/processes/$p4/signal" '{"signal":99}'
  expect_error processes.signal_99_400 400 invalid_request signal
  apij POST "/v1/sandboxes/$SBX/processes/$p4/signal" '{"signal":"NOPE"}'
  expect_error processes.signal_name_400 400 invalid_request NOPE
  api DELETE "/v1/sandboxes/$SBX/processes/$p4"
  expect_error processes.forget_running_409 409 conflict running
  apij POST "/v1/sandboxes/$SBX/processes/$p4/signal" '{"signal":"SIGTERM"}'
  check processes.signal_delivered "$(snip)" okj 200 '.delivered == true'
  apij POST "/v1/sandboxes/$SBX/processes/$p4/wait" '{"timeout_ms":10000}'
  check processes.signal_exit "$(snip)" okj 200 '.exited == true and .process.exit_code == 143 and .process.signal == 15'
  apij POST "/v1/sandboxes/$SBX/processes/$p4/wait" '{"timeout_ms":0}'
  expect_error processes.wait_0_400 400 invalid_request timeout_ms

  # The ring keeps the last output_bytes; what fell out is said.
  start_proc '{"cmd":"head -c 10000 /dev/zero | tr \"\\0\" x","output_bytes":4096}'
  local p5=$PROC
  apij POST "/v1/sandboxes/$SBX/processes/$p5/wait" '{"timeout_ms":10000}'
  api GET "/v1/sandboxes/$SBX/processes/$p5/output"
  check processes.ring_dropped "$(jq -c 'del(.chunks)' "$RESP" | head -c 300)" okj 200 '.dropped == 5904 and .from == 5904 and .next == 10000
    and ([.chunks[].data] | add | length) == 4096'
  start_proc '{"cmd":"true","output_bytes":100}'
  expect_error processes.ring_too_small_400 400 invalid_request output_bytes

  # An answer that is not a follow is bounded (--max-exec-output, 1 MiB of output): 3 MiB of
  # \x01 bytes come in answers of about 1 MiB each (at most 2 MiB of JSON), as base64 (six as
  # \u0001 escapes each: a 64 MiB ring made a 400 MB answer), `more` until the last, and reading
  # from each `next` gives every byte once.
  start_proc '{"cmd":"head -c 3145728 /dev/zero | tr \"\\0\" \"\\001\"","output_bytes":4194304}'
  local pb=$PROC off=0 reads=0 got=0 biggest=0 size encodings=""
  apij POST "/v1/sandboxes/$SBX/processes/$pb/wait" '{"timeout_ms":20000}'
  while [ "$reads" -lt 10 ]; do
    api GET "/v1/sandboxes/$SBX/processes/$pb/output?since=$off"
    [ "$ST" = 200 ] || break
    reads=$((reads + 1))
    size=$(stat -c %s "$RESP")
    [ "$size" -le "$biggest" ] || biggest=$size
    got=$((got + $(jq '[.chunks[] | select(.data) | .data | if . == "" then 0 else (@base64d | length) end] | add // 0' "$RESP")))
    encodings="$encodings$(jq -r '[.chunks[].encoding // "text"] | unique | join(",")' "$RESP") "
    off=$(j .next)
    [ "$(j '.more // false')" = true ] || break
  done
  check processes.output_answer_bounded "$reads reads, $got bytes, largest answer $biggest bytes, encodings: $encodings" \
    test "$reads" -ge 3 -a "$reads" -le 4 -a "$got" = 3145728 -a "$off" = 3145728 -a "$biggest" -le 2097152
  check processes.output_control_bytes_as_base64 "encodings: $encodings" \
    sh -c "! echo '$encodings' | grep -q text"
  check processes.output_last_read_complete "$(jq -c 'del(.chunks)' "$RESP" | head -c 300)" \
    okj 200 '(.more // false) == false and .running == false and .exit_code == 0'

  # Forget: an exited process goes, then it is unknown.
  api DELETE "/v1/sandboxes/$SBX/processes/$p5"
  check processes.forget "$(snip)" okj 200 '.deleted == true'
  api GET "/v1/sandboxes/$SBX/processes/$p5"
  expect_error processes.forgotten_404 404 process_not_found
  api GET "/v1/sandboxes/$SBX/processes/proc_999999"
  expect_error processes.unknown_404 404 process_not_found
  api GET "/v1/sandboxes/$SBX/processes/nonsense"
  expect_error processes.malformed_404 404 process_not_found
  start_proc '{"cmd":"pwd","cwd":"/no/such"}'
  expect_error processes.bad_cwd_400 400 invalid_request cwd
  start_proc '{"cmd":"true","stdin":"text"}'
  expect_error processes.stdin_not_bool_400 400 invalid_request stdin
  start_proc '{"cmd":"true","timeout_ms":5}'
  expect_error processes.unknown_field_400 400 invalid_request timeout_ms

  # A process outlives the request that started it, and the sandbox is not idle meanwhile.
  start_proc '{"cmd":"sleep 2; echo late"}'
  local p6=$PROC
  apij POST "/v1/sandboxes/$SBX/processes/$p6/wait" '{"timeout_ms":10000}'
  api GET "/v1/sandboxes/$SBX/processes/$p6/output"
  check processes.outlives_request "$(snip)" okj 200 '.chunks[0].data == "late\n"'

  # A background process that forks 10,000 children (each its own memory) is held by the
  # sandbox's own limits: gVisor's tasks are not host processes, so the node's pids are never
  # at stake; the sandbox's memory is, and a sandbox that fills it is stopped (failed) with a
  # message. Either way it ends, and deleting it leaves nothing behind.
  create_sandbox '{"memory_mib":256}'
  local fb=$CID
  apij POST "/v1/sandboxes/$fb/processes" '{"cmd":["python3","-c","import os, signal\nn = 0\nfor i in range(10000):\n    try:\n        pid = os.fork()\n    except OSError as e:\n        print(\"fork failed after\", n, e, flush=True); break\n    if pid == 0:\n        signal.pause(); os._exit(0)\n    n += 1\nprint(\"forked\", n, flush=True)\nsignal.pause()"]}'
  check processes.fork_flood_started "$(snip)" okj 201 '.status == "running"'
  local flood=$(j .id) how=""
  for _ in $(seq 120); do
    api GET "/v1/sandboxes/$fb"
    if [ "$(j .status)" = failed ]; then how="failed: $(j .stop_message)"; break; fi
    api GET "/v1/sandboxes/$fb/processes/$flood/output"
    if jt '[.chunks[].data] | add // "" | test("fork failed|forked")'; then how="$(j '[.chunks[].data] | add')"; break; fi
    sleep 0.5
  done
  check processes.fork_flood_bounded "ended as: ${how:-not within 60 s}" test -n "$how"
  api GET "/v1/sandboxes/$fb"
  info "fork flood: the sandbox is $(j .status): ${how:0:200}"
  run_exec "$SBX" '{"cmd":"echo other"}'
  check processes.fork_flood_others_unaffected "$(snip)" okj 200 '.stdout == "other\n"'
  delete_sandbox "$fb" || true
  check processes.fork_flood_nothing_left "runsc still lists $fb or its cgroup remains" \
    eventually 20 bash -c "! runsc --root '$T/run/runsc' list --quiet 2>/dev/null | grep -qx '$fb' && [ -z \"\$(ls -d /sys/fs/cgroup/*/b3os/$fb 2>/dev/null)\" ]"
}

# A running background process keeps its sandbox in use: timeout_s counts from when it ended.
s_processes_idle() {
  # A file watch holds a sandbox the same way (for its 9 s here), in a second sandbox alongside;
  # its clock starts once the watch has begun (that start is itself a call on the sandbox).
  create_sandbox '{"timeout_s":2}'
  local sw=$CID
  curl -sN -m 30 -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes/$sw/files/watch?path=/workspace&timeout_ms=9000" \
    >"$T/idlewatch.out" 2>&1 &
  local wpid=$!
  eventually 10 grep -q '^event: start' "$T/idlewatch.out" || true
  local tw=$SECONDS
  create_sandbox '{"timeout_s":2}'
  local sb=$CID
  apij POST "/v1/sandboxes/$sb/processes" '{"cmd":"sleep 6"}'
  check processes_idle.start "$(snip)" okj 201 '.status == "running"'
  local t0=$SECONDS
  sleep 4.5
  api GET "/v1/sandboxes/$sb"
  check processes_idle.held_past_timeout "$((SECONDS - t0)) s after the last call with timeout_s 2: $(snip)" okj 200 '.status == "running"'
  api GET "/v1/sandboxes/$sw"
  check processes_idle.watch_held_past_timeout "$((SECONDS - tw)) s after the watch began, timeout_s 2: $(snip)" okj 200 '.status == "running"'
  wait "$wpid" || true
  check processes_idle.watch_ended_by_its_timeout "$(tail -c 200 "$T/idlewatch.out" | tr '\n' ' ')" \
    grep -q '"reason":"timeout"' "$T/idlewatch.out"
  local stopped=""
  for _ in $(seq 60); do
    api GET "/v1/sandboxes/$sb"
    if [ "$(j .status)" = stopped ]; then stopped=$((SECONDS - t0)); break; fi
    sleep 0.25
  done
  check processes_idle.times_out_after "stopped ${stopped:-not within 15 s} s after start: $(snip)" \
    bash -c "[ -n '$stopped' ] && [ '$stopped' -ge 7 ] && jq -e '.stop_reason == \"timeout\"' '$RESP' >/dev/null"
  delete_sandbox "$sb" || true
  check processes_idle.watch_then_times_out "$(snip)" eventually 15 bash -c \
    "curl -s -H 'Authorization: Bearer $KEY' '$URL/v1/sandboxes/$sw' | jq -e '.status == \"stopped\" and .stop_reason == \"timeout\"' >/dev/null"
  delete_sandbox "$sw" || true
}

# A background process is carried by a fork (listed there, still writing) and by a snapshot.
s_processes_fork() {
  create_sandbox '{"forkable":true}'
  check processes_fork.create "$(snip)" okj 201 '.forkable == true'
  local src=$CID
  apij POST "/v1/sandboxes/$src/processes" '{"cmd":"i=0; while true; do i=$((i+1)); echo $i; sleep 0.1; done","tag":"ticker"}'
  check processes_fork.start "$(snip)" okj 201 '.status == "running"'
  local p
  p=$(j .id)
  sleep 0.5
  apij POST "/v1/sandboxes/$src/fork" '{"count":2}'
  check processes_fork.fork_201 "$(snip)" okj 201 '(.data | length) == 2'
  local forks f n=0
  forks=$(j '.data[].id')
  for f in $forks; do echo "$f" >>"$T/ids"; done
  for f in $forks; do
    n=$((n + 1))
    api GET "/v1/sandboxes/$f/processes"
    check "processes_fork.$n.listed" "$(snip)" okj 200 'any(.data[]; .id == "'"$p"'" and .tag == "ticker" and .status == "running")'
    local before after
    api GET "/v1/sandboxes/$f/processes/$p"
    before=$(j .output.end)
    sleep 0.5
    api GET "/v1/sandboxes/$f/processes/$p"
    after=$(j .output.end)
    check "processes_fork.$n.still_writing" "output end $before -> $after" test "${after:-0}" -gt "${before:-0}"
    apij POST "/v1/sandboxes/$f/processes/$p/signal" '{"signal":"TERM"}'
    check "processes_fork.$n.signal_in_fork" "$(snip)" okj 200 '.delivered == true'
  done
  api GET "/v1/sandboxes/$src/processes/$p"
  check processes_fork.source_unaffected "$(snip)" okj 200 '.status == "running"'
  for f in $forks; do delete_sandbox "$f" || true; done
  delete_sandbox "$src" || true
}

# pty STEPS [QUERY] [SANDBOX]: the node `ws` client on a terminal of $SBX (or SANDBOX); its
# lines in $T/pty.out.
pty() {
  timeout 120 node "$HERE/pty_client.mjs" "$URL" "$KEY" "${3:-$SBX}" "${2:-rows=24&cols=80}" "$1" >"$T/pty.out" 2>"$T/pty.err" || true
}
pty_jq() { jq -s -e "$1" "$T/pty.out" >/dev/null 2>&1; }
pty_snip() { head -c 600 "$T/pty.out" | tr '\n' ' '; cat "$T/pty.err" | head -c 200; }

# Terminals: a WebSocket (Beast's) carrying a pty made in the sandbox, driven by the `ws` client.
s_terminal() {
  if ! [ -d "$HERE/../mcp/node_modules/ws" ]; then
    skip terminal.all "the ws package is not installed (npm ci in tests/mcp failed)"
    return 0
  fi
  pty '[{"send":"echo T=$TERM; stty size\n"},{"expect":"T=xterm-256color"},{"expect":"24 80"},
        {"text":{"type":"resize","rows":30,"cols":100}},{"send":"stty size; tput cols\n"},{"expect":"30 100\\r?\\n100"},
        {"send":"sleep 100\n"},{"sleep":0.7},{"send":"\u0003"},{"send":"echo rc=$?\n"},{"expect":"rc=130"},
        {"send":"top -d 0.5\n"},{"expect":"load average"},{"send":"q"},{"sleep":1},{"send":"echo after-top\n"},{"expect":"after-top\\r?\\n"},
        {"send":"exit 7\n"},{"wait_exit":10}]'
  check terminal.started "$(pty_snip)" pty_jq '.[0].started.type == "started" and (.[0].started.pid | type) == "number"'
  check terminal.term_and_size "$(pty_snip)" pty_jq '.[1].ok and .[2].ok'
  check terminal.resize "$(pty_snip)" pty_jq '.[3].ok'
  check terminal.ctrl_c_reaches_the_job "$(pty_snip)" pty_jq '.[4].ok'
  check terminal.full_screen_top "$(pty_snip)" pty_jq '.[5].ok and .[6].ok'
  check terminal.exit_code "$(pty_snip)" pty_jq '.[-1].exit.exit_code == 7 and .[-1].closed.code == 1000'
  # A paste of 6 MB into a program that reads nothing for 11 s (more than the agent's 4 MiB
  # window and b3osd's queue, and longer than b3osd once waited before dropping typed bytes):
  # the client is held back and nothing is dropped.
  pty '[{"send":"stty raw -echo; echo ready; sleep 11; head -c 6000000 | wc -c; stty sane\n"},{"expect":"ready\\n"},
        {"send_bytes":6000000},{"expect":"6000000","timeout":60},{"send":"exit 3\n"},{"wait_exit":10}]'
  check terminal.paste_nothing_dropped "$(pty_snip)" pty_jq '.[1].ok and .[3].ok and .[-1].exit.exit_code == 3'
  # A client that leaves ends its shell and what runs on the terminal (SIGHUP, then KILL).
  pty '[{"send":"sleep 977\n"},{"sleep":0.5},{"close":true}]'
  check terminal.left "$(pty_snip)" pty_jq '.[-1].closed.code == 1000'
  check terminal.leaving_ends_the_shell "a sleep 977 is still running" eventually 10 bash -c "curl -s -H 'Authorization: Bearer $KEY' \
    -H 'Content-Type: application/json' -d '{\"cmd\":\"pgrep -f \\\"sleep 9[7]7\\\" | wc -l\"}' '$URL/v1/sandboxes/$SBX/exec' | jq -e '.stdout == \"0\\n\"' >/dev/null"
  # A pause ends the sandbox's terminals as a delete does (1011): a terminal stayed open on a
  # paused sandbox, holding its slot, for as long as the client waited.
  create_sandbox '{}'
  local paused=$CID pty_bg
  pty '[{"send":"echo up-$((40+2))\n"},{"expect":"up-42"},{"wait_close":30}]' '' "$paused" &
  pty_bg=$!
  check terminal.pause_setup "$(pty_snip)" eventually 20 grep -q '"ok":true' "$T/pty.out"
  api POST "/v1/sandboxes/$paused/pause"
  check terminal.pause_answered "$(snip)" okj 200 '.status == "paused"'
  wait "$pty_bg" || true
  check terminal.pause_closes_1011 "$(pty_snip)" pty_jq '.[-1].exit == null and .[-1].closed.code == 1011 and (.[-1].closed.reason | test("paused"))'
  delete_sandbox "$paused" || true
  # The cap: 64 terminals per sandbox; the 65th is refused (429 quota_exceeded), the others all
  # work. Two keys: one key's 65th request would meet its own cap of 64 requests in flight
  # first (concurrency_limited), which an open terminal counts in. (cat, not 64 login shells:
  # the cap is the point, not the sandbox's memory.)
  create_sandbox '{"memory_mib":1024}'
  local many=$CID key2
  key2=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
  pty '{"many":65,"keys":["'"$key2"'"]}' 'cmd=cat' "$many"
  check terminal.cap_64 "$(pty_snip)" pty_jq '.[0].counts.started == 64 and .[0].counts["429:quota_exceeded"] == 1'
  delete_sandbox "$many" || true
  # Bad requests get ordinary answers.
  api GET "/v1/sandboxes/$SBX/pty"
  expect_error terminal.not_a_websocket_400 400 invalid_request WebSocket
  api GET "/v1/sandboxes/$SBX/pty?rows=0" -H 'Connection: Upgrade' -H 'Upgrade: websocket'
  expect_error terminal.rows_0_400 400 invalid_request rows
  api GET "/v1/sandboxes/$SBX/pty?term=a;b"
  expect_error terminal.bad_term_400 400 invalid_request term
  api GET "/v1/sandboxes/$SBX/pty?cwd=/no/such" -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='
  expect_error terminal.bad_cwd_400 400 invalid_request cwd
  api GET /v1/sandboxes/sbx_00000000000000000000000000/pty
  expect_error terminal.no_sandbox_404 404 sandbox_not_found
  # A handshake Beast would refuse is refused before any shell starts.
  local shells_before
  run_exec "$SBX" '{"cmd":"pgrep -c -x bash || true"}'
  shells_before=$(j .stdout)
  api GET "/v1/sandboxes/$SBX/pty" -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: not-a-key'
  expect_error terminal.bad_ws_key_400 400 invalid_request Sec-WebSocket-Key
  api GET "/v1/sandboxes/$SBX/pty" -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 8' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=='
  expect_error terminal.bad_ws_version_400 400 invalid_request Sec-WebSocket-Version
  run_exec "$SBX" '{"cmd":"pgrep -c -x bash || true"}'
  check terminal.bad_handshake_started_nothing "bash processes before ${shells_before} after $(j .stdout)" [ "$(j .stdout)" = "$shells_before" ]
  local rc=0
  B3OS_API_URL=$URL B3OS_API_KEY=$KEY "$B3OS_BIN/b3os" shell sbx_00000000000000000000000000 </dev/null >/dev/null 2>"$T/shell404.err" || rc=$?
  check terminal.cli_unknown_sandbox_exit_1 "rc=$rc: $(cat "$T/shell404.err")" bash -c "[ $rc = 1 ] && grep -q '^error: sandbox_not_found' '$T/shell404.err'"
}

# `b3os shell` in a real terminal (tmux): raw mode, the window's size, resize on SIGWINCH,
# Ctrl-C to the foreground job, a full-screen program, and the shell's exit code as its own.
s_shell_cli() {
  if ! command -v tmux >/dev/null; then
    skip shell_cli.all "tmux is not installed (scripts/install-deps.sh installs it)"
    return 0
  fi
  local tm="b3os-e2e-$$" rc="$T/shell.rc"
  rm -f "$rc"
  tmux kill-session -t "$tm" 2>/dev/null || true
  tmux new-session -d -s "$tm" -x 100 -y 30 \
    "B3OS_API_URL='$URL' B3OS_API_KEY='$KEY' '$B3OS_BIN/b3os' shell '$SBX'; echo EXIT=\$? > '$rc'; sleep 60"
  pane_has() { tmux capture-pane -p -t "$tm" 2>/dev/null | grep -Eq "$1"; }
  check shell_cli.prompt "no prompt: $(tmux capture-pane -p -t "$tm" | grep -v '^$' | tail -2)" eventually 15 pane_has '#\s*$'
  tmux send-keys -t "$tm" 'echo size=$(tput cols)x$(tput lines)' Enter
  check shell_cli.window_size "$(tmux capture-pane -p -t "$tm" | grep -v '^$' | tail -2)" eventually 10 pane_has '^size=100x30'
  tmux resize-window -t "$tm" -x 120 -y 40 2>/dev/null || tmux resize-pane -t "$tm" -x 120 -y 40
  sleep 0.5
  tmux send-keys -t "$tm" 'echo now=$(tput cols)x$(tput lines)' Enter
  check shell_cli.resize "$(tmux capture-pane -p -t "$tm" | grep -v '^$' | tail -2)" eventually 10 pane_has '^now=120x40'
  tmux send-keys -t "$tm" 'sleep 100' Enter
  sleep 0.7
  tmux send-keys -t "$tm" C-c
  tmux send-keys -t "$tm" 'echo rc=$?' Enter
  check shell_cli.ctrl_c "$(tmux capture-pane -p -t "$tm" | grep -v '^$' | tail -2)" eventually 10 pane_has '^rc=130'
  tmux send-keys -t "$tm" 'top -d 0.5' Enter
  check shell_cli.top_opens "$(tmux capture-pane -p -t "$tm" | head -3)" eventually 10 pane_has 'load average'
  tmux send-keys -t "$tm" q
  sleep 1
  tmux send-keys -t "$tm" 'echo back-from-top' Enter
  check shell_cli.top_quits "$(tmux capture-pane -p -t "$tm" | grep -v '^$' | tail -2)" eventually 10 pane_has '^back-from-top'
  tmux send-keys -t "$tm" 'exit 9' Enter
  check shell_cli.exit_code "$(cat "$rc" 2>/dev/null)" eventually 10 grep -qx 'EXIT=9' "$rc"
  tmux kill-session -t "$tm" 2>/dev/null || true
}

# A fork while a terminal is open: the source's terminal goes on; in the forks its shell is
# ended (a fork has no client for it), and nothing of it is left running there.
s_terminal_fork() {
  if ! [ -d "$HERE/../mcp/node_modules/ws" ]; then
    skip terminal_fork.all "the ws package is not installed (npm ci in tests/mcp failed)"
    return 0
  fi
  create_sandbox '{"forkable":true}'
  local src=$CID
  timeout 120 node "$HERE/pty_client.mjs" "$URL" "$KEY" "$src" "rows=24&cols=80" \
    '[{"send":"echo before-fork\n"},{"expect":"before-fork\\r?\\n"},{"sleep":6},{"send":"echo after-fork\n"},{"expect":"after-fork\\r?\\n"},{"send":"exit 4\n"},{"wait_exit":10}]' \
    >"$T/ptyfork.out" 2>"$T/ptyfork.err" &
  local client=$!
  sleep 2.5
  apij POST "/v1/sandboxes/$src/fork" '{"count":1}'
  check terminal_fork.fork_201 "$(snip)" okj 201 '(.data | length) == 1'
  local f
  f=$(j '.data[0].id')
  echo "$f" >>"$T/ids"
  wait "$client" || true
  check terminal_fork.source_goes_on "$(head -c 600 "$T/ptyfork.out" | tr '\n' ' ')" \
    jq -s -e '.[1].ok and .[2].ok and .[-1].exit.exit_code == 4' "$T/ptyfork.out"
  run_exec "$f" '{"cmd":"pgrep -c -x bash || true"}'
  check terminal_fork.ended_in_fork "$(snip)" okj 200 '.stdout == "0\n"'
  delete_sandbox "$f" || true
  delete_sandbox "$src" || true
}

# The CLI's commands for processes, forks, pause and snapshots (tables by default, --json).
s_cli_processes() {
  local cli="$B3OS_BIN/b3os" out rc
  export B3OS_API_URL=$URL B3OS_API_KEY=$KEY
  out=$("$cli" start "$SBX" --tag cli-tick -- 'for i in 1 2 3; do echo tick$i; sleep 0.3; done; exit 6' 2>&1)
  check cli_processes.start "$out" bash -c "[[ '$out' == proc_* ]]"
  local p=$out
  out=$("$cli" ps "$SBX" 2>&1)
  check cli_processes.ps_table "$out" bash -c "grep -q '^ID ' <<<'$out' && grep -q '$p .* cli-tick' <<<'$out'"
  out=$("$cli" ps "$SBX" --json 2>&1)
  check cli_processes.ps_json "$(head -c 200 <<<"$out")" bash -c "jq -e '.data | any(.id == \"$p\")' <<<'$out' >/dev/null"
  rc=0
  out=$("$cli" logs -f "$SBX" "$p" 2>&1) || rc=$?  # its exit code is the process's (6): not an error here
  check cli_processes.logs_follow_exit "rc=$rc: $out" bash -c "[ $rc = 6 ] && [ '$(printf 'tick1\ntick2\ntick3')' = '$out' ]"
  out=$("$cli" logs "$SBX" "$p" --since 6 2>&1)
  check cli_processes.logs_since "$out" test "$out" = "$(printf 'tick2\ntick3')"
  out=$("$cli" start "$SBX" -- sleep 300 2>&1)
  out=$("$cli" kill "$SBX" "$out" -s KILL 2>&1)
  check cli_processes.kill "$out" test "$out" = delivered
  rc=0
  "$cli" kill "$SBX" proc_999999 >/dev/null 2>&1 || rc=$?
  check cli_processes.kill_unknown_fails "rc=$rc" test "$rc" != 0
  create_sandbox '{"forkable":true}'
  local src=$CID
  out=$("$cli" fork "$src" -n 2 2>&1)
  check cli_processes.fork_ids "$out" bash -c "[ \$(grep -c '^sbx_' <<<'$out') = 2 ]"
  local forks f
  forks=$(grep -o '^sbx_[0-9a-z]*' <<<"$out" || true)
  for f in $forks; do echo "$f" >>"$T/ids"; done
  out=$("$cli" pause "$src" 2>&1)
  check cli_processes.pause "$out" bash -c "grep -q ' paused$' <<<'$out'"
  out=$("$cli" resume "$src" 2>&1)
  check cli_processes.resume "$out" bash -c "grep -q ' running$' <<<'$out'"
  out=$("$cli" snapshot create "$src" 2>&1)
  check cli_processes.snapshot_create "$out" bash -c "[[ '$out' == snp_* ]]"
  local snp=$out
  out=$("$cli" snapshot list 2>&1)
  check cli_processes.snapshot_list "$out" bash -c "grep -q '^$snp ' <<<'$out'"
  out=$("$cli" create --from-snapshot "$snp" --port 8000:public --port 9000 2>&1)
  check cli_processes.create_from_snapshot "$out" bash -c "[[ '$out' == sbx_* ]]"
  local restored=$out
  echo "$restored" >>"$T/ids"
  out=$("$cli" ports "$restored" 2>&1)
  check cli_processes.ports_table "$out" bash -c "grep -q '^PORT ' <<<'$out' && grep -qE '^8000 +true +http://8000-' <<<'$out' && grep -qE '^9000 +false +-' <<<'$out'"
  out=$("$cli" url "$restored" 9000 --ttl 60 2>&1)
  check cli_processes.url "$out" bash -c "[[ '$out' == http://9000-* ]] && grep -q 'b3os_token=' <<<'$out'"
  out=$("$cli" egress get "$restored" 2>&1)
  check cli_processes.egress_get "$out" test "$out" = "mode: deny"
  rc=0
  out=$("$cli" egress set "$restored" --mode public 2>&1) || rc=$?
  check cli_processes.egress_set_deny_refused "rc=$rc: $out" bash -c "[ $rc = 1 ] && grep -q '^error: conflict:' <<<'$out'"
  rc=0
  out=$("$cli" create --from-snapshot "$snp" --template base 2>&1) || rc=$?
  check cli_processes.create_usage_error_2 "rc=$rc: $out" test "$rc" = 2
  delete_sandbox "$restored" || true
  out=$("$cli" completion bash 2>&1)
  check cli_processes.completion_bash "$(head -c 200 <<<"$out")" bash -c "bash -n <<<'$out' && grep -q 'complete -F _b3os b3os' <<<'$out' && grep -q '\[\"egress set\"\]' <<<'$out'"
  out=$("$cli" snapshot rm "$snp" 2>&1)
  check cli_processes.snapshot_rm "$out" bash -c "grep -q 'deleted' <<<'$out'"
  for f in $forks; do delete_sandbox "$f" || true; done
  delete_sandbox "$src" || true
  # A deleted sandbox is released behind the answer (delete.container_gone): wait for it.
  forks_listed() { [ -n "$(runsc_list | grep -F "$forks")" ]; }
  eventually 15 not forks_listed || true
  check cli_processes.forks_deleted "runsc still lists: [$(runsc_list | grep -F "$forks" | tr '\n' ' ')]" not forks_listed
}

# shellcheck shell=bash
# shellcheck disable=SC2034 # ST, TIME, CID are read by e2e.sh
# Helpers for the e2e suites (tests/e2e/*.sh and the sections of e2e.sh): result lines,
# sections run in subshells, HTTP calls with curl, JSON checks with jq, and
# starting/stopping/cleaning up a private b3osd.
#
# e2e.sh sets these before using the helpers:
#   T         the temp directory of the run
#   B3OS_BIN  the directory with b3osd, b3os, b3os-shim, b3os-agent
#   URL       http://127.0.0.1:PORT of the private b3osd
#   KEY       the API key api() sends (override per call: KEY=... api ...)

E2E_RESULTS=${E2E_RESULTS:-}   # one line per result, so sections run in subshells can report

# jq 1.6 exits 0 under -e when its input holds no value at all (an empty file, a request that
# failed before writing one): a check on such a file passed without looking. Every suite
# sources this file, so here -e also fails when jq printed nothing. Exported, for checks run
# with bash -c. (A short option cluster holding e, or --exit-status, is -e.)
jq() {
  local a e=0 out rc
  for a in "$@"; do
    case $a in
      --exit-status) e=1 ;;
      --*) ;;
      -*e*) [[ $a =~ ^-[a-zA-Z]+$ ]] && e=1 ;;
    esac
  done
  [ "$e" = 1 ] || { command jq "$@"; return; }
  out=$(command jq "$@")
  rc=$?
  [ -z "$out" ] || printf '%s\n' "$out"
  [ "$rc" = 0 ] && [ -n "$out" ]
}
export -f jq

# ---- suite set-up ------------------------------------------------------------------------

# e2e_begin NAME TOOL...: the checks and state every suite starts with: root, the binaries in
# $B3OS_BIN, the TOOLs on PATH, the base template in $TEMPLATES; then the run's temp dir $T and
# the result and response files. Exits with a clear message when something is missing.
die() {
  echo "${E2E_NAME:-e2e}: $*" >&2
  exit 1
}

e2e_begin() {
  local name=$1
  shift
  E2E_NAME=$name
  [ "$(id -u)" = 0 ] || { echo "$name: must run as root (b3osd drives runsc)" >&2; exit 1; }
  local b c
  for b in b3osd b3os b3os-shim b3os-agent; do
    [ -x "$B3OS_BIN/$b" ] || { echo "$name: $B3OS_BIN/$b not found; build with: ninja -C build b3osd b3os-agent b3os-shim b3os" >&2; exit 1; }
  done
  for c in curl jq runsc "$@"; do
    command -v "$c" >/dev/null || { echo "$name: $c is not installed" >&2; exit 1; }
  done
  if [ ! -e "$TEMPLATES/base/.b3os-ready" ]; then
    echo "FAIL setup: the base template is not built at $TEMPLATES/base (no .b3os-ready);" \
      "build it with: templates/base/build.sh $TEMPLATES/base"
    exit 1
  fi
  T=$(mktemp -d "/tmp/b3os-$name.XXXXXX")
  export B3OS_E2E_PIDFILE=$T/daemon.pid
  E2E_RESULTS=$T/results
  RESP=$T/resp
  RESPH=$T/resp.headers
  : >"$E2E_RESULTS"
  : >"$T/ids"
  ALL_KEYS=()
  SUITE_START=$(now_ms)
  e2e_guard
}

# ---- an early exit names itself ----------------------------------------------------------

# Under `set -e` a command that fails outside a check (a glob that matched nothing, a grep
# that found nothing, a head that closed a pipe) ends the script where no check failed. The
# ERR trap fires exactly when errexit is about to end the shell, so it records where: the file,
# line, command and status, in E2E_ABORT, on stderr, and in $B3OS_TEST_ABORT_FILE when
# scripts/test.sh set one (its summary line for the step then says so). errtrace (-E) carries
# the trap into functions; subshells (sections, background clients, command substitutions)
# are left to their parent, which sees their status. Suites' EXIT handlers call e2e_aborted.
E2E_ABORT=
E2E_GUARD_LEVEL=0
e2e_guard() {
  E2E_GUARD_LEVEL=$BASH_SUBSHELL
  set -E
  trap '_e2e_on_err "$?" "${PIPESTATUS[*]}" "$LINENO" "$BASH_COMMAND"' ERR
}
_e2e_on_err() {
  local st=$1 pipe=$2 line=$3 cmd=$4 file=${BASH_SOURCE[1]:-?} fn=${FUNCNAME[1]:-}
  [[ $- == *e* ]] || return 0
  [ "$BASH_SUBSHELL" = "$E2E_GUARD_LEVEL" ] || return 0
  [ -z "$E2E_ABORT" ] || return 0
  # Where the function that failed was called from, when it was not the script's top level.
  local from=
  [ -z "$fn" ] || [ "$fn" = main ] || from=" (in $fn, called from ${BASH_SOURCE[2]##*/} line ${BASH_LINENO[1]})"
  # A pipeline's members' statuses when there were several: the command shown is its last.
  [[ $pipe != *" "* ]] || st="$st; the pipeline's statuses $pipe"
  E2E_ABORT="${file##*/} line $line$from: ${cmd//$'\n'/ } (exit $st)"
  echo "# ${E2E_NAME:-suite}: ended early, at an unexpected error outside any check: $E2E_ABORT" >&2
  [ -z "${B3OS_TEST_ABORT_FILE:-}" ] || echo "${E2E_NAME:-suite}: $E2E_ABORT" >>"$B3OS_TEST_ABORT_FILE" 2>/dev/null || true
}

# e2e_aborted RC: for a suite's EXIT handler. One FAIL NAME.ended_early when an unexpected
# error ended the script (E2E_ABORT says where: the checks after it never ran), or when it ends
# with RC != 0 and no check failed (a signal, an explicit exit: the status is all there is).
E2E_ABORT_REPORTED=
e2e_aborted() {
  local rc=$1
  trap - ERR
  [ -z "$E2E_ABORT_REPORTED" ] || return 0
  E2E_ABORT_REPORTED=1
  if [ -n "$E2E_ABORT" ]; then
    fail "${E2E_NAME:-suite}.ended_early" "the script ended at $E2E_ABORT; the checks after it did not run"
  elif [ "$rc" != 0 ] && [ "$(count_results FAIL)" = 0 ]; then
    fail "${E2E_NAME:-suite}.ended_early" "the script ended with status $rc where no check failed"
  fi
  return 0
}

# ---- results ----------------------------------------------------------------------------

pass() { echo "PASS $1"; echo "PASS" >>"$E2E_RESULTS"; }
fail() { echo "FAIL $1: $2"; echo "FAIL" >>"$E2E_RESULTS"; }
# relay: the PASS/FAIL lines of a client program (stdin) into this suite's counts; other lines
# are information.
relay() {
  local line rest
  while IFS= read -r line; do
    case $line in
      "PASS "*) pass "${line#PASS }" ;;
      "FAIL "*) rest=${line#FAIL }; fail "${rest%%:*}" "${rest#*: }" ;;
      "SKIP "*) rest=${line#SKIP }; skip "${rest%%:*}" "${rest#*: }" ;;
      *) info "$line" ;;
    esac
  done
}
skip() { echo "SKIP $1: $2"; echo "SKIP" >>"$E2E_RESULTS"; }
info() { echo "# $*"; }

# check NAME DETAIL CMD...: PASS if CMD succeeds, else FAIL with DETAIL. Always returns 0.
check() {
  local name=$1 detail=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
  return 0
}

# eventually SECS CMD...: CMD succeeds within SECS seconds (tried every 0.1 s). For what
# b3osd does just after it answers (a delete releases the container behind its answer).
eventually() {
  local until=$(($(date +%s%N) / 1000000 + $1 * 1000))
  shift
  until "$@"; do
    [ "$(($(date +%s%N) / 1000000))" -lt "$until" ] || return 1
    sleep 0.1
  done
}

count_results() { grep -c "^$1\$" "$E2E_RESULTS" 2>/dev/null || true; }

# ---- sections ---------------------------------------------------------------------------

SECTION_PID=   # the subshell of the section running now (a suite's INT/TERM trap ends it)

# run_section FN: runs one group of checks in a subshell with errexit, so an unexpected error
# ends that group (reported as a FAIL) and the suite goes on with the next. The subshell runs
# in the background and is waited for, so INT/TERM reach the traps at once.
run_section() {
  local fn=$1 rc
  # E2E_SECTIONS="s_fork s_pause" runs only those (development); the suite runs them all.
  if [ -n "${E2E_SECTIONS:-}" ] && [[ " $E2E_SECTIONS " != *" $fn "* ]]; then
    echo "# SKIP $fn: not in E2E_SECTIONS"
    return 0
  fi
  # E2E_SKIP_SECTIONS="s_a s_b" leaves those out, each a SKIP with E2E_SKIP_REASON (a suite
  # run again through a router leaves out what tests the node alone).
  if [[ " ${E2E_SKIP_SECTIONS:-} " == *" $fn "* ]]; then
    skip "$fn" "${E2E_SKIP_REASON:-in E2E_SKIP_SECTIONS}"
    return 0
  fi
  local t0=$SECONDS
  set +e
  (
    set -eE
    trap - INT TERM
    level=$BASH_SUBSHELL
    trap '[ "$BASH_SUBSHELL" != "$level" ] || echo "# $fn: unexpected error at ${BASH_SOURCE[0]##*/} line $LINENO: $BASH_COMMAND" >&2' ERR
    "$fn"
  ) &
  SECTION_PID=$!
  wait "$SECTION_PID"
  rc=$?
  SECTION_PID=
  set -e
  # Where the suite's time goes (CI has a budget): every section that took 5 s or more says so.
  [ $((SECONDS - t0)) -lt 5 ] || echo "# $fn took $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || fail "$fn" "the section stopped at an unexpected error (exit $rc); see the line above"
  # The daemon must survive every section (s_restart kills it on purpose and starts it again).
  if ! daemon_alive; then
    fail "$fn.daemon_alive" "b3osd died during $fn: $(grep 'b3osd exited with status' "$T/daemon.log" | tail -n1)"
    start_daemon || die "b3osd does not start again; see $T/daemon.log"
  fi
  return 0
}

# ---- HTTP --------------------------------------------------------------------------------

# api METHOD PATH [curl args...]: one request to the private b3osd with $KEY (none if KEY is
# empty). Sets ST to the HTTP status (000 if curl failed) and TIME to the seconds it took;
# the body is in $RESP and the headers in $RESPH. Never fails.
api() {
  local method=$1 path=$2
  shift 2
  local auth=()
  [ -n "${KEY:-}" ] && auth=(-H "Authorization: Bearer $KEY")
  : >"$RESP"
  : >"$RESPH"
  local out
  out=$(curl -sS -g -o "$RESP" -D "$RESPH" -w '%{http_code} %{time_total}' -X "$method" \
    ${auth[@]+"${auth[@]}"} "$@" "$URL$path" 2>"$T/curl.err") || out="000 0"
  ST=${out%% *}
  TIME=${out#* }
  record_response "$method" "$path" || true
}

# record_response METHOD PATH: appends the last response to $T/responses.jsonl, one JSON line
# {method, path, status, content_type, body} for tests/e2e/openapi_check.py (check_responses).
# A body over 1 MiB is left out ("body": null, "skipped": why). Concurrent callers take turns.
record_response() {
  [ "$ST" != 000 ] || return 0
  local ct size
  ct=$(awk 'tolower($1) == "content-type:" { sub(/^[^:]*:[ \t]*/, ""); sub(/\r$/, ""); v = $0 } END { print v }' "$RESPH")
  size=$(stat -c %s "$RESP" 2>/dev/null || echo 0)
  {
    flock 9
    if [ "$size" -gt 1048576 ]; then
      jq -nc --arg m "$1" --arg p "$2" --argjson s "$ST" --arg c "$ct" --arg why "body of $size bytes (over 1 MiB)" \
        '{method: $m, path: $p, status: $s, content_type: $c, body: null, skipped: $why}'
    else
      jq -nc --arg m "$1" --arg p "$2" --argjson s "$ST" --arg c "$ct" --rawfile b "$RESP" \
        '{method: $m, path: $p, status: $s, content_type: $c, body: $b}'
    fi >>"$T/responses.jsonl"
  } 9>>"$T/responses.lock"
}

# check_responses: validates every response recorded by api() against docs/openapi.yaml, as
# one check (openapi.responses_valid); its summary and each failure are printed as "#" lines.
check_responses() {
  local out rc=0 here
  here=$(dirname "${BASH_SOURCE[0]}")
  out=$(python3 "$here/openapi_check.py" validate "$T/responses.jsonl" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/# /'
  if [ "$rc" = 0 ]; then
    pass openapi.responses_valid
  else
    fail openapi.responses_valid "responses that docs/openapi.yaml does not describe (lines above)"
  fi
  return 0
}

# apij METHOD PATH JSON [curl args...]: api with a JSON body.
apij() {
  local method=$1 path=$2 body=$3
  shift 3
  api "$method" "$path" -H 'Content-Type: application/json' --data-binary "$body" "$@"
}

# j [jq options] FILTER: jq -r on the last response body ("" when it is not JSON).
j() { jq -r "$@" "$RESP" 2>/dev/null || true; }
# jt [jq options] FILTER: true if the filter holds on the last response body.
jt() { jq -e "$@" "$RESP" >/dev/null 2>&1; }
# okj STATUS FILTER: true if the last response had STATUS and the filter holds on its body.
okj() { [ "$ST" = "$1" ] && jt "$2"; }
# not CMD...: true if CMD fails (for check).
not() { ! "$@"; }
# header NAME: the value of a header of the last response (case-insensitive name).
header() { grep -i "^$1:" "$RESPH" | head -n1 | cut -d: -f2- | sed 's/^ *//; s/\r$//' || true; }
# snip: the last response, shortened, for FAIL details.
snip() { printf 'HTTP %s %s' "$ST" "$(head -c 300 "$RESP" | tr '\n' ' ')"; }

# expect NAME STATUS: PASS if the last response had STATUS.
expect() {
  if [ "$ST" = "$2" ]; then pass "$1"; else fail "$1" "want HTTP $2, got $(snip)"; fi
  return 0
}

# expect_error NAME STATUS CODE [WORD]: the last response is STATUS with error.code CODE, a
# non-empty error.message and, when WORD is given, a message mentioning WORD.
expect_error() {
  local name=$1 status=$2 code=$3 word=${4:-}
  local got_code got_msg
  got_code=$(j '.error.code // empty')
  got_msg=$(j '.error.message // empty')
  if [ "$ST" != "$status" ] || [ "$got_code" != "$code" ]; then
    fail "$name" "want HTTP $status $code, got $(snip)"
  elif [ -z "$got_msg" ]; then
    fail "$name" "error body has no error.message: $(snip)"
  elif [ -n "$word" ] && [[ $got_msg != *"$word"* ]]; then
    fail "$name" "message does not name '$word': $got_msg"
  else
    pass "$name"
  fi
  return 0
}

# create_sandbox JSON [curl args...]: POST /v1/sandboxes with $KEY. Sets CID to the new id
# on 201 (and remembers it for the cleanup), else to "". The response stays in $RESP.
create_sandbox() {
  local body=$1
  shift
  apij POST /v1/sandboxes "$body" "$@"
  CID=
  if [ "$ST" = 201 ]; then
    CID=$(j .id)
    echo "$CID" >>"$T/ids"
  fi
}

# delete_sandbox ID: DELETE it with $KEY; returns 0 on 200.
delete_sandbox() {
  api DELETE "/v1/sandboxes/$1"
  [ "$ST" = 200 ]
}

# run_exec ID JSON [curl args...]: POST .../exec; the result is in $RESP.
run_exec() {
  local id=$1 body=$2
  shift 2
  apij POST "/v1/sandboxes/$id/exec" "$body" "$@"
}

# ---- runsc and host state -----------------------------------------------------------------

runsc_list() { runsc --root "$T/run/runsc" list --quiet 2>/dev/null || true; }
runsc_has() { runsc_list | grep -qx "$1"; }
cgroup_dirs() { ls -d /sys/fs/cgroup/*/b3os/"$1" 2>/dev/null || true; }
no_cgroup() { [ -z "$(cgroup_dirs "$1")" ]; }
# thaw ID: thaws a sandbox's freezer cgroup (b3osd freezes idle sandboxes; a runsc verb run by
# hand on a frozen one, kill included, waits for ever).
thaw() {
  echo THAWED >"/sys/fs/cgroup/freezer/b3os/$1/freezer.state" 2>/dev/null ||
    echo 0 >"/sys/fs/cgroup/b3os/$1/cgroup.freeze" 2>/dev/null || true
}
# memory_limit ID: the memory limit of a sandbox's cgroup in bytes (cgroup v1, else v2).
memory_limit() {
  cat "/sys/fs/cgroup/memory/b3os/$1/memory.limit_in_bytes" 2>/dev/null || cat "/sys/fs/cgroup/b3os/$1/memory.max"
}
# rss_kb PID: the VmRSS of a process in kB (0 if gone).
rss_kb() {
  local r
  r=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
  echo "${r:-0}"
}
mem_available_kb() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
now_ms() { date +%s%3N; }

# ---- the private daemon -------------------------------------------------------------------

# free_port: a TCP port on 127.0.0.1 nothing listens on.
free_port() {
  # Below the kernel's ephemeral range: a port kept across a restart of b3osd (the API's, the
  # preview listener's) cannot be taken meanwhile as the local port of some client connection
  # (seen: "Address already in use" for the preview listener after a SIGKILL).
  local p low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 21000 ] 2>/dev/null || low=32768
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % (low - 20000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

daemon_pid() { cat "$T/daemon.pid" 2>/dev/null || true; }
daemon_alive() {
  local pid
  pid=$(daemon_pid)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# start_daemon: starts b3osd with the suite's flags (appending to $T/daemon.log) and waits
# up to 30 s for /healthz. Returns 1 if it does not come up. A small bash parent waits for
# b3osd and appends "b3osd exited with status N" to the log, so a crash is visible there.
start_daemon() {
  # B3OS_E2E_DAEMON_ARGS: more flags for b3osd, split on spaces (a test's own models...).
  local extra=()
  read -r -a extra <<<"${B3OS_E2E_DAEMON_ARGS:-}"
  # No configuration file of the host's (/etc/b3os/b3osd.conf) unless the suite names one.
  [[ " ${extra[*]:-} " == *" --config "* ]] || extra+=(--config /dev/null)
  # Metrics on a port of the kernel's choosing unless the suite sets METRICS_PORT or names one.
  [[ " ${extra[*]:-} " == *" --metrics-listen "* ]] || extra+=(--metrics-listen "127.0.0.1:${METRICS_PORT:-0}")
  rm -f "$T/daemon.pid"
  bash -c '"$@" </dev/null & echo $! >"$B3OS_E2E_PIDFILE"; wait $!
           echo "b3osd exited with status $? at $(date +%T.%3N)"' b3osd-e2e-wrapper \
    "$B3OS_BIN/b3osd" --listen "127.0.0.1:$PORT" --data-dir "$T/data" --run-dir "$T/run" \
    --runsc-root "$T/run/runsc" --templates-dir "$TEMPLATES" --quiet-key --max-sandboxes-per-project "${E2E_MAX_SANDBOXES_PER_PROJECT:-12}" --warm-pool "${E2E_WARM_POOL:-0}" --fork-pool "${E2E_FORK_POOL:-0}" --fork-ahead "${E2E_FORK_AHEAD:-0}" \
    --template-checkpoints "${E2E_TEMPLATE_CHECKPOINTS:-off}" --root-overlay "${E2E_ROOT_OVERLAY:-disk}" \
    --network "${E2E_NETWORK:-off}" --preview-listen "127.0.0.1:${PREVIEW_PORT:-$(free_port)}" \
    "${extra[@]}" \
    >>"$T/daemon.log" 2>&1 </dev/null &
  disown $! 2>/dev/null || true
  local pid=""
  for _ in $(seq 1 100); do
    pid=$(cat "$T/daemon.pid" 2>/dev/null || true)
    [ -z "$pid" ] || break
    sleep 0.01
  done
  [ -n "$pid" ] || return 1
  for _ in $(seq 1 300); do
    if curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# stop_daemon [SIGNAL]: kills the private b3osd (default KILL) and waits for it to go.
stop_daemon() {
  local pid
  pid=$(daemon_pid)
  [ -n "$pid" ] || return 0
  kill "-${1:-KILL}" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  rm -f "$T/daemon.pid"
}

# restart_with FLAGS...: b3osd again (SIGTERM, then started: sandboxes are reattached) with the
# suite's own flags, as they were at the first call, and these.
restart_with() {
  : "${E2E_BASE_ARGS=${B3OS_E2E_DAEMON_ARGS:-}}"
  local pid
  pid=$(daemon_pid)
  stop_daemon TERM
  # stop_daemon waits 5 s; a loaded machine may need longer, and two b3osd must never overlap.
  if [ -n "$pid" ] && ! eventually 30 not kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    eventually 10 not kill -0 "$pid" 2>/dev/null || die "b3osd $pid did not stop"
  fi
  B3OS_E2E_DAEMON_ARGS="$E2E_BASE_ARGS $*"
  start_daemon || die "b3osd did not start with: $*"
}

# start_private_daemon: a free port ($PORT, $URL), the run's directories, b3osd started (the
# suite dies with the log's tail when it does not come up), and its admin key in $ADMIN,
# $KEY and $ALL_KEYS.
start_private_daemon() {
  PORT=$(free_port) || die "no free TCP port found"
  URL=http://127.0.0.1:$PORT
  # The preview listener (ports' URLs) on a port of its own, kept across restarts of the suite.
  PREVIEW_PORT=$(free_port) || die "no free TCP port found"
  PREVIEW=http://127.0.0.1:$PREVIEW_PORT
  mkdir -p "$T/data" "$T/run"
  start_daemon || {
    tail -n 20 "$T/daemon.log" >&2
    die "b3osd did not start (log above)"
  }
  ADMIN=$(cat "$T/data/admin.key")
  [[ $ADMIN == b3os_sk_* ]] || die "could not read the admin key"
  KEY=$ADMIN
  ALL_KEYS=("$ADMIN")
  # B3OS_E2E_ROUTER=1: the suite's requests go through a b3os-router in front of this b3osd
  # (tests/cluster/cluster.sh runs suites so: b3osd on the shared store B3OS_STORE with an
  # internal listener, from B3OS_E2E_DAEMON_ARGS and B3OS_CLUSTER_SECRET_FILE).
  if [ "${B3OS_E2E_ROUTER:-0}" = 1 ]; then
    local rport
    rport=$(free_port) || die "no free TCP port found"
    "$B3OS_BIN/b3os-router" --port "$rport" --store "$B3OS_STORE" --cluster-secret-file "$B3OS_CLUSTER_SECRET_FILE" \
      --name e2e-router >>"$T/router.log" 2>&1 </dev/null &
    ROUTER_PID=$!
    disown "$ROUTER_PID" 2>/dev/null || true
    URL=http://127.0.0.1:$rport
    eventually 10 curl -sf -o /dev/null "$URL/healthz" || die "b3os-router did not come up ($(tail -n 3 "$T/router.log"))"
    info "through b3os-router on $URL (pid $ROUTER_PID) to b3osd on 127.0.0.1:$PORT"
  fi
}

# finish_private_suite RC [--term-first]: the end of a suite with a private b3osd, for its EXIT
# trap: everything of the run removed, the daemon's last log lines when anything failed, the
# temp dir removed (kept with B3OS_E2E_KEEP=1); exits RC. --term-first: SIGTERM first, so that
# b3osd removes its pool members itself (up to 60 s).
finish_private_suite() {
  local rc=$1 pid
  set +e
  trap - EXIT
  e2e_aborted "$rc"
  if [ "${2:-}" = --term-first ]; then
    pid=$(daemon_pid)
    if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
      for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
  cleanup_everything
  [ -z "${ROUTER_PID:-}" ] || kill -KILL "$ROUTER_PID" 2>/dev/null || true
  if [ "$rc" != 0 ] || [ "$(count_results FAIL)" != 0 ]; then
    echo "# ---- last 40 lines of the b3osd log ($T/daemon.log) ----"
    tail -n 40 "$T/daemon.log" 2>/dev/null | sed 's/^/# /'
  fi
  if [ "${B3OS_E2E_KEEP:-0}" = 1 ]; then echo "# kept $T"; else rm -rf "$T"; fi
  exit "$rc"
}

# cleanup_everything: deletes every sandbox of the run through the API (while the daemon is
# up), stops the daemon, then removes by hand whatever is left: runsc containers under
# $T/run/runsc, b3os-shim processes of $T, cgroup directories of the run's sandbox ids.
cleanup_everything() {
  local pid id k
  pid=$(daemon_pid)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    for k in ${ALL_KEYS[@]+"${ALL_KEYS[@]}"}; do
      for id in $(curl -s -m 10 -H "Authorization: Bearer $k" "$URL/v1/sandboxes?status=running&limit=100" |
        jq -r '.data[]?.id' 2>/dev/null); do
        curl -s -m 30 -o /dev/null -X DELETE -H "Authorization: Bearer $k" "$URL/v1/sandboxes/$id" || true
      done
    done
  fi
  stop_daemon KILL
  for id in $(runsc_list); do
    thaw "$id"
    runsc --root "$T/run/runsc" kill --all "$id" KILL >/dev/null 2>&1 || true
    runsc --root "$T/run/runsc" delete --force "$id" >/dev/null 2>&1 || true
  done
  # Shims of this run only: their command line names a socket under $T.
  for pid in $(pgrep -f "b3os-shim $T/" 2>/dev/null || true); do
    kill "$pid" 2>/dev/null || true
  done
  # Disks still mounted (a daemon killed before it deleted them): unmounted, so that removing
  # $T never walks into one; their loop devices go with the mounts.
  local m
  for m in $(awk -v p="$T/data/disks/" 'index($2, p) == 1 {print $2}' /proc/mounts 2>/dev/null); do
    umount -l "$m" 2>/dev/null || true
  done
  if [ -f "$T/ids" ]; then
    while read -r id; do
      [ -n "$id" ] || continue
      for d in $(cgroup_dirs "$id"); do rmdir "$d" 2>/dev/null || true; done
    done <"$T/ids"
  fi
  # The suite's b3os-router (B3OS_E2E_ROUTER=1), last: the deletes above went through it.
  [ -z "${ROUTER_PID:-}" ] || kill -KILL "$ROUTER_PID" 2>/dev/null || true
}

# ---- the fake internet (tests/net) ------------------------------------------------------------

# fakenet_lock: waits (up to 30 min) for /tmp/b3os-fakenet.lock, the lock of the one fake
# internet a host can have (`fakenet.sh up` tears down the one that is up), and holds it until
# this shell ends. A flock of its own holds it (-o: nothing the suite starts inherits the
# lock's descriptor, so a sandbox or shim left behind cannot keep it) and lets go within a
# second of the shell's end, however it ends. Sets FAKENET_LOCK_PID: kill it to let go sooner.
FAKENET_LOCK_PID=
fakenet_lock() {
  local lock=${B3OS_FAKENET_LOCK:-/tmp/b3os-fakenet.lock} held=$T/fakenet-lock.held
  info "waiting for $lock (one fake internet per host)"
  # shellcheck disable=SC2016 # $1 and $2 are the inner bash's
  flock -o -w 1800 "$lock" bash -c 'echo held >"$1"; while kill -0 "$2" 2>/dev/null; do sleep 1; done' \
    fakenet-lock "$held" "$$" &
  FAKENET_LOCK_PID=$!
  for _ in $(seq 1 18000); do
    if [ -e "$held" ] || ! kill -0 "$FAKENET_LOCK_PID" 2>/dev/null; then break; fi
    sleep 0.1
  done
  [ -e "$held" ] || die "could not take $lock within 30 min"
}

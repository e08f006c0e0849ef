#!/usr/bin/env bash
# End-to-end test of b3osd through its HTTP API (docs/api.md), as a user would drive it: curl,
# jq and the b3os CLI against a private b3osd with its own data, run and runsc directories.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/e2e.sh
# Env:
#   B3OS_BIN             directory of b3osd, b3os, b3os-shim, b3os-agent (default: build/bin)
#   B3OS_TEMPLATES_DIR   template root (default /var/lib/b3os/templates; base must be built)
#   B3OS_E2E_BIG=0       skip the 1 GiB upload/download (default 1: run it when >= 6 GiB free)
#   B3OS_E2E_CYCLES=N    create/delete cycles of the leak check (default 50)
#   B3OS_E2E_KEEP=1      keep the temp directory (daemon log, data) afterwards
#
# The checks live in tests/e2e/sections/, one file per area; this file sets the suite up,
# starts b3osd, runs the sections in order (run_section, lib.sh) and prints the counts.
#
# Prints one line per check (PASS name / FAIL name: detail / SKIP name: reason) and lines
# starting with "#" for information, then the counts. Exits 1 if any check failed.
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
BIG=${B3OS_E2E_BIG:-1}
CYCLES=${B3OS_E2E_CYCLES:-50}

e2e_begin e2e cmp dd pgrep

trap 'finish_private_suite $?' EXIT
on_signal() {
  echo "# interrupted; cleaning up" >&2
  [ -z "$SECTION_PID" ] || kill -TERM "$SECTION_PID" 2>/dev/null || true
  exit 130
}
trap on_signal INT TERM

# The sections, one file per area: each defines s_* functions (and the constants they use) and
# runs nothing when sourced.
# shellcheck source=tests/e2e/sections/create.sh
. "$HERE/sections/create.sh"
# shellcheck source=tests/e2e/sections/exec.sh
. "$HERE/sections/exec.sh"
# shellcheck source=tests/e2e/sections/processes.sh
. "$HERE/sections/processes.sh"
# shellcheck source=tests/e2e/sections/files.sh
. "$HERE/sections/files.sh"
# shellcheck source=tests/e2e/sections/errors.sh
. "$HERE/sections/errors.sh"
# shellcheck source=tests/e2e/sections/idempotency.sh
. "$HERE/sections/idempotency.sh"
# shellcheck source=tests/e2e/sections/rate_limit.sh
. "$HERE/sections/rate_limit.sh"
# shellcheck source=tests/e2e/sections/list.sh
. "$HERE/sections/list.sh"
# shellcheck source=tests/e2e/sections/lifecycle.sh
. "$HERE/sections/lifecycle.sh"
# shellcheck source=tests/e2e/sections/restart.sh
. "$HERE/sections/restart.sh"
# shellcheck source=tests/e2e/sections/cli.sh
. "$HERE/sections/cli.sh"
# shellcheck source=tests/e2e/sections/fork.sh
. "$HERE/sections/fork.sh"
# shellcheck source=tests/e2e/sections/pause_snapshot.sh
. "$HERE/sections/pause_snapshot.sh"
# shellcheck source=tests/e2e/sections/pools.sh
. "$HERE/sections/pools.sh"
# shellcheck source=tests/e2e/sections/disk.sh
. "$HERE/sections/disk.sh"
# shellcheck source=tests/e2e/sections/idle_freeze.sh
. "$HERE/sections/idle_freeze.sh"
# shellcheck source=tests/e2e/sections/warm_shell.sh
. "$HERE/sections/warm_shell.sh"
# shellcheck source=tests/e2e/sections/leaks.sh
. "$HERE/sections/leaks.sh"
# shellcheck source=tests/e2e/sections/keys.sh
. "$HERE/sections/keys.sh"

# ---- setup --------------------------------------------------------------------------------

start_private_daemon
OTHER=$("$B3OS_BIN/b3os" keys create --project other --data-dir "$T/data" 2>/dev/null)
SAME=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
[[ $OTHER == b3os_sk_* && $SAME == b3os_sk_* ]] || die "could not create API keys"
ALL_KEYS+=("$OTHER")
info "b3osd pid $(daemon_pid) on $URL, temp dir $T"

# ---- run ------------------------------------------------------------------------------------

s_create
run_section s_exec
run_section s_exec_timeout
run_section s_exec_truncation
run_section s_exec_concurrent
run_section s_exec_user
run_section s_exec_stream
run_section s_processes
run_section s_processes_idle
run_section s_terminal
run_section s_shell_cli
run_section s_cli_processes
run_section s_files
run_section s_files_watch
run_section s_errors
run_section s_idempotency
run_section s_rate_limit
run_section s_keys
run_section s_access
run_section s_list
run_section s_timeout
run_section s_usage
run_section s_secrets
run_section s_restart
run_section s_delete
run_section s_cli
run_section s_fork
run_section s_fork_failure
run_section s_fork_big
run_section s_fork_ahead
run_section s_processes_fork
run_section s_terminal_fork
run_section s_pause
run_section s_snapshot
run_section s_snapshot_quota
run_section s_files_big
run_section s_warm_pool
run_section s_template_checkpoint
run_section s_disk_limit
run_section s_disk_big
run_section s_idle_freeze
run_section s_warm_shell
run_section s_forget_ended
delete_sandbox "$SBX" || fail delete.main "$(snip)"
run_section s_leaks

# b3osd ends cleanly on SIGTERM (daemon/main.cc: it logs "signal 15, stopping" and exits 0;
# sandboxes would keep running).
pid=$(daemon_pid)
kill -TERM "$pid"
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
sleep 0.2
exit_line=$(grep 'b3osd exited with status' "$T/daemon.log" | tail -n1 || true)
check shutdown.sigterm_exit_0 "after SIGTERM: '$exit_line'" grep -q 'exited with status 0 ' <<<"$exit_line"
check shutdown.sigterm_logged "no 'signal 15, stopping' line in the log" grep -q 'signal 15, stopping' "$T/daemon.log"
kill -0 "$pid" 2>/dev/null || rm -f "$T/daemon.pid"

# Every response the suite received, against docs/openapi.yaml.
check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
ELAPSED=$(($(now_ms) - SUITE_START))
echo "passed $P, failed $F, skipped $S in $((ELAPSED / 1000)) s"
[ "$F" = 0 ] || exit 1

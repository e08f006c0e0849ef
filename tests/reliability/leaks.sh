#!/usr/bin/env bash
# Leaks: N cycles of create (forkable), fork, snapshot, create from the snapshot, delete the
# three sandboxes and the snapshot, run by a few concurrent workers against a private b3osd.
# Before and after (each once the node has settled): processes, mounts, cgroups, netns, files
# of the run's dirs, b3osd's fds and RSS; FAIL on growth past the tolerances below
# (tests/reliability/load.py, mode leaks, says each check).
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build-dev/bin tests/reliability/leaks.sh [--cycles N] [--workers N] [--pools W,F]
#   --cycles N    cycles after the warm-up (default 500)
#   --workers N   concurrent workers (default 4)
#   --pools W,F   the daemon's --warm-pool and --fork-pool (default 2,3)
# Tolerances: b3osd RSS +25% or +64 MiB, fds +32; processes, mounts, cgroups, files: +0.
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
CYCLES=500
WORKERS=4
POOLS=2,3
while [ $# -gt 0 ]; do
  case $1 in
    --cycles) CYCLES=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --pools) POOLS=$2; shift 2 ;;
    *) echo "usage: $0 [--cycles N] [--workers N] [--pools WARM,FORK]" >&2; exit 2 ;;
  esac
done
E2E_WARM_POOL=${POOLS%,*}
E2E_FORK_POOL=${POOLS#*,}
E2E_MAX_SANDBOXES_PER_PROJECT=$((3 * WORKERS + 16))
B3OS_E2E_DAEMON_ARGS="--rate 2000 --burst 4000"

e2e_begin leaks python3

trap 'finish_private_suite $? --term-first' EXIT  # pool members removed by b3osd itself
trap 'exit 130' INT TERM
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, temp dir $T; $CYCLES cycles by $WORKERS workers," \
  "--warm-pool $E2E_WARM_POOL --fork-pool $E2E_FORK_POOL"

rc=0
start=$(now_ms)
python3 "$HERE/load.py" --url "$URL" --key "$ADMIN" --pid "$(daemon_pid)" --dir "$T" --mode leaks \
  --clients "$WORKERS" --warmup "$((2 * WORKERS))c" --cycles "$CYCLES" --pool $((E2E_WARM_POOL + E2E_FORK_POOL)) || rc=$?
ms=$(($(now_ms) - start))
info "leaks: $CYCLES cycles (plus $((2 * WORKERS)) of warm-up) and the checks took $((ms / 1000)).$(printf %03d $((ms % 1000))) s"
if daemon_alive; then pass daemon.alive; else fail daemon.alive "b3osd died: $(grep 'b3osd exited' "$T/daemon.log" | tail -n1)"; rc=1; fi
exit "$rc"

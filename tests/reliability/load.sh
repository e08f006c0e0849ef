#!/usr/bin/env bash
# Load: 20 concurrent clients loop create (forkable every other cycle), exec, upload, download,
# fork, delete against a private b3osd for a duration; then every answer was documented, no
# 5xx but 503, b3osd's RSS and fds flat, and nothing of the run left but the pools' members
# (tests/reliability/load.py says each check).
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build-dev/bin tests/reliability/load.sh [--duration S] [--warmup S] [--clients N]
#                                                    [--pools WARM,FORK] [--daemon-args "..."]
#   --duration S      seconds of load after the warm-up (default 180)
#   --warmup S        seconds of load before the first measurement (default 20)
#   --clients N       concurrent clients (default 20)
#   --pools W,F       the daemon's --warm-pool and --fork-pool (default 2,3: the daemon's
#                     defaults, so claims and pooled boots are under load too; 0,0 makes the
#                     leak count exact with no pool at all)
#   --daemon-args S   b3osd's rate and cap flags (default "--rate 2000 --burst 4000", so the
#                     per-key rate limit does not dominate); e.g. "--rate 20 --burst 20
#                     --max-requests-per-key 8" makes many 429s, to exercise the retries
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
DURATION=180
WARMUP=20
CLIENTS=20
POOLS=2,3
DAEMON_ARGS="--rate 2000 --burst 4000"
while [ $# -gt 0 ]; do
  case $1 in
    --duration) DURATION=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --pools) POOLS=$2; shift 2 ;;
    --daemon-args) DAEMON_ARGS=$2; shift 2 ;;
    *) echo "usage: $0 [--duration S] [--warmup S] [--clients N] [--pools WARM,FORK] [--daemon-args S]" >&2; exit 2 ;;
  esac
done
E2E_WARM_POOL=${POOLS%,*}
E2E_FORK_POOL=${POOLS#*,}
# Each client holds at most two sandboxes (a source and its fork); the cap must never be what
# the test measures. The rate limit neither: 20 clients make ~100 requests/s at most here.
E2E_MAX_SANDBOXES_PER_PROJECT=$((2 * CLIENTS + 16))
B3OS_E2E_DAEMON_ARGS=$DAEMON_ARGS

e2e_begin load python3

trap 'finish_private_suite $? --term-first' EXIT  # pool members removed by b3osd itself
trap 'exit 130' INT TERM
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, temp dir $T; $CLIENTS clients, ${WARMUP} s warm-up, ${DURATION} s load," \
  "--warm-pool $E2E_WARM_POOL --fork-pool $E2E_FORK_POOL $DAEMON_ARGS"

rc=0
python3 "$HERE/load.py" --url "$URL" --key "$ADMIN" --pid "$(daemon_pid)" --dir "$T" --mode load \
  --clients "$CLIENTS" --warmup "$WARMUP" --duration "$DURATION" --pool $((E2E_WARM_POOL + E2E_FORK_POOL)) || rc=$?
if daemon_alive; then pass daemon.alive; else fail daemon.alive "b3osd died: $(grep 'b3osd exited' "$T/daemon.log" | tail -n1)"; rc=1; fi
exit "$rc"

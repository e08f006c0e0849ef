#!/usr/bin/env bash
# Slow and idle clients against a private b3osd (tests/reliability/slow_clients.py says what
# is checked). Short deadlines and caps make it quick: well under a minute.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build-dev/bin tests/reliability/slow_clients.sh
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"

B3OS_BIN=${B3OS_BIN:-$(cd "$HERE/../.." && pwd)/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
HEAD_TIMEOUT=6
BODY_TIMEOUT=2
PER_KEY=8
MAX_CONNECTIONS=2500

e2e_begin slow_clients python3

on_exit() {
  local rc=$?
  set +e
  trap - EXIT
  cleanup_everything
  if [ "$rc" != 0 ]; then
    echo "# ---- last 40 lines of the b3osd log ($T/daemon.log) ----"
    tail -n 40 "$T/daemon.log" 2>/dev/null | sed 's/^/# /'
  fi
  if [ "${B3OS_E2E_KEEP:-0}" = 1 ]; then echo "# kept $T"; else rm -rf "$T"; fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

PORT=$(free_port) || die "no free TCP port found"
URL=http://127.0.0.1:$PORT
mkdir -p "$T/data" "$T/run"
B3OS_E2E_DAEMON_ARGS="--http-head-timeout $HEAD_TIMEOUT --http-body-timeout $BODY_TIMEOUT
  --max-requests-per-key $PER_KEY --max-requests-per-project $((2 * PER_KEY)) --max-connections $MAX_CONNECTIONS"
B3OS_E2E_DAEMON_ARGS=${B3OS_E2E_DAEMON_ARGS//$'\n'/ }
start_daemon || {
  tail -n 20 "$T/daemon.log" >&2
  die "b3osd did not start (log above)"
}
ADMIN=$(cat "$T/data/admin.key")
OTHER=$("$B3OS_BIN/b3os" keys create --project other --data-dir "$T/data" 2>/dev/null)
[[ $ADMIN == b3os_sk_* && $OTHER == b3os_sk_* ]] || die "could not read/create API keys"
ALL_KEYS=("$ADMIN" "$OTHER")
info "b3osd pid $(daemon_pid) on $URL, temp dir $T"

python3 "$HERE/slow_clients.py" --url "$URL" --key "$ADMIN" --other-key "$OTHER" \
  --head-timeout "$HEAD_TIMEOUT" --body-timeout "$BODY_TIMEOUT" --per-key "$PER_KEY" \
  --max-connections "$MAX_CONNECTIONS"

#!/usr/bin/env bash
# Slow and idle clients against a private b3osd, on its API and on its preview listener
# (tests/reliability/slow_clients.py says what is checked). Short deadlines and caps make it
# quick: about a minute and a half, most of it the preview's write deadline (60 s, no flag).
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
IDLE_TIMEOUT=15
PER_KEY=8
MAX_CONNECTIONS=2500

e2e_begin slow_clients python3

trap 'finish_private_suite $?' EXIT
trap 'exit 130' INT TERM

B3OS_E2E_DAEMON_ARGS="--http-head-timeout $HEAD_TIMEOUT --http-body-timeout $BODY_TIMEOUT --http-idle-timeout $IDLE_TIMEOUT
  --max-requests-per-key $PER_KEY --max-requests-per-project $((2 * PER_KEY)) --max-connections $MAX_CONNECTIONS"
B3OS_E2E_DAEMON_ARGS=${B3OS_E2E_DAEMON_ARGS//$'\n'/ }
start_private_daemon
OTHER=$("$B3OS_BIN/b3os" keys create --project other --data-dir "$T/data" 2>/dev/null)
[[ $OTHER == b3os_sk_* ]] || die "could not create a second API key"
ALL_KEYS+=("$OTHER")
info "b3osd pid $(daemon_pid) on $URL, previews on $PREVIEW, temp dir $T"

python3 "$HERE/slow_clients.py" --url "$URL" --key "$ADMIN" --other-key "$OTHER" \
  --head-timeout "$HEAD_TIMEOUT" --body-timeout "$BODY_TIMEOUT" --per-key "$PER_KEY" \
  --max-connections "$MAX_CONNECTIONS" --preview-url "$PREVIEW" --idle-timeout "$IDLE_TIMEOUT" \
  --daemon-pid "$(daemon_pid)" --app "$HERE/../e2e/ports_app.py"

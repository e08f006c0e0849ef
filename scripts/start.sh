#!/usr/bin/env bash
# (Re)starts b3osd in the background on 127.0.0.1:7070 with its embedded defaults and prints
# where it listens and the API key. Sandboxes of a previous b3osd keep running and are reattached.
# Where systemd runs, scripts/setup.sh starts b3osd as b3osd.service instead
# (scripts/start-service.sh); this script then refuses to start a second b3osd beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /run/systemd/system ] && systemctl -q is-active b3osd.service 2>/dev/null; then
  echo "b3osd runs as the systemd service b3osd.service; restart it with scripts/start-service.sh" \
    "or systemctl restart b3osd (sandboxes keep running), or stop it first: systemctl stop b3osd" >&2
  exit 1
fi
bin=$PWD/build/bin
log=${B3OS_LOG:-/var/log/b3osd.log}
pidfile=/run/b3osd.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "stopping the running b3osd (pid $(cat "$pidfile"))"
  kill "$(cat "$pidfile")"
  for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
fi
: >"$log"
setsid "$bin/b3osd" "$@" >>"$log" 2>&1 </dev/null &
echo $! >"$pidfile"
# Ready means /healthz answers 200: b3osd answers at once (503 "starting" while it reattaches the
# sandboxes of a previous run), so wait on what it says, not on its log.
url=""
for _ in $(seq 3000); do
  kill -0 "$(cat "$pidfile")" 2>/dev/null || break
  [ -n "$url" ] || url=$(sed -n 's/^b3osd listening on \(http[^ ]*\).*/\1/p' "$log" | head -n 1)
  if [ -n "$url" ]; then
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$url/healthz" || true)
    if [ "$code" = 200 ]; then
      grep -E '^(b3osd listening|API key|  export)' "$log"
      echo "log: $log   stop: kill \$(cat $pidfile)"
      exit 0
    fi
  fi
  sleep 0.1
done
if kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "b3osd is running but not ready after 300 s (/healthz: ${code:-no answer}); its log:" >&2
else
  echo "b3osd did not start; its log:" >&2
fi
cat "$log" >&2
exit 1

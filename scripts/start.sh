#!/usr/bin/env bash
# (Re)starts b3osd in the background on 127.0.0.1:7070 with its embedded defaults and prints
# where it listens and the API key. Sandboxes of a previous b3osd keep running and are reattached.
set -euo pipefail
cd "$(dirname "$0")/.."
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
for _ in $(seq 100); do
  if grep -q '^b3osd listening' "$log"; then
    grep -E '^(b3osd listening|API key|  export)' "$log"
    echo "log: $log   stop: kill \$(cat $pidfile)"
    exit 0
  fi
  kill -0 "$(cat "$pidfile")" 2>/dev/null || break
  sleep 0.1
done
echo "b3osd did not start; its log:" >&2
cat "$log" >&2
exit 1

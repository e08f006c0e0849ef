#!/usr/bin/env bash
# Integration test of b3os-agent and b3os-shim in a real gVisor sandbox.
#
# Finds the binaries and makes a temp dir, then runs agent_driver.py beside this script: it
# starts the agent as PID 1 of a runsc container built on the base template (which is never
# written: the container's root is an in-memory overlay), speaks the channel protocol to it
# (and plays the daemon's model gateway for the agent's HTTP relay on 127.0.0.1:7700), and
# hands the channel over through b3os-shim. This script then deletes the container and checks
# that nothing of it is left running.
#
# Usage (as root): B3OS_BUILD_DIR=/path/to/build tests/integration/agent_runsc.sh
# Env: B3OS_TEMPLATE_ROOTFS (default /var/lib/b3os/templates/base/rootfs),
#      B3OS_RUNSC_DEBUG=1 (runsc debug logs kept in the temp dir), B3OS_KEEP_TMP=1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${B3OS_BUILD_DIR:?set B3OS_BUILD_DIR to the cmake build directory}
rootfs=${B3OS_TEMPLATE_ROOTFS:-/var/lib/b3os/templates/base/rootfs}
find_bin() {
  for p in "$build/bin/$2" "$build/$1/$2" "$build/$2"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "agent_runsc: $2 not found under $build" >&2
  return 1
}
agent=$(find_bin agent b3os-agent)
shim=$(find_bin shim b3os-shim)
[ "$(id -u)" = 0 ] || { echo "agent_runsc: must run as root" >&2; exit 2; }
[ -d "$rootfs/usr" ] || { echo "agent_runsc: no template rootfs at $rootfs" >&2; exit 2; }
command -v runsc >/dev/null || { echo "agent_runsc: runsc not installed" >&2; exit 2; }

tmp=$(mktemp -d /tmp/b3os-agent-it.XXXXXX)
id="b3os-it-$$-$RANDOM"
runsc_root="$tmp/runsc"
runsc_flags=(--root "$runsc_root" --overlay2=root:memory --network=none)
mkdir -p "$runsc_root" "$tmp/bundle"
failures=0
pass() { echo "PASS $1"; }
failed() { echo "FAIL $1"; failures=$((failures + 1)); }

cleanup() {
  runsc "${runsc_flags[@]}" kill "$id" KILL >/dev/null 2>&1 || true
  runsc "${runsc_flags[@]}" delete --force "$id" >/dev/null 2>&1 || true
  if [ "${B3OS_KEEP_TMP:-0}" = 1 ]; then echo "agent_runsc: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

template_workspace_before=$(ls -A "$rootfs/workspace" | wc -l)

set +e
B3OS_AGENT="$agent" B3OS_SHIM="$shim" B3OS_ROOTFS="$rootfs" B3OS_TMP="$tmp" B3OS_ID="$id" \
  B3OS_RUNSC_ROOT="$runsc_root" timeout 360 python3 "$here/agent_driver.py"
driver_rc=$?
set -e
if [ "$driver_rc" != 0 ]; then
  failures=$((failures + 1))
  echo "agent_runsc: driver exited with $driver_rc; agent log:"
  sed 's/^/  | /' "$tmp/agent.log" 2>/dev/null | tail -40 || true
fi

# Teardown: kill and delete the container, then nothing with its id may keep running.
runsc "${runsc_flags[@]}" kill "$id" KILL >/dev/null 2>&1 || true
if runsc "${runsc_flags[@]}" delete --force "$id" >"$tmp/delete.log" 2>&1; then
  pass "runsc delete --force"
else
  failed "runsc delete --force: $(tail -3 "$tmp/delete.log")"
fi
left=""
for _ in $(seq 1 40); do
  left=$(pgrep -f -- "$id" || true)
  [ -z "$left" ] && break
  sleep 0.05
done
if [ -z "$left" ]; then pass "no runsc process left for $id"; else failed "processes left for $id: $left"; fi
if runsc "${runsc_flags[@]}" list 2>/dev/null | grep -q -- "$id"; then
  failed "container still listed by runsc list"
else
  pass "container gone from runsc list"
fi
if [ "$(ls -A "$rootfs/workspace" | wc -l)" = "$template_workspace_before" ]; then
  pass "template rootfs untouched (/workspace)"
else
  failed "template rootfs /workspace changed"
fi

if [ "$failures" = 0 ]; then
  echo "agent_runsc: all checks passed"
  exit 0
fi
echo "agent_runsc: $failures failure(s)"
exit 1

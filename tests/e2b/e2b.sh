#!/usr/bin/env bash
# End-to-end test of E2B compatibility (docs/e2b.md) against a private b3osd:
#   - tests/e2b/wire_check.py: bad requests in E2B's wire format (unknown fields, wrong types,
#     huge bodies and streams, bad tokens and signatures, other projects' ids) get typed errors
#     and change nothing;
#   - tests/e2b/proto_names.mjs: the field names envd.cc speaks are in the .proto descriptors
#     the pinned SDK carries;
#   - tests/e2b/sdk_test.mjs: the unmodified e2b SDK (pinned in tests/e2b/package.json) drives
#     the control plane and envd through every call b3os serves, asserting results, errors
#     and streaming callbacks;
#   - tests/e2b/recipes.mjs: both cookbook recipes' flows through the SDK;
#   - nothing left behind.
#
# Usage (as root, with the base template built; scripts/test.sh runs npm ci in tests/e2b):
#   B3OS_BIN=/work/main/build/bin tests/e2b/e2b.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}

e2e_begin e2b node

on_exit() {
  local rc=$?
  e2e_aborted "$rc"
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

start_private_daemon
E2B_KEY=$("$B3OS_BIN/b3os" keys create --e2b --project default --data-dir "$T/data" 2>/dev/null)
OTHER=$("$B3OS_BIN/b3os" keys create --e2b --project elsewhere --data-dir "$T/data" 2>/dev/null)
ALL_KEYS+=("$OTHER")
info "b3osd pid $(daemon_pid) on $URL"
check keys.e2b_shape "$E2B_KEY" bash -c "[[ '$E2B_KEY' =~ ^e2b_[0-9a-f]{40}$ ]]"


# run_client NAME CMD...: a checker's PASS/FAIL lines into this suite's counts; a checker that
# stops before its last line ("# NAME: N failed") is a FAIL of its own.
run_client() {
  local client=$1 out=$T/$1.out
  shift
  "$@" >"$out" 2>&1 || true
  relay <"$out"
  grep -q "^# $client: [0-9]* failed" "$out" || fail "$client.finished" "it stopped early: $(tail -n 3 "$out" | tr '\n' ' ')"
}

run_client wire_check python3 "$HERE/wire_check.py" "$URL" "$E2B_KEY" "$OTHER"

if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then
  skip sdk "node 20 or newer is not installed"
elif [ ! -d "$HERE/node_modules/e2b" ]; then
  skip sdk "the e2b SDK is not installed in tests/e2b (npm ci --prefix tests/e2b; scripts/test.sh does it)"
else
  run_client proto_names env -C "$HERE" node proto_names.mjs
  run_client sdk env -C "$HERE" B3OS_API_URL="$URL" E2B_API_URL="$URL" E2B_SANDBOX_URL="$URL" E2B_API_KEY="$E2B_KEY" \
    timeout 600 node sdk_test.mjs "$OTHER"
  run_client recipes env -C "$HERE" B3OS_API_URL="$URL" E2B_API_URL="$URL" E2B_SANDBOX_URL="$URL" E2B_API_KEY="$E2B_KEY" \
    timeout 600 node recipes.mjs
fi

# Nothing left by the clients, in either project: no sandbox running or paused, no container,
# no cgroup of any sandbox they made.
live() {  # KEY: the project's sandboxes running or paused
  for st in running paused; do curl -s -H "Authorization: Bearer $1" "$URL/v1/sandboxes?status=$st&limit=100" | jq -r '.data[].id'; done
}
made() { for k in "$E2B_KEY" "$OTHER"; do curl -s -H "Authorization: Bearer $k" "$URL/v1/sandboxes?limit=100" | jq -r '.data[].id'; done; }
left() {
  local ids
  ids="$(live "$E2B_KEY") $(live "$OTHER") $(runsc_list)"
  for id in $(made); do [ -z "$(cgroup_dirs "$id")" ] || ids+=" cgroup:$id"; done
  echo $ids
}
export -f live made left runsc_list cgroup_dirs
export URL E2B_KEY OTHER T
check nothing_left "left: $(left)" eventually 30 bash -c '[ -z "$(left)" ]'
info "the clients made $(made | wc -l) sandboxes"

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
echo "passed $P, failed $F, skipped $S in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$F" = 0 ] || exit 1

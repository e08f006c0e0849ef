#!/usr/bin/env bash
# End-to-end test of the MCP endpoint (docs/mcp.md) against a private b3osd, with real clients:
#   - tests/mcp/proto_check.py: auth, Origin, methods, protocol versions, sessions bound to
#     their key, batches, JSON-RPC errors, toolsets, 100 concurrent tool calls on one session,
#     a client that disconnects in the middle of sandbox_exec (the command is cancelled);
#   - the official TypeScript SDK (tests/mcp/sdk_test.mjs) over streamable HTTP and over stdio
#     (b3os mcp): every tool called, each result checked against its outputSchema;
#   - the MCP Inspector CLI 1.0.3: tools/list and tools/call;
#   - docs/mcp.md's tool reference is what tools/list says;
#   - nothing left behind.
# The recipes' MCP tabs run in tests/e2e/cookbook_model.sh (they need the scripted model).
#
# Usage (as root, with the base template built; scripts/test.sh runs npm ci in tests/mcp):
#   B3OS_BIN=/work/main/build/bin tests/e2e/mcp.sh
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
MCP_DIR=$ROOT/tests/mcp

e2e_begin mcp python3

on_exit() {
  local rc=$?
  e2e_aborted "$rc"
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

# 100 tool calls at once on one key need the key's cap on requests in flight above 100, and its
# rate limit's burst (the suite sends a few hundred requests in a few seconds).
export B3OS_E2E_DAEMON_ARGS="--max-requests-per-key 128 --max-requests-per-project 256 --rate 1000 --burst 1000 ${B3OS_E2E_DAEMON_ARGS:-}"
start_private_daemon
OTHER=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
ALL_KEYS+=("$OTHER")
info "b3osd pid $(daemon_pid) on $URL"

jqe() { jq -e "$@" >/dev/null; }

python3 "$MCP_DIR/proto_check.py" "$URL" "$KEY" "$OTHER" 2>&1 | relay || true

NODE_OK=0
if command -v node >/dev/null && [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then NODE_OK=1; fi
if [ "$NODE_OK" = 0 ]; then
  skip sdk "node 20 or newer is not installed"
elif [ ! -d "$MCP_DIR/node_modules/@modelcontextprotocol/sdk" ]; then
  skip sdk "the MCP SDK is not installed in tests/mcp (npm ci --prefix tests/mcp; scripts/test.sh does it)"
else
  (cd "$MCP_DIR" && timeout 300 node sdk_test.mjs http "$URL" "$KEY") 2>&1 | relay || true
  (cd "$MCP_DIR" && timeout 300 node sdk_test.mjs stdio "$URL" "$KEY" "$B3OS_BIN/b3os") 2>&1 | relay || true
  INSPECTOR=$MCP_DIR/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js
  if [ -f "$INSPECTOR" ]; then
    # What the Inspector printed is the check, not its exit status: under pipefail a failing
    # node (a timeout, an error of its own) made the assignment fail and ended the suite here.
    # Nothing printed is checked as null, which fails (jq 1.6's -e passes on empty input).
    out=$(timeout 120 node "$INSPECTOR" --cli "$URL/mcp?toolsets=sandboxes" --transport http --method tools/list \
      --header "Authorization: Bearer $KEY" 2>"$T/inspector.err" | sed -n '/^{/,$p') || true
    check inspector.tools_list "$(head -c 300 <<<"$out") $(tail -n 3 "$T/inspector.err")" \
      jqe '[.tools[].name] | index("sandbox_exec") != null and index("sandbox_fork") != null' <<<"${out:-null}"
    out=$(timeout 120 node "$INSPECTOR" --cli "$URL/mcp?toolsets=templates" --transport http --method tools/call \
      --tool-name template_list --header "Authorization: Bearer $KEY" 2>>"$T/inspector.err" | sed -n '/^{/,$p') || true
    check inspector.tools_call "$(head -c 300 <<<"$out")" \
      jqe '.structuredContent.data | map(.name) | index("base") != null' <<<"${out:-null}"
  else
    skip inspector "the MCP Inspector is not installed in tests/mcp"
  fi
fi

check docs.tool_reference_current "$(python3 "$MCP_DIR/tools_doc.py" check "$URL" "$KEY" "$ROOT/docs/mcp.md" 2>&1)" \
  python3 "$MCP_DIR/tools_doc.py" check "$URL" "$KEY" "$ROOT/docs/mcp.md"

running() { curl -s -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes?status=running&limit=100" | jq '.data | length'; }
check nothing_left "running: $(running), runsc: $(runsc_list | tr '\n' ' ')" \
  eventually 30 bash -c "[ \"\$(curl -s -H 'Authorization: Bearer $KEY' '$URL/v1/sandboxes?status=running&limit=100' | jq '.data | length')\" = 0 ] && [ -z \"\$(runsc --root '$T/run/runsc' list --quiet 2>/dev/null)\" ]"

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
echo "passed $P, failed $F, skipped $S in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$F" = 0 ] || exit 1

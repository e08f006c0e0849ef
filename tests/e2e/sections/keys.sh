# shellcheck shell=bash
# Sourced by tests/e2e/e2e.sh: API keys from the operator's side (b3os keys, on the node's
# store): a key's last use is noted, and a revoked key is refused at once by the running b3osd,
# on the REST API and on /mcp, while the project's other keys go on.

s_keys() {
  local k id before
  k=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
  id=$("$B3OS_BIN/b3os" keys list --json --data-dir "$T/data" | jq -r --arg p "${k:0:14}" '.[] | select(.prefix == $p) | .id')
  check keys.created "key $id" test -n "$id"
  check keys.never_used "$("$B3OS_BIN/b3os" keys list --json --data-dir "$T/data" | jq -c --arg id "$id" '.[] | select(.id == $id)')" \
    bash -c "'$B3OS_BIN/b3os' keys list --json --data-dir '$T/data' | jq -e --arg id '$id' '.[] | select(.id == \$id) | .last_used_at_ms == null' >/dev/null"
  before=$(($(date +%s) * 1000 - 1000))
  KEY=$k api GET '/v1/sandboxes?limit=1'
  check keys.works "$(snip)" test "$ST" = 200
  check keys.last_use_noted "$("$B3OS_BIN/b3os" keys list --json --data-dir "$T/data" | jq -c --arg id "$id" '.[] | select(.id == $id)')" \
    bash -c "'$B3OS_BIN/b3os' keys list --json --data-dir '$T/data' | jq -e --arg id '$id' --argjson t $before '.[] | select(.id == \$id) | .last_used_at_ms >= \$t' >/dev/null"
  check keys.table_shows_last_use "$("$B3OS_BIN/b3os" keys list --data-dir "$T/data" | head -3)" \
    bash -c "'$B3OS_BIN/b3os' keys list --data-dir '$T/data' | grep -q 'LAST USED'"
  check keys.revoke "exit status of b3os keys revoke" "$B3OS_BIN/b3os" keys revoke "$id" --data-dir "$T/data"
  KEY=$k api GET '/v1/sandboxes?limit=1'
  expect_error keys.revoked_401 401 unauthorized "revoked"
  ST=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $k" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' "$URL/mcp" \
    -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}')
  check keys.revoked_mcp_401 "HTTP $ST" test "$ST" = 401
  api GET '/v1/sandboxes?limit=1'
  check keys.others_go_on "$(snip)" test "$ST" = 200
  check keys.revoke_again_fails "a second revoke must fail" bash -c "! '$B3OS_BIN/b3os' keys revoke '$id' --data-dir '$T/data' 2>/dev/null"
  check keys.listed_as_revoked "" bash -c "'$B3OS_BIN/b3os' keys list --all --json --data-dir '$T/data' | jq -e --arg id '$id' '.[] | select(.id == \$id) | .revoked_at_ms != null' >/dev/null &&
    ! '$B3OS_BIN/b3os' keys list --json --data-dir '$T/data' | jq -e --arg id '$id' '.[] | select(.id == \$id)' >/dev/null"
}

# Every route of the access table (b3osd --print-access) with every kind of credential a tenant
# could bring: tests/e2e/access_walk.py says what each must get.
s_access() {
  local a b revoked rid
  create_sandbox '{"template": "base", "timeout_s": 300}'
  a=$CID
  create_sandbox '{"template": "base", "timeout_s": 300}'
  b=$CID
  revoked=$("$B3OS_BIN/b3os" keys create --project default --data-dir "$T/data" 2>/dev/null)
  rid=$("$B3OS_BIN/b3os" keys list --json --data-dir "$T/data" | jq -r --arg p "${revoked:0:14}" '.[] | select(.prefix == $p) | .id')
  "$B3OS_BIN/b3os" keys revoke "$rid" --data-dir "$T/data" >/dev/null
  "$B3OS_BIN/b3osd" --print-access >"$T/access.json"
  python3 "$HERE/access_walk.py" "$URL" "$T/access.json" "$KEY" "$OTHER" "$revoked" "$a" "$b" >"$T/access.out" 2>&1 || true
  relay <"$T/access.out"
  grep -q '^# access_walk: [0-9]* failed' "$T/access.out" || fail access.finished "it stopped early: $(tail -n 3 "$T/access.out" | tr '\n' ' ')"
  delete_sandbox "$a" || true
  delete_sandbox "$b" || true
}

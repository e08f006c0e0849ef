# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: listing sandboxes (pages, metadata and status filters, bad parameters).
# s_list also starts the two timeout_s 2 sandboxes that s_timeout (lifecycle.sh) looks at
# later, and leaves their ids in $T/timeout.id and $T/timeout.busy.

# ---- 9. list (also starts the sandbox of the timeout check) --------------------------------

s_list() {
  create_sandbox '{"timeout_s":2}'
  echo "$CID" >"$T/timeout.id"
  now_ms >"$T/timeout.ms"
  check timeout.create "$(snip)" [ -n "$CID" -a "$(j .timeout_s)" = 2 ]
  # A second sandbox with timeout_s 2 is kept busy (an exec every 0.5 s, in the background)
  # until s_timeout looks: activity postpones its stop.
  create_sandbox '{"timeout_s":2}'
  echo "$CID" >"$T/timeout.busy"
  if [ -n "$CID" ]; then
    (
      for _ in $(seq 1 240); do
        [ -d "$T" ] && [ ! -e "$T/timeout.busy.stop" ] || break
        curl -s -o /dev/null -m 10 -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
          -d '{"cmd":"true"}' "$URL/v1/sandboxes/$CID/exec" || true
        sleep 0.5
      done
    ) &
  fi

  local b1 b2 b3 cursor long
  # b1 also carries a 500-character value (counted in characters: "é" is 2 bytes in UTF-8).
  long=$(printf 'é%.0s' $(seq 1 500))
  create_sandbox "{\"metadata\":{\"batch\":\"e2e\",\"long\":\"$long\"}}"
  b1=$CID
  check list.metadata_500_chars "$(snip)" okj 201 '.metadata.long | length == 500'
  create_sandbox '{"metadata":{"batch":"e2e","q":"a b&c=d/é"}}'
  b2=$CID
  create_sandbox '{"metadata":{"batch":"e2e","team.name:x-y":"v"}}'
  b3=$CID
  check list.create_3 "$(snip)" [ -n "$b1" -a -n "$b2" -a -n "$b3" ]
  api GET '/v1/sandboxes?limit=2&metadata[batch]=e2e'
  cursor=$(j '.next_cursor // empty')
  check list.page1 "want [$b3,$b2] and a cursor; $(snip)" \
    [ "$ST" = 200 -a "$(j .object)" = list -a "$(j '[.data[].id] | join(",")')" = "$b3,$b2" -a -n "$cursor" ]
  api GET "/v1/sandboxes?limit=2&metadata[batch]=e2e&cursor=$cursor"
  check list.page2 "want [$b1] and next_cursor null; $(snip)" \
    [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b1" -a "$(j '.next_cursor')" = null ]
  api GET '/v1/sandboxes?metadata[q]=a%20b%26c%3Dd%2F%C3%A9'
  check list.metadata_urlencoded "want [$b2]; $(snip)" [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b2" ]
  api GET '/v1/sandboxes?metadata[team.name:x-y]=v'
  check list.metadata_key_chars "want [$b3]; $(snip)" [ "$ST" = 200 -a "$(j '[.data[].id] | join(",")')" = "$b3" ]
  api GET '/v1/sandboxes?metadata[batch]=e2e&metadata[nope]=x'
  check list.metadata_and "$(snip)" [ "$ST" = 200 -a "$(j '.data | length')" = 0 ]
  delete_sandbox "$b3" || fail list.delete "$(snip)"
  api GET '/v1/sandboxes?status=running&metadata[batch]=e2e'
  check list.status_running "want [$b2,$b1]; $(snip)" [ "$(j '[.data[].id] | join(",")')" = "$b2,$b1" ]
  api GET '/v1/sandboxes?status=stopped&metadata[batch]=e2e'
  check list.status_stopped "want [$b3]; $(snip)" [ "$(j '[.data[].id] | join(",")')" = "$b3" ]
  api GET '/v1/sandboxes?limit=0'
  expect_error list.limit_0_400 400 invalid_request limit
  api GET '/v1/sandboxes?limit=101'
  expect_error list.limit_101_400 400 invalid_request limit
  api GET '/v1/sandboxes?status=sleeping'
  expect_error list.bad_status_400 400 invalid_request status
  api GET '/v1/sandboxes?cursor=bogus'
  expect_error list.bad_cursor_400 400 invalid_request cursor
  api GET '/v1/sandboxes?colour=blue'
  expect_error list.unknown_param_400 400 invalid_request colour
  delete_sandbox "$b1" || fail list.delete "$(snip)"
  delete_sandbox "$b2" || fail list.delete "$(snip)"
}

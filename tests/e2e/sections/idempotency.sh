# shellcheck shell=bash
# shellcheck disable=SC2153 # OTHER (another project's key) is set by e2e.sh, not a typo of the local other
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: Idempotency-Key on creates, execs and deletes: replays, conflicts, scope.

# ---- 8. idempotency -------------------------------------------------------------------------

s_idempotency() {
  # A create that must boot its own container (forkable: no warm pool; an odd memory size: no
  # pre-created container or template image), so the first request is surely still running
  # (a few hundred ms) when the second comes 0.1 s after it. A pooled create can finish in
  # under 0.2 s, and the check then raced.
  local body='{"metadata":{"test":"idem"},"forkable":true,"memory_mib":640}' k="e2e-idem-$$" first second other
  # The first request runs in the background; the same key while it runs is a conflict.
  curl -s -o "$T/idem.first" -D "$T/idem.first.headers" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
    -H 'Content-Type: application/json' -H "Idempotency-Key: $k" --data-binary "$body" \
    "$URL/v1/sandboxes" >"$T/idem.first.status" &
  local bg=$!
  sleep 0.1
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $k"
  expect_error idem.in_flight_409 409 idempotency_key_conflict
  wait "$bg" || true
  first=$(jq -r '.id // empty' "$T/idem.first" 2>/dev/null || true)
  [ -z "$first" ] || echo "$first" >>"$T/ids"
  check idem.first_201 "HTTP $(cat "$T/idem.first.status") $(head -c 200 "$T/idem.first")" \
    [ "$(cat "$T/idem.first.status")" = 201 -a -n "$first" ]
  check idem.first_not_replayed "the first answer has Idempotent-Replayed" not grep -qi '^Idempotent-Replayed:' "$T/idem.first.headers"
  create_sandbox "$body" -H "Idempotency-Key: $k"
  second=$CID
  check idem.replay_same_id "first $first, second $second ($(snip))" [ -n "$first" -a "$first" = "$second" ]
  check idem.replay_header "Idempotent-Replayed: '$(header Idempotent-Replayed)'" [ "$(header Idempotent-Replayed)" = true ]
  apij POST /v1/sandboxes '{"metadata":{"test":"idem-other-body"}}' -H "Idempotency-Key: $k"
  expect_error idem.other_body_409 409 idempotency_key_conflict
  KEY=$OTHER create_sandbox "$body" -H "Idempotency-Key: $k"
  other=$CID
  check idem.other_project_fresh "$(snip)" [ -n "$other" -a "$other" != "$first" -a -z "$(header Idempotent-Replayed)" ]
  KEY=$SAME apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $k"
  expect_error idem.other_key_same_project_409 409 idempotency_key_conflict
  api GET '/v1/sandboxes?metadata[test]=idem'
  check idem.one_sandbox "$(snip)" [ "$(j '.data | length')" = 1 ]
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: $(head -c 256 /dev/zero | tr '\0' k)"
  expect_error idem.key_too_long_400 400 invalid_request Idempotency-Key
  apij POST /v1/sandboxes "$body" -H "Idempotency-Key: a b"
  expect_error idem.key_with_space_400 400 invalid_request Idempotency-Key
  # The same key on another path is a conflict.
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"true"}' -H "Idempotency-Key: $k"
  expect_error idem.other_path_409 409 idempotency_key_conflict
  # A 4xx answer is stored too (only 5xx are not): the retry is a replay of the 400.
  apij POST /v1/sandboxes '{"timeout_s":0}' -H "Idempotency-Key: $k-bad"
  apij POST /v1/sandboxes '{"timeout_s":0}' -H "Idempotency-Key: $k-bad"
  check idem.4xx_replayed "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
    [ "$ST" = 400 -a "$(header Idempotent-Replayed)" = true -a "$(j .error.code)" = invalid_request ]
  # An answer over 64 KiB is answered once and not kept (an exec writing 1 MiB of output was
  # kept whole for a day, 12.6 MB a request): its replay is a 409 that says it ran, and the
  # command does not run again.
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"echo ran >> /tmp/idem-big-runs; head -c 200000 /dev/zero | tr \"\\0\" y"}' \
    -H "Idempotency-Key: $k-big"
  check idem.big_answer_served "HTTP $ST, $(stat -c %s "$RESP") bytes" [ "$ST" = 200 -a "$(j '.stdout | length')" = 200000 ]
  apij POST "/v1/sandboxes/$SBX/exec" '{"cmd":"echo ran >> /tmp/idem-big-runs; head -c 200000 /dev/zero | tr \"\\0\" y"}' \
    -H "Idempotency-Key: $k-big"
  check idem.big_answer_not_kept "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
    [ "$ST" = 409 -a "$(header Idempotent-Replayed)" = true -a "$(j .error.code)" = idempotency_key_conflict ]
  check idem.big_answer_says_why "$(j .error.message)" jt '.error.message | test("ran once") and test("HTTP 200") and test("not kept")'
  run_exec "$SBX" '{"cmd":"wc -l < /tmp/idem-big-runs"}'
  check idem.big_ran_once "$(snip)" okj 200 '.stdout == "1\n"'
  if [ -n "$first" ]; then
    api DELETE "/v1/sandboxes/$first" -H "Idempotency-Key: $k-delete"
    api DELETE "/v1/sandboxes/$first" -H "Idempotency-Key: $k-delete"
    check idem.delete_replayed "Idempotent-Replayed: '$(header Idempotent-Replayed)', $(snip)" \
      [ "$ST" = 200 -a "$(header Idempotent-Replayed)" = true -a "$(j .status)" = stopped ]
  fi
  [ -z "$other" ] || KEY=$OTHER delete_sandbox "$other" || fail idem.cleanup_other "$(snip)"
}

# shellcheck shell=bash
# shellcheck disable=SC2016,SC2015,SC2012 # single-quoted $VAR and $((...)) are for the sandbox's shell or jq
# e2e section: moving files in and out of the main sandbox $SBX (upload, download, list,
# delete, chunked, limits), and the 1 GiB round trip in a sandbox of its own.

# ---- 6. files -------------------------------------------------------------------------------

s_files() {
  head -c 5M /dev/urandom >"$T/x.bin"
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/x.bin" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$T/x.bin"
  check files.upload_201 "$(snip)" okj 201 '.path == "/workspace/x.bin" and .size == 5242880'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  check files.download_exact "HTTP $ST, $(wc -c <"$RESP") bytes" cmp -s "$T/x.bin" "$RESP"
  check files.download_headers "Content-Length '$(header Content-Length)', Content-Type '$(header Content-Type)'" \
    [ "$(header Content-Length)" = 5242880 -a "$(header Content-Type)" = application/octet-stream ]
  api GET "/v1/sandboxes/$SBX/files/list?path=/workspace"
  check files.list "$(snip)" okj 200 '.object == "list" and .path == "/workspace" and
    ([.data[] | select(.name == "x.bin" and .path == "/workspace/x.bin" and .type == "file" and .size == 5242880 and .mode == 420 and (.modified_at | type) == "string")] | length) == 1'
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  check files.delete "$(snip)" [ "$ST" = 200 -a "$(j .deleted)" = true -a "$(j .path)" = /workspace/x.bin ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/x.bin"
  expect_error files.deleted_404 404 file_not_found
  # A relative path is under /workspace; parents are created.
  api PUT "/v1/sandboxes/$SBX/files?path=rel/dir/r.txt" -H 'Content-Type: application/octet-stream' --data-binary 'hello'
  check files.relative_path "$(snip)" [ "$ST" = 201 -a "$(j .path)" = /workspace/rel/dir/r.txt -a "$(j .size)" = 5 ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/rel/dir/r.txt"
  check files.relative_readback "$(snip)" [ "$ST" = 200 -a "$(cat "$RESP")" = hello ]
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/rel"
  expect_error files.get_directory_400 400 invalid_request
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/t.txt" -H 'Content-Type: text/plain' --data-binary 'hello'
  expect_error files.upload_wrong_type_415 415 unsupported_media_type
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/empty" -H 'Content-Type: application/octet-stream' --data-binary ''
  check files.upload_empty "$(snip)" okj 201 '.size == 0'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/empty"
  check files.download_empty "HTTP $ST, $(wc -c <"$RESP") bytes, Content-Length '$(header Content-Length)'" \
    [ "$ST" = 200 -a ! -s "$RESP" -a "$(header Content-Length)" = 0 ]
  # From a pipe curl sends the body chunked (no Content-Length).
  head -c 300K /dev/urandom >"$T/chunked.bin"
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/chunked.bin" -H 'Content-Type: application/octet-stream' -T - <"$T/chunked.bin"
  check files.upload_chunked "$(snip)" okj 201 '.size == 307200'
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/chunked.bin"
  check files.chunked_readback "HTTP $ST" cmp -s "$T/chunked.bin" "$RESP"
  api GET "/v1/sandboxes/$SBX/files/list?path=/no/such/dir"
  expect_error files.list_missing_404 404 file_not_found
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/no-such-file"
  expect_error files.delete_missing_404 404 file_not_found
  api GET "/v1/sandboxes/$SBX/files?path=/workspace/../etc/passwd"
  expect_error files.dotdot_400 400 invalid_request path
  api GET "/v1/sandboxes/$SBX/files"
  expect_error files.no_path_400 400 invalid_request path
  # An upload announcing more than --max-upload-bytes (default 16 GiB) is refused before its body.
  api PUT "/v1/sandboxes/$SBX/files?path=/workspace/huge.bin" -m 20 -H 'Content-Type: application/octet-stream' \
    -H 'Content-Length: 20000000000' --data-binary 'abc'
  expect_error files.upload_over_limit_413 413 payload_too_large
  api DELETE "/v1/sandboxes/$SBX/files?path=/workspace/rel&recursive=true"
  check files.delete_recursive "$(snip)" okj 200 '.deleted == true and .path == "/workspace/rel"'
}

s_files_big() {
  if [ "$BIG" != 1 ]; then
    skip files_big "B3OS_E2E_BIG=$BIG"
    return 0
  fi
  local avail
  avail=$(mem_available_kb)
  if [ "$avail" -lt $((6 * 1024 * 1024)) ]; then
    skip files_big "only $((avail / 1024)) MiB of memory available, the 1 GiB round trip needs 6 GiB"
    return 0
  fi
  local pid id up down peak
  pid=$(daemon_pid)
  # 1 GiB does not fit the default disk (disk_gib 1 is enforced: ~990 MB usable).
  create_sandbox '{"memory_mib":2048,"disk_gib":2}'
  id=$CID
  [ -n "$id" ] || { fail files_big.create "$(snip)"; return 0; }
  dd if=/dev/urandom of="$T/big.bin" bs=1M count=1024 status=none
  echo 0 >"$T/big.peak"
  rm -f "$T/big.stop"
  (
    peak=0
    while [ ! -e "$T/big.stop" ]; do
      r=$(rss_kb "$pid")
      if [ "$r" -gt "$peak" ]; then peak=$r; echo "$peak" >"$T/big.peak"; fi
      sleep 0.1
    done
  ) &
  local mon=$!
  # During the upload another stream (an exec) must still get through: one big file may not
  # starve the channel.
  (
    sleep 3
    curl -s -o "$T/big.exec" -w '%{http_code} %{time_total}' -m 60 -H "Authorization: Bearer $ADMIN" \
      -H 'Content-Type: application/json' -d '{"cmd":"echo alive"}' "$URL/v1/sandboxes/$id/exec" >"$T/big.exec.status"
  ) &
  local side=$!
  # curl -T streams the file; --data-binary @file would read 1 GiB into curl's memory.
  api PUT "/v1/sandboxes/$id/files?path=/workspace/big.bin" -H 'Content-Type: application/octet-stream' -T "$T/big.bin"
  up=$TIME
  check files_big.upload "$(snip)" [ "$ST" = 201 -a "$(j .size)" = 1073741824 ]
  wait "$side" || true
  check files_big.exec_during_upload "exec answered '$(cat "$T/big.exec.status" 2>/dev/null || true)' $(head -c 200 "$T/big.exec" 2>/dev/null || true)" \
    awk '{ exit !($1 == 200 && $2 < 5) }' "$T/big.exec.status"
  api GET "/v1/sandboxes/$id/files?path=/workspace/big.bin"
  down=$TIME
  touch "$T/big.stop"
  wait "$mon" || true
  peak=$(cat "$T/big.peak")
  check files_big.download_exact "HTTP $ST, $(stat -c %s "$RESP") bytes" cmp -s "$T/big.bin" "$RESP"
  check files_big.daemon_rss_below_200MB "b3osd peak VmRSS $((peak / 1024)) MiB" [ "$peak" -gt 0 -a "$peak" -lt 200000 ]
  info "1 GiB upload ${up}s, download ${down}s, b3osd peak RSS $((peak / 1024)) MiB"
  rm -f "$T/big.bin" "$RESP"
  delete_sandbox "$id" || fail files_big.delete "$(snip)"
}

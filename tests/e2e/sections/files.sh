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
  # A large directory comes in pages (1,000 entries by default) in name order, each naming
  # the next with next_cursor: 2,500 files were cut at 2,822 entries of 100,000 with
  # next_cursor null, saying nothing.
  run_exec "$SBX" '{"cmd":"mkdir -p /tmp/many && cd /tmp/many && seq -w 1 2500 | xargs touch"}'
  local cursor="" pages=0 names="$T/list-names" firsts="" url
  : >"$names"
  while [ "$pages" -lt 10 ]; do
    url="/v1/sandboxes/$SBX/files/list?path=/tmp/many"
    [ -z "$cursor" ] || url="$url&cursor=$cursor"
    api GET "$url"
    [ "$ST" = 200 ] || break
    pages=$((pages + 1))
    firsts="$firsts $(j '.data | length')"
    jq -r '.data[].name' "$RESP" >>"$names"
    cursor=$(j '.next_cursor // empty')
    [ -n "$cursor" ] || break
  done
  check files.list_paged "$pages pages of:$firsts; $(wc -l <"$names") names, $(sort -u "$names" | wc -l) distinct" \
    sh -c "[ $pages = 3 ] && [ \"$firsts\" = ' 1000 1000 500' ] && [ \$(sort -u '$names' | wc -l) = 2500 ] && sort -c '$names'"
  api GET "/v1/sandboxes/$SBX/files/list?path=/tmp/many&limit=7"
  check files.list_limit "$(jq -c '{n: (.data | length), next_cursor}' "$RESP")" \
    okj 200 '(.data | length) == 7 and .data[-1].name == "0007" and (.next_cursor | type) == "string"'
  api GET "/v1/sandboxes/$SBX/files/list?path=/tmp/many&limit=7&cursor=$(j -r .next_cursor)"
  check files.list_cursor "$(jq -c '[.data[].name]' "$RESP")" okj 200 '.data[0].name == "0008" and (.data | length) == 7'
  api GET "/v1/sandboxes/$SBX/files/list?path=/tmp/many&limit=0"
  expect_error files.list_limit_0_400 400 invalid_request limit
  api GET "/v1/sandboxes/$SBX/files/list?path=/tmp/many&cursor=zz"
  expect_error files.list_bad_cursor_400 400 invalid_request cursor
  api GET "/v1/sandboxes/$SBX/files/list?path=/tmp/many&cursor=2f"
  expect_error files.list_slash_cursor_400 400 invalid_request cursor
  run_exec "$SBX" '{"cmd":"rm -rf /tmp/many"}'
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

# GET .../files/watch: changes under a path as server-sent events, from inotify in the sandbox;
# ends when the path goes or the timeout passes; bad input; 64 watches per sandbox, freed when
# their clients leave; `b3os watch`.
s_files_watch() {
  local auth=(-H "Authorization: Bearer $KEY") w="$URL/v1/sandboxes/$SBX/files/watch"
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/wt && mkdir -p /workspace/wt/keep && echo 1 > /workspace/wt/f1"}'
  curl -sN -m 30 "${auth[@]}" "$w?path=/workspace/wt&recursive=true" >"$T/watch1.out" 2>&1 &
  local c1=$!
  check watch.started "$(head -c 300 "$T/watch1.out")" eventually 10 grep -q '^event: start' "$T/watch1.out"
  check watch.start_event "$(grep -A1 '^event: start' "$T/watch1.out" | tail -1)" bash -c \
    "grep -A1 '^event: start' '$T/watch1.out' | tail -1 | sed 's/^data: //' | jq -e '.path == \"/workspace/wt\" and .recursive and .is_dir and .watches == 2' >/dev/null"
  # The new directories first, and their events awaited: the agent adds a watch for a new
  # directory when it reads the directory's create, so a file written into it sooner is sent
  # as a create only (docs/api.md); on a loaded machine that window is wide enough to hit.
  run_exec "$SBX" '{"cmd":"cd /workspace/wt && mkdir -p a/b"}'
  eventually 15 grep -qF '"path":"/workspace/wt/a/b","type":"create"' "$T/watch1.out" || true
  run_exec "$SBX" '{"cmd":"cd /workspace/wt && echo hi > a/b/f && echo x >> a/b/f && mv a/b/f a/g && chmod 600 a/g && rm a/g && echo y >> keep/../f1"}'
  # The last change's event has come (not a fixed wait: a loaded machine may take longer).
  eventually 15 grep -qF '"path":"/workspace/wt/f1","type":"modify"' "$T/watch1.out" || true
  local events
  events=$(sed -n 's/^data: //p' "$T/watch1.out" | jq -c 'select(.type != null) | [.type, .path, .is_dir] + (if .from then [.from] else [] end)' 2>/dev/null | tr '\n' ' ')
  local want
  for want in '["create","/workspace/wt/a",true]' '["create","/workspace/wt/a/b",true]' '["create","/workspace/wt/a/b/f",false]' \
    '["modify","/workspace/wt/a/b/f",false]' '["rename","/workspace/wt/a/g",false,"/workspace/wt/a/b/f"]' \
    '["attrib","/workspace/wt/a/g",false]' '["delete","/workspace/wt/a/g",false]' '["modify","/workspace/wt/f1",false]'; do
    check "watch.event.$(jq -r '.[0]' <<<"$want")_$(jq -r '.[1] | ltrimstr("/workspace/wt/")' <<<"$want")" "got: $events" \
      grep -qF -- "$want" <<<"$events"
  done
  # The watched directory removed: a delete for it, then `end` {"reason":"deleted"} and the stream ends.
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/wt"}'
  local rc=0
  wait "$c1" || rc=$?
  check watch.root_gone_ends "curl rc=$rc, tail: $(tail -c 200 "$T/watch1.out" | tr '\n' ' ')" bash -c \
    "[ $rc = 0 ] && grep -A1 '^event: end' '$T/watch1.out' | grep -q '\"reason\":\"deleted\"'"
  # timeout_ms ends it with reason timeout; a file may be watched.
  run_exec "$SBX" '{"cmd":"echo 1 > /workspace/wf"}'
  curl -sN -m 20 "${auth[@]}" "$w?path=wf&timeout_ms=1500" >"$T/watch2.out" 2>&1
  check watch.timeout_ends "$(tr '\n' ' ' <"$T/watch2.out" | head -c 300)" bash -c \
    "grep -A1 '^event: end' '$T/watch2.out' | grep -q '\"reason\":\"timeout\"' && grep -q '\"is_dir\":false,\"path\":\"/workspace/wf\"' '$T/watch2.out'"
  # A symlink named as the root is followed (events carry the path asked for).
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/wl /workspace/wlink && mkdir /workspace/wl && ln -s wl /workspace/wlink"}'
  curl -sN -m 20 "${auth[@]}" "$w?path=/workspace/wlink&timeout_ms=8000" >"$T/watch4.out" 2>&1 &
  local c4=$!
  eventually 10 grep -q '^event: start' "$T/watch4.out" || true
  run_exec "$SBX" '{"cmd":"echo z > /workspace/wl/inlink"}'
  eventually 10 grep -qF '"path":"/workspace/wlink/inlink"' "$T/watch4.out" || true
  kill "$c4" 2>/dev/null || true
  wait "$c4" 2>/dev/null || true
  check watch.symlinked_root "$(tr '\n' ' ' <"$T/watch4.out" | head -c 400)" \
    grep -qF '"is_dir":false,"path":"/workspace/wlink/inlink","type":"create"' "$T/watch4.out"
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/wl /workspace/wlink"}'
  # Bad input, before any stream.
  api GET "/v1/sandboxes/$SBX/files/watch"
  expect_error watch.no_path_400 400 invalid_request path
  api GET "/v1/sandboxes/$SBX/files/watch?path=/no/such/dir"
  expect_error watch.missing_404 404 file_not_found
  api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace/wf&recursive=true"
  expect_error watch.recursive_file_400 400 invalid_request recursive
  api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace&depth=3"
  expect_error watch.unknown_param_400 400 invalid_request depth
  api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace&timeout_ms=0"
  expect_error watch.timeout_0_400 400 invalid_request timeout_ms
  api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace/../etc"
  expect_error watch.dotdot_400 400 invalid_request path
  KEY=$OTHER api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace"
  expect_error watch.other_project_404 404 sandbox_not_found
  # 64 watches at once (from two keys: a key has 64 requests in flight), the 65th refused; once
  # their clients leave, the sandbox's watches are free again.
  local pids=() i
  for i in $(seq 1 64); do
    local k=$KEY
    [ $((i % 2)) = 0 ] && k=$SAME
    curl -sN -m 60 -H "Authorization: Bearer $k" "$w?path=/workspace" >"$T/watchcap.$i" 2>&1 &
    pids+=($!)
  done
  eventually 30 bash -c "[ \$(grep -l '^event: start' $T/watchcap.* 2>/dev/null | wc -l) = 64 ]" || true
  api GET "/v1/sandboxes/$SBX/files/watch?path=/workspace" -m 10
  expect_error watch.cap_64_429 429 quota_exceeded watches
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -f "$T"/watchcap.*
  check watch.freed_after_clients_left "a new watch after the 64 clients left: $(head -c 200 "$T/watch3.out" 2>/dev/null)" \
    eventually 20 bash -c "curl -sN -m 3 -H 'Authorization: Bearer $KEY' '$w?path=/workspace&timeout_ms=500' >'$T/watch3.out' 2>&1; grep -q '^event: start' '$T/watch3.out'"
  # The CLI: one line per change.
  local cli="$B3OS_BIN/b3os"
  run_exec "$SBX" '{"cmd":"mkdir -p /workspace/cw"}'
  B3OS_API_URL=$URL B3OS_API_KEY=$KEY "$cli" watch "$SBX" cw -r --timeout 60 >"$T/cliwatch.out" 2>"$T/cliwatch.err" &
  local cw=$!
  eventually 15 grep -q '^watching /workspace/cw' "$T/cliwatch.err" || true
  run_exec "$SBX" '{"cmd":"echo a > /workspace/cw/new.txt"}'
  eventually 15 grep -q 'new.txt' "$T/cliwatch.out" || true
  # Removing the watched directory ends the watch (reason deleted) and the CLI with it.
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/cw"}'
  rc=0
  wait "$cw" || rc=$?
  check watch.cli_lines "rc=$rc: $(tr '\n' '|' <"$T/cliwatch.out") / $(tr '\n' '|' <"$T/cliwatch.err")" bash -c \
    "[ $rc = 0 ] && grep -qx 'create  /workspace/cw/new.txt' '$T/cliwatch.out' && grep -q 'watch ended: deleted' '$T/cliwatch.err'"
  rc=0
  B3OS_API_URL=$URL B3OS_API_KEY=$KEY "$cli" watch "$SBX" /no/such >/dev/null 2>"$T/cliwatch.err" || rc=$?
  check watch.cli_missing_fails "rc=$rc: $(cat "$T/cliwatch.err")" bash -c "[ $rc = 1 ] && grep -q file_not_found '$T/cliwatch.err'"
  run_exec "$SBX" '{"cmd":"rm -rf /workspace/wf"}'
}

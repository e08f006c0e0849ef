#!/usr/bin/env bash
# End-to-end test of templates users build (docs/templates.md, docs/image-import.md) against a
# private b3osd with sandbox networks on, whose builds install packages from an apt repository
# on the fake internet (tests/net/: a.b3t.test serves tests/fixtures/make_apt_repo.sh's
# repository under /debian/; b3osd gets it with --template-apt-sources):
#   1-2. a full build (packages, files inline and base64, a context upload, run, env, workdir,
#        a non-root user, a start command with ready {port}); its log followed to the end; its
#        sandboxes by name and id have the start process running when create answers (inside
#        and through a preview URL), the defaults, the package, the files and their modes;
#   3.   forks (count 2) and a snapshot of a sandbox of it;
#   4.   versions: v2 changes a file, the old sandbox keeps v1, a new one gets v2; an unchanged
#        rebuild is ready at once (reused_from), timed;
#   5.   projects: another project's key sees none of it (404 template_not_found) and lists
#        only base and node-wide ones; node-wide publishing and who may delete;
#   6.   bad input: bad specs (400 naming the field, 413), tarballs that are not images (400
#        at once), builds failing at packages, run[i] and ready, hostile images (tests/fixtures/
#        make_image.py --hostile, b3osd with --template-setuid refuse; a bomb and a layer past
#        the size limit) failing at import: the error names the step or the image problem, the
#        host files the layers aimed at are untouched, and no container, mount, loop device,
#        *.building directory, cgroup, root or checkpoint of a failed build stays;
#   7.   image import: a docker save of base's own root (start: true runs its Cmd; its Env and
#        WorkingDir become defaults) and a small OCI layout;
#   8.   delete: 409 while a sandbox runs it, force, files gone after the sandbox, base 403;
#   9.   b3osd killed (SIGKILL) during a build: the build is failed after the restart and its
#        sandbox's container, disk and half-made files are swept;
#   10.  every JSON response against docs/openapi.yaml.
# Network: 127.0.0.1 (the API, the preview listener) and the fake internet only (its lock,
# /tmp/b3os-fakenet.lock, is held for the whole run: one fake internet per host). Nothing is
# downloaded: the package, the repository and the images are made here.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/templates.sh
# Env: B3OS_TEMPLATES_DIR (default /var/lib/b3os/templates), TPL_E2E_UPLINKS (sandbox uplink
# range, default 10.206.0.0/16), B3OS_E2E_KEEP=1 keeps the temp dir, E2E_SECTIONS="s_a s_b"
# runs only those sections (development).
# Prints PASS/FAIL/SKIP lines and "#" information lines, then the counts; exits 1 on a FAIL.
# shellcheck disable=SC2016 # single-quoted $VAR and $(...) are for jq or the sandbox's shell
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
UPLINKS=${TPL_E2E_UPLINKS:-10.206.0.0/16}
TABLE=b3os_$(echo "$UPLINKS" | tr './' '__')
SERVICE=$(python3 -c "import ipaddress,sys; print(ipaddress.ip_network(sys.argv[1])[1])" "$UPLINKS")
FAKENET=$ROOT/tests/net/fakenet.sh
MAKE_IMAGE=$ROOT/tests/fixtures/make_image.py

e2e_begin templates python3 nft ip dnsmasq openssl flock tar dpkg-deb dpkg-scanpackages readelf losetup sha256sum base64

FN=$T/fakenet
on_exit() {
  local rc=$?
  set +e
  e2e_aborted "$rc"
  [ -z "$SAMPLER_PID" ] || kill "$SAMPLER_PID" 2>/dev/null
  cleanup_everything
  # What the sandboxes' networks left (the daemon is gone): namespaces, the table, the address.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^b3s-'); do
    ip -n "$ns" -4 -o addr show dev up0 2>/dev/null | grep -q " ${UPLINKS%.*.*}\." && ip netns del "$ns" 2>/dev/null
  done
  nft delete table inet "$TABLE" 2>/dev/null
  ip addr del "$SERVICE/32" dev lo 2>/dev/null
  # Loop devices of the run's disks (cleanup_everything unmounted them).
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v p="$T/" 'index($2, p) == 1 {print $1}' |
    while read -r dev; do losetup -d "$dev" 2>/dev/null; done
  if [ -n "$FAKENET_LOCK_PID" ]; then
    "$FAKENET" down "$FN" >/dev/null 2>&1
    kill "$FAKENET_LOCK_PID" 2>/dev/null
  fi
  finish_private_suite "$rc"
}
trap on_exit EXIT
on_signal() {
  echo "# interrupted; cleaning up" >&2
  [ -z "$SECTION_PID" ] || kill -TERM "$SECTION_PID" 2>/dev/null || true
  exit 130
}
trap on_signal INT TERM

# ---- helpers ---------------------------------------------------------------------------------

mkdir -p "$T/state" "$T/logs" "$T/images" "$T/work"
# put NAME VALUE / get NAME: values that sections (subshells) hand to later ones.
put() { printf '%s' "$2" >"$T/state/$1"; }
get() { cat "$T/state/$1" 2>/dev/null || true; }

# submit JSON: POST /v1/templates with $KEY (a full queue, 429, is waited out for up to 5 min).
# Sets TPL (the template id) and BLD (the new build's id), "" when not 202.
submit() {
  local body=$1 until=$(($(date +%s) + 300))
  while :; do
    apij POST /v1/templates "$body"
    if [ "$ST" = 429 ] && [ "$(j .error.code)" = concurrency_limited ] && [ "$(date +%s)" -lt "$until" ]; then
      sleep 1
      continue
    fi
    break
  done
  TPL=
  BLD=
  if [ "$ST" = 202 ]; then
    TPL=$(j .id)
    BLD=$(j .build.id)
  fi
}
# wait_build TEMPLATE BUILD [SECS]: follows the build's log (logs?follow=true, which returns when
# the build ends) into $T/logs/BUILD.log, then GETs the build: its object is in $RESP and
# $T/logs/BUILD.json, its status in BST.
wait_build() {
  local tpl=$1 b=$2 secs=${3:-600}
  api GET "/v1/templates/$tpl/builds/$b/logs?follow=true" -m "$secs"
  cp "$RESP" "$T/logs/$b.log"
  api GET "/v1/templates/$tpl/builds/$b"
  cp "$RESP" "$T/logs/$b.json"
  BST=$(j .status)
}
# build_took: how long the build in $RESP waited and ran, and its steps' times.
build_took() {
  local c s f
  c=$(date -d "$(j .created_at)" +%s%3N 2>/dev/null || echo 0)
  s=$(date -d "$(j .started_at)" +%s%3N 2>/dev/null || echo 0)
  f=$(date -d "$(j .finished_at)" +%s%3N 2>/dev/null || echo 0)
  printf 'queued %d ms, built in %d ms (%s)' $((s - c)) $((f - s)) "$(j -r '[.steps[] | "\(.name) \(.duration_ms | floor)"] | join(", ")')"
}
# blog BUILD: the followed log of a build.
blog() { cat "$T/logs/$1.log" 2>/dev/null || true; }
# inside ID SH [USER]: a shell line inside ID (the template's defaults apply unless USER); its
# stdout in $OUT, the exec's answer in $RESP.
inside() {
  local body
  body=$(jq -nc --arg c "$2" --arg u "${3:-}" '{cmd: $c, timeout_ms: 30000} + (if $u == "" then {} else {user: $u} end)')
  run_exec "$1" "$body"
  OUT=$(j .stdout)
}
# okj STATUS [jq options] FILTER: lib.sh's okj, with jq options (--arg ...) allowed.
okj() {
  local want=$1
  shift
  [ "$ST" = "$want" ] && jt "$@"
}
has_line() { grep -qF -- "$2" <<<"$1"; }

# The sandboxes of the run that are alive now, by every key.
live_ids() {
  local k
  for k in "${ALL_KEYS[@]}"; do
    for s in running paused; do
      curl -s -m 10 -H "Authorization: Bearer $k" "$URL/v1/sandboxes?status=$s&limit=100" | jq -r '.data[]?.id' 2>/dev/null
    done
  done | sort -u
}
# Every sandbox id of the run: those b3osd named in its log, and those the sampler saw in its
# run and disk directories (b3osd does not log the ids of its own build and checkpoint sandboxes).
seen_ids() { cat <(grep -o 'sbx_[0-9a-z]\{26\}' "$T/daemon.log" 2>/dev/null) "$T/seen-ids" 2>/dev/null | sort -u || true; }
SAMPLER_PID=
start_id_sampler() {
  (
    trap - EXIT INT TERM ERR
    declare -A seen=()
    while :; do
      for d in "$T"/run/sandboxes/sbx_* "$T"/data/disks/sbx_*; do
        d=${d##*/}
        [ "$d" != 'sbx_*' ] && [ -z "${seen[$d]:-}" ] && { seen[$d]=1; echo "$d" >>"$T/seen-ids"; }
      done
      sleep 0.2
    done
  ) &
  SAMPLER_PID=$!
}
# What the run holds on the host that belongs to no live sandbox: runsc containers, mounts and
# loop devices under the data dir, *.building directories, cgroups of ids b3osd logged.
stray_state() {
  local live out="" id
  live=$(live_ids)
  for id in $(runsc_list); do grep -qx "$id" <<<"$live" || out+="container:$id "; done
  while read -r m; do
    [ -n "$m" ] || continue
    id=$(grep -o 'sbx_[0-9a-z]\{26\}' <<<"$m" | head -n1 || true)
    [ -n "$id" ] && grep -qx "$id" <<<"$live" || out+="mount:$m "
  done < <(awk -v p="$T/" 'index($2, p) == 1 {print $2}' /proc/mounts)
  while read -r dev back; do
    [ -n "$dev" ] || continue
    id=$(grep -o 'sbx_[0-9a-z]\{26\}' <<<"$back" | head -n1 || true)
    [ -n "$id" ] && grep -qx "$id" <<<"$live" || out+="loop:$dev($back) "
  done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v p="$T/" 'index($2, p) == 1')
  while read -r m; do [ -z "$m" ] || out+="building:$m "; done < <(find "$T/data" -maxdepth 3 -name '*.building' 2>/dev/null)
  for id in $(seen_ids); do
    grep -qx "$id" <<<"$live" && continue
    for d in $(cgroup_dirs "$id"); do out+="cgroup:$d "; done
    pgrep -f "b3os-shim $T/.*$id" >/dev/null 2>&1 && out+="shim:$id "
  done
  printf '%s' "$out"
}
no_stray() { [ -z "$(stray_state)" ]; }
# check_no_stray NAME [SECS]: nothing of a build is left (within SECS, default 20).
check_no_stray() {
  eventually "${2:-20}" no_stray || true
  local left
  left=$(stray_state)
  check "$1" "left on the host: $left" [ -z "$left" ]
}
# preview_get URL PATH: GET PATH through the preview listener with the token of URL (a minted
# preview URL); the body in $PBODY, the status in PST.
preview_get() {
  local host tok
  host=$(sed -E 's#^https?://([^:/]+).*#\1#' <<<"$1")
  tok=${1##*b3os_token=}
  PBODY=$(curl -sS -m 10 -o - -w '\n%{http_code}' -H "Host: $host" "$PREVIEW$2?b3os_token=$tok" 2>&1) || true
  PST=$(tail -n1 <<<"$PBODY")
  PBODY=$(sed '$d' <<<"$PBODY")
}

# ---- set-up: the fake internet and its apt repository, the images, b3osd ---------------------

fakenet_lock
"$FAKENET" up "$FN" >"$T/fakenet.log" 2>&1 || die "the fake internet did not come up: $(tail -n 5 "$T/fakenet.log")"
eval "$("$FAKENET" env "$FN")"
"$ROOT/tests/fixtures/make_apt_repo.sh" "$B3T_WWW/debian" >"$T/apt-repo.log" 2>&1 ||
  die "make_apt_repo.sh failed: $(cat "$T/apt-repo.log")"
echo "deb [trusted=yes] http://$B3T_HOST_A/debian ./" >"$T/apt-sources.list"
HELLO_LINE="hello from b3os-fixture-hello 1.0"

# Hostile images aim their escapes at this directory of the host.
ESCAPE=$T/escape
mkdir -p "$ESCAPE"
echo original >"$ESCAPE/file"
chmod 0640 "$ESCAPE/file"
escape_state() { (cd "$ESCAPE" && find . -printf '%p %m %u %s %n %y\n' | sort && cat file); }
escape_state >"$T/escape.before"

E2E_NETWORK=on
E2E_MAX_SANDBOXES_PER_PROJECT=24
export E2E_NETWORK E2E_MAX_SANDBOXES_PER_PROJECT
B3OS_E2E_DAEMON_ARGS="--net-uplinks $UPLINKS --dns-upstream $B3T_DNS --net-warm-pool 0 --net-fork-pool 0
  --template-apt-sources $T/apt-sources.list --template-setuid refuse --template-image-paths $T/images
  --template-publishers default,links"
B3OS_E2E_DAEMON_ARGS=$(tr '\n' ' ' <<<"$B3OS_E2E_DAEMON_ARGS")
export B3OS_E2E_DAEMON_ARGS
start_private_daemon
start_id_sampler
OTHER=$("$B3OS_BIN/b3os" keys create --project other --data-dir "$T/data" 2>/dev/null)
HOSTILE=$("$B3OS_BIN/b3os" keys create --project hostile --data-dir "$T/data" 2>/dev/null)
LINKS=$("$B3OS_BIN/b3os" keys create --project links --data-dir "$T/data" 2>/dev/null)
TWIN=$("$B3OS_BIN/b3os" keys create --project twin --data-dir "$T/data" 2>/dev/null)
[[ $OTHER == b3os_sk_* && $HOSTILE == b3os_sk_* && $LINKS == b3os_sk_* && $TWIN == b3os_sk_* ]] || die "could not create API keys"
ALL_KEYS+=("$OTHER" "$HOSTILE" "$LINKS" "$TWIN")
info "b3osd pid $(daemon_pid) on $URL, previews on $PREVIEW, uplinks $UPLINKS, apt from http://$B3T_HOST_A/debian, temp dir $T"

# ---- 1-2. the full build -----------------------------------------------------------------------

# The spec of "web" (v1; v2 changes hello.txt). $1: the context upload, $2: hello.txt's text.
web_spec() {
  jq -nc --arg ctx "$1" --arg hello "$2" --arg tool "$(printf '#!/bin/sh\necho tool-ok\n' | base64 -w0)" '{
    name: "web",
    packages: ["b3os-fixture-hello"],
    files: [{path: "/srv/app/hello.txt", content: $hello, mode: 420},
            {path: "/srv/app/bin/tool.sh", content_base64: $tool, mode: 493},
            {path: "/srv/app/secret.conf", content: "s3cret\n", mode: 384, owner: "app"}],
    context: {upload: $ctx, dest: "/srv/app/ctx"},
    run: ["b3os-fixture-hello | tee /srv/app/from-run.txt",
          "pwd > /srv/app/run-cwd.txt; echo \"$APP_ENV\" > /srv/app/run-env.txt; echo run-two-done"],
    env: {APP_ENV: "dev", GREETING: "hi there"},
    workdir: "/srv/app",
    user: "app",
    start: "python3 -m http.server 8000",
    ready: {port: 8000, timeout_s: 30},
    memory_mib: 512}'
}

s_build_submit() {
  mkdir -p "$T/ctx/static"
  echo "from the context" >"$T/ctx/static/page.txt"
  echo "ctx-readme" >"$T/ctx/README"
  tar -C "$T/ctx" -cf "$T/ctx.tar" .
  api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/ctx.tar"
  check upload.context_201 "$(snip)" okj 201 --arg s "$(sha256sum "$T/ctx.tar" | cut -d' ' -f1)" --argjson n "$(stat -c %s "$T/ctx.tar")" \
    '.object == "template_upload" and (.id | startswith("upl_")) and .sha256 == $s and .size_bytes == $n and (.expires_at | type == "string")'
  local ctx
  ctx=$(j .id)
  put ctx "$ctx"
  : >"$B3T_HTTP_LOG"
  submit "$(web_spec "$ctx" 'inline text v1')"
  check build.submit_202 "$(snip)" okj 202 '.object == "template" and .name == "web" and (.id | startswith("tpl_"))
    and (.build.id | startswith("bld_")) and .build.status == "queued" and .build.version == 1 and .build.reused_from == null
    and .status == "queued" and .version == null and .ready_build_id == null'
  put web_tpl "$TPL"
  put web_v1 "$BLD"
  # Followed from now on, while it is queued and built: the answer must end with the build.
  now_ms >"$T/follow-web.start"
  (
    trap - EXIT INT TERM ERR
    curl -sS -N -m 600 -H "Authorization: Bearer $KEY" -o "$T/follow-web.log" -w '%{http_code}' \
      "$URL/v1/templates/web/builds/$BLD/logs?follow=true" >"$T/follow-web.status" 2>"$T/follow-web.err" || true
    now_ms >"$T/follow-web.end"
  ) &
}

s_build_full() {
  local tpl bld
  tpl=$(get web_tpl)
  bld=$(get web_v1)
  [ -n "$bld" ] || { fail build.full "no build was submitted"; return 0; }
  eventually 600 test -s "$T/follow-web.end" || true
  wait_build web "$bld"
  info "web v1: $(build_took)"
  local fin
  fin=$(date -d "$(j .finished_at)" +%s%3N 2>/dev/null || echo 0)
  check build.follow_open_until_the_end "follow from $(cat "$T/follow-web.start") to $(cat "$T/follow-web.end" 2>/dev/null), build finished $fin, HTTP $(cat "$T/follow-web.status" 2>/dev/null)" \
    bash -c "[ \"\$(cat '$T/follow-web.status')\" = 200 ] && [ $(cat "$T/follow-web.start") -lt $fin ] && [ \$(cat '$T/follow-web.end') -ge $fin ]"
  check build.follow_got_whole_log "the followed log differs from the log read after: $(diff "$T/follow-web.log" "$T/logs/$bld.log" | head -n 3 | tr '\n' ' ')" \
    cmp -s "$T/follow-web.log" "$T/logs/$bld.log"
  check build.ready "$(snip) log: $(blog "$bld" | tail -n 5 | tr '\n' ' ')" test "$BST" = ready
  check build.object "$(snip)" jt --arg t "$tpl" '.object == "template_build" and .template_id == $t and .version == 1
    and (.created_at | type == "string") and (.started_at | type == "string") and (.finished_at | type == "string")
    and .error == null and .reused_from == null and (.content_hash | length) >= 24'
  check build.steps_listed_with_exit_codes "$(j -c '[.steps[] | [.name, .exit_code]]')" jt '[.steps[].name] as $n
    | ($n | index("copy")) != null and ($n | index("apt sources")) != null and ($n | index("packages")) != null
    and ($n | index("user")) != null and ($n | index("files[0]")) != null and ($n | index("files[1]")) != null
    and ($n | index("files[2]")) != null and ($n | index("context")) != null and ($n | index("run[0]")) != null
    and ($n | index("run[1]")) != null and ($n | index("keep")) != null and ($n | index("checkpoint")) != null
    and ($n | index("checkpoint (network)")) != null
    and all(.steps[]; .exit_code == 0 and (.duration_ms | type == "number"))'
  local log
  log=$(blog "$bld")
  local step
  for step in "-- apt sources:" "-- packages: apt-get install b3os-fixture-hello" "-- user: app" "-- files[0]: /srv/app/hello.txt" \
    "-- files[1]: /srv/app/bin/tool.sh" "-- context: extracted into /srv/app/ctx" "-- run[0]:" "-- run[1]:" "-- checkpoint" \
    "-- ready: waiting" "== ready in"; do
    check "build.log_has.${step//[^a-z0-9\[\]]/_}" "the followed log lacks '$step'; it ends: $(tail -n 3 <<<"$log" | tr '\n' ' ')" has_line "$log" "$step"
  done
  check build.log_has_step_output "run[0]'s output is not in the log" has_line "$log" "$HELLO_LINE"
  check build.log_has_run1_output "run[1]'s output is not in the log" has_line "$log" "run-two-done"
  check build.apt_used_the_fake_mirror "http.log of the fake internet: $(grep -c debian "$B3T_HTTP_LOG") /debian requests" \
    grep -q "GET /debian/./b3os-fixture-hello_1.0_all.deb$" "$B3T_HTTP_LOG"
  api GET /v1/templates/web
  check template.get_ready "$(snip)" okj 200 --arg b "$bld" '.status == "ready" and .version == 1 and .ready_build_id == $b
    and .public == false and .source.kind == "base" and .size_bytes > 0
    and .checkpoint.status == "ready" and .checkpoint.memory_mib == 512
    and .defaults.workdir == "/srv/app" and .defaults.user == "app" and .defaults.start == "python3 -m http.server 8000"
    and .defaults.env == {"APP_ENV": "dev", "GREETING": "hi there"} and .defaults.ready.port == 8000'
  check template.no_host_paths "$(snip)" not grep -q "$T" "$RESP"
  api GET /v1/templates
  check template.listed "$(snip)" okj 200 '([.data[].name] | index("base")) == 0 and ([.data[].name] | index("web")) != null and .next_cursor == null'
  api GET "/v1/templates/$tpl/builds"
  check template.builds_list "$(snip)" okj 200 --arg b "$bld" '.object == "list" and (.data | length) == 1 and .data[0].id == $b'
}

# check_web_sandbox PREFIX ID HELLO: what a sandbox of web has (HELLO: hello.txt's text).
check_web_sandbox() {
  local p=$1 id=$2 hello=$3
  inside "$id" 'pwd; id -un; echo "$APP_ENV|$GREETING"'
  check "$p.defaults_workdir_user_env" "want /srv/app, app, dev|hi there; got $(snip)" jt '.exit_code == 0 and .stdout == "/srv/app\napp\ndev|hi there\n"'
  inside "$id" 'b3os-fixture-hello; /srv/app/bin/tool.sh; cat /srv/app/from-run.txt /srv/app/run-cwd.txt /srv/app/run-env.txt /srv/app/ctx/static/page.txt /srv/app/ctx/README'
  check "$p.package_files_run_context" "$(snip)" jt --arg h "$HELLO_LINE" '.exit_code == 0 and .stdout == ($h + "\ntool-ok\n" + $h + "\n/srv/app\ndev\nfrom the context\nctx-readme\n")'
  inside "$id" 'stat -c "%n %a %U" /srv/app/hello.txt /srv/app/bin/tool.sh /srv/app/secret.conf /usr/bin/b3os-fixture-hello; cat /srv/app/hello.txt' root
  check "$p.file_modes_owners" "$(snip)" jt --arg h "$hello" '.exit_code == 0 and .stdout == ("/srv/app/hello.txt 644 root\n/srv/app/bin/tool.sh 755 root\n/srv/app/secret.conf 600 app\n/usr/bin/b3os-fixture-hello 755 root\n" + $h)'
  inside "$id" 'cat /srv/app/secret.conf'
  check "$p.owner_applies" "the template's user reads its own 0600 file: $(snip)" jt '.exit_code == 0 and .stdout == "s3cret\n"'
}

s_sandboxes() {
  local tpl id t0
  tpl=$(get web_tpl)
  t0=$(now_ms)
  create_sandbox '{"template": "web"}'
  info "create from web (restoring its checkpoint) answered in $(($(now_ms) - t0)) ms"
  check create.by_name_201 "$(snip)" okj 201 --arg t "$tpl" '.template == {"id": $t, "name": "web"} and .env == {"APP_ENV": "dev", "GREETING": "hi there"} and .memory_mib == 512'
  check create.restored_checkpoint "Server-Timing: $(header Server-Timing)" grep -qi 'restore;dur=' "$RESPH"
  id=$CID
  put sbx_v1 "$id"
  # No wait: the start process is already listening when create answers.
  inside "$id" 'curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
  check create.start_running_at_once "$(snip)" jt '.exit_code == 0 and .stdout == "inline text v1"'
  apij POST "/v1/sandboxes/$id/ports/8000/url" '{}'
  local url
  url=$(j .url)
  check ports.url_minted "$(snip)" test -n "$url"
  preview_get "$url" /hello.txt
  check ports.preview_serves_start_process "HTTP $PST: $PBODY" test "$PST $PBODY" = "200 inline text v1"
  check_web_sandbox byname "$id" 'inline text v1'
  inside "$id" 'ps -eo user,args | grep "[h]ttp.server"'
  check create.start_runs_as_template_user "$(snip)" jt '.stdout | test("(^|\n)app +python3 -m http.server 8000\n")'

  create_sandbox "$(jq -nc --arg t "$tpl" '{template: $t, egress: {mode: "public"}}')"
  check create.by_id_201 "$(snip)" okj 201 --arg t "$tpl" '.template.id == $t and .template.name == "web" and .egress.mode == "public"'
  check create.by_id_restored_network_checkpoint "Server-Timing: $(header Server-Timing)" grep -qi 'restore;dur=' "$RESPH"
  id=$CID
  inside "$id" 'curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
  check create.by_id_start_running_at_once "$(snip)" jt '.exit_code == 0 and .stdout == "inline text v1"'
  check_web_sandbox byid "$id" 'inline text v1'
  # A create of another memory size boots the root and runs start and ready itself.
  # A create of its own env (which wins over the template's) and memory size.
  create_sandbox '{"template": "web", "memory_mib": 640, "env": {"APP_ENV": "prod"}}'
  check create.other_memory_201 "$(snip)" okj 201 '.memory_mib == 640 and .env == {"APP_ENV": "prod", "GREETING": "hi there"}'
  id=$CID
  inside "$id" 'curl -sS -m 5 http://127.0.0.1:8000/hello.txt; echo; pwd; id -un; echo "$APP_ENV|$GREETING"'
  check create.other_memory_start_and_defaults "$(snip)" jt '.exit_code == 0 and .stdout == "inline text v1\n/srv/app\napp\nprod|hi there\n"'
  delete_sandbox "$id" || true
}

# ---- 3. forks and snapshots -------------------------------------------------------------------

s_fork_snapshot() {
  local src snp f1 f2 id
  create_sandbox '{"template": "web", "forkable": true}'
  check fork.source_201 "$(snip)" okj 201 '.forkable == true and .template.name == "web"'
  src=$CID
  put sbx_forksrc "$src"
  inside "$src" 'echo written-after-create > /workspace/after.txt && cat /workspace/after.txt'
  check fork.source_write "$(snip)" jt '.stdout == "written-after-create\n"'
  apij POST "/v1/sandboxes/$src/fork" '{"count": 2}'
  check fork.count2_201 "$(snip)" okj 201 '(.data | length) == 2 and all(.data[]; .status == "running" and .template.name == "web")'
  f1=$(j -r '.data[0].id')
  f2=$(j -r '.data[1].id')
  for id in "$f1" "$f2"; do echo "$id" >>"$T/ids"; done
  for id in "$f1" "$f2"; do
    inside "$id" 'cat /srv/app/hello.txt; echo; cat /workspace/after.txt; pwd; id -un; curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
    check "fork.$id.template_files_own_copy_start_runs" "$(snip)" jt '.exit_code == 0 and .stdout == "inline text v1\nwritten-after-create\n/srv/app\napp\ninline text v1"'
  done
  inside "$f1" 'echo changed-in-fork1 > /workspace/after.txt'
  inside "$f2" 'cat /workspace/after.txt'
  check fork.files_are_each_forks_own "fork 2 sees: $OUT" test "$OUT" = written-after-create
  inside "$src" 'cat /workspace/after.txt'
  check fork.source_keeps_its_file "the source sees: $OUT" test "$OUT" = written-after-create

  api POST "/v1/sandboxes/$src/snapshot"
  check snapshot.201 "$(snip)" okj 201 '.object == "snapshot" and .template.name == "web"'
  snp=$(j .id)
  put snapshot "$snp"
  create_sandbox "$(jq -nc --arg s "$snp" '{snapshot: $s}')"
  check snapshot.create_from_201 "$(snip)" okj 201 --arg s "$snp" '.snapshot == $s and .template.name == "web"'
  id=$CID
  inside "$id" 'cat /workspace/after.txt; cat /srv/app/hello.txt; echo; pwd; id -un; curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
  check snapshot.files_defaults_start_runs "$(snip)" jt '.exit_code == 0 and .stdout == "written-after-create\ninline text v1\n/srv/app\napp\ninline text v1"'
  for id in "$f1" "$f2" "$id"; do delete_sandbox "$id" || fail fork.cleanup "$(snip)"; done
}

# ---- 4. versions --------------------------------------------------------------------------------

s_versions() {
  local ctx v1 v2 v3 old id secs
  ctx=$(get ctx)
  v1=$(get web_v1)
  old=$(get sbx_v1)
  submit "$(web_spec "$ctx" 'inline text v2')"
  check version.v2_submit_202 "$(snip)" okj 202 --arg t "$(get web_tpl)" '.id == $t and .build.version == 2 and .build.status == "queued" and .version == 1 and .status == "ready"'
  v2=$BLD
  put web_v2 "$v2"
  wait_build web "$v2"
  info "web v2: $(build_took)"
  check version.v2_ready "$(snip)" test "$BST" = ready
  check version.v2_new_hash "$(snip)" jt --arg h "$(jq -r .content_hash "$T/logs/$v1.json")" '.content_hash != $h and .reused_from == null'
  api GET /v1/templates/web
  check version.template_at_v2 "$(snip)" okj 200 --arg b "$v2" '.version == 2 and .ready_build_id == $b and .build.id == $b'
  inside "$old" 'cat /srv/app/hello.txt; echo; curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
  check version.old_sandbox_keeps_v1 "$(snip)" jt '.stdout == "inline text v1\ninline text v1"'
  create_sandbox '{"template": "web"}'
  id=$CID
  put sbx_v2 "$id"
  inside "$id" 'cat /srv/app/hello.txt; echo; curl -sS -m 5 http://127.0.0.1:8000/hello.txt; echo; pwd; id -un'
  check version.new_sandbox_gets_v2 "$(snip)" jt '.stdout == "inline text v2\ninline text v2\n/srv/app\napp\n"'
  api GET /v1/templates/web/builds
  check version.builds_newest_first "$(snip)" okj 200 --arg a "$v2" --arg b "$v1" '[.data[].id] == [$a, $b] and [.data[].version] == [2, 1]'

  # The same spec again: ready at once, sharing v2's build.
  submit "$(web_spec "$ctx" 'inline text v2')"
  secs=$TIME
  check version.unchanged_rebuild_ready_at_once "$(snip)" okj 202 --arg b "$v2" '.build.status == "ready" and .build.reused_from == $b and .build.version == 3 and .version == 3'
  v3=$BLD
  info "an unchanged rebuild was ready in $secs s (the POST's answer)"
  echo "$secs" >"$T/rebuild.secs"
  check version.unchanged_rebuild_under_5s "took $secs s" awk -v s="$secs" 'BEGIN { exit !(s < 5) }'
  api GET "/v1/templates/web/builds/$v3"
  check version.reused_build_object "$(snip)" okj 200 --arg b "$v2" --arg h "$(jq -r .content_hash "$T/logs/$v2.json")" '.status == "ready" and .reused_from == $b and .content_hash == $h'
  api GET "/v1/templates/web/builds/$v3/logs"
  check version.reused_log_says_so "$(snip)" bash -c "[ $ST = 200 ] && grep -q 'reused' '$RESP'"
  create_sandbox '{"template": "web"}'
  id=$CID
  inside "$id" 'cat /srv/app/hello.txt; echo; curl -sS -m 5 http://127.0.0.1:8000/hello.txt'
  check version.v3_sandbox_runs "$(snip)" jt '.stdout == "inline text v2\ninline text v2"'
  delete_sandbox "$id" || true
}

# ---- 5. projects ---------------------------------------------------------------------------------

s_projects() {
  local tpl bld
  tpl=$(get web_tpl)
  bld=$(get web_v1)
  KEY=$OTHER api GET /v1/templates/web
  expect_error project.get_by_name_404 404 template_not_found
  KEY=$OTHER api GET "/v1/templates/$tpl"
  expect_error project.get_by_id_404 404 template_not_found
  KEY=$OTHER create_sandbox '{"template": "web"}'
  expect_error project.create_from_404 404 template_not_found
  KEY=$OTHER create_sandbox "$(jq -nc --arg t "$tpl" '{template: $t}')"
  expect_error project.create_from_id_404 404 template_not_found
  KEY=$OTHER submit '{"name": "stolen", "from": "web", "run": ["true"]}'
  expect_error project.build_from_404 404 template_not_found
  local other_answer
  other_answer="$ST $(j .error.code)"
  # Exactly like a template that never existed (no way to tell that another project has one).
  KEY=$OTHER submit '{"name": "stolen", "from": "never-existed", "run": ["true"]}'
  check project.build_from_same_as_unknown "another project's template: $other_answer; one that never existed: $ST $(j .error.code)" \
    test "$other_answer" = "$ST $(j .error.code)"
  KEY=$OTHER submit "$(jq -nc --arg t "$tpl" '{name: "stolen2", from: $t}')"
  expect_error project.build_from_id_404 404 template_not_found
  KEY=$OTHER api GET "/v1/templates/web/builds/$bld/logs"
  expect_error project.logs_404 404 template_not_found
  KEY=$OTHER api GET "/v1/templates/web/builds/$bld"
  check project.build_404 "$(snip)" okj 404 '.error.code == "template_not_found" or .error.code == "not_found"'
  KEY=$OTHER api GET /v1/templates/web/builds
  expect_error project.builds_404 404 template_not_found
  KEY=$OTHER api DELETE /v1/templates/web
  expect_error project.delete_404 404 template_not_found
  api GET /v1/templates/web
  check project.still_there_for_its_own "$(snip)" okj 200 '.status == "ready"'
  KEY=$OTHER api GET /v1/templates
  check project.list_only_base "$(snip)" okj 200 '[.data[].name] == ["base"]'

  # Node-wide: the default project (the admin key's) publishes; the other sees, uses, cannot delete.
  submit '{"name": "shared", "public": true, "env": {"SHARED": "yes"}, "workdir": "/srv"}'
  check public.publish_202 "$(snip)" okj 202 '.public == true'
  local shared=$TPL sb=$BLD
  wait_build shared "$sb" 300
  check public.ready "$(snip)" test "$BST" = ready
  KEY=$OTHER api GET /v1/templates
  check public.listed_for_others "$(snip)" okj 200 --arg t "$shared" '[.data[].name] == ["base", "shared"] and (.data[1] | .id == $t and .public == true)'
  KEY=$OTHER api GET /v1/templates/shared
  check public.get_by_others "$(snip)" okj 200 --arg t "$shared" '.id == $t and .defaults.env.SHARED == "yes"'
  KEY=$OTHER create_sandbox '{"template": "shared"}'
  check public.used_by_others "$(snip)" okj 201 --arg t "$shared" '.template.id == $t'
  local id=$CID
  KEY=$OTHER inside "$id" 'echo "$SHARED"; pwd'
  check public.defaults_for_others "$(snip)" jt '.stdout == "yes\n/srv\n"'
  KEY=$OTHER submit '{"name": "mine", "from": "shared", "env": {"MINE": "1"}}'
  check public.built_from_by_others "$(snip)" okj 202 '.source.kind == "template"'
  KEY=$OTHER wait_build mine "$BLD" 300
  check public.built_from_ready "$(snip)" test "$BST" = ready
  KEY=$OTHER api DELETE /v1/templates/shared
  expect_error public.delete_by_others_403 403 forbidden
  KEY=$OTHER submit '{"name": "theirs", "public": true}'
  expect_error public.publish_by_others_403 403 forbidden
  KEY=$OTHER api GET /v1/templates/theirs
  expect_error public.refused_publish_made_nothing 404 template_not_found
  KEY=$OTHER delete_sandbox "$id" || true
  KEY=$OTHER api DELETE /v1/templates/mine
  check public.others_delete_their_own "$(snip)" okj 200 '.deleted == true'

  # A second publisher's template of the same name, published later, shadows nothing: every
  # other project still gets the first one, and sees it once in its list.
  KEY=$LINKS submit '{"name": "shared", "public": true, "env": {"SHARED": "shadow"}}'
  check public.second_publisher_202 "$(snip)" test "$ST" = 202
  KEY=$LINKS wait_build shared "$BLD" 300
  check public.second_publisher_ready "$(snip)" test "$BST" = ready
  KEY=$OTHER api GET /v1/templates/shared
  check public.first_published_wins "$(snip)" okj 200 --arg t "$shared" '.id == $t and .defaults.env.SHARED == "yes"'
  KEY=$OTHER api GET /v1/templates
  check public.listed_once "$(snip)" okj 200 --arg t "$shared" '[.data[] | select(.name == "shared") | .id] == [$t]'
  KEY=$LINKS api GET /v1/templates/shared
  check public.publisher_sees_its_own "$(snip)" okj 200 --arg t "$shared" '.id != $t and .defaults.env.SHARED == "shadow"'
  # Build logs are the publisher's: another project reads the template, not what its steps printed.
  KEY=$OTHER api GET "/v1/templates/shared/builds/$sb/logs"
  check public.logs_not_for_others "$(snip)" okj 404 '.error.code == "not_found"'
  api GET "/v1/templates/shared/builds/$sb/logs"
  check public.logs_for_the_publisher "$(snip)" test "$ST" = 200
}

# ---- 6. bad input ----------------------------------------------------------------------------------

# bad_spec NAME JSON WORD: a 400 invalid_request naming WORD, and no template of that name.
bad_spec() {
  local name=$1 body=$2 word=$3 tname
  submit "$body"
  expect_error "bad_spec.$name" 400 invalid_request "$word"
  tname=$(jq -r '.name // empty | select(type == "string")' <<<"$body" 2>/dev/null || true)
  if [ -n "$tname" ] && [ "$tname" != base ]; then
    api GET "/v1/templates/$(jq -rn --arg n "$tname" '$n | @uri')"
    check "bad_spec.$name.nothing_made" "$(snip)" test "$ST" != 200
  fi
}

s_bad_specs() {
  api GET /v1/templates
  local before
  before=$(j -c '[.data[].id]')
  bad_spec unknown_field '{"name": "bad-a", "pakages": ["curl"]}' pakages
  bad_spec unknown_nested_field '{"name": "bad-b", "files": [{"path": "/x", "content": "", "colour": 1}]}' 'files[0].colour'
  bad_spec bad_name '{"name": "Bad Name"}' name
  bad_spec name_base '{"name": "base"}' name
  bad_spec name_id '{"name": "tpl_abc"}' name
  bad_spec ready_without_start '{"name": "bad-c", "ready": {"port": 8000}}' ready
  bad_spec relative_file_path '{"name": "bad-d", "files": [{"path": "etc/x", "content": "x"}]}' 'files[0].path'
  bad_spec dotdot_file_path '{"name": "bad-e", "files": [{"path": "/etc/../x", "content": "x"}]}' 'files[0].path'
  bad_spec relative_workdir '{"name": "bad-f", "workdir": "srv/app"}' workdir
  bad_spec relative_context_dest '{"name": "bad-g", "context": {"upload": "upl_abcdefgh", "dest": "ctx"}}' context.dest
  bad_spec bad_package '{"name": "bad-h", "packages": ["Bad Pkg"]}' 'packages[0]'
  bad_spec from_and_image '{"name": "bad-i", "from": "base", "image": {"upload": "upl_abcdefgh"}}' image
  bad_spec unknown_upload '{"name": "bad-j", "image": {"upload": "upl_abcdefgh"}}' image.upload
  bad_spec image_path_not_allowed '{"name": "bad-k", "image": {"path": "/etc/passwd"}}' image.path
  bad_spec root_user '{"name": "bad-l", "user": "root"}' user
  bad_spec build_egress_deny '{"name": "bad-m", "build": {"egress": {"mode": "deny"}}}' build.egress
  bad_spec start_true_without_image '{"name": "bad-n", "start": true}' start
  bad_spec not_an_object '["name", "x"]' body
  # Over 1 MiB: 413, before any of it is parsed.
  python3 -c 'import json; print(json.dumps({"name": "bad-big", "run": ["echo " + "x" * 1100000]}))' >"$T/big-spec.json"
  api POST /v1/templates -H 'Content-Type: application/json' --data-binary "@$T/big-spec.json"
  expect_error bad_spec.over_1mib_413 413 payload_too_large
  api GET /v1/templates/bad-big
  check bad_spec.over_1mib.nothing_made "$(snip)" test "$ST" = 404
  api POST /v1/templates/uploads -H 'Content-Type: application/x-tar'
  expect_error upload.empty_400 400 invalid_request
  api POST /v1/templates/uploads -H 'Content-Type: text/plain' --data-binary 'hello'
  check upload.wrong_type_415 "$(snip)" okj 415 '.error.code == "unsupported_media_type"'
  api GET /v1/templates
  check bad_spec.list_unchanged "before $before, after $(j -c '[.data[].id]')" okj 200 --argjson b "$before" '[.data[].id] == $b'
}

# Builds that fail: each names its step (and exit code and output), or the image's problem.
s_bad_builds_submit() {
  : >"$T/bad-builds"
  submit '{"name": "bad-pkg", "packages": ["b3os-no-such-package"]}'
  check bad_build.pkg_submit_202 "$(snip)" test "$ST" = 202
  echo "bad-pkg $BLD" >>"$T/bad-builds"
  submit '{"name": "bad-run", "run": ["echo first-ok", "echo about-to-fail; echo oops-on-stderr >&2; exit 3", "echo never-run"]}'
  check bad_build.run_submit_202 "$(snip)" test "$ST" = 202
  echo "bad-run $BLD" >>"$T/bad-builds"
  submit '{"name": "bad-ready", "start": "echo start-said-this; sleep 600", "ready": {"port": 9, "timeout_s": 3}}'
  check bad_build.ready_submit_202 "$(snip)" test "$ST" = 202
  echo "bad-ready $BLD" >>"$T/bad-builds"
}

s_bad_builds() {
  local name b
  while read -r name b; do
    [ -n "$b" ] || continue
    wait_build "$name" "$b" 300
    check "bad_build.$name.failed" "$(snip)" test "$BST" = failed
    case $name in
      bad-pkg)
        check bad_build.pkg.step_exit_message "$(j -c .error)" jt '.error.step == "packages" and .error.exit_code == 100
          and .error.code == "invalid_request" and (.error.message | test("^packages exited with 100"))
          and (.error.output_tail | test("Unable to locate package b3os-no-such-package"))'
        check bad_build.pkg.steps "$(j -c .steps)" jt '[.steps[] | [.name, .exit_code]] | .[-1] == ["packages", 100]' ;;
      bad-run)
        check bad_build.run.step_exit_output "$(j -c .error)" jt '.error.step == "run[1]" and .error.exit_code == 3
          and (.error.message | test("^run\\[1\\] exited with 3"))
          and (.error.output_tail | test("about-to-fail")) and (.error.output_tail | test("oops-on-stderr"))'
        check bad_build.run.steps "$(j -c .steps)" jt '[.steps[] | select(.name | startswith("run")) | [.name, .exit_code]] == [["run[0]", 0], ["run[1]", 3]]'
        check bad_build.run.later_steps_not_run "log: $(blog "$b" | tail -n 3 | tr '\n' ' ')" not has_line "$(blog "$b")" never-run ;;
      bad-ready)
        check bad_build.ready.step_message "$(j -c .error)" jt '.error.step == "ready" and (.error.message | test("^ready: no port 9 listening within 3 s"))
          and (.error.message | test("start-said-this"))' ;;
    esac
    api GET "/v1/templates/$name"
    check "bad_build.$name.template_failed_no_version" "$(snip)" okj 200 '.status == "failed" and .version == null and .ready_build_id == null'
    create_sandbox "$(jq -nc --arg t "$name" '{template: $t}')"
    expect_error "bad_build.$name.create_409" 409 conflict
    submit "$(jq -nc --arg t "$name" '{name: "from-failed", from: $t}')"
    expect_error "bad_build.$name.build_from_400" 400 invalid_request from
  done <"$T/bad-builds"
}

# Image tarballs: not images (refused at once: b3osd reads an image's metadata before it
# answers), and each hostile variant of make_image.py aimed at $ESCAPE (their layers fail the
# build at its import step).
NOT_IMAGES="not-image plain-tar bad-json big-json missing-blob multi-image"
# gz-plain-tar and zst-bomb are archives compressed whole: their metadata lies behind all
# their bytes, so the request leaves it to the build (202 at once) and the build fails.
HOSTILE_KINDS="dotdot symlink-escape symlink-relative hardlink-escape whiteout-symlink device setuid bomb big-layer bad-digest gz-plain-tar zst-bomb"
# Images that import well but hold symlinks where a root is prepared (s_root_links).
ROOT_LINK_IMAGES="root-links root-link-etc"
make_hostile_images() {
  local k
  for k in $NOT_IMAGES $HOSTILE_KINDS $ROOT_LINK_IMAGES; do
    case $k in
      bomb) python3 "$MAKE_IMAGE" "$T/images/$k.tar" --hostile bomb --bomb-mb 1300 --target "$ESCAPE" ;;
      big-layer)
        # One layer holding a sparse file of 5 GiB: 5 GiB counted, past the 4 GiB limit of a
        # layer, though it costs no disk (tar --sparse keeps only the map of its holes).
        mkdir -p "$T/work/sparse"
        truncate -s 5G "$T/work/sparse/huge"
        tar -C "$T/work/sparse" --sparse --format=pax -cf "$T/work/sparse.tar" huge
        python3 "$MAKE_IMAGE" "$T/images/$k.tar" --layer-tar "$T/work/sparse.tar" --target "$ESCAPE"
        rm -rf "$T/work/sparse" ;;
      gz-plain-tar)
        python3 "$MAKE_IMAGE" "$T/work/plain.tar" --hostile plain-tar --target "$ESCAPE"
        gzip -1 -c "$T/work/plain.tar" >"$T/images/$k.tar"
        rm -f "$T/work/plain.tar" ;;
      zst-bomb)
        # 1.1 GiB of zeros in one member, about 40 KiB compressed: past what a 1 GiB build may
        # decompress, refused at the member's header. Sparse on disk, so tar reads no disk.
        mkdir -p "$T/work/zeros"
        truncate -s 1100M "$T/work/zeros/zeros"
        tar -C "$T/work/zeros" -cf - zeros | zstd -q -1 -c >"$T/images/$k.tar"
        rm -rf "$T/work/zeros" ;;
      *) python3 "$MAKE_IMAGE" "$T/images/$k.tar" --hostile "$k" --target "$ESCAPE" ;;
    esac
  done
}

s_images_not_images() {
  local k
  for k in $NOT_IMAGES; do
    KEY=$HOSTILE submit "$(jq -nc --arg k "$k" --arg p "$T/images/$k.tar" '{name: ("img-" + $k), image: {path: $p}}')"
    expect_error "image_bad.$k.400_at_once" 400 invalid_request "image.path: image: "
    KEY=$HOSTILE api GET "/v1/templates/img-$k"
    expect_error "image_bad.$k.nothing_made" 404 template_not_found
  done
  # The same through an upload.
  KEY=$HOSTILE api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/images/plain-tar.tar"
  check image_bad.upload_201 "$(snip)" okj 201 '.object == "template_upload"'
  KEY=$HOSTILE submit "$(jq -nc --arg u "$(j .id)" '{name: "img-upload-plain-tar", image: {upload: $u}}')"
  expect_error image_bad.upload_not_image_400 400 invalid_request "image.upload: image: "
}

s_images_hostile_submit() {
  local k
  : >"$T/hostile-builds"
  for k in $HOSTILE_KINDS; do
    # A build's size limit (its disk, 1 GiB here) bounds an image too; big-layer meets the
    # importer's own limit of a layer (4 GiB) under the default 8 GiB.
    local lim='{disk_gib: 1}'
    [ "$k" != big-layer ] || lim='{}'
    KEY=$HOSTILE submit "$(jq -nc --arg k "$k" --arg p "$T/images/$k.tar" "{name: (\"img-\" + \$k), image: {path: \$p}, build: $lim}")"
    check "image_bad.$k.submit_202" "$(snip)" test "$ST" = 202
    echo "$k $BLD" >>"$T/hostile-builds"
  done
}

s_images_hostile() {
  local k b want
  while read -r k b; do
    [ -n "$b" ] || continue
    KEY=$HOSTILE wait_build "img-$k" "$b" 300
    check "image_bad.$k.failed" "$(snip)" test "$BST" = failed
    case $k in
      dotdot) want='\.\.' ;;
      symlink-escape | symlink-relative | whiteout-symlink) want='symlink' ;;
      hardlink-escape) want='\.\.|link' ;;
      device) want='device' ;;
      setuid) want='setuid|setgid' ;;
      bomb) want='larger than 1073741824 bytes uncompressed' ;;
      big-layer) want='larger than 4294967296 bytes uncompressed' ;;
      bad-digest) want='digest|diff_id|sha256' ;;
      gz-plain-tar) want='manifest' ;;
      zst-bomb) want='decompresses to more than' ;;
    esac
    check "image_bad.$k.error_names_it" "$(j -c .error)" jt --arg w "$want" '.error.step == "import" and .error.code == "invalid_request"
      and (.error.message | startswith("image: ")) and (.error.message | test($w))'
    check "image_bad.$k.message_says_image_once" "$(j -r .error.message | head -c 120)" jt '.error.message | startswith("image: image:") | not'
    check "image_bad.$k.escape_target_untouched" "$(diff <(escape_state) "$T/escape.before" | head -n 5 | tr '\n' ' ')" \
      cmp -s <(escape_state) "$T/escape.before"
  done <"$T/hostile-builds"
}

# Roots whose symlinks aim at the host where b3osd prepares a root (workspace and tmp made
# 1777, mount points made, etc/resolv.conf created): two images (an import alone, and an
# import with a step, which goes through the build's disk), and a from: chain whose first
# template's step replaces /workspace with a symlink to a host file and whose second copies
# that root and runs a step. Whether each build ends ready or failed, nothing under $ESCAPE
# changes mode, owner or content (before image::TenantRoot, the file became 1777).
s_root_links_submit() {
  local k
  : >"$T/root-link-builds"
  for k in $ROOT_LINK_IMAGES; do
    KEY=$LINKS submit "$(jq -nc --arg k "$k" --arg p "$T/images/$k.tar" '{name: ("links-" + $k), image: {path: $p}, build: {disk_gib: 1}}')"
    check "root_links.$k.submit_202" "$(snip)" test "$ST" = 202
    echo "links-$k $BLD" >>"$T/root-link-builds"
    KEY=$LINKS submit "$(jq -nc --arg k "$k" --arg p "$T/images/$k.tar" '{name: ("links-step-" + $k), image: {path: $p},
      run: ["true"], build: {disk_gib: 1}}')"
    check "root_links.$k.step_submit_202" "$(snip)" test "$ST" = 202
    echo "links-step-$k $BLD" >>"$T/root-link-builds"
  done
  KEY=$LINKS submit "$(jq -nc --arg f "$ESCAPE/file" '{name: "links-chain-a", from: "base",
    run: [("rm -rf /workspace && ln -s " + $f + " /workspace")]}')"
  check root_links.chain_a_submit_202 "$(snip)" test "$ST" = 202
  echo "$BLD" >"$T/root-link-chain-a"
}

s_root_links() {
  local name b
  KEY=$LINKS wait_build links-chain-a "$(cat "$T/root-link-chain-a")" 300
  check root_links.chain_a_ready "$(snip)" test "$BST" = ready
  KEY=$LINKS submit '{"name": "links-chain-b", "from": "links-chain-a", "run": ["true"]}'
  check root_links.chain_b_submit_202 "$(snip)" test "$ST" = 202
  echo "links-chain-b $BLD" >>"$T/root-link-builds"
  while read -r name b; do
    [ -n "$b" ] || continue
    KEY=$LINKS wait_build "$name" "$b" 300
    info "root_links: $name ended $BST $(j -c '.error // empty' | head -c 200)"
    check "root_links.$name.ended" "$(snip)" test "$BST" = ready -o "$BST" = failed
  done <"$T/root-link-builds"
  check root_links.escape_target_untouched "$(diff <(escape_state) "$T/escape.before" | awk 'NR <= 5' | tr '\n' ' ')" \
    cmp -s <(escape_state) "$T/escape.before"
}

# A step's result is its project's: two projects' identical specs get roots of their own (a
# secret a step generates differs), and two builds of one spec at once in one project both end
# ready on one root that neither removes under the other.
SECRET_SPEC='"run": ["head -c 16 /dev/urandom | od -An -tx1 | tr -d \" \\\\n\" > /etc/b3os-secret"]'
s_roots_per_project_submit() {
  local k n who
  : >"$T/twin-builds"
  for k in "TWIN keys-a" "TWIN keys-b" "LINKS keys-a"; do
    n=${k#* }
    who=${k%% *}
    KEY=${!who} submit "{\"name\": \"$n\", \"from\": \"base\", $SECRET_SPEC}"
    check "roots.$who.$n.submit_202" "$(snip)" test "$ST" = 202
    echo "$who $n $BLD" >>"$T/twin-builds"
  done
}
s_roots_per_project() {
  local who n b secret
  declare -A secrets=()
  while read -r who n b; do
    KEY=${!who} wait_build "$n" "$b" 300
    check "roots.$who.$n.ready" "$(snip)" okj 200 '.status == "ready" and .reused_from == null'
    KEY=${!who} create_sandbox "{\"template\": \"$n\"}"
    KEY=${!who} inside "$CID" 'cat /etc/b3os-secret'
    secrets[$who.$n]=$OUT
    check "roots.$who.$n.runs" "$(snip)" test -n "$OUT"
    KEY=${!who} delete_sandbox "$CID" || true
  done <"$T/twin-builds"
  check roots.other_project_has_its_own "twin ${secrets[TWIN.keys-a]:-?}, links ${secrets[LINKS.keys-a]:-?}" \
    test -n "${secrets[TWIN.keys-a]:-}" -a "${secrets[TWIN.keys-a]:-}" != "${secrets[LINKS.keys-a]:-}"
  check roots.twins_in_one_project_share "keys-a ${secrets[TWIN.keys-a]:-?}, keys-b ${secrets[TWIN.keys-b]:-?}" \
    test -n "${secrets[TWIN.keys-b]:-}" -a "${secrets[TWIN.keys-a]:-}" = "${secrets[TWIN.keys-b]:-}"
}

# step_root_of BUILD: where a build with steps keeps its root (a- and the first 24 hex of the
# SHA-256 of its project and content hash), from the store, whether or not it got that far.
step_root_of() {
  local a
  a=$(python3 -c 'import hashlib, sqlite3, sys
r = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute("SELECT project_id, content_hash FROM template_builds WHERE id = ?", (sys.argv[2],)).fetchone()
print("a-" + hashlib.sha256((r[0] + "\n" + r[1]).encode()).hexdigest()[:24] if r else "")' "$T/data/b3os.db" "$1" 2>/dev/null || true)
  echo "$T/data/template-roots/${a:-no-build-$1}"
}

s_no_stray_after_failures() {
  check_no_stray leaks.after_failed_builds 30
  # No root or checkpoint of a failed build: neither under its id nor under its content's name.
  local name b left=""
  while read -r name b; do
    [ -n "$b" ] || continue
    for f in "$T/data/template-images/$b" "$T/data/template-images/$b-net" \
      "$T/data/template-roots/a-$(jq -r '.content_hash[0:24]' "$T/logs/$b.json")" "$(step_root_of "$b")"; do
      [ ! -e "$f" ] || left+="$f "
    done
  done < <(cat "$T/bad-builds" "$T/hostile-builds")
  check leaks.no_files_of_failed_builds "left: $left" test -z "$left"
}

# ---- 7. image import ---------------------------------------------------------------------------

# A docker save of base's own root (set-uid bits cleared: this b3osd refuses them), with
# /srv/img holding a page, and a config with Env, WorkingDir and Cmd.
make_good_images() {
  local r=$T/work/imgroot
  rm -rf "$r"
  cp -a "$TEMPLATES/base/rootfs" "$r"
  find "$r" -xdev -type f -perm /6000 -exec chmod ug-s {} +
  mkdir -p "$r/srv/img"
  echo "served from the image" >"$r/srv/img/index.txt"
  python3 "$MAKE_IMAGE" "$T/work/docker.tar" --layer "$r" --format docker \
    --env IMG_ENV=from-image --env 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --workdir /srv/img --cmd '["python3", "-m", "http.server", "8000"]' 2>"$T/work/docker.err"
  rm -rf "$r"
  # A small OCI layout: dash, cat and what they load, from base, and a page.
  local o=$T/work/ociroot f lib
  rm -rf "$o"
  mkdir -p "$o/usr/bin" "$o/usr/lib/x86_64-linux-gnu" "$o/usr/lib64" "$o/etc" "$o/srv/oci"
  ln -s usr/bin "$o/bin"
  ln -s usr/lib "$o/lib"
  ln -s usr/lib64 "$o/lib64"
  for f in dash cat; do cp -a "$TEMPLATES/base/rootfs/usr/bin/$f" "$o/usr/bin/"; done
  ln -s dash "$o/usr/bin/sh"
  for lib in $(for f in dash cat; do readelf -d "$o/usr/bin/$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u); do
    cp -aL "$TEMPLATES/base/rootfs/usr/lib/x86_64-linux-gnu/$lib" "$o/usr/lib/x86_64-linux-gnu/"
  done
  f=$(readelf -l "$o/usr/bin/dash" | sed -n 's/.*program interpreter: \(.*\)\]/\1/p')
  mkdir -p "$o/usr$(dirname "${f#/usr}")"
  cp -aL "$TEMPLATES/base/rootfs$f" "$o/usr${f#/usr}"
  cp -a "$TEMPLATES/base/rootfs/etc/passwd" "$TEMPLATES/base/rootfs/etc/group" "$o/etc/"
  echo "oci layout ok" >"$o/srv/oci/hello"
  python3 "$MAKE_IMAGE" "$T/work/oci.tar" --layer "$o" --format oci --compress gzip \
    --env OCI_ENV=from-oci --env 'PATH=/usr/bin:/bin' --workdir /srv/oci
  rm -rf "$o"
}

s_images_good() {
  local up_d up_o id b
  api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/work/docker.tar"
  check image.docker_upload_201 "$(snip)" okj 201 --argjson n "$(stat -c %s "$T/work/docker.tar")" '.size_bytes == $n'
  up_d=$(j .id)
  api POST /v1/templates/uploads -H 'Content-Type: application/octet-stream' --data-binary "@$T/work/oci.tar"
  check image.oci_upload_201 "$(snip)" okj 201 --argjson n "$(stat -c %s "$T/work/oci.tar")" '.size_bytes == $n'
  up_o=$(j .id)
  info "images: docker save $(($(stat -c %s "$T/work/docker.tar") / 1048576)) MiB, OCI layout $(($(stat -c %s "$T/work/oci.tar") / 1024)) KiB"
  submit "$(jq -nc --arg u "$up_d" '{name: "img-docker", image: {upload: $u}, start: true, ready: {port: 8000, timeout_s: 30}}')"
  check image.docker_submit_202 "$(snip)" okj 202 '.build.status == "queued"'
  local bd=$BLD
  submit "$(jq -nc --arg u "$up_o" '{name: "img-oci", image: {upload: $u}}')"
  check image.oci_submit_202 "$(snip)" okj 202 '.build.status == "queued"'
  local bo=$BLD
  wait_build img-docker "$bd"
  info "img-docker: $(build_took)"
  check image.docker_ready "$(snip) log: $(blog "$bd" | tail -n 4 | tr '\n' ' ')" test "$BST" = ready
  check image.docker_steps "$(j -c '[.steps[] | [.name, .exit_code]]')" jt '[.steps[].name] as $n | $n[0] == "import"
    and ($n | index("checkpoint")) != null and ($n | index("checkpoint (network)")) != null and all(.steps[]; .exit_code == 0)'
  check image.docker_log "$(blog "$bd" | head -n 5 | tr '\n' ' ')" has_line "$(blog "$bd")" "docker-save, 1 layers"
  api GET /v1/templates/img-docker
  check image.docker_defaults "$(snip)" okj 200 --arg s "'python3' '-m' 'http.server' '8000'" '.source.kind == "image"
    and .defaults.workdir == "/srv/img" and .defaults.env.IMG_ENV == "from-image" and .defaults.start == $s
    and .checkpoint.status == "ready"'
  create_sandbox '{"template": "img-docker"}'
  check image.docker_create_201 "$(snip)" okj 201 '.template.name == "img-docker" and .env.IMG_ENV == "from-image"'
  id=$CID
  inside "$id" 'curl -sS -m 5 http://127.0.0.1:8000/index.txt; pwd; echo "$IMG_ENV"; python3 -c "print(6*7)"'
  check image.docker_runs_cmd_env_workdir "$(snip)" jt '.exit_code == 0 and .stdout == "served from the image\n/srv/img\nfrom-image\n42\n"'
  delete_sandbox "$id" || true

  wait_build img-oci "$bo"
  info "img-oci: $(build_took)"
  check image.oci_ready "$(snip) log: $(blog "$bo" | tail -n 4 | tr '\n' ' ')" test "$BST" = ready
  check image.oci_log "$(blog "$bo" | head -n 5 | tr '\n' ' ')" has_line "$(blog "$bo")" "oci-layout, 1 layers"
  create_sandbox '{"template": "img-oci"}'
  check image.oci_create_201 "$(snip)" okj 201 '.template.name == "img-oci" and .env.OCI_ENV == "from-oci"'
  id=$CID
  inside "$id" 'cat /srv/oci/hello; pwd; echo "$OCI_ENV"'
  check image.oci_runs_commands_env_workdir "$(snip)" jt '.exit_code == 0 and .stdout == "oci layout ok\n/srv/oci\nfrom-oci\n"'
  run_exec "$id" '{"cmd": ["/usr/bin/cat", "/etc/passwd"]}'
  check image.oci_runs_argv "$(snip)" jt '.exit_code == 0 and (.stdout | startswith("root:"))'
  delete_sandbox "$id" || true
  # start: true with an image that has neither entrypoint nor cmd: refused, naming start (at
  # once, or as the build's error).
  submit "$(jq -nc --arg u "$up_o" '{name: "img-oci-start", image: {upload: $u}, start: true}')"
  if [ "$ST" = 202 ]; then
    wait_build img-oci-start "$BLD" 120
    check image.start_true_without_cmd_refused "$(snip)" jt '.status == "failed" and (.error.message | test("^start: "))'
  else
    expect_error image.start_true_without_cmd_refused 400 invalid_request start
  fi
  # Uploads: the same bytes again are the same upload; a project holds 4 no build has read
  # (those builds read make room), a fifth is refused.
  api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/ctx.tar"
  check upload.same_bytes_same_id "$(snip)" okj 201 --arg u "$(get ctx)" '.id == $u'
  local i ok=0
  for i in 1 2 3 4 5; do
    head -c 4096 /dev/urandom >"$T/work/unread-$i.tar"
    api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/work/unread-$i.tar"
    [ "$i" = 5 ] || { [ "$ST" = 201 ] && ok=$((ok + 1)); }
  done
  check upload.four_unread_201 "$ok of 4" test "$ok" = 4
  expect_error upload.fifth_unread_429 429 concurrency_limited
}

# root_of BUILD: the directory of a build's root on this node, as the store records it (a step
# build's root is named by its project and content, an import's by its content alone).
root_of() {
  local a
  a=$(python3 -c 'import sqlite3, sys
r = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute("SELECT artifact FROM template_builds WHERE id = ?", (sys.argv[2],)).fetchone()
print(r[0] if r else "")' "$T/data/b3os.db" "$1" 2>/dev/null || true)
  echo "$T/data/template-roots/${a:-no-root-recorded-for-$1}"
}

# ---- 8. delete ------------------------------------------------------------------------------------

s_delete() {
  local v1 v2 a1 a2 s1 s2 src snp
  v1=$(get web_v1)
  v2=$(get web_v2)
  a1=$(root_of "$v1")
  a2=$(root_of "$v2")
  check delete.roots_exist "$a1 $a2" test -d "$a1/rootfs" -a -d "$a2/rootfs"
  s1=$(get sbx_v1)
  s2=$(get sbx_v2)
  src=$(get sbx_forksrc)
  snp=$(get snapshot)
  api DELETE /v1/templates/web
  expect_error delete.in_use_409 409 conflict
  api GET /v1/templates/web
  check delete.in_use_kept "$(snip)" okj 200 '.status == "ready"'
  api DELETE '/v1/templates/web?force=true'
  check delete.force_200 "$(snip)" okj 200 --arg t "$(get web_tpl)" '.id == $t and .deleted == true and .name == "web"'
  api GET /v1/templates/web
  expect_error delete.gone_from_api 404 template_not_found
  create_sandbox '{"template": "web"}'
  expect_error delete.create_from_deleted_404 404 template_not_found
  inside "$s1" 'cat /srv/app/hello.txt; echo; curl -sS -m 5 http://127.0.0.1:8000/hello.txt; echo; pwd'
  check delete.sandbox_keeps_running "$(snip)" jt '.exit_code == 0 and .stdout == "inline text v1\ninline text v1\n/srv/app\n"'
  check delete.files_kept_while_used "$a1 $a2" test -d "$a1/rootfs" -a -d "$a2/rootfs"
  local id
  for id in "$s1" "$s2" "$src" $(KEY=$ADMIN live_ids); do
    api GET "/v1/sandboxes/$id"
    [ "$(j .template.name)" = web ] || continue
    delete_sandbox "$id" || fail delete.sandbox "$(snip)"
  done
  # The snapshot uses v1's root too.
  api DELETE "/v1/snapshots/$snp"
  check delete.snapshot_200 "$(snip)" test "$ST" = 200
  local t0
  t0=$(now_ms)
  eventually 30 bash -c "[ ! -e '$a1' ] && [ ! -e '$a2' ]" || true
  check delete.files_gone_after_sandboxes "still there after 30 s: $(find "$a1" "$a2" -maxdepth 0 2>/dev/null | tr '\n' ' ')" \
    bash -c "[ ! -e '$a1' ] && [ ! -e '$a2' ]"
  info "web's roots removed $(($(now_ms) - t0)) ms after its last user went"
  check delete.no_checkpoints_left "$(find "$T/data/template-images" -maxdepth 1 -name "$v1*" -o -maxdepth 1 -name "$v2*" | tr '\n' ' ')" \
    test -z "$(find "$T/data/template-images" -maxdepth 1 \( -name "$v1*" -o -name "$v2*" \))"
  api DELETE /v1/templates/base
  expect_error delete.base_403 403 forbidden
  api GET /v1/templates/base
  check delete.base_still_there "$(snip)" okj 200 '.name == "base"'
}

# ---- 9. b3osd killed during a build ------------------------------------------------------------

s_killed_mid_build() {
  local b before after id sbx
  # A sandbox of an image template, to see it after the restart with its defaults and process.
  create_sandbox '{"template": "img-docker"}'
  check killed.sandbox_before_201 "$(snip)" test "$ST" = 201
  sbx=$CID
  before=$(runsc_list | sort)
  submit '{"name": "killed", "run": ["echo killed-build-started; sleep 600"]}'
  check killed.submit_202 "$(snip)" test "$ST" = 202
  b=$BLD
  eventually 120 bash -c "curl -s -H 'Authorization: Bearer $KEY' '$URL/v1/templates/killed/builds/$b/logs' | grep -q killed-build-started" || true
  api GET "/v1/templates/killed/builds/$b"
  check killed.building "$(snip)" okj 200 '.status == "building"'
  api DELETE /v1/templates/killed
  expect_error killed.delete_while_building_409 409 conflict
  after=$(runsc_list | sort)
  id=$(comm -13 <(echo "$before") <(echo "$after") | head -n1)
  check killed.build_container_seen "runsc list before: $before, after: $after" test -n "$id"
  check killed.build_disk_mounted "$(grep -c "$T/" /proc/mounts) mounts under $T" bash -c "grep -q '$id' /proc/mounts"
  stop_daemon KILL
  start_daemon || die "b3osd did not start again after SIGKILL; see $T/daemon.log"
  api GET "/v1/templates/killed/builds/$b"
  check killed.failed_after_restart "$(snip)" okj 200 '.status == "failed" and (.error.message | test("b3osd stopped during the build"))'
  inside "$sbx" 'pwd; echo "$IMG_ENV"; curl -sS -m 5 http://127.0.0.1:8000/index.txt'
  check killed.template_sandbox_survives_restart "$(snip)" jt '.exit_code == 0 and .stdout == "/srv/img\nfrom-image\nserved from the image\n"'
  api GET /v1/templates/killed
  check killed.template_failed "$(snip)" okj 200 '.status == "failed"'
  eventually 30 bash -c "! runsc --root '$T/run/runsc' list --quiet 2>/dev/null | grep -qx '$id'" || true
  check killed.container_swept "runsc list: $(runsc_list | tr '\n' ' ')" not runsc_has "$id"
  eventually 20 bash -c "! grep -q '$id' /proc/mounts" || true
  check killed.disk_unmounted "$(grep "$id" /proc/mounts | head -n 2)" not grep -q "$id" /proc/mounts
  check killed.loop_released "$(losetup -l -n -O NAME,BACK-FILE | grep "$id")" bash -c "! losetup -l -n -O NAME,BACK-FILE | grep -q '$id'"
  check killed.no_cgroup "$(cgroup_dirs "$id")" no_cgroup "$id"
  check killed.no_building_dirs "$(find "$T/data" -maxdepth 3 -name '*.building')" test -z "$(find "$T/data" -maxdepth 3 -name '*.building')"
  check_no_stray killed.nothing_left 30
  api DELETE /v1/templates/killed
  check killed.delete_after "$(snip)" test "$ST" = 200
}

# ---- 9. what a project may keep -------------------------------------------------------------------

# Ready roots stay on the node's disk: past --template-max-gib-per-project a project's new build
# is 429 quota_exceeded (a spec built before is reused, adds nothing and is not refused; another
# project is not affected); with no more than --disk-reserve-gib free, builds and uploads are 503.
# A refusal makes no template, build or upload.
s_quotas() {
  local held
  submit '{"name": "q-small", "env": {"Q": "1"}}'
  check quota.small_202 "$(snip)" test "$ST" = 202
  wait_build q-small "$BLD" 300
  check quota.small_ready "$(snip)" test "$BST" = ready
  api GET /v1/templates
  held=$(j '[.data[] | select((.public | not) and (.id | startswith("tpl_"))) | .size_bytes // 0] | add // 0')
  if [ "$held" -lt $((1 << 20)) ]; then
    skip quota.bytes "this project's templates hold $held bytes, under the smallest limit (1 MiB)"
  else
    restart_with --template-max-gib-per-project 0.001
    submit '{"name": "q-new", "env": {"Q": "2"}}'
    expect_error quota.bytes_429 429 quota_exceeded "--template-max-gib-per-project"
    api GET /v1/templates/q-new
    expect_error quota.bytes_made_nothing 404 template_not_found
    submit '{"name": "q-small", "env": {"Q": "1"}}'
    check quota.reuse_not_refused "$(snip)" okj 202 '.build.status == "ready"'
    KEY=$OTHER submit '{"name": "q-other", "env": {"Q": "3"}}'
    check quota.other_project_202 "$(snip)" test "$ST" = 202
    KEY=$OTHER wait_build q-other "$BLD" 300
    check quota.other_project_ready "$(snip)" test "$BST" = ready
    KEY=$OTHER api DELETE /v1/templates/q-other
  fi
  restart_with --disk-reserve-gib 1000000
  local uploads_before
  uploads_before=$(ls "$T/data/template-uploads" 2>/dev/null | sort | tr '\n' ' ')
  submit '{"name": "q-new", "env": {"Q": "2"}}'
  expect_error quota.reserve_build_503 503 capacity_unavailable "--disk-reserve-gib"
  check quota.reserve_retry_after "Retry-After: '$(header Retry-After)'" test -n "$(header Retry-After)"
  api GET /v1/templates/q-new
  expect_error quota.reserve_made_nothing 404 template_not_found
  # (The other project: this one holds its 4 uploads, which are refused first.)
  printf 'x' >"$T/q.tar"
  KEY=$OTHER api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/q.tar"
  expect_error quota.reserve_upload_503 503 capacity_unavailable "--disk-reserve-gib"
  check quota.reserve_no_upload_file "uploads: $(ls "$T/data/template-uploads" 2>/dev/null | tr '\n' ' '), before: $uploads_before" \
    test "$(ls "$T/data/template-uploads" 2>/dev/null | sort | tr '\n' ' ')" = "$uploads_before"
  restart_with
  api DELETE /v1/templates/q-small
  check quota.cleanup "$(snip)" test "$ST" = 200
}

# A project runs one build at a time, and another project's build is not held behind its long
# ones (two builds of `sleep` held another project's one-line build queued for 104 s); a build
# can be cancelled, queued or running; a spec cannot ask more time than the operator allows.
s_build_fairness() {
  KEY=$TWIN submit '{"name": "long-a", "run": ["sleep 300"], "build": {"timeout_s": 600}}'
  local a1=$BLD t1=$TPL
  KEY=$TWIN submit '{"name": "long-b", "run": ["sleep 300"]}'
  local a2=$BLD t2=$TPL
  KEY=$OTHER submit '{"name": "quick-other", "run": ["echo quick"]}'
  local o=$BLD to=$TPL
  check fair.submitted "$a1 $a2 $o" test -n "$a1" -a -n "$a2" -a -n "$o"
  KEY=$OTHER wait_build "$to" "$o" 180
  check fair.other_project_not_held "$(snip)" test "$BST" = ready
  KEY=$TWIN api GET "/v1/templates/$t1/builds/$a1"
  check fair.first_runs "$(snip)" okj 200 '.status == "building"'
  KEY=$TWIN api GET "/v1/templates/$t2/builds/$a2"
  check fair.one_build_per_project "$(snip)" okj 200 '.status == "queued"'
  # Cancel: a queued build fails at once; a running one has its step killed.
  KEY=$TWIN api POST "/v1/templates/$t2/builds/$a2/cancel"
  check cancel.queued_200 "$(snip)" okj 200 '.status == "failed" and .error.cancelled == true and .error.code == "conflict"'
  KEY=$OTHER api POST "/v1/templates/$t1/builds/$a1/cancel"
  check cancel.other_project_404 "$(snip)" test "$ST" = 404
  KEY=$TWIN api POST "/v1/templates/$t1/builds/$a1/cancel"
  check cancel.running_202 "$(snip)" okj 202 '.cancelling == true and .status == "building"'
  KEY=$TWIN wait_build "$t1" "$a1" 60
  check cancel.running_failed "$(snip)" okj 200 '.status == "failed" and .error.cancelled == true and .error.step == "run[0]"'
  check cancel.running_ended_soon "$(build_took)" jt '((.finished_at | sub("\\.[0-9]+Z$"; "Z") | fromdate) - (.started_at | sub("\\.[0-9]+Z$"; "Z") | fromdate)) < 120'
  KEY=$TWIN api POST "/v1/templates/$t1/builds/$a1/cancel"
  expect_error cancel.ended_409 409 conflict "failed already"
  local rc
  B3OS_API_URL=$URL B3OS_API_KEY=$TWIN "$B3OS_BIN/b3os" templates cancel long-a "$a1" >"$T/cancel.cli" 2>&1 && rc=0 || rc=$?
  check cancel.cli_says_it_ended "exit $rc: $(head -c 200 "$T/cancel.cli")" \
    sh -c "[ $rc != 0 ] && grep -q 'failed already' '$T/cancel.cli'"
  # The operator's bound on a build's time (--template-build-max-timeout, 1800 s by default).
  KEY=$TWIN submit '{"name": "too-long", "build": {"timeout_s": 3600}}'
  expect_error build.timeout_past_max_400 400 invalid_request build.timeout_s
}

# ---- run ---------------------------------------------------------------------------------------

# Images first (the sandbox steps wait on builds anyway), then builds queued in an order that
# keeps both build workers busy: the full build, the failures, the hostile images.
t_images=$(now_ms)
make_hostile_images 2>"$T/work/hostile.err" || die "make_image.py failed: $(tail -n 3 "$T/work/hostile.err")"
info "hostile images made in $(($(now_ms) - t_images)) ms"
run_section s_build_submit
run_section s_images_hostile_submit
run_section s_root_links_submit
run_section s_roots_per_project_submit
run_section s_images_not_images
run_section s_bad_builds_submit
run_section s_bad_specs
t_images=$(now_ms)
make_good_images || die "could not make the good images"
info "good images made in $(($(now_ms) - t_images)) ms"
run_section s_build_full
run_section s_sandboxes
run_section s_fork_snapshot
run_section s_bad_builds
run_section s_images_hostile
run_section s_root_links
run_section s_roots_per_project
run_section s_no_stray_after_failures
run_section s_versions
run_section s_projects
run_section s_images_good
run_section s_delete
run_section s_killed_mid_build
run_section s_quotas
run_section s_build_fairness
# from: debian:bookworm makes a fresh minbase with mmdebstrap from a Debian mirror, which no
# test may reach (docs/templates.md, "How it is tested").
skip templates.from_debian_bookworm "needs a Debian mirror for mmdebstrap; tests reach none (built by hand, docs/templates.md)"

check_responses

P=$(count_results PASS)
F=$(count_results FAIL)
S=$(count_results SKIP)
ELAPSED=$(($(now_ms) - SUITE_START))
info "an unchanged rebuild was ready in $(cat "$T/rebuild.secs" 2>/dev/null || echo '?') s"
echo "passed $P, failed $F, skipped $S in $((ELAPSED / 1000)) s"
[ "$F" = 0 ] || exit 1

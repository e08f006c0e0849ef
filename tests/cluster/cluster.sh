#!/usr/bin/env bash
# The cluster on one machine (docs/cluster.md): a Postgres 15 of its own (tests/store/
# postgres.sh, a unix socket only), three b3osd nodes (each its own data, run and runsc
# directories and ports, on the one shared store, each with an internal listener that takes
# only requests signed with the cluster secret) and two b3os-routers. Checks what only a
# cluster has: the internal port refuses what is not signed, creates spread over the nodes,
# every sandbox is reached through either router, a fork stays on its source's node, a
# restore goes where its image is, two routers racing one Idempotency-Key create one sandbox,
# the spend cap of a key is one across nodes, a node killed is marked down within 10 s (its
# sandboxes failed, creates go to the others) and its restart sweeps what it left, a router
# killed mid-stream leaves the other serving. Then the e2e suite, the MCP suite and both
# cookbook recipes (all four tabs), each through a router in front of a b3osd on Postgres.
#
# Usage (as root, base template built): B3OS_BIN=build/bin tests/cluster/cluster.sh
# shellcheck disable=SC2016
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
# shellcheck source=tests/store/postgres.sh
. "$ROOT/tests/store/postgres.sh"

B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
[ -x "$B3OS_BIN/b3os-router" ] || { echo "cluster: $B3OS_BIN/b3os-router not found" >&2; exit 1; }
e2e_begin cluster psql

NODES=(a b c)
declare -A NODE_PID NODE_URL NODE_PORT
ROUTER_PIDS=()
ROUTERS=()

# ---- set-up and clean-up ---------------------------------------------------------------------

# A node's leftovers, as cleanup_everything does for the e2e suites' one daemon.
cleanup_node() {
  local d=$T/node-$1 id pid m
  for id in $(runsc --root "$d/run/runsc" list --quiet 2>/dev/null || true); do
    thaw "$id"
    runsc --root "$d/run/runsc" kill --all "$id" KILL >/dev/null 2>&1 || true
    runsc --root "$d/run/runsc" delete --force "$id" >/dev/null 2>&1 || true
  done
  for pid in $(pgrep -f "b3os-shim $d/" 2>/dev/null || true); do kill "$pid" 2>/dev/null || true; done
  for m in $(awk -v p="$d/data/disks/" 'index($2, p) == 1 {print $2}' /proc/mounts 2>/dev/null); do
    umount -l "$m" 2>/dev/null || true
  done
}

finish() {
  local rc=$? n p
  set +e
  trap - EXIT
  for p in ${ROUTER_PIDS[@]+"${ROUTER_PIDS[@]}"}; do kill -KILL "$p" 2>/dev/null; done
  for n in "${NODES[@]}"; do
    [ -z "${NODE_PID[$n]:-}" ] || kill -KILL "${NODE_PID[$n]}" 2>/dev/null
  done
  sleep 0.5
  for n in "${NODES[@]}"; do cleanup_node "$n"; done
  if [ -f "$T/ids" ]; then
    while read -r id; do
      [ -n "$id" ] || continue
      for d in $(cgroup_dirs "$id"); do rmdir "$d" 2>/dev/null || true; done
    done <"$T/ids"
  fi
  pg_stop
  if [ "$rc" != 0 ] || [ "$(count_results FAIL)" != 0 ]; then
    for n in "${NODES[@]}"; do
      echo "# ---- last 15 lines of node $n's log ----"
      tail -n 15 "$T/node-$n/log" 2>/dev/null | sed 's/^/# /'
    done
  fi
  local passed failed skipped
  passed=$(count_results PASS)
  failed=$(count_results FAIL)
  skipped=$(count_results SKIP)
  echo "cluster: $passed passed, $failed failed, $skipped skipped"
  if [ "${B3OS_E2E_KEEP:-0}" = 1 ]; then echo "# kept $T"; else rm -rf "$T"; fi
  [ "$failed" = 0 ] && [ "$rc" = 0 ] || exit 1
  exit 0
}
trap finish EXIT
trap 'exit 130' INT TERM

pg_start || die "postgres did not start"
STORE=$(pg_createdb b3cluster) || die "could not create the database"
export B3OS_STORE=$STORE
SECRET=$T/cluster.secret
head -c 48 /dev/urandom | base64 >"$SECRET"
chmod 600 "$SECRET"

# start_node NAME: b3osd on the shared store with an internal listener; waits for /healthz.
start_node() {
  local n=$1 d=$T/node-$1
  mkdir -p "$d/data" "$d/run"
  [ -n "${NODE_PORT[$n]:-}" ] || NODE_PORT[$n]=$(free_port)
  "$B3OS_BIN/b3osd" --config /dev/null --listen "127.0.0.1:${NODE_PORT[$n]}" --data-dir "$d/data" --run-dir "$d/run" \
    --runsc-root "$d/run/runsc" --templates-dir "$TEMPLATES" --quiet-key --warm-pool 0 --fork-pool 0 \
    --template-checkpoints off --network off --preview-listen "127.0.0.1:$(free_port)" --metrics-listen "127.0.0.1:0" \
    --store "$STORE" --node-id "node-$n" --cluster-listen 127.0.0.1:0 --cluster-secret-file "$SECRET" \
    ${CLUSTER_NODE_ARGS:-} >>"$d/log" 2>&1 </dev/null &
  NODE_PID[$n]=$!
  NODE_URL[$n]=http://127.0.0.1:${NODE_PORT[$n]}
  for _ in $(seq 1 300); do
    curl -sf -o /dev/null "${NODE_URL[$n]}/healthz" && return 0
    kill -0 "${NODE_PID[$n]}" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start_router: a b3os-router on a free port; appends its URL to ROUTERS.
start_router() {
  local port i=${#ROUTERS[@]}
  port=$(free_port)
  "$B3OS_BIN/b3os-router" --port "$port" --store "$STORE" --cluster-secret-file "$SECRET" --name "router-$i" \
    >>"$T/router-$i.log" 2>&1 </dev/null &
  ROUTER_PIDS+=($!)
  ROUTERS+=("http://127.0.0.1:$port")
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && return 0
    sleep 0.1
  done
  return 1
}

psql_q() { pg_as psql -h "$PG_DIR" -d b3cluster -tAq -c "$1"; }
node_of() { psql_q "SELECT node_id FROM sandboxes WHERE id = '$1'"; }

for n in "${NODES[@]}"; do start_node "$n" || die "node $n did not start (see $T/node-$n/log)"; done
start_router || die "router 0 did not start"
start_router || die "router 1 did not start"
KEY=$("$B3OS_BIN/b3os" keys create --project default --store "$STORE" 2>/dev/null)
[[ $KEY == b3os_sk_* ]] || die "could not create an API key in the shared store"
# shellcheck disable=SC2034 # read by lib.sh
ALL_KEYS=("$KEY")
info "postgres at $PG_DIR; nodes ${NODE_URL[*]}; routers ${ROUTERS[*]}"

# ---- the nodes and the routers ---------------------------------------------------------------

URL=${ROUTERS[0]}
api GET /healthz
check router.healthz "$(snip)" okj 200 '.nodes_ready == 3'
check nodes.registered "$(psql_q "SELECT id, state FROM nodes")" \
  test "$(psql_q "SELECT count(*) FROM nodes WHERE state = 'ready' AND url LIKE 'http://127.0.0.1:%'")" = 3

# The internal port takes only what a router signed.
internal=$(psql_q "SELECT url FROM nodes WHERE id = 'node-a'")
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$internal/v1/sandboxes")
check internal.unsigned_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  test "$code:$(jq -r .error.code "$T/int.json")" = 401:unauthorized
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
  -H "X-B3os-Cluster-Time: $(now_ms)" -H "X-B3os-Cluster-Signature: $(printf '0%.0s' $(seq 64))" "$internal/v1/sandboxes")
check internal.bad_signature_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  sh -c "[ $code = 401 ] && grep -q 'does not match' '$T/int.json'"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "${NODE_URL[a]}/v1/sandboxes")
check internal.public_port_unchanged "HTTP $code" test "$code" = 200

# ---- creates spread; every sandbox reached through either router -------------------------------

IDS=()
for i in 1 2 3 4 5 6; do
  URL=${ROUTERS[$((i % 2))]}
  forkable=false
  [ "$i" != 1 ] || forkable=true
  create_sandbox '{"timeout_s": 600, "forkable": '"$forkable"', "metadata": {"n": "'"$i"'"}}'
  [ -n "$CID" ] && IDS+=("$CID") || fail "create.$i" "$(snip)"
done
check create.six "${#IDS[@]} created" test "${#IDS[@]}" = 6
spread=$(for id in "${IDS[@]}"; do node_of "$id"; done | sort -u | wc -l)
check create.spread_over_nodes "on $spread nodes: $(for id in "${IDS[@]}"; do node_of "$id"; done | tr '\n' ' ')" \
  test "$spread" -ge 2
ok=0
for i in "${!IDS[@]}"; do
  URL=${ROUTERS[$(((i + 1) % 2))]}  # the other router than the one that created it
  run_exec "${IDS[$i]}" '{"cmd": "echo hi-$(hostname)"}'
  okj 200 '.exit_code == 0 and (.stdout | startswith("hi-"))' && ok=$((ok + 1))
done
check exec.through_either_router "$ok of ${#IDS[@]}" test "$ok" = "${#IDS[@]}"
URL=${ROUTERS[1]}
api GET '/v1/sandboxes?limit=100'
check list.all_nodes "$(snip)" okj 200 '[.data[].id] | length == 6'
# A stream goes through whole: 4 MiB of output, streamed (server-sent events).
SID=${IDS[0]}
curl -sN -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -H 'Accept: text/event-stream' \
  --data '{"cmd": "head -c 4194304 /dev/zero | base64 -w 1000"}' "$URL/v1/sandboxes/$SID/exec" >"$T/stream.sse"
got=$(grep -c '^event: stdout' "$T/stream.sse" || true)
check stream.through_router "$(wc -c <"$T/stream.sse") bytes, $got stdout events" \
  sh -c "[ $got -ge 1 ] && grep -q '^event: exit' '$T/stream.sse'"
# A file up and down through the router: 8 MiB, byte for byte.
head -c 8388608 /dev/urandom >"$T/blob"
api PUT "/v1/sandboxes/$SID/files?path=/tmp/blob" --data-binary @"$T/blob" -H 'Content-Type: application/octet-stream'
expect files.upload 201
api GET "/v1/sandboxes/$SID/files?path=/tmp/blob"
check files.download_same_bytes "$(stat -c %s "$RESP") bytes" cmp -s "$RESP" "$T/blob"

# ---- b3os nodes: list, drain (no new sandboxes there), ready again ------------------------------

out=$("$B3OS_BIN/b3os" nodes list --store "$STORE" 2>&1) || true
check nodes.list "$out" sh -c "echo '$out' | grep -q '^node-a *ready' && echo '$out' | grep -q '^node-c *ready'"
check nodes.drain "exit status" "$B3OS_BIN/b3os" nodes drain node-c --store "$STORE"
sleep 1.2  # the routers read the nodes at most once a second
URL=${ROUTERS[0]}
on_c=0
for i in 1 2 3 4; do
  create_sandbox '{"timeout_s": 120}'
  [ -n "$CID" ] && [ "$(node_of "$CID")" = node-c ] && on_c=$((on_c + 1))
  [ -z "$CID" ] || delete_sandbox "$CID" || true
done
check nodes.drained_gets_none "$on_c of 4 creates on node-c" test "$on_c" = 0
"$B3OS_BIN/b3os" nodes list --json --store "$STORE" >"$T/nodes.json" 2>/dev/null || true
check nodes.list_json "$(head -c 200 "$T/nodes.json")" jq -e '.[] | select(.id == "node-c") | .state == "draining"' "$T/nodes.json"
"$B3OS_BIN/b3os" nodes drain node-zzz --store "$STORE" >/dev/null 2>&1 && rc=0 || rc=$?
check nodes.drain_unknown_exit_1 "exit $rc" test "$rc" = 1
check nodes.ready "exit status" "$B3OS_BIN/b3os" nodes ready node-c --store "$STORE"

# ---- fork stays on its source's node; a restore goes where its image is ------------------------

apij POST "/v1/sandboxes/$SID/fork" '{"count": 2}'
if [ "$ST" = 201 ] || [ "$ST" = 200 ]; then
  src_node=$(node_of "$SID")
  forks=$(j '.data[].id // .forks[].id // empty' | tr '\n' ' ')
  for f in $forks; do echo "$f" >>"$T/ids"; done
  same=1
  for f in $forks; do [ "$(node_of "$f")" = "$src_node" ] || same=0; done
  check fork.on_source_node "source on $src_node, forks $forks" test "$same" = 1 -a -n "$forks"
else
  fail fork.on_source_node "$(snip)"
fi
SNAP_SRC=${IDS[1]}
apij POST "/v1/sandboxes/$SNAP_SRC/snapshot" '{}'
SNP=$(j .id)
if [ "$ST" = 201 ] || [ "$ST" = 200 ]; then
  URL=${ROUTERS[0]}
  create_sandbox '{"snapshot": "'"$SNP"'"}'
  check snapshot.restore_on_image_node "$(snip)" \
    test -n "$CID" -a "$(node_of "${CID:-none}")" = "$(psql_q "SELECT node_id FROM snapshots WHERE id = '$SNP'")"
else
  fail snapshot.restore_on_image_node "snapshot: $(snip)"
fi

# ---- two routers race one Idempotency-Key ------------------------------------------------------

racers=()
for r in 0 1; do
  curl -s -o "$T/idem.$r" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -H 'Idempotency-Key: cluster-race-1' --data '{"metadata": {"race": "1"}}' "${ROUTERS[$r]}/v1/sandboxes" \
    >"$T/idem.$r.code" &
  racers+=($!)
done
wait "${racers[@]}" || true
n_race=$(psql_q "SELECT count(*) FROM sandboxes WHERE metadata LIKE '%\"race\":\"1\"%'")
check idempotency.two_routers_one_sandbox "codes $(cat "$T/idem.0.code") $(cat "$T/idem.1.code"); $n_race sandboxes" \
  test "$n_race" = 1
for r in 0 1; do jq -r '.id // empty' "$T/idem.$r" >>"$T/ids" 2>/dev/null || true; done

# ---- a node killed: marked down within 10 s, its sandboxes failed, creates go elsewhere --------

victim=$(node_of "${IDS[2]}")
vn=${victim#node-}
on_victim=$(psql_q "SELECT count(*) FROM sandboxes WHERE node_id = '$victim' AND state = 'running'")
t0=$(now_ms)
kill -KILL "${NODE_PID[$vn]}"
down_ms=
for _ in $(seq 1 200); do
  if [ "$(psql_q "SELECT state FROM nodes WHERE id = '$victim'")" = down ]; then down_ms=$(($(now_ms) - t0)); break; fi
  sleep 0.1
done
check down.within_12s "node $victim marked down after ${down_ms:-never} ms" test -n "$down_ms" -a "${down_ms:-99999}" -le 12500
info "node $victim (with $on_victim running sandboxes) marked down ${down_ms:-never} ms after SIGKILL"
URL=${ROUTERS[0]}
api GET "/v1/sandboxes/${IDS[2]}"
check down.sandbox_failed "$(snip)" okj 200 '.status == "failed" and .stop_reason == "failed"'
left=$(psql_q "SELECT count(*) FROM sandboxes WHERE node_id = '$victim' AND state NOT IN ('stopped', 'failed')")
check down.none_left_running "$left" test "$left" = 0
made=0
for i in 1 2 3; do
  create_sandbox '{"timeout_s": 120}'
  [ -n "$CID" ] && [ "$(node_of "$CID")" != "$victim" ] && made=$((made + 1))
done
check down.creates_go_elsewhere "$made of 3" test "$made" = 3
# Its restart: nothing reattached, its containers swept, ready again.
start_node "$vn" || fail down.restart "node $vn did not start again"
check down.restart_ready "$(psql_q "SELECT state FROM nodes WHERE id = '$victim'")" \
  test "$(psql_q "SELECT state FROM nodes WHERE id = '$victim'")" = ready
check down.restart_swept "$(runsc --root "$T/node-$vn/run/runsc" list --quiet 2>/dev/null | tr '\n' ' ')" \
  eventually 20 sh -c "[ -z \"\$(runsc --root '$T/node-$vn/run/runsc' list --quiet 2>/dev/null)\" ]"

# ---- a router killed mid-stream: the other serves ----------------------------------------------

SID=${IDS[0]}
[ "$(node_of "$SID")" != "$victim" ] || SID=${IDS[1]}
curl -sN -m 30 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -H 'Accept: text/event-stream' \
  --data '{"cmd": "for i in $(seq 1 40); do echo tick $i; sleep 0.1; done"}' \
  "${ROUTERS[0]}/v1/sandboxes/$SID/exec" >"$T/cut.sse" 2>/dev/null &
cpid=$!
sleep 1
kill -KILL "${ROUTER_PIDS[0]}"
wait "$cpid" || true
check router_killed.stream_cut "$(grep -c tick "$T/cut.sse") ticks" sh -c "! grep -q '^event: exit' '$T/cut.sse'"
URL=${ROUTERS[1]}
run_exec "$SID" '{"cmd": "echo still"}'
check router_killed.other_serves "$(snip)" okj 200 '.stdout == "still\n"'

# ---- cleanup through the API ---------------------------------------------------------------------

URL=${ROUTERS[1]}
for id in $(psql_q "SELECT id FROM sandboxes WHERE state = 'running'"); do delete_sandbox "$id" || true; done
left=$(psql_q "SELECT count(*) FROM sandboxes WHERE state IN ('running', 'paused')")
check cleanup.all_deleted "$left left" test "$left" = 0

# ---- the e2e suite, MCP and both recipes through a router ------------------------------------------
# Each on a database of its own, with its own b3osd (the suite's private one, on the shared
# store with an internal listener) behind a b3os-router that start_private_daemon starts
# (B3OS_E2E_ROUTER=1): every request of the suite goes through the router. The nodes above are
# stopped first (two cores). CLUSTER_E2E=0 leaves this out (said below).
for p in ${ROUTER_PIDS[@]+"${ROUTER_PIDS[@]}"}; do kill -KILL "$p" 2>/dev/null || true; done
ROUTER_PIDS=()
for n in "${NODES[@]}"; do
  kill -TERM "${NODE_PID[$n]}" 2>/dev/null || true
done
for n in "${NODES[@]}"; do
  for _ in $(seq 1 100); do kill -0 "${NODE_PID[$n]}" 2>/dev/null || break; sleep 0.1; done
  cleanup_node "$n"
  NODE_PID[$n]=
done

# via_router NAME SCRIPT: runs a suite of tests/e2e through a router; its lines are shown
# indented, and it counts as one check here.
via_router() {
  local name=$1 script=$2 db rc=0
  db=$(pg_createdb "b3$name") || { fail "via_router.$name" "could not create its database"; return 0; }
  info "tests/e2e/$script through b3os-router (its own lines follow, indented)"
  B3OS_STORE=$db B3OS_CLUSTER_SECRET_FILE=$SECRET B3OS_E2E_ROUTER=1 B3OS_E2E_BIG=0 \
    B3OS_E2E_DAEMON_ARGS="--node-id $name-node --cluster-listen 127.0.0.1:0 --cluster-secret-file $SECRET" \
    B3OS_BIN=$B3OS_BIN B3OS_TEMPLATES_DIR=$TEMPLATES "$ROOT/tests/e2e/$script" >"$T/$name.log" 2>&1 || rc=$?
  sed 's/^/  | /' "$T/$name.log"
  check "via_router.$name" "exit $rc; $(grep -c '^FAIL' "$T/$name.log") FAIL lines (above)" test "$rc" = 0
}
if [ "${CLUSTER_E2E:-1}" = 1 ]; then
  via_router e2e e2e.sh
  via_router mcp mcp.sh
  via_router fork_recipe cookbook_fork.sh
  via_router model_recipe cookbook_model.sh
else
  for s in e2e mcp fork_recipe model_recipe; do skip "via_router.$s" "CLUSTER_E2E=0"; done
fi

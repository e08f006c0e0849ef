#!/usr/bin/env bash
# The cluster on one machine (docs/cluster.md): a Postgres 15 of its own (tests/store/
# postgres.sh, a unix socket only), three b3osd nodes (each its own data, run and runsc
# directories and ports, on the one shared store, each with an internal listener that takes
# only requests signed with the cluster secret) and two b3os-routers. Checks what only a
# cluster has: the internal port refuses what is not signed, creates spread over the nodes,
# every sandbox is reached through either router, a fork stays on its source's node, a
# restore goes where its image is, two routers racing one Idempotency-Key create one sandbox,
# the spend cap of a key is one across nodes, the routers' /metrics count what they relayed
# and show the nodes, Postgres restarted under load gives clients only 2xx or typed 503s and
# loses no record nor node, a node killed is marked down within 10 s (its sandboxes failed,
# creates go to the others) and its restart sweeps what it left, a node killed mid-create or
# mid-fork leaves no answer claiming a sandbox, no record running and (after its restart)
# nothing on the host, a router killed mid-stream leaves the other serving, MCP tool calls
# reach the sandboxes of every node from one session, a template built on one node runs on
# all three, a drain moves a forkable sandbox (its processes going on) and leaves the others.
# Then the e2e
# suite, the MCP suite and both cookbook recipes (all four tabs), each through a router in
# front of a b3osd on Postgres.
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
ROUTER_METRICS=()

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
  e2e_aborted "$rc"
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
  [ -z "${S3PID:-}" ] || kill "$S3PID" 2>/dev/null
  [ -z "${MODEL_PID:-}" ] || kill "$MODEL_PID" 2>/dev/null
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

# The object store every node puts its snapshots in: s3rver (tests/cluster/package.json, an S3
# test server keeping objects in files) on loopback; a shared directory when npm could not
# install it (said).
S3PORT=$(free_port)
S3PID=
EMPTY_SHA=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
if [ -x "$HERE/node_modules/.bin/s3rver" ]; then
  mkdir -p "$T/s3"
  "$HERE/node_modules/.bin/s3rver" -d "$T/s3" -a 127.0.0.1 -p "$S3PORT" --silent --configure-bucket b3os \
    >>"$T/s3.log" 2>&1 </dev/null &
  S3PID=$!
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
  OBJECT_STORE="s3://b3os/cluster?endpoint=http://127.0.0.1:$S3PORT"
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$S3PORT/" && break; sleep 0.1; done
else
  info "tests/cluster/node_modules/.bin/s3rver is missing (npm ci failed, see above): the object store is a shared directory"
  OBJECT_STORE="dir:$T/objects"
fi
# s3 METHOD KEY [curl args...]: a signed request for an object of the cluster's store; prints
# the HTTP status. With a dir: store, the same questions of the directory.
s3() {
  local method=$1 key=$2
  shift 2
  if [ -z "$S3PID" ]; then
    case $method in
      HEAD) if [ -f "$T/objects/$key" ]; then echo 200; else echo 404; fi ;;
      PUT) cp "$2" "$T/objects/$key" && echo 200 ;;
    esac
    return 0
  fi
  local sha=$EMPTY_SHA how=(-X "$method")
  [ "$method" != PUT ] || sha=$(sha256sum "$2" | cut -d' ' -f1)
  [ "$method" != HEAD ] || how=(-I)
  curl -s -o /dev/null -w '%{http_code}' -m 10 --aws-sigv4 aws:amz:us-east-1:s3 -u S3RVER:S3RVER \
    -H "x-amz-content-sha256: $sha" "${how[@]}" "$@" "http://127.0.0.1:$S3PORT/b3os/cluster/$key" || true
}

# The model every node's gateway offers: the scripted model (tests/fixtures/scripted_model.py,
# a TEST FIXTURE on 127.0.0.1), answering after 1.5 s so that racing calls are in flight when
# Postgres restarts; prices make each call cost about 2 cents.
python3 "$ROOT/tests/fixtures/scripted_model.py" --port 0 --port-file "$T/model.port" --delay-ms 1500 --quiet \
  >"$T/model.out" 2>"$T/model.log" </dev/null &
MODEL_PID=$!
for _ in $(seq 1 100); do [ -s "$T/model.port" ] && break; sleep 0.1; done
[ -s "$T/model.port" ] || die "the scripted model did not start: $(tail -n 5 "$T/model.log")"
MODEL_ARG="b3os/pricey=http://127.0.0.1:$(cat "$T/model.port")/v1,upstream=scripted,in=1000,out=2000,default"

# Each project's limit on every node; the section "one limit per project" fills a project of
# its own to it from both routers at once. Not higher: every sandbox has a loop device for its
# disk, and the machine has 64 (at 30 the tight project and the default one's ran out of them
# once: 503 capacity_unavailable, "no free loop device").
PER_PROJECT=20

# The routers' preview listeners (ROUTER_PREVIEW[i] for router i); the nodes name router 0's
# port in the URLs they mint.
ROUTER_PREVIEW=("$(free_port)" "$(free_port)")

# The object store's shared roots are collected 15 s after the last node asked for one (an hour
# by default), by collectors that run every 3 s (10 min): the section "the object store is
# collected" sees a deleted template's root go and the roots of snapshots stay.
OBJECT_GRACE=15

# start_node NAME: b3osd on the shared store with an internal listener; waits for /healthz.
start_node() {
  local n=$1 d=$T/node-$1
  mkdir -p "$d/data" "$d/run"
  [ -n "${NODE_PORT[$n]:-}" ] || NODE_PORT[$n]=$(free_port)
  "$B3OS_BIN/b3osd" --config /dev/null --listen "127.0.0.1:${NODE_PORT[$n]}" --data-dir "$d/data" --run-dir "$d/run" \
    --runsc-root "$d/run/runsc" --templates-dir "$TEMPLATES" --quiet-key --warm-pool 0 --fork-pool 0 \
    --template-checkpoints off --network off --preview-listen "127.0.0.1:$(free_port)" --metrics-listen "127.0.0.1:0" \
    --store "$STORE" --node-id "node-$n" --cluster-listen 127.0.0.1:0 --cluster-secret-file "$SECRET" \
    --object-store "$OBJECT_STORE" --object-store-collect-every 3 --object-store-grace "$OBJECT_GRACE" \
    --preview-url-port "${ROUTER_PREVIEW[0]}" --max-sandboxes-per-project "$PER_PROJECT" \
    --model "$MODEL_ARG" --cluster-tls-ca "$T/tls/ca.crt" $([ "$n" != c ] || echo "$NODE_C_TLS") \
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

# start_router: a b3os-router on a free port, its metrics on a port of the kernel's choosing;
# appends its URL to ROUTERS and its metrics URL (from the first line of its log: "b3os-router
# listening on ..., metrics on http://HOST:PORT/metrics") to ROUTER_METRICS.
start_router() {
  local port i=${#ROUTERS[@]} murl=
  port=$(free_port)
  "$B3OS_BIN/b3os-router" --port "$port" --store "$STORE" --cluster-secret-file "$SECRET" --name "router-$i" \
    --cluster-tls-ca "$T/tls/ca.crt" --metrics-listen 127.0.0.1:0 --preview-listen "127.0.0.1:${ROUTER_PREVIEW[$i]}" >>"$T/router-$i.log" 2>&1 </dev/null &
  ROUTER_PIDS+=($!)
  ROUTERS+=("http://127.0.0.1:$port")
  for _ in $(seq 1 100); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/healthz"; then
      murl=$(grep -o 'metrics on http://[0-9.]*:[0-9]*/metrics' "$T/router-$i.log" | head -n1 | sed 's/^metrics on //')
      ROUTER_METRICS+=("$murl")
      return 0
    fi
    sleep 0.1
  done
  return 1
}

psql_q() { pg_as psql -h "$PG_DIR" -d b3cluster -tAq -c "$1"; }
node_of() { psql_q "SELECT node_id FROM sandboxes WHERE id = '$1'"; }

# TLS on one node's internal listener (node-c): a CA of the test's own and a certificate for
# 127.0.0.1 it signed; every node and router checks https:// node URLs against that CA.
mkdir -p "$T/tls"
(
  cd "$T/tls" &&
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=b3os test cluster CA" \
      -keyout ca.key -out ca.crt &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=node-c" -keyout node.key -out node.csr &&
    printf 'subjectAltName=IP:127.0.0.1\n' >node.ext &&
    openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile node.ext -out node.crt
) >"$T/tls/openssl.log" 2>&1 || die "could not make the test's TLS certificates: $(tail -n 3 "$T/tls/openssl.log")"
NODE_C_TLS="--cluster-tls-cert $T/tls/node.crt --cluster-tls-key $T/tls/node.key"

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
check nodes.registered "$(psql_q "SELECT id, state, url FROM nodes")" \
  test "$(psql_q "SELECT count(*) FROM nodes WHERE state = 'ready' AND url LIKE 'http://127.0.0.1:%'")" = 2 -a \
  "$(psql_q "SELECT url LIKE 'https://127.0.0.1:%' FROM nodes WHERE id = 'node-c'")" = t

# node-c's internal listener speaks TLS (--cluster-tls-cert): plain HTTP gets no answer, a
# client that does not know the CA is refused, and a signed request over TLS is served.
internal_c=$(psql_q "SELECT url FROM nodes WHERE id = 'node-c'")
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "${internal_c/https:/http:}/v1/sandboxes" || true)
check tls.plaintext_not_served "HTTP $code" test "$code" = 000
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "$internal_c/v1/sandboxes" || true)
check tls.unknown_ca_refused "HTTP $code" test "$code" = 000

# The internal port takes only what a router signed.
internal=$(psql_q "SELECT url FROM nodes WHERE id = 'node-a'")
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$internal/v1/sandboxes")
check internal.unsigned_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  test "$code:$(jq -r .error.code "$T/int.json")" = 401:unauthorized
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
  -H "X-B3os-Cluster-Time: $(now_ms)" -H "X-B3os-Cluster-Nonce: $(printf '1%.0s' $(seq 32))" -H "X-B3os-Cluster-Body: unsigned" \
  -H "X-B3os-Cluster-Signature: $(printf '0%.0s' $(seq 64))" "$internal/v1/sandboxes")
check internal.bad_signature_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  sh -c "[ $code = 401 ] && grep -q 'does not match' '$T/int.json'"
# A request signed with the secret (as a router signs: docs/cluster.md) is served once: sent
# again it is a replay; with another credential header added on the way it no longer matches.
# signed_headers METHOD TARGET [BODY_FILE [KEY]]: the cluster headers for a request, which
# python3 computes from $SECRET as docs/cluster.md says (METHOD with its route, "adopt:POST";
# the body's SHA-256 when a file is given, else unsigned; KEY as the Authorization header).
signed_headers() {
  python3 - "$SECRET" "$1" "$2" "${3:-}" "${4-$KEY}" "$(now_ms)" <<'PY'
import hashlib, hmac, os, sys
secret = open(sys.argv[1], "rb").read().rstrip(b" \t\r\n")
method, target, body_file, key, t = sys.argv[2:7]
nonce = os.urandom(16).hex()
body = hashlib.sha256(open(body_file, "rb").read()).hexdigest() if body_file else "unsigned"
creds = {"Authorization": "Bearer " + key} if key else {}
msg = f"b3os-cluster-v2\n{method}\n{target}\n{t}\n{nonce}\n{body}\n"
for name in ["Authorization", "X-API-Key", "X-Access-Token", "E2b-Sandbox-Id", "Cookie", "e2b-traffic-access-token"]:
    v = creds.get(name, "")
    msg += f"{name}:{hashlib.sha256(v.encode()).hexdigest() if v else '-'}\n"
sig = hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()
print(f"X-B3os-Cluster-Time: {t}\nX-B3os-Cluster-Nonce: {nonce}\nX-B3os-Cluster-Body: {body}\nX-B3os-Cluster-Signature: {sig}")
PY
}
signed_headers GET /v1/sandboxes >"$T/signed.h"
sh_args=()
while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
code1=$(curl -s -o "$T/int1.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" "${sh_args[@]}" "$internal/v1/sandboxes")
code2=$(curl -s -o "$T/int2.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" "${sh_args[@]}" "$internal/v1/sandboxes")
check internal.signed_served_once "first HTTP $code1 $(head -c 120 "$T/int1.json"); again HTTP $code2 $(head -c 160 "$T/int2.json")" \
  sh -c "[ $code1 = 200 ] && [ $code2 = 401 ] && grep -q replay '$T/int2.json'"
signed_headers GET /v1/sandboxes >"$T/signed.h"
sh_args=()
while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H "X-API-Key: $KEY" "${sh_args[@]}" "$internal/v1/sandboxes")
check internal.added_credential_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  sh -c "[ $code = 401 ] && grep -q 'does not match' '$T/int.json'"
# A body a router holds whole is signed by its digest: the node reads and checks it before the
# API sees it. The body signed is served (the exec names no sandbox: 404 from the API itself);
# another body under the same signature is refused, and nothing runs.
printf '%s' '{"cmd": "echo signed-body"}' >"$T/body.signed"
printf '%s' '{"cmd": "echo altered-body"}' >"$T/body.altered"
signed_headers POST /v1/sandboxes/sbx_nosuchone/exec "$T/body.signed" >"$T/signed.h"
sh_args=()
while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  "${sh_args[@]}" --data-binary @"$T/body.altered" "$internal/v1/sandboxes/sbx_nosuchone/exec")
check internal.altered_body_refused "HTTP $code $(head -c 200 "$T/int.json")" \
  sh -c "[ $code = 401 ] && grep -q 'not the one the cluster signature covers' '$T/int.json'"
signed_headers POST /v1/sandboxes/sbx_nosuchone/exec "$T/body.signed" >"$T/signed.h"
sh_args=()
while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  "${sh_args[@]}" --data-binary @"$T/body.signed" "$internal/v1/sandboxes/sbx_nosuchone/exec")
check internal.signed_body_served "HTTP $code $(head -c 200 "$T/int.json")" \
  sh -c "[ $code = 404 ] && grep -q sandbox_not_found '$T/int.json'"
signed_headers GET /v1/sandboxes >"$T/signed.h"
sh_args=()
while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
code=$(curl -s -o "$T/int.json" -w '%{http_code}' --cacert "$T/tls/ca.crt" -H "Authorization: Bearer $KEY" \
  "${sh_args[@]}" "$internal_c/v1/sandboxes" || true)
check tls.signed_served "HTTP $code $(head -c 200 "$T/int.json")" test "$code" = 200
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
on_c=$(for id in "${IDS[@]}"; do node_of "$id"; done | grep -c '^node-c$' || true)
check tls.node_c_holds_some "$on_c of ${#IDS[@]} on node-c (its internal listener is TLS; the execs above reached them)" \
  test "$on_c" -ge 1
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

# ---- the router's metrics ------------------------------------------------------------------------
# Router 0 placed three of the six creates above and relayed requests since; its /metrics
# counts them and shows the nodes as it last read them (all ready, each with its sandboxes).

URL=${ROUTERS[0]}
api GET /v1/sandboxes  # a request now: the router reads the nodes again (at most 1 s old)
metrics_url=${ROUTER_METRICS[0]:-}
code=$(curl -s -o "$T/router.metrics" -w '%{http_code}' "${metrics_url:-http://127.0.0.1:1/none}") || true
# metric_value NAME{LABELS}: its value in $T/router.metrics ("" when absent, the file too: curl
# makes none when it reaches no listener, and awk's failure would end the suite at the
# assignments below, before router_metrics.served says so).
metric_value() { awk -v k="$1" '$1 == k { print $2; exit }' "$T/router.metrics" 2>/dev/null || true; }
relayed=$(metric_value 'b3os_router_forwards_total{kind="create",result="relayed"}')
ready_nodes=$(metric_value 'b3os_router_nodes{state="ready"}')
sb_a=$(metric_value 'b3os_router_node_sandboxes{node="node-a"}')
info "router metrics at ${metrics_url:-(none in its log)}: HTTP $code; creates relayed ${relayed:-absent}," \
  "nodes ready ${ready_nodes:-absent}, node-a sandboxes ${sb_a:-absent}"
check router_metrics.served "HTTP $code from ${metrics_url:-no metrics URL in $T/router-0.log}" \
  sh -c "[ '$code' = 200 ] && grep -q '^# TYPE b3os_router_forwards_total counter' '$T/router.metrics'"
check router_metrics.creates_relayed "b3os_router_forwards_total{kind=\"create\",result=\"relayed\"} ${relayed:-absent}" \
  awk -v v="${relayed:-0}" 'BEGIN { exit !(v + 0 > 0) }'
check router_metrics.nodes_ready "b3os_router_nodes{state=\"ready\"} ${ready_nodes:-absent}" test "${ready_nodes:-}" = 3
check router_metrics.node_sandboxes "b3os_router_node_sandboxes{node=\"node-a\"} ${sb_a:-absent}" \
  sh -c "echo '$sb_a' | grep -Eqx '[0-9]+'"

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

# ---- preview URLs through either router -----------------------------------------------------------
# A node mints URLs naming router 0's preview port; each router's preview listener relays a
# request to the node holding the sandbox, whose preview server checks the token.

create_sandbox '{"ports": [{"port": 8000, "public": true}], "timeout_s": 300}'
PV=$CID
if [ -n "$PV" ]; then
  run_exec "$PV" '{"cmd": "mkdir -p /tmp/www && echo preview-'"$$"' > /tmp/www/index.html && cd /tmp/www && nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & sleep 1"}'
  api GET "/v1/sandboxes/$PV"
  PURL=$(j '.ports[0].url')
  check preview.url_names_router "$PURL" sh -c "echo '$PURL' | grep -q ':${ROUTER_PREVIEW[0]}/'"
  got=""
  for _ in $(seq 1 30); do
    got=$(curl -s -m 5 "$PURL" 2>/dev/null || true)
    [ "$got" = "preview-$$" ] && break
    sleep 0.3
  done
  check preview.through_router "node $(node_of "$PV"): got '$(printf %s "$got" | head -c 100)'" test "$got" = "preview-$$"
  other=${PURL/:${ROUTER_PREVIEW[0]}\//:${ROUTER_PREVIEW[1]}/}
  got=$(curl -s -m 5 "$other" 2>/dev/null || true)
  check preview.through_other_router "got '$(printf %s "$got" | head -c 100)'" test "$got" = "preview-$$"
  bad=${PURL%%b3os_token=*}b3os_token=AAAA
  code=$(curl -s -o "$T/pv.json" -w '%{http_code}' -m 5 "$bad" || true)
  check preview.bad_token_refused "HTTP $code $(head -c 200 "$T/pv.json")" sh -c "[ '$code' = 401 ] || [ '$code' = 403 ] || [ '$code' = 404 ]"
  code=$(curl -s -o "$T/pv.json" -w '%{http_code}' -m 5 -H "Host: 8000-sbx-0000000000000000000000000a.localhost" \
    "http://127.0.0.1:${ROUTER_PREVIEW[0]}/" || true)
  check preview.unknown_sandbox_404 "HTTP $code $(head -c 200 "$T/pv.json")" test "$code" = 404
  code=$(curl -s -o "$T/pv.json" -w '%{http_code}' -m 5 -H "Host: example.com" "http://127.0.0.1:${ROUTER_PREVIEW[0]}/" || true)
  check preview.foreign_host_404 "HTTP $code $(head -c 200 "$T/pv.json")" test "$code" = 404
  delete_sandbox "$PV" || true
else
  fail preview.through_router "create with a public port: $(snip)"
fi

# ---- E2B's SDK through either router --------------------------------------------------------------
# Control plane placed and bound like /v1, envd requests (a sandbox's token, no key) relayed to
# the node holding the sandbox (tests/e2b/router_check.mjs; docs/cluster.md).
if [ -d "$ROOT/tests/e2b/node_modules/e2b" ] && command -v node >/dev/null; then
  E2B_KEY=$("$B3OS_BIN/b3os" keys create --e2b --project default --store "$STORE" 2>/dev/null)
  env -C "$ROOT/tests/e2b" E2B_API_URL="${ROUTERS[0]}" E2B_SANDBOX_URL="${ROUTERS[0]}" E2B_API_KEY="$E2B_KEY" \
    timeout 300 node router_check.mjs "${ROUTERS[1]}" >"$T/e2b_router.out" 2>&1 || true
  sed -e 's/^PASS /PASS e2b./' -e 's/^FAIL /FAIL e2b./' "$T/e2b_router.out" | relay
  grep -q '^# e2b_router: [0-9]* failed' "$T/e2b_router.out" ||
    fail e2b.finished "it stopped early: $(tail -n 3 "$T/e2b_router.out" | tr '\n' ' ')"
else
  skip e2b.through_router "the e2b SDK is not installed in tests/e2b (npm ci there; scripts/test.sh does it) or node is missing"
fi

# ---- MCP tools reach every node's sandboxes --------------------------------------------------------
# A session lives on one node; a tool call naming a sandbox another node holds is relayed by
# that node to the holder's internal listener (signed for "mcp-call") and answered from there,
# progress streams included; a cancel ends the call on the holder too.

# mcp_call ID BODY [curl args...]: one JSON-RPC POST to router 0's /mcp in session $MSID; the
# answer (JSON, or the event stream) in $T/mcp.out, the HTTP status in MST.
mcp_call() {
  local body=$1
  shift
  MST=$(curl -s -o "$T/mcp.out" -w '%{http_code}' -m 120 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-06-18' ${MSID:+-H "Mcp-Session-Id: $MSID"} \
    "$@" --data-binary "$body" "${ROUTERS[0]}/mcp" || echo 000)
}
# mcp_result: the JSON-RPC answer in $T/mcp.out (the last data line of an event stream).
mcp_result() { if grep -q '^data: ' "$T/mcp.out"; then grep '^data: ' "$T/mcp.out" | tail -n1 | cut -c7-; else cat "$T/mcp.out"; fi; }
MSID=
curl -s -D "$T/mcp.h" -o "$T/mcp.out" -m 30 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' "${ROUTERS[0]}/mcp" --data-binary \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cluster-test","version":"1"}}}' || true
MSID=$(awk 'tolower($1) == "mcp-session-id:" { sub(/\r$/, "", $2); print $2 }' "$T/mcp.h")
check mcp.session_opened "$(head -c 200 "$T/mcp.out")" test -n "$MSID"
mcp_call '{"jsonrpc":"2.0","method":"notifications/initialized"}'
ok=0
nodes_reached=""
for i in "${!IDS[@]}"; do
  mcp_call '{"jsonrpc":"2.0","id":'"$((10 + i))"',"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox_id":"'"${IDS[$i]}"'","cmd":"echo mcp-'"$i"'"}}}'
  if mcp_result | jq -e --arg w "mcp-$i" '.result.structuredContent.stdout == ($w + "\n") and (.result.isError | not)' >/dev/null 2>&1; then
    ok=$((ok + 1))
    nodes_reached="$nodes_reached $(node_of "${IDS[$i]}")"
  else
    info "mcp exec on ${IDS[$i]} ($(node_of "${IDS[$i]}")): HTTP $MST $(head -c 300 "$T/mcp.out")"
  fi
done
check mcp.exec_on_every_node "$ok of ${#IDS[@]}, on:$nodes_reached" \
  sh -c "[ $ok = ${#IDS[@]} ] && [ \$(echo '$nodes_reached' | tr ' ' '\n' | sort -u | grep -c node-) -ge 2 ]"
# A sandbox on another node than the session's: files both ways, a progress stream, a cancel.
sess_node=$(python3 -c 'import sys; print(bytes.fromhex(sys.argv[1]).decode())' "${MSID##*.}" 2>/dev/null || true)
FAR=
for id in "${IDS[@]}"; do [ "$(node_of "$id")" = "$sess_node" ] || { FAR=$id; break; }; done
if [ -n "$FAR" ] && [ -n "$sess_node" ]; then
  info "MCP session on $sess_node; far sandbox $FAR on $(node_of "$FAR")"
  mcp_call '{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"sandbox_write_file","arguments":{"sandbox_id":"'"$FAR"'","path":"/tmp/mcp.txt","content":"far-'"$$"'"}}}'
  mcp_call '{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"sandbox_read_file","arguments":{"sandbox_id":"'"$FAR"'","path":"/tmp/mcp.txt"}}}'
  mcp_result >"$T/mcp.res"
  check mcp.files_on_other_node "HTTP $MST $(head -c 300 "$T/mcp.out")" grep -q "far-$$" "$T/mcp.res"
  mcp_call '{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"sandbox_exec","_meta":{"progressToken":"p1"},"arguments":{"sandbox_id":"'"$FAR"'","cmd":"for i in 1 2 3; do echo tick-$i; sleep 0.7; done"}}}'
  check mcp.progress_stream_relayed "HTTP $MST $(head -c 400 "$T/mcp.out" | tr '\n' ' ')" \
    sh -c "grep -q 'notifications/progress' '$T/mcp.out' && grep '^data: ' '$T/mcp.out' | tail -n1 | cut -c7- | jq -e '.id == 32 and (.result.structuredContent.stdout | contains(\"tick-3\"))' >/dev/null"
  # A long call cancelled: answered at once, and the command gone on the holder.
  t0=$(date +%s)
  mcp_call '{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox_id":"'"$FAR"'","cmd":"sleep 97"}}}' &
  cpid=$!
  sleep 3
  curl -s -o /dev/null -m 10 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H "Mcp-Session-Id: $MSID" --data-binary '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":33}}' "${ROUTERS[0]}/mcp" || true
  wait "$cpid" || true
  took=$(($(date +%s) - t0))
  check mcp.cancel_answered "after ${took}s: $(head -c 300 "$T/mcp.out")" sh -c "[ $took -lt 60 ] && grep -q cancelled '$T/mcp.out'"
  gone=0
  for _ in $(seq 1 20); do
    run_exec "$FAR" '{"cmd": "ps -eo args | grep -c \"^sleep 97\" || true"}'
    [ "$(j .stdout)" = "0" ] && { gone=1; break; }
    sleep 0.5
  done
  check mcp.cancel_stops_on_holder "$(snip)" test "$gone" = 1
else
  fail mcp.files_on_other_node "no sandbox on another node than the session's ($sess_node)"
fi
mcp_call '{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox_id":"sbx_00000000000000000000000000","cmd":"true"}}}'
mcp_result >"$T/mcp.res"
check mcp.unknown_sandbox "$(head -c 300 "$T/mcp.out")" \
  sh -c "jq -e '.result.isError == true' '$T/mcp.res' >/dev/null && grep -q sandbox_not_found '$T/mcp.res'"
# A sandbox_create is made on the session's node while it is ready; once it is draining, on
# another node (placed as a router places a REST create), and the session reaches it there.
if [ -n "$sess_node" ]; then
  mcp_call '{"jsonrpc":"2.0","id":45,"method":"tools/call","params":{"name":"sandbox_create","arguments":{"timeout_s":300}}}'
  mcp_result >"$T/mcp.res"
  MCID=$(jq -r '.result.structuredContent.id // empty' "$T/mcp.res" 2>/dev/null || true)
  mc_node=$([ -n "$MCID" ] && node_of "$MCID" || true)
  check mcp.create_on_session_node "session on $sess_node, created ${MCID:-nothing} on ${mc_node:-?}: $(head -c 300 "$T/mcp.res")" \
    test "$mc_node" = "$sess_node"
  [ -z "$MCID" ] || mcp_call '{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"sandbox_delete","arguments":{"sandbox_id":"'"$MCID"'"}}}'
  "$B3OS_BIN/b3os" nodes drain "$sess_node" --store "$STORE" >/dev/null
  # The node reads its state at its heartbeats (every 2 s, later on a busy machine): a create
  # it made before it saw the drain is deleted and asked again, up to 6 times 2 s apart.
  for try in 1 2 3 4 5 6; do
    sleep 2
    mcp_call '{"jsonrpc":"2.0","id":'"$((45 + try))"',"method":"tools/call","params":{"name":"sandbox_create","arguments":{"timeout_s":300}}}'
    mcp_result >"$T/mcp.res"
    MCID=$(jq -r '.result.structuredContent.id // empty' "$T/mcp.res" 2>/dev/null || true)
    mc_node=$([ -n "$MCID" ] && node_of "$MCID" || true)
    [ "$mc_node" = "$sess_node" ] || break
    mcp_call '{"jsonrpc":"2.0","id":'"$((55 + try))"',"method":"tools/call","params":{"name":"sandbox_delete","arguments":{"sandbox_id":"'"$MCID"'"}}}'
  done
  check mcp.create_placed_off_draining_node "session on $sess_node, created ${MCID:-nothing} on ${mc_node:-?}: $(head -c 300 "$T/mcp.res")" \
    sh -c "[ -n '$mc_node' ] && [ '$mc_node' != '$sess_node' ]"
  "$B3OS_BIN/b3os" nodes ready "$sess_node" --store "$STORE" >/dev/null
  if [ -n "$MCID" ]; then
    mcp_call '{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"sandbox_exec","arguments":{"sandbox_id":"'"$MCID"'","cmd":"echo placed"}}}'
    mcp_result >"$T/mcp.res"
    check mcp.placed_sandbox_reached "$(head -c 300 "$T/mcp.out")" \
      jq -e '.result.structuredContent.stdout == "placed\n" and (.result.isError | not)' "$T/mcp.res"
    mcp_call '{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":"sandbox_delete","arguments":{"sandbox_id":"'"$MCID"'"}}}'
  fi
fi
code=$(curl -s -o "$T/int.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -H 'X-B3os-Route: mcp-call' --data-binary '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sandbox_list"}}' "$internal/mcp")
check mcp.relay_route_unsigned_refused "HTTP $code $(head -c 200 "$T/int.json")" test "$code" = 401

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

# ---- snapshots move: through the object store to another node ------------------------------------
# A snapshot is in the object store before its record; a restore placed away from the image's
# node (drained) fetches it, checked against its manifest; a changed object is refused; the
# store down during a snapshot is a typed 503 that leaves nothing; a delete removes the objects.

apij POST "/v1/sandboxes/$SNAP_SRC/exec" '{"cmd": "echo moved-'"$$"' > /tmp/mark"}'
apij POST "/v1/sandboxes/$SNAP_SRC/snapshot" '{}'
SNP2=$(j .id)
check objstore.snapshot_uploaded "$(snip); upload $(j .timing.upload_ms) ms" \
  test "$(s3 HEAD "snapshots/$SNP2/manifest.json")" = 200 -a "$(s3 HEAD "snapshots/$SNP2/checkpoint.img")" = 200
img_node=$(psql_q "SELECT node_id FROM snapshots WHERE id = '$SNP2'")
"$B3OS_BIN/b3os" nodes drain "$img_node" --store "$STORE" >/dev/null
sleep 1.2  # the routers' copy of the nodes
create_sandbox '{"snapshot": "'"$SNP2"'", "timeout_s": 120}'
MOVED=$CID
check objstore.restore_on_another_node "$(snip | head -c 200); image on $img_node, restored on $(node_of "${MOVED:-none}")" \
  test -n "$MOVED" -a "$(node_of "${MOVED:-none}")" != "$img_node"
info "a restore on another node: fetch $(j .timing.fetch_ms) ms (the image, and the template's root the first time), total $(j .timing.total_ms) ms"
if [ -n "$MOVED" ]; then
  run_exec "$MOVED" '{"cmd": "cat /tmp/mark"}'
  check objstore.restored_has_the_files "$(snip)" okj 200 '.stdout == "moved-'"$$"'\n"'
  mn=$(node_of "$MOVED")
  check objstore.fetched_image_removed "$(ls "$T/node-${mn#node-}/data/fork-images" 2>/dev/null | tr '\n' ' ')" \
    test -z "$(ls "$T/node-${mn#node-}/data/fork-images" 2>/dev/null)"
  delete_sandbox "$MOVED" || true
fi
# A forged adopt (signed with the secret, as a node would): another node told to take the
# snapshot's sandbox, which still runs, from the snapshot's image. A move names its sandbox,
# project and node in its manifest and only such a move is taken; before, this ran a second copy.
src_node=$(node_of "$SNAP_SRC")
other_node=$(psql_q "SELECT id FROM nodes WHERE id <> '$src_node' AND state = 'ready' ORDER BY id LIMIT 1")
other_url=$(psql_q "SELECT url FROM nodes WHERE id = '$other_node'")
for mid in "$SNP2" "mov_$(printf 'x%.0s' $(seq 26))"; do
  jq -nc --arg s "$SNAP_SRC" --arg p "$(psql_q "SELECT project_id FROM sandboxes WHERE id = '$SNAP_SRC'")" --arg m "$mid" \
    --arg n "$src_node" --arg to "$other_node" --argjson d "$(($(now_ms) + 60000))" \
    '{sandbox_id: $s, project_id: $p, move_id: $m, from_node: $n, to_node: $to, deadline_ms: $d}' >"$T/adopt.json"
  signed_headers adopt:POST /internal/adopt "$T/adopt.json" "" >"$T/signed.h"
  sh_args=(-H "X-B3os-Route: adopt" -H 'Content-Type: application/json')
  while IFS= read -r h; do sh_args+=(-H "$h"); done <"$T/signed.h"
  code=$(curl -s -o "$T/adopt.out" -w '%{http_code}' "${sh_args[@]}" --data-binary "@$T/adopt.json" "$other_url/internal/adopt")
  check "objstore.forged_adopt_refused.${mid%%_*}" "HTTP $code $(head -c 200 "$T/adopt.out"); $SNAP_SRC on $(node_of "$SNAP_SRC")" \
    test "$code" != 200 -a "$(node_of "$SNAP_SRC")" = "$src_node" -a -z "$(runsc --root "$T/node-${other_node#node-}/run/runsc" list --quiet 2>/dev/null | grep -x "$SNAP_SRC" || true)"
done
# The image changed in the store after its manifest: refused, nothing made.
head -c 4096 /dev/urandom >"$T/garbage"
put=$(s3 PUT "snapshots/$SNP2/checkpoint.img" -T "$T/garbage")
rows_before=$(psql_q "SELECT count(*) FROM sandboxes")
create_sandbox '{"snapshot": "'"$SNP2"'"}'
check objstore.changed_image_refused "PUT $put; $(snip)" \
  sh -c "[ '$ST' = 500 ] && grep -q 'does not match its manifest' '$RESP' && [ \"\$(ls $T/node-*/data/fork-images 2>/dev/null | grep -c fetch)\" = 0 ]"
check objstore.changed_image_no_row "$rows_before rows before, $(psql_q "SELECT count(*) FROM sandboxes") after" \
  test "$(psql_q "SELECT count(*) FROM sandboxes")" = "$rows_before"
"$B3OS_BIN/b3os" nodes ready "$img_node" --store "$STORE" >/dev/null
# The store down during a snapshot: 503, no record, no image left on the node.
if [ -n "$S3PID" ]; then
  # s3rver may have gone on its own meanwhile (the store is then down all the same): a kill of
  # a gone pid fails, and must not end the suite.
  kill "$S3PID" 2>/dev/null || true
  wait "$S3PID" 2>/dev/null || true
  snaps_before=$(psql_q "SELECT count(*) FROM snapshots")
  src_node=$(node_of "$SNAP_SRC")
  dirs_before=$(ls "$T/node-${src_node#node-}/data/snapshots" | wc -l)
  apij POST "/v1/sandboxes/$SNAP_SRC/snapshot" '{}'
  check objstore.down_snapshot_503 "$(snip)" okj 503 '.error.code == "node_unavailable" and (.error.message | test("object store"))'
  check objstore.down_nothing_recorded "snapshots $snaps_before -> $(psql_q "SELECT count(*) FROM snapshots"); image dirs $dirs_before -> $(ls "$T/node-${src_node#node-}/data/snapshots" | wc -l)" \
    test "$(psql_q "SELECT count(*) FROM snapshots")" = "$snaps_before" -a "$(ls "$T/node-${src_node#node-}/data/snapshots" | wc -l)" = "$dirs_before"
  run_exec "$SNAP_SRC" '{"cmd": "echo alive"}'
  check objstore.down_source_runs_on "$(snip)" okj 200 '.stdout == "alive\n"'
  "$HERE/node_modules/.bin/s3rver" -d "$T/s3" -a 127.0.0.1 -p "$S3PORT" --silent --configure-bucket b3os \
    >>"$T/s3.log" 2>&1 </dev/null &
  S3PID=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$S3PORT/" && break; sleep 0.1; done
  apij POST "/v1/sandboxes/$SNAP_SRC/snapshot" '{}'
  check objstore.back_snapshot_works "$(snip)" sh -c "[ '$ST' = 201 ] || [ '$ST' = 200 ]"
else
  skip objstore.down_snapshot_503 "the object store is a shared directory here (s3rver missing)"
fi
# A delete removes the snapshot's objects.
api DELETE "/v1/snapshots/$SNP2"
check objstore.delete_removes_objects "$(snip); manifest $(s3 HEAD "snapshots/$SNP2/manifest.json")" \
  test "$ST" = 200 -a "$(s3 HEAD "snapshots/$SNP2/manifest.json")" = 404

# ---- templates are the cluster's: built on one node, run on every node ----------------------------
# A context uploaded to node a (it goes to the object store too); the template asked of node b,
# which fetches the upload and builds it; its log followed through a router (sent to b); its
# root put in the object store before it is ready; sandboxes of it on all three nodes (a and c
# fetch the root at their first create); another project's key can use neither the upload
# nor the template; a delete on node c hides it everywhere.

mkdir -p "$T/tctx" && echo "ctx-$$" >"$T/tctx/hello.txt" && tar -C "$T/tctx" -cf "$T/tctx.tar" .
URL=${NODE_URL[a]}
api POST /v1/templates/uploads -H 'Content-Type: application/x-tar' --data-binary "@$T/tctx.tar"
UPL=$(j .id)
check tpl.upload_on_a "$(snip)" okj 201 '.id | startswith("upl_")'
check tpl.upload_in_object_store "meta $(s3 HEAD "template-uploads/$UPL/meta.json")" test "$(s3 HEAD "template-uploads/$UPL/meta.json")" = 200
URL=${NODE_URL[b]}
apij POST /v1/templates '{"name": "clt", "context": {"upload": "'"$UPL"'", "dest": "/srv/ctx"}, "run": ["cat /srv/ctx/hello.txt > /srv/from-run.txt"]}'
BLD=$(j .build.id)
check tpl.asked_of_b "$(snip)" test "$ST" = 202
check tpl.built_on_b "build $BLD on $(psql_q "SELECT node_id FROM template_builds WHERE id = '$BLD'")" \
  test "$(psql_q "SELECT node_id FROM template_builds WHERE id = '$BLD'")" = node-b
curl -sN -m 600 -H "Authorization: Bearer $KEY" "${ROUTERS[0]}/v1/templates/clt/builds/$BLD/logs?follow=true" >"$T/tpl.log" 2>&1 || true
check tpl.log_followed_through_router "$(tail -c 300 "$T/tpl.log" | tr '\n' ' ')" grep -q '^== ready' "$T/tpl.log"
ART=$(psql_q "SELECT artifact FROM template_builds WHERE id = '$BLD'")
check tpl.root_in_object_store "artifact $ART: $(s3 HEAD "template-roots/$ART/manifest.json")" \
  test -n "$ART" -a "$(s3 HEAD "template-roots/$ART/manifest.json")" = 200
ran=""
for n in a b c; do
  URL=${NODE_URL[$n]}
  create_sandbox '{"template": "clt", "timeout_s": 120}'
  if [ -n "$CID" ]; then
    run_exec "$CID" '{"cmd": "cat /srv/from-run.txt"}'
    okj 200 '.stdout == "ctx-'"$$"'\n"' && ran="$ran $n"
    delete_sandbox "$CID" || true
  else
    info "template clt on node $n: $(snip)"
  fi
done
check tpl.runs_on_every_node "ran on:$ran" test "$ran" = " a b c"
check tpl.root_fetched_by_others "$(ls -d "$T"/node-*/data/template-roots/"$ART" 2>/dev/null | tr '\n' ' ')" \
  test "$(ls -d "$T"/node-*/data/template-roots/"$ART" 2>/dev/null | wc -l)" = 3
OTHER_KEY=$("$B3OS_BIN/b3os" keys create --project tpl-other --store "$STORE" 2>/dev/null)
URL=${NODE_URL[c]}
KEY=$OTHER_KEY apij POST /v1/templates '{"name": "stolen", "context": {"upload": "'"$UPL"'", "dest": "/x"}, "run": ["true"]}'
check tpl.other_project_upload_refused "$(snip); $(ls "$T/node-c/data/template-uploads" | tr '\n' ' ')" \
  sh -c "[ '$ST' = 400 ] && [ ! -e '$T/node-c/data/template-uploads/$UPL.tar' ]"
KEY=$OTHER_KEY api GET /v1/templates/clt
expect_error tpl.other_project_404 404 template_not_found
api DELETE /v1/templates/clt
expect tpl.deleted_on_c 200
sleep 1.2  # each node reads the builds at most once a second
gone=""
for n in a b; do
  URL=${NODE_URL[$n]}
  api GET /v1/templates/clt
  [ "$ST" = 404 ] && gone="$gone $n"
done
check tpl.gone_everywhere "gone on:$gone" test "$gone" = " a b"
# A snapshot kept until the section "the object store is collected", minutes from now.
URL=${NODE_URL[a]}
create_sandbox '{"timeout_s": 1800}'
GC_SBX=$CID
GC_SNP=
if [ -n "$GC_SBX" ]; then
  api POST "/v1/sandboxes/$GC_SBX/snapshot"
  GC_SNP=$(j .id)
fi

# ---- a drain moves the sandboxes whose owners allowed it ------------------------------------------
# After --drain-move-after (30 s by default) a draining node hands each forkable sandbox to
# another node: its image through the object store, the same id, its files and processes
# going on there; a sandbox that is not forkable stays and runs; nothing of the moved one is
# left on the drained node; a request through a router reaches it after at most one 503.

URL=${NODE_URL[a]}
create_sandbox '{"forkable": true, "timeout_s": 600}'
MV=$CID
create_sandbox '{"timeout_s": 600}'
STAY=$CID
URL=${ROUTERS[0]}
if [ -n "$MV" ] && [ -n "$STAY" ]; then
  run_exec "$MV" '{"cmd": "echo before-move > /tmp/before.txt; nohup sh -c '"'"'i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done'"'"' >/dev/null 2>&1 & echo $!"}'
  MVPID=$(j .stdout | tr -d '\n')
  run_exec "$MV" '{"cmd": "cat /tmp/before.txt"}'  # the router now has it on node-a
  "$B3OS_BIN/b3os" nodes drain node-a --store "$STORE" >/dev/null
  moved_to=""
  for _ in $(seq 1 150); do
    n=$(node_of "$MV")
    if [ -n "$n" ] && [ "$n" != node-a ]; then moved_to=$n; break; fi
    sleep 1
  done
  check drain.forkable_moved "on ${moved_to:-node-a}; node a: $(grep -E 'drain|mov' "$T/node-a/log" | tail -n 3 | tr '\n' ' ')" test -n "$moved_to"
  n503=0
  for _ in 1 2 3 4 5 6; do
    run_exec "$MV" '{"cmd": "cat /tmp/before.txt; kill -0 '"$MVPID"' && echo alive; cat /tmp/count"}'
    [ "$ST" != 200 ] || break
    [ "$ST" != 503 ] || n503=$((n503 + 1))
    sleep 1
  done
  check drain.moved_keeps_files_and_processes "$(snip)" okj 200 '.stdout | startswith("before-move\nalive\n")'
  check drain.at_most_one_503 "$n503 answers 503" test "$n503" -le 1
  c1=$(j .stdout | tail -n 1)
  sleep 1.5
  run_exec "$MV" '{"cmd": "cat /tmp/count"}'
  c2=$(j .stdout | tr -d '\n')
  check drain.process_goes_on_counting "count $c1, then $c2" test "${c2:-0}" -gt "${c1:-0}"
  check drain.not_forkable_stays "on $(node_of "$STAY")" test "$(node_of "$STAY")" = node-a
  run_exec "$STAY" '{"cmd": "echo still"}'
  check drain.not_forkable_runs "$(snip)" okj 200 '.stdout == "still\n"'
  # The node's other forkable sandboxes (the fork source above and its forks, when they are
  # here) move in the same pass: their images are gone once their moves end.
  for _ in $(seq 1 60); do
    [ -z "$(ls "$T/node-a/data/fork-images" 2>/dev/null)" ] && break
    sleep 1
  done
  # (Its cgroups are the machine's: the node it moved to, on this same machine, has made its own.)
  left=$( (runsc --root "$T/node-a/run/runsc" list --quiet 2>/dev/null | grep -x "$MV"
    ls -d "$T/node-a/run/sandboxes/$MV" "$T"/node-a/data/fork-images/* 2>/dev/null) | tr '\n' ' ' || true)
  check drain.nothing_left_on_drained_node "left: $left" test -z "$left"
  "$B3OS_BIN/b3os" nodes ready node-a --store "$STORE" >/dev/null
  delete_sandbox "$MV" || true
  delete_sandbox "$STAY" || true
else
  fail drain.forkable_moved "creates on node a: $(snip)"
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

# ---- Postgres restarted under load -------------------------------------------------------------
# Six clients, through both routers, loop over the six sandboxes (GET it, exec `true` in it)
# while Postgres restarts (pg_ctl stop -m fast, then start on the same data). Every answer must
# be a 2xx with the right body or a typed 503 (a JSON .error.code, and Retry-After): no 500, no
# connection cut without an answer. Requests succeed again within 10 s of Postgres being back
# and keep succeeding, the nodes stay ready (a restart of a second or two is far below the 10 s
# silence that marks a node down), and no record is lost. No psql here while Postgres is away
# (set -e). Postgres away for longer than 10 s is not tested: see docs/cluster.md, "Faults".

# load_client N ID ROUTER: until $T/load.stop exists, one line per request in $T/load.N.log:
# KIND START_MS END_MS STATUS CURL_EXIT ERROR_CODE OK ("-" for none; OK is "bad" for a 200
# with the wrong body or a 503 without Retry-After); each answer but a good 2xx in load.N.answers.
load_client() {
  local n=$1 id=$2 url=$3 i=0 kind st rc code ok t0 t1 body=$T/load.$1.body hdr=$T/load.$1.headers
  : >"$T/load.$n.log"
  while [ ! -e "$T/load.stop" ]; do
    : >"$body"
    : >"$hdr"
    rc=0
    t0=$(now_ms)
    if [ $((i % 2)) = 0 ]; then
      kind="get"
      st=$(curl -s -m 20 -o "$body" -D "$hdr" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$url/v1/sandboxes/$id") || rc=$?
    else
      kind="exec"
      st=$(curl -s -m 20 -o "$body" -D "$hdr" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        --data '{"cmd": ["true"]}' "$url/v1/sandboxes/$id/exec") || rc=$?
    fi
    t1=$(now_ms)
    code=$(jq -r '.error.code // empty' "$body" 2>/dev/null || true)
    ok=-
    case "$kind:$st" in
      get:200) jq -e --arg id "$id" '.id == $id and .status == "running"' "$body" >/dev/null 2>&1 && ok=ok || ok=bad ;;
      exec:200) jq -e '.exit_code == 0' "$body" >/dev/null 2>&1 && ok=ok || ok=bad ;;
      *:503) grep -qi '^retry-after:' "$hdr" && ok=retry-after || ok=bad ;;
    esac
    echo "$kind $t0 $t1 ${st:-000} $rc ${code:--} $ok" >>"$T/load.$n.log"
    [ "$ok" = ok ] || echo "$kind HTTP ${st:-000} curl-exit-$rc: $(head -c 240 "$body" | tr '\n' ' ')" >>"$T/load.$n.answers"
    i=$((i + 1))
  done
}
# load_ok_after KIND MS: a KIND request that started at MS or later had a good 2xx.
load_ok_after() { { cat "$T"/load.*.log 2>/dev/null || true; } | awk -v k="$1" -v t="$2" '$1 == k && $2 >= t && $4 ~ /^2/ && $7 != "bad" { f = 1 } END { exit !f }'; }

# pg_restart_report DIR DOWN_MS UP_MS PG_OK BACK_MS: the summary of the load through the
# restart and its two checks, from the clients' DIR/load.*.log and DIR/load.*.answers. A client
# writes an .answers file only for answers that were not good, so when the outage cost no
# request (the best outcome) there is none: every glob and grep here may match nothing.
pg_restart_report() {
  local d=$1 down=$2 up=$3 pg_ok=$4 back=$5 n_req seen n_503 last_bad_ms
  { cat "$d"/load.*.log 2>/dev/null || true; } >"$d/load.all"
  n_req=$(wc -l <"$d/load.all")
  seen=$(awk '{ print $1 " " $4 ($6 != "-" ? " " $6 : "") ($5 != 0 ? " curl-exit-" $5 : "") ($7 == "bad" ? " BAD" : $7 == "retry-after" ? " Retry-After" : "") }' "$d/load.all" |
    sort | uniq -c | awk '{ c = $1; $1 = ""; printf "%s%s x%d", (NR > 1 ? ";" : ""), $0, c }')
  # Neither a 2xx with the right body nor a 503 with an error code and Retry-After: each such line.
  awk '!(($4 ~ /^2/ && $7 != "bad") || ($4 == 503 && $6 != "-" && $7 != "bad"))' "$d/load.all" >"$d/load.bad"
  n_503=$(awk '$4 == 503 { n++ } END { print n + 0 }' "$d/load.all")
  # The last answer that was not a good 2xx, in ms after Postgres was back (<= 0: none after).
  last_bad_ms=$(awk -v u="$up" '!($4 ~ /^2/ && $7 != "bad") { if ($3 - u > m) m = $3 - u } END { print m + 0 }' "$d/load.all")
  info "postgres restart: down for $((up - down)) ms (pg_restart ok=$pg_ok); $n_req requests by 6 clients, $n_503 answered 503;" \
    "both kinds succeeded again ${back:-never (15 s)} ms after it was back; last failure ${last_bad_ms} ms after; seen:$seen"
  # The answers that were not good, by kind (awk, not head: nothing closes the pipe early).
  { cat "$d"/load.*.answers 2>/dev/null || true; } | sed -E 's/sbx_[0-9a-z]+/sbx_ID/g; s/req_[0-9a-z]+/req_ID/g' |
    sort | uniq -c | sort -rn | awk 'NR <= 6 { sub(/^ */, ""); print "# postgres restart: answer (times seen) " $0 }'
  [ -s "$d/load.bad" ] || [ -n "$(cat "$d"/load.*.answers 2>/dev/null || true)" ] || info "postgres restart: every answer was a good 2xx"
  check pg_restart.answers_2xx_or_typed_503 "$(wc -l <"$d/load.bad") answers neither a good 2xx nor a typed 503: $(awk 'NR <= 5' "$d/load.bad" | tr '\n' '|'); all seen:$seen" \
    test "$pg_ok:$(wc -l <"$d/load.bad")" = 1:0
  check pg_restart.requests_succeed_within_10s "both kinds ok again after ${back:-never} ms; last failure ${last_bad_ms} ms after Postgres was back" \
    test -n "$back" -a "${back:-99999}" -le 10000 -a "$last_bad_ms" -le 10000
}

# The report fed load logs made up here, before the real run: one where the outage cost no
# request (no .answers file at all; the run that once ended the suite at this point), one with
# typed 503s, one with a 500. Each in a subshell under the suite's set -euo pipefail, its results
# apart: it must get to its end, with the outcome its log calls for.
pg_report_selftest() {  # NAME WANT_PASS WANT_FAIL LINES...: the lines are load.0.log's
  local name=$1 want_pass=$2 want_fail=$3 d out rc=0 l
  shift 3
  d=$T/pgreport.$name
  mkdir -p "$d"
  printf '%s\n' "$@" >"$d/load.0.log"
  for l in "$@"; do
    case $l in *" ok") ;; *) echo "${l%% *} HTTP made-up" >>"$d/load.0.answers" ;; esac
  done
  # In the background and waited for: a subshell run where errexit is ignored (left of ||, in
  # a command substitution) would ignore its own set -e too, and this must run as the suite does.
  (set -euo pipefail; E2E_RESULTS=$d/results; : >"$E2E_RESULTS"; pg_restart_report "$d" 1000 1600 1 800
    echo "counts $(count_results PASS) $(count_results FAIL)") >"$d/out" 2>&1 &
  wait $! || rc=$?
  out=$(cat "$d/out")
  check "pg_restart.report_$name" "exit $rc, want $want_pass passed and $want_fail failed: $(tr '\n' '|' <<<"$out")" \
    test "$rc:$(tail -n 1 <<<"$out")" = "0:counts $want_pass $want_fail"
}
pg_report_selftest no_failed_answer 2 0 "get 900 950 200 0 - ok" "exec 960 1200 200 0 - ok" "get 1700 1710 200 0 - ok" "exec 1700 1800 200 0 - ok"
pg_report_selftest typed_503s 2 0 "get 900 950 200 0 - ok" "exec 1000 1100 503 0 store_unavailable retry-after" "get 1700 1710 200 0 - ok"
pg_report_selftest a_500 1 1 "get 900 950 200 0 - ok" "exec 1000 1100 500 0 internal -" "get 1700 1710 200 0 - ok"

rows_before=$(psql_q "SELECT count(*) FROM sandboxes")
psql_q "SELECT id FROM sandboxes WHERE state = 'running' ORDER BY id" >"$T/running.before"
rm -f "$T/load.stop" "$T"/load.*.log "$T"/load.*.answers
loaders=()
for i in "${!IDS[@]}"; do
  load_client "$i" "${IDS[$i]}" "${ROUTERS[$((i % 2))]}" &
  loaders+=($!)
done
sleep 2
pg_down_ms=$(now_ms)
pg_restart && pg_ok=1 || pg_ok=0
pg_up_ms=$(now_ms)
# Until both kinds of request have succeeded again (at most 15 s), then 3 s more of load.
back_ms=
for _ in $(seq 1 150); do
  if load_ok_after get "$pg_up_ms" && load_ok_after exec "$pg_up_ms"; then back_ms=$(($(now_ms) - pg_up_ms)); break; fi
  sleep 0.1
done
sleep 3
touch "$T/load.stop"
wait "${loaders[@]}" || true
pg_restart_report "$T" "$pg_down_ms" "$pg_up_ms" "$pg_ok" "$back_ms"
# Three heartbeats (2 s each) after Postgres came back, every node still ready and running.
while [ $(($(now_ms) - pg_up_ms)) -lt 6500 ]; do sleep 0.2; done
states=$(psql_q "SELECT id || ':' || state FROM nodes ORDER BY id" | tr '\n' ' ')
alive=0
for n in "${NODES[@]}"; do kill -0 "${NODE_PID[$n]}" 2>/dev/null && alive=$((alive + 1)); done
check pg_restart.nodes_still_ready "nodes $states; $alive of 3 b3osd alive (a node marked down by the outage is a bug)" \
  test "$(psql_q "SELECT count(*) FROM nodes WHERE state = 'ready'"):$alive" = 3:3
rows_after=$(psql_q "SELECT count(*) FROM sandboxes")
psql_q "SELECT id FROM sandboxes WHERE state = 'running' ORDER BY id" >"$T/running.after"
gone=$(comm -23 "$T/running.before" "$T/running.after" | tr '\n' ' ')
check pg_restart.no_record_lost "rows $rows_before before, $rows_after after; running before and not after: ${gone:-none}" \
  test "$rows_before" = "$rows_after" -a -z "$gone" -a -s "$T/running.before"

# ---- one spend cap across the nodes, through a Postgres restart -----------------------------------
# A key capped at $3; a sandbox of it on each node (their calls charge the key's budget), each
# racing 25 model calls at once through its own node's gateway, and Postgres restarted while
# the calls are in flight. Every answer is 200, 402 spend_cap_reached or a typed 503; the
# ledger holds exactly the admitted calls, its sum is what the budget says was spent and no
# more than the cap, and nothing stays held.

BKEY=$("$B3OS_BIN/b3os" keys create --project capped --spend-cap-usd 3 --store "$STORE" 2>/dev/null)
BSB=()
for n in "${NODES[@]}"; do
  URL=${NODE_URL[$n]}
  KEY=$BKEY create_sandbox '{"api": {"scopes": ["infer:run"]}, "timeout_s": 600}'
  [ -z "$CID" ] || BSB+=("$CID")
  [ -z "$CID" ] || KEY=$BKEY api PUT "/v1/sandboxes/$CID/files?path=/opt/racer.py" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$ROOT/tests/fixtures/model_racer.py"
done
if [ "${#BSB[@]}" = 3 ]; then
  KEY=$BKEY api GET "/v1/sandboxes/${BSB[0]}"
  BUDGET=$(j .api.budget_id)
  for i in 0 1 2; do
    URL=${NODE_URL[${NODES[$i]}]}
    KEY=$BKEY run_exec "${BSB[$i]}" '{"cmd": "nohup python3 /opt/racer.py 25 > /tmp/race.json 2>/tmp/race.err &"}'
  done
  sleep 0.7
  pg_restart 1 && pg_ok=1 || pg_ok=0
  done_n=0
  for _ in $(seq 1 90); do
    done_n=0
    for i in 0 1 2; do
      URL=${NODE_URL[${NODES[$i]}]}
      KEY=$BKEY run_exec "${BSB[$i]}" '{"cmd": "cat /tmp/race.json"}'
      if okj 200 '.stdout | length > 0'; then j .stdout >"$T/brace.$i.json"; done_n=$((done_n + 1)); fi
    done
    [ "$done_n" != 3 ] || break
    sleep 1
  done
  cat "$T"/brace.*.json 2>/dev/null | jq -s 'add' >"$T/brace.all.json" 2>/dev/null || echo '[]' >"$T/brace.all.json"
  info "spend cap across nodes: $(jq -c 'group_by(.status) | map({status: .[0].status, code: (.[0].body.error.code // null), n: length})' "$T/brace.all.json")"
  check budget.races_finished "$done_n of 3 racers wrote their results; postgres restart ok=$pg_ok" test "$done_n:$pg_ok" = 3:1
  check budget.answers_typed "$(jq -c '[.[] | select(.status != 200) | {status, code: .body.error.code, message: (if .status == 402 then null else (.body.error.message // .error) end)}] | unique' "$T/brace.all.json")" \
    jq -e 'length == 75 and all(.[]; .status == 200 or (.status == 402 and .body.error.code == "spend_cap_reached") or (.status == 503 and (.body.error.code | type) == "string"))' "$T/brace.all.json"
  check budget.some_admitted_some_refused "$(jq -c 'map(.status) | group_by(.) | map({(.[0] | tostring): length}) | add' "$T/brace.all.json")" \
    jq -e 'map(.status) | (index(200) != null) and (index(402) != null)' "$T/brace.all.json"
  # The settles of calls that were in flight through the restart may take a moment.
  for _ in $(seq 1 30); do
    [ "$(psql_q "SELECT reserved_micros FROM budgets WHERE id = '$BUDGET'")" = 0 ] && break
    sleep 0.5
  done
  admitted=$(jq '[.[] | select(.status == 200)] | length' "$T/brace.all.json")
  ledger=$(psql_q "SELECT count(*) FILTER (WHERE status = 200) || ' ' || COALESCE(sum(cost_micros), 0) FROM ledger WHERE budget_id = '$BUDGET'")
  budget=$(psql_q "SELECT spent_micros || ' ' || reserved_micros || ' ' || cap_micros FROM budgets WHERE id = '$BUDGET'")
  holds=$(psql_q "SELECT count(*) FROM budget_holds WHERE budget_id = '$BUDGET'")
  read -r l_n l_sum <<<"$ledger"
  read -r b_spent b_reserved b_cap <<<"$budget"
  check budget.ledger_is_the_admitted_calls "admitted $admitted, ledger rows $l_n" test "$admitted" = "$l_n"
  check budget.spent_is_the_ledger_within_cap "ledger sum $l_sum, spent $b_spent, cap $b_cap" \
    test "$l_sum" = "$b_spent" -a "$b_spent" -le "$b_cap" -a "$b_spent" -gt 0
  check budget.nothing_held "reserved $b_reserved, holds $holds" test "$b_reserved:$holds" = 0:0
  for i in 0 1 2; do URL=${NODE_URL[${NODES[$i]}]}; KEY=$BKEY delete_sandbox "${BSB[$i]}" || true; done
else
  fail budget.races_finished "a sandbox of the capped key on each node: $(snip)"
fi

# ---- one limit per project across the nodes ------------------------------------------------------
# PER_PROJECT + 3 creates of one project at once, through both routers, placed over the three
# nodes: exactly PER_PROJECT run, the rest are 429 concurrency_limited, and no start stays held.

TKEY=$("$B3OS_BIN/b3os" keys create --project tight --store "$STORE" 2>/dev/null)
n_try=$((PER_PROJECT + 3))
racers=()
for i in $(seq 1 "$n_try"); do
  curl -s -o "$T/tight.$i" -w '%{http_code}' -m 120 -H "Authorization: Bearer $TKEY" -H 'Content-Type: application/json' \
    --data '{"timeout_s": 300}' "${ROUTERS[$((i % 2))]}/v1/sandboxes" >"$T/tight.$i.code" 2>/dev/null &
  racers+=($!)
done
wait "${racers[@]}" || true
made=0 limited=0 other=""
for i in $(seq 1 "$n_try"); do
  c=$(cat "$T/tight.$i.code" 2>/dev/null)
  case $c in
    201) made=$((made + 1)); jq -r '.id // empty' "$T/tight.$i" >>"$T/ids" ;;
    429) if jq -e '.error.code == "concurrency_limited"' "$T/tight.$i" >/dev/null 2>&1; then limited=$((limited + 1)); else other+="$c "; fi ;;
    *) other+="$c:$(head -c 120 "$T/tight.$i" 2>/dev/null) " ;;
  esac
done
tight_nodes=$(psql_q "SELECT count(DISTINCT node_id) FROM sandboxes s JOIN projects p ON p.id = s.project_id WHERE p.name = 'tight' AND s.state = 'running'")
check project_limit.exact_across_nodes "$made made on $tight_nodes nodes, $limited concurrency_limited, other: ${other:-none}" \
  test "$made" = "$PER_PROJECT" -a "$limited" = 3 -a -z "$other"
check project_limit.spread "$tight_nodes nodes" test "$tight_nodes" -ge 2
check project_limit.no_start_held "$(psql_q "SELECT count(*) FROM project_starts")" test "$(psql_q "SELECT COALESCE(SUM(starting), 0) FROM project_starts")" = 0
grep -h 'limit of' "$T"/tight.[0-9]* 2>/dev/null | head -n1 | sed 's/^/# a refused create: /' || true
racers=()
for id in $(psql_q "SELECT s.id FROM sandboxes s JOIN projects p ON p.id = s.project_id WHERE p.name = 'tight' AND s.state = 'running'"); do
  curl -s -o /dev/null -m 60 -X DELETE -H "Authorization: Bearer $TKEY" "${ROUTERS[0]}/v1/sandboxes/$id" &
  racers+=($!)
done
wait "${racers[@]}" || true
check project_limit.all_deleted "$(psql_q "SELECT count(*) FROM sandboxes s JOIN projects p ON p.id = s.project_id WHERE p.name = 'tight' AND s.state = 'running'") left" \
  test "$(psql_q "SELECT count(*) FROM sandboxes s JOIN projects p ON p.id = s.project_id WHERE p.name = 'tight' AND s.state = 'running'")" = 0

# ---- Postgres away longer than the silence limit: no node marked down -----------------------------
# Every node is silent while the store is away; none may take the others' silence for death
# when it comes back (a node judges others only after 10 s of its own heartbeats, no gap).

# A model call admitted just before Postgres goes away and answered while it is away: its
# answer does not wait for the store; its settle is kept (in the node's journal) and written
# once the store answers, 14 s later: the ledger has the call, once, and nothing stays held.
SKEY=$("$B3OS_BIN/b3os" keys create --project settle --spend-cap-usd 3 --store "$STORE" 2>/dev/null)
URL=${NODE_URL[b]}
KEY=$SKEY create_sandbox '{"api": {"scopes": ["infer:run"]}, "timeout_s": 600}'
SSBX=$CID
SBUDGET=
if [ -n "$SSBX" ]; then
  KEY=$SKEY api PUT "/v1/sandboxes/$SSBX/files?path=/opt/racer.py" \
    -H 'Content-Type: application/octet-stream' --data-binary "@$ROOT/tests/fixtures/model_racer.py"
  KEY=$SKEY api GET "/v1/sandboxes/$SSBX"
  SBUDGET=$(j .api.budget_id)
  KEY=$SKEY run_exec "$SSBX" '{"cmd": "nohup python3 /opt/racer.py 1 > /tmp/one.json 2>/tmp/one.err &"}'
  # Admitted (its hold is a row), then the store goes: the model answers 1.5 s after admission.
  for _ in $(seq 1 50); do [ "$(psql_q "SELECT count(*) FROM budget_holds WHERE budget_id = '$SBUDGET'")" = 1 ] && break; sleep 0.05; done
fi
held_before=$(psql_q "SELECT count(*) FROM budget_holds WHERE budget_id = '$SBUDGET'")

psql_q "SELECT id FROM sandboxes WHERE state = 'running' ORDER BY id" >"$T/running.away"
pg_restart 14 || die "postgres did not come back"
sleep 13  # past the silence limit again, the store up: every node has beaten again meanwhile
check pg_away.no_node_marked_down "$(psql_q "SELECT id || '=' || state FROM nodes ORDER BY id" | tr '\n' ' ')" \
  test "$(psql_q "SELECT count(*) FROM nodes WHERE state <> 'ready'")" = 0
# Running before and not after; one whose own idle timeout ended meanwhile stopped as it
# would have anyway, and is only listed.
gone=$(comm -23 "$T/running.away" <(psql_q "SELECT id FROM sandboxes WHERE state = 'running' OR (state = 'stopped' AND stop_reason = 'timeout') ORDER BY id") | tr '\n' ' ')
timed_out=$(comm -12 "$T/running.away" <(psql_q "SELECT id FROM sandboxes WHERE state = 'stopped' AND stop_reason = 'timeout' ORDER BY id") | tr '\n' ' ')
check pg_away.sandboxes_still_running "running before and not after: ${gone:-none} (stopped by their own timeout meanwhile: ${timed_out:-none})" \
  test -z "$gone"
URL=${ROUTERS[1]}
run_exec "${IDS[0]}" '{"cmd": "echo back"}'
check pg_away.serves_again "$(snip)" okj 200 '.stdout == "back\n"'

if [ -n "$SSBX" ]; then
  URL=${NODE_URL[b]}
  KEY=$SKEY run_exec "$SSBX" '{"cmd": "cat /tmp/one.json"}'
  check settle.call_answered "held before the outage: $held_before; $(snip)" okj 200 '(.stdout | fromjson | .[0].status) == 200'
  check settle.kept_while_away "$(grep -E 'settle of hold|pending settles' "$T/node-b/log" | tail -n 2 | tr '\n' ' ')" \
    grep -q 'the settle of hold .* waits for it' "$T/node-b/log"
  for _ in $(seq 1 40); do
    [ "$(psql_q "SELECT count(*) FROM budget_holds WHERE budget_id = '$SBUDGET'")" = 0 ] && break
    sleep 0.5
  done
  row=$(psql_q "SELECT count(*) || ' ' || COALESCE(sum(cost_micros), 0) || ' ' || count(hold_id) FROM ledger WHERE budget_id = '$SBUDGET'")
  bud=$(psql_q "SELECT spent_micros || ' ' || reserved_micros FROM budgets WHERE id = '$SBUDGET'")
  read -r s_rows s_sum s_with_hold <<<"$row"
  read -r s_spent s_reserved <<<"$bud"
  check settle.written_once "ledger rows $s_rows (with their hold $s_with_hold), sum $s_sum; spent $s_spent, reserved $s_reserved" \
    test "$s_rows:$s_with_hold:$s_reserved" = 1:1:0 -a "$s_sum" = "$s_spent" -a "$s_spent" -gt 0
  check settle.journal_gone "$(ls "$T/node-b/data" | tr '\n' ' ')" test ! -e "$T/node-b/data/pending-settles.json"
  KEY=$SKEY delete_sandbox "$SSBX" || true
  URL=${ROUTERS[1]}
else
  fail settle.call_answered "a sandbox of the key settle: $(snip)"
fi

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

# ---- a node killed mid-create, and mid-fork ------------------------------------------------------
# The same node again ($victim: none of the sandboxes the later sections use is on it). The two
# others are drained first, so that placement has only it; they are set ready at the end.

# after_kill NAME CPID IDS_JQ WHAT: the checks after node $victim was killed under the request
# of client CPID ($T/NAME.code and $T/NAME.json; IDS_JQ picks the ids a 2xx would claim): it
# was killed in flight, the client got no 2xx, the node is marked down with no row of it left
# running, and its restart leaves nothing on the host.
after_kill() {
  local name=$1 cpid=$2 ids=$3 what=$4 crc st ecode answer down_ms left
  wait "$cpid" && crc=0 || crc=$?
  st=$(cat "$T/$name.code" 2>/dev/null || true)
  ecode=$(jq -r '.error.code // empty' "$T/$name.json" 2>/dev/null || true)
  # The node is killed mid-request on purpose, so the body may be cut short or missing: jq
  # then fails, and as the last substitution of an assignment its status would be the
  # assignment's and end the suite here, before the checks below say what the client got.
  case "$st" in
    2*) answer="HTTP $st claiming $(jq -r "[$ids] | join(\" \")" "$T/$name.json" 2>/dev/null || true)"
        jq -r "$ids" "$T/$name.json" >>"$T/ids" 2>/dev/null || true ;;
    000 | "") answer="no answer: the connection was cut (curl exit $crc)" ;;
    *) answer="HTTP $st ${ecode:-untyped}: $({ jq -r '.error.message // empty' "$T/$name.json" 2>/dev/null || true; } | head -c 200)" ;;
  esac
  info "$name: the client got $answer"
  check "$name.killed_in_flight" "$what when the node was killed (${KILL_MS} ms; $answer)" test "$KILL_SEEN" = 1
  check "$name.client_answer_not_2xx" "$answer" \
    sh -c "[ '$st' = 000 ] || [ -z '$st' ] || { [ '$st' = 503 ] && [ -n '$ecode' ]; }"
  down_ms=$(wait_down "$victim")
  left=$(psql_q "SELECT id || ':' || state FROM sandboxes WHERE node_id = '$victim' AND state NOT IN ('stopped', 'failed')" | tr '\n' ' ')
  info "$name: node $victim marked down after $down_ms ms; its rows not ended: ${left:-none}"
  check "$name.no_row_left_running" "down after $down_ms ms; rows of $victim not ended: ${left:-none}" \
    test "$down_ms" != never -a -z "$left"
  restart_clean "$vn" "$name"
}

# node_leftovers N: what of node N is on the host: runsc containers, sandbox directories, disks
# (files and mounts), fork images, shims. Empty when there is nothing.
node_leftovers() {
  local d=$T/node-$1 f
  runsc --root "$d/run/runsc" list --quiet 2>/dev/null | sed 's/^/container:/'
  for f in "$d"/run/sandboxes/* "$d"/data/disks/* "$d"/data/fork-images/*; do
    [ -e "$f" ] && echo "${f#"$d"/}"
  done
  awk -v p="$d/data/disks/" 'index($2, p) == 1 { print "mount:" $2 }' /proc/mounts
  pgrep -af "b3os-shim $d/" 2>/dev/null | sed 's/^/shim:/' || true  # "shim:PID CMDLINE" (its sandbox's dir)
}
node_clean() { [ -z "$(node_leftovers "$1")" ]; }
# node_stale N: node_leftovers N less what belongs to sandboxes running on it now (the nodes
# drained for the sections below move their forkable sandboxes to it once it is back, as they
# should): what is left of the sandboxes it had when it was killed.
node_stale() {
  local live
  live=$(psql_q "SELECT id FROM sandboxes WHERE node_id = 'node-$1' AND state = 'running'" | tr '\n' '|')
  if [ -z "$live" ]; then node_leftovers "$1"; else node_leftovers "$1" | grep -Ev "(${live%|})" || true; fi
}
node_fresh() { [ -z "$(node_stale "$1")" ]; }
# wait_down NODE_ID: waits (up to 25 s) for the store to have it down; prints the ms it took.
wait_down() {
  local t0 s
  t0=$(now_ms)
  for _ in $(seq 1 250); do
    s=$(psql_q "SELECT state FROM nodes WHERE id = '$1'" || true)
    [ "$s" != down ] || { echo $(($(now_ms) - t0)); return 0; }
    sleep 0.1
  done
  echo never
}
# restart_clean N CHECK: starts node N again; CHECK.restart_clean passes when it is ready
# and, within 20 s (its orphan sweep runs behind the API), nothing of it is left on the host.
restart_clean() {
  local n=$1 name=$2
  start_node "$n" || { fail "$name.restart_clean" "node $n did not start again"; return 0; }
  eventually 20 node_fresh "$n" || true
  local st left
  st=$(psql_q "SELECT state FROM nodes WHERE id = 'node-$n'")
  left=$(node_stale "$n" | tr '\n' ' ')
  info "$name: node-$n restarted, $st; left on the host: ${left:-nothing}"
  check "$name.restart_clean" "node-$n $st; left on the host: ${left:-nothing}" test "$st:$left" = ready:
}
# in_flight_kill N PID NAME WHAT CMD...: waits (up to 20 s, every 5 ms) for CMD to succeed (WHAT
# says what it looks for) while the client PID is still waiting, then SIGKILLs node N. Says what
# was on the host at the kill; sets KILL_MS (ms after the call) and KILL_SEEN (1: CMD held).
in_flight_kill() {
  local n=$1 cpid=$2 name=$3 what=$4 t0
  shift 4
  local waiting=no
  t0=$(now_ms)
  KILL_SEEN=0
  for _ in $(seq 1 4000); do
    if "$@"; then KILL_SEEN=1; break; fi
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.005
  done
  ! kill -0 "$cpid" 2>/dev/null || waiting=yes
  kill -KILL "${NODE_PID[$n]}" 2>/dev/null || true
  KILL_MS=$(($(now_ms) - t0))
  wait "${NODE_PID[$n]}" 2>/dev/null || true
  [ "$waiting" = yes ] || KILL_SEEN=0  # the answer came first: not killed in flight
  info "$name: node-$n SIGKILLed ${KILL_MS} ms after the request was sent ($what: $([ "$KILL_SEEN" = 1 ] && echo yes ||
    echo no); client still waiting then: $waiting); on the host after the kill:" "$(node_leftovers "$n" | tr '\n' ' ')"
}
# has_entries DIR MIN: DIR has at least MIN entries.
has_entries() {
  local e=("$1"/*)
  [ -e "${e[0]}" ] && [ "${#e[@]}" -ge "$2" ]
}

others=()
for n in "${NODES[@]}"; do [ "node-$n" = "$victim" ] || others+=("node-$n"); done
for o in "${others[@]}"; do
  out=$("$B3OS_BIN/b3os" nodes drain "$o" --store "$STORE" 2>&1) || fail midcreate.drain_others "$o: $out"
done
sleep 1.2  # the routers read the nodes at most once a second
eventually 20 node_clean "$vn" || true

# Mid-create: killed once the create's container is being made (runsc has its state file).
curl -s -m 60 -o "$T/midcreate.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  --data '{"timeout_s": 120, "metadata": {"fault": "mid-create"}}' "${ROUTERS[0]}/v1/sandboxes" >"$T/midcreate.code" 2>/dev/null &
cpid=$!
in_flight_kill "$vn" "$cpid" midcreate "the container begun (runsc state)" has_entries "$T/node-$vn/run/runsc" 1
after_kill midcreate "$cpid" '.id // empty' "the create's container had not appeared"

# Mid-fork: a forkable sandbox on the node, a fork of 3, the node killed while the forks are
# being restored from the fork's image (the image written, a fork's sandbox directory made).
sleep 1.2  # the routers see it ready
URL=${ROUTERS[0]}
create_sandbox '{"forkable": true, "timeout_s": 120, "metadata": {"fault": "mid-fork"}}'
FSRC=$CID
if [ -n "$FSRC" ] && [ "$(node_of "$FSRC")" = "$victim" ]; then
  curl -s -m 60 -o "$T/midfork.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    --data '{"count": 3}' "${ROUTERS[0]}/v1/sandboxes/$FSRC/fork" >"$T/midfork.code" 2>/dev/null &
  cpid=$!
  # A second sandbox directory besides the source's: the first fork's launch has begun.
  in_flight_kill "$vn" "$cpid" midfork "a fork's launch begun" has_entries "$T/node-$vn/run/sandboxes" 2
  after_kill midfork "$cpid" '.data[]?.id' "no fork had begun its launch"
else
  fail midfork.source "the forkable source is not on $victim: $(snip)"
fi
for o in "${others[@]}"; do
  out=$("$B3OS_BIN/b3os" nodes ready "$o" --store "$STORE" 2>&1) || fail midfork.others_ready_again "$o: $out"
done
sleep 1.2

# ---- a router killed mid-stream: the other serves ----------------------------------------------

# A sandbox of its own: the earlier ones may all be on the nodes killed above by now (a
# drain moved some of them, so where they are is not fixed), and a failed one proves nothing.
URL=${ROUTERS[1]}
create_sandbox '{"timeout_s": 300}'
SID=${CID:-none}
[ -n "$CID" ] || fail router_killed.sandbox "create through router 1: $(snip)"
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

# ---- the object store is collected ----------------------------------------------------------------
# A root no record refers to goes once no node has asked for it for the grace: the deleted
# template's root, and the root of a snapshot once the snapshot is deleted (if no other
# snapshot shares it); the roots of the snapshots that remain stay, though their grace passed.

gc_row() { psql_q "SELECT count(*) FROM object_roots WHERE key = '$1'"; }
for _ in $(seq 1 40); do
  [ "$(s3 HEAD "template-roots/$ART/manifest.json")" = 404 ] && [ "$(gc_row "template-roots/$ART")" = 0 ] && break
  sleep 1
done
check object_gc.deleted_template_root_collected \
  "template-roots/$ART: manifest $(s3 HEAD "template-roots/$ART/manifest.json"), rows $(gc_row "template-roots/$ART"); $(grep -h "object store: removed" "$T"/node-*/log 2>/dev/null | tail -n 3 | tr '\n' ' ')" \
  test "$(s3 HEAD "template-roots/$ART/manifest.json"):$(gc_row "template-roots/$ART")" = 404:0
GC_ROOT=$([ -n "$GC_SNP" ] && psql_q "SELECT object_root FROM snapshots WHERE id = '$GC_SNP'" || true)
# Every root's grace made over at once (moves and snapshots touch them as they go), then two
# passes of the collectors: the roots of snapshots stay.
# A probe root (stale, no record, no objects) goes at the next pass: once it is gone a pass
# ran after the roots of snapshots were made stale too.
psql_q "INSERT INTO object_roots (key, touched_ms) VALUES ('rootfs/probe-$$', 0)" >/dev/null
psql_q "UPDATE object_roots SET touched_ms = 0 WHERE key IN (SELECT object_root FROM snapshots)" >/dev/null
for _ in $(seq 1 40); do [ "$(gc_row "rootfs/probe-$$")" = 0 ] && break; sleep 0.5; done
check object_gc.a_pass_ran "probe rows left: $(gc_row "rootfs/probe-$$")" test "$(gc_row "rootfs/probe-$$")" = 0
kept=0 missing=""
for r in $(psql_q "SELECT DISTINCT object_root FROM snapshots WHERE object_root <> ''"); do
  if [ "$(s3 HEAD "$r/manifest.json")" = 200 ] && [ "$(gc_row "$r")" = 1 ]; then kept=$((kept + 1)); else missing="$missing $r"; fi
done
check object_gc.snapshot_roots_kept "snapshot $GC_SNP on ${GC_ROOT:-no root}; roots of snapshots present past their grace: $kept, missing:${missing:- none}" \
  test -n "$GC_ROOT" -a "$kept" -ge 1 -a -z "$missing"
if [ -n "$GC_SNP" ]; then
  URL=${ROUTERS[1]}  # each delete to the node that holds the snapshot (router 0 was killed above)
  # Every snapshot taken on that root goes (earlier sections' too, which no later one uses).
  for sid in $(psql_q "SELECT id FROM snapshots WHERE object_root = '$GC_ROOT'"); do api DELETE "/v1/snapshots/$sid"; done
  shared=$(psql_q "SELECT count(*) FROM snapshots WHERE object_root = '$GC_ROOT'")
  if [ "$shared" = 0 ]; then
    for _ in $(seq 1 40); do
      [ "$(s3 HEAD "$GC_ROOT/manifest.json")" = 404 ] && break
      sleep 1
    done
    check object_gc.deleted_snapshot_root_collected "$GC_ROOT: manifest $(s3 HEAD "$GC_ROOT/manifest.json"), rows $(gc_row "$GC_ROOT")" \
      test "$(s3 HEAD "$GC_ROOT/manifest.json"):$(gc_row "$GC_ROOT")" = 404:0
    # Snapshotted again: the root is put again, and the snapshot restores.
    api POST "/v1/sandboxes/$GC_SBX/snapshot"
    GC_SNP=$(j .id)
    check object_gc.root_put_again "$(snip); manifest $(s3 HEAD "$GC_ROOT/manifest.json")" \
      test "$(s3 HEAD "$GC_ROOT/manifest.json")" = 200 -a -n "$GC_SNP"
    [ -z "$GC_SNP" ] || api DELETE "/v1/snapshots/$GC_SNP"
  else
    skip object_gc.deleted_snapshot_root_collected "$shared snapshots of other projects share the root $GC_ROOT"
  fi
fi
[ -z "$GC_SBX" ] || delete_sandbox "$GC_SBX" || true

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
# indented, and it counts as one check here. The e2e sections whose subject is the node's own
# disk, memory and host (a disk filled past 1 GiB and to its limit, a fork of a sandbox with
# much memory, idle freezing, host leaks over many cycles) say SKIP: the e2e step ran them on
# the node, and the router relays their requests as it relays every other section's.
NODE_ONLY_SECTIONS="s_disk_big s_disk_limit s_fork_big s_idle_freeze s_leaks"
via_router() {
  local name=$1 script=$2 db rc=0
  db=$(pg_createdb "b3$name") || { fail "via_router.$name" "could not create its database"; return 0; }
  info "tests/e2e/$script through b3os-router (its own lines follow, indented)"
  E2E_SKIP_SECTIONS=$NODE_ONLY_SECTIONS E2E_SKIP_REASON="the node's own disk, memory or host: the e2e step runs it on the node" \
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

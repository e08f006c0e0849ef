#!/usr/bin/env bash
# A hostile allowlist sandbox against the per-sandbox caps of b3osd's resolver (64 questions in
# flight, SERVFAIL beyond) and egress proxy (256 connections, reset beyond), while another
# sandbox's DNS and proxied HTTP and the API must keep answering and b3osd's threads and fds
# stay bounded; a public sandbox against its flow cap (--net-max-flows); and a crowd of 40
# hostile sandboxes against the node-wide caps, with a quiet one served meanwhile
# (tests/reliability/net_caps.py says what is checked). About three minutes.
#
# Network: 127.0.0.1 (the API; the test's own DNS upstream, which b3osd is given as its only
# --dns-upstream) and the fake internet of tests/net/fakenet.sh (TEST-NET addresses in a
# network namespace this test builds and removes). The sandboxes are allowed only names of
# the fake internet's zone. Nothing else is sent anywhere. The fake internet is one per host:
# when one is up already (tests/e2e/network.sh or bench/network.py running), this part prints
# a SKIP and exits 77 rather than tear it down.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=build/bin tests/reliability/net_caps.sh
# Env: B3OS_BIN, B3OS_TEMPLATES_DIR as for tests/e2e/e2e.sh; B3OS_E2E_KEEP=1 keeps the temp dir;
# NET_CAPS_UPLINKS (default 10.204.0.0/16) the uplink range of its b3osd.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/../e2e/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
UPLINKS=${NET_CAPS_UPLINKS:-10.204.0.0/16}
TABLE=b3os_$(echo "$UPLINKS" | tr './' '__')
SERVICE=$(python3 -c "import ipaddress,sys; print(ipaddress.ip_network(sys.argv[1])[1])" "$UPLINKS")

e2e_begin net_caps python3 nft ip dnsmasq openssl

FAKENET=$ROOT/tests/net/fakenet.sh
FN=$T/fakenet
UPSTREAM_PID=

# The run's namespaces (by their uplink range), its nft table and its service address: what
# its b3osd leaves when it is killed.
my_netns() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep '^b3s-' | while read -r ns; do
    ip -n "$ns" -4 -o addr show dev up0 2>/dev/null | grep -q " ${UPLINKS%.*.*}\." && echo "$ns"
  done || true
}
net_leftovers_removed() {
  local ns
  for ns in $(my_netns); do ip netns del "$ns" 2>/dev/null; done
  nft delete table inet "$TABLE" 2>/dev/null || true
  ip addr del "$SERVICE/32" dev lo 2>/dev/null || true
}

# One fake internet per host, and `fakenet.sh up` tears down the one that is up: a network
# test running now (tests/e2e/network.sh, bench/network.py) keeps it; this part waits its turn.
if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx b3t-inet; then
  skip net_caps "a fake internet (netns b3t-inet) is up already: another network test is running; run this after it"
  rm -rf "$T"
  exit 77
fi

on_exit() {
  local rc=$?
  set +e
  e2e_aborted "$rc"
  cleanup_everything
  net_leftovers_removed
  [ -z "$UPSTREAM_PID" ] || kill "$UPSTREAM_PID" 2>/dev/null
  "$FAKENET" down "$FN" >/dev/null 2>&1
  local left
  left=$(my_netns | wc -l)
  if [ "$left" != 0 ]; then
    fail cleanup.namespaces "$left namespaces of $UPLINKS left after the clean-up"
    rc=1
  fi
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

"$FAKENET" up "$FN" >"$T/fakenet.log" 2>&1 || die "the fake internet did not come up: $(tail -n 5 "$T/fakenet.log")"
eval "$("$FAKENET" env "$FN")"

# The only upstream b3osd asks: answers a.b3t.test, never answers *.slow.b3t.test.
python3 "$HERE/net_caps.py" upstream --port-file "$T/upstream.port" --log "$T/upstream.log" \
  --answer "$B3T_NAME_A=$B3T_HOST_A" --drop "slow.$B3T_ZONE" >"$T/upstream.out" 2>&1 &
UPSTREAM_PID=$!
for _ in $(seq 100); do [ -s "$T/upstream.port" ] && break; sleep 0.05; done
[ -s "$T/upstream.port" ] || die "the test's DNS upstream did not start: $(cat "$T/upstream.out")"
UPSTREAM=127.0.0.1:$(cat "$T/upstream.port")

E2E_NETWORK=on
FLOWS_CAP=512
# Node caps scaled down for the crowd part (net_caps.py says why); the per-sandbox caps are the
# defaults, which the dns and proxy parts check.
B3OS_E2E_DAEMON_ARGS="--net-uplinks $UPLINKS --dns-upstream $UPSTREAM --net-warm-pool 0 --net-fork-pool 0 --net-max-flows $FLOWS_CAP"
B3OS_E2E_DAEMON_ARGS+=" --net-dns-max-pending 512 --net-proxy-max-connections 2048"
B3OS_E2E_DAEMON_ARGS+=" --preview-max-requests 256 --preview-max-per-sandbox 64 --preview-sandbox-floor 2"
E2E_MAX_SANDBOXES_PER_PROJECT=64
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, uplinks $UPLINKS, DNS upstream $UPSTREAM (the test's), temp dir $T"

rc=0
python3 "$HERE/net_caps.py" check --url "$URL" --key "$ADMIN" --upstream-log "$T/upstream.log" \
  --daemon-pid "$(daemon_pid)" --zone "$B3T_ZONE" --name-a "$B3T_NAME_A" --host-a "$B3T_HOST_A" \
  --flows-cap "$FLOWS_CAP" --crowd "${NET_CAPS_CROWD:-40}" --service "$SERVICE" |
  tee "$T/check.out" || rc=$?
# The lines of net_caps.py count as this suite's results too (finish_private_suite's log tail).
grep -E '^(PASS|FAIL|SKIP) ' "$T/check.out" | cut -d' ' -f1 >>"$E2E_RESULTS" || true
# The sandboxes were deleted through the API: b3osd removes their containers and namespaces
# behind its answer.
no_containers() { [ -z "$(runsc_list)" ]; }
no_namespaces() { [ -z "$(my_netns)" ]; }
if eventually 30 no_containers; then pass cleanup.no_containers
else fail cleanup.no_containers "containers left 30 s after the deletes: $(runsc_list | tr '\n' ' ')"; fi
if eventually 30 no_namespaces; then pass cleanup.no_namespaces
else fail cleanup.no_namespaces "namespaces left 30 s after the deletes: $(my_netns | tr '\n' ' ')"; fi
stray=$("$FAKENET" counters "$FN" | awk '$1 == "stray" { sub(/packets=/, "", $2); print $2 }')
check fakenet.no_stray "$stray packets reached the fake internet for an address nobody has" test "${stray:-0}" = 0
[ "$rc" = 0 ] && [ "$(count_results FAIL)" = 0 ]

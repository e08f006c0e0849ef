#!/usr/bin/env bash
# End-to-end test of egress `public` and `allowlist` (docs/network.md) against a private b3osd
# with sandbox networks on, and a fake internet the test builds (tests/net/fakenet.sh: test
# hosts on TEST-NET addresses in a network namespace, a "private", a CGNAT and a "metadata"
# host routed into it, dnsmasq logging every query, HTTP/HTTPS servers with a test CA).
#   - public reaches the test hosts, and none of the always-denied ranges, the host, the
#     resolver's other ports or another sandbox; refused connects fail at once;
#   - allowlist allows exactly its entries (name, wildcard vs bare name, letter case, :port,
#     CIDR); /etc/hosts spoofing, a bare IP, fronting, an allowed name resolving to a private
#     address, an exfiltration name (never in the resolver's log), UDP 443: refused;
#   - the policy holds after pause/resume, in each of 3 forks, after a snapshot restore and
#     after SIGKILL of b3osd; a live change takes effect and survives a restart;
#   - bad input gets its status and code and changes nothing;
#   - 50 create/fork/delete cycles leave no namespace, veth, nft element or conntrack entry;
#   - the node itself is out of reach: an allowed name resolving to an address of the host is
#     neither resolved nor dialled, and the firewall refuses the proxy's marked sockets towards
#     any local address; Azure's platform address and the operator's --deny-cidr are denied;
#     public answers carry no private or host address, and PTR questions for private ranges
#     are not asked upstream;
#   - a policy stored but not applied when b3osd died (its nft transaction held by a wrapper,
#     then SIGKILL) cuts, after the restart, a connection the old policy had let through.
# Network: 127.0.0.1 (the API) and the fake internet only; b3osd's resolver asks the test's
# dnsmasq (--dns-upstream), never the host's.
#
# Usage (as root, with the base template built):
#   B3OS_BIN=/work/main/build/bin tests/e2e/network.sh
# shellcheck disable=SC2016 # single-quoted $VAR and $(...) are for jq or the sandbox's shell
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/e2e/lib.sh
. "$HERE/lib.sh"
ROOT=$(cd "$HERE/../.." && pwd)
B3OS_BIN=${B3OS_BIN:-$ROOT/build/bin}
TEMPLATES=${B3OS_TEMPLATES_DIR:-/var/lib/b3os/templates}
UPLINKS=${NET_E2E_UPLINKS:-10.202.0.0/16}
TABLE=b3os_$(echo "$UPLINKS" | tr './' '__')
SERVICE=$(python3 -c "import ipaddress,sys; print(ipaddress.ip_network(sys.argv[1])[1])" "$UPLINKS")
CYCLES=${NET_E2E_CYCLES:-50}

e2e_begin network python3 nft ip conntrack dnsmasq openssl

FAKENET=$ROOT/tests/net/fakenet.sh
FN=$T/fakenet
on_exit() {
  local rc=$?
  set +e
  e2e_aborted "$rc"
  # The daemon first (cleanup_everything stops it), then what its networks left, then the
  # fake internet; finish_private_suite does the rest (log tail on a FAIL, the temp dir).
  cleanup_everything
  net_leftovers_removed
  "$FAKENET" down "$FN" >/dev/null 2>&1
  [ -z "$FAKENET_LOCK_PID" ] || kill "$FAKENET_LOCK_PID" 2>/dev/null
  [ -z "${SELF_PID:-}" ] || kill "$SELF_PID" 2>/dev/null
  ip addr del "${B3T_HOST_LATE:-198.51.100.78}/32" dev lo 2>/dev/null  # s_node_self's, if it stopped midway
  finish_private_suite "$rc"
}
trap on_exit EXIT
trap 'echo "# interrupted; cleaning up" >&2; exit 130' INT TERM

# ---- host state: what the run's sandboxes have on the host --------------------------------

my_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep '^b3s-' | while read -r ns; do
  ip -n "$ns" -4 -o addr show dev up0 2>/dev/null | grep -q " ${UPLINKS%.*.*}\." && echo "$ns"; done || true; }
netns_count() { my_netns | wc -l; }
uplink_count() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -c '^b3u' || true; }
set_elements() { nft -j list set inet "$TABLE" "$1" 2>/dev/null | jq '[.nftables[] | .set? | select(.) | .elem // [] | length] | add // 0'; }
all_elements() { echo $(($(set_elements public_src) + $(set_elements allow_cidr) + $(set_elements proxy_ports))); }
# Conntrack entries from uplink addresses no namespace of the run holds now (a released
# sandbox's connections, which b3osd forgets when it releases the sandbox).
stale_conntrack() {
  local live
  live=$(for ns in $(my_netns); do ip -n "$ns" -4 -o addr show dev up0 | awk '{print $4}' | cut -d/ -f1; done)
  conntrack -L -s "$UPLINKS" 2>/dev/null | grep -o 'src=[0-9.]*' | sort -u | cut -d= -f2 |
    while read -r a; do grep -qx "$a" <<<"$live" || echo "$a"; done | grep -c . || true
}
# For eventually (its command is run again each time, so the counts are read each time).
netns_at_most() { [ "$(netns_count)" -le "$1" ]; }
netns_is() { [ "$(netns_count)" = "$1" ]; }
uplink_of() { ip -n "b3s-$1" -4 -o addr show dev up0 | awk '{print $4}' | cut -d/ -f1; }
# The run's leftovers after the daemon is gone: namespaces, the table, the service address.
net_leftovers_removed() {
  local ns
  for ns in $(my_netns); do ip netns del "$ns" 2>/dev/null; done
  nft delete table inet "$TABLE" 2>/dev/null || true
  ip addr del "$SERVICE/32" dev lo 2>/dev/null || true
}

# ---- in a sandbox ----------------------------------------------------------------------------

# probe ID ARGS...: tests/net/probe.py ARGS inside sandbox ID; its JSON in $P.
probe() {
  local id=$1
  shift
  run_exec "$id" "$(printf '%s\n' "$@" | jq -R . | jq -sc '{cmd: (["python3", "/workspace/probe.py"] + .), timeout_ms: 30000}')"
  P=$(j .stdout)
  [ -n "$P" ] || P='{"ok": false, "error": "no output"}'
}
pj() { jq -e "$@" <<<"$P" >/dev/null 2>&1; }
# inside ID 'sh': a shell command inside ID; stdout in $OUT.
inside() {
  run_exec "$1" "$(jq -nc --arg c "$2" '{cmd: $c, timeout_ms: 30000}')"
  OUT=$(j .stdout)
}
upload_tools() {
  api PUT "/v1/sandboxes/$1/files?path=/workspace/probe.py" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$ROOT/tests/net/probe.py"
  api PUT "/v1/sandboxes/$1/files?path=/workspace/ca.pem" -H 'Content-Type: application/octet-stream' \
    --data-binary @"$B3T_CA"
}
conn_lines() { grep -c " $1:" "$B3T_CONN_LOG" 2>/dev/null || true; }
# requested PATH: a fake server logged a request for /PATH (B3T_HTTP_LOG lines end "METHOD /path").
requested() { grep -q -- " /$1\$" "$B3T_HTTP_LOG"; }
# same_connection P1 P2: the probe's two answers are a.b3t.test's, and its server logged both
# requests from one peer port: one connection all the way.
same_connection() {
  pj --arg s "$B3T_HOST_A" '.ok and (.responses | length == 2 and all(.status == 200 and .body.server == $s))' || return 1
  local p1 p2
  p1=$(grep -- " /$1\$" "$B3T_HTTP_LOG" | awk '{print $5}')
  p2=$(grep -- " /$2\$" "$B3T_HTTP_LOG" | awk '{print $5}')
  [ -n "$p1" ] && [ "$p1" = "$p2" ]
}
# cut_after_first PATH: the first answer is a.b3t.test's, the connection ended before another,
# and no server ever saw a request for PATH.
cut_after_first() {
  pj --arg s "$B3T_HOST_A" '.ok == false and (.responses | length == 1) and .responses[0].status == 200 and .responses[0].body.server == $s' &&
    ! requested "$1"
}
# denied_unseen PATH: the answer is the proxy's 403 egress_denied, and no server saw PATH.
denied_unseen() { pj '.responses[0].status == 403 and .responses[0].body.error.code == "egress_denied"' && ! requested "$1"; }
# tls_conns: connections a.b3t.test's HTTPS server accepted.
tls_conns() { grep -c "tcp $B3T_HOST_A:443 from" "$B3T_CONN_LOG" 2>/dev/null || true; }
served_by() { pj --arg s "$1" '.ok and .status == 200 and .body.server == $s'; }
refused() { pj '.ok == false or .status == 403'; }

# ---- set-up ----------------------------------------------------------------------------------

fakenet_lock
"$FAKENET" up "$FN" >"$T/fakenet.log" 2>&1 || die "the fake internet did not come up: $(tail -n 5 "$T/fakenet.log")"
eval "$("$FAKENET" env "$FN")"
E2E_NETWORK=on
export E2E_NETWORK
# b3osd finds nft through PATH: a wrapper that passes every call through, except that while
# $NFT_HOLD exists a transaction taking a sandbox out of public_src waits (s_crash_window
# kills b3osd during that wait: its new policy is stored and not yet applied).
NFT_HOLD=$T/nft.hold
mkdir -p "$T/nftwrap"
cat >"$T/nftwrap/nft" <<EOF_NFT
#!/usr/bin/env bash
real=\$(PATH=\${PATH#$T/nftwrap:} command -v nft)
[ "\$*" = "-j -f -" ] || exec "\$real" "\$@"
tx=\$(cat)
if [ -e "$NFT_HOLD" ] && grep -q '"delete".*"public_src"' <<<"\$tx"; then
  echo "\$\$" >"$NFT_HOLD.held"
  sleep 60
fi
exec "\$real" "\$@" <<<"\$tx"
EOF_NFT
chmod +x "$T/nftwrap/nft"
export PATH=$T/nftwrap:$PATH
# host_service ADDR PORT LOG: a TCP service of the host on ADDR:PORT, in the background, that
# logs every connection it accepts to LOG and answers it a short HTTP 200 ("self").
host_service() {
  : >"$3"
  python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
log = open(sys.argv[3], "a", buffering=1)
while True:
    c, peer = s.accept()
    log.write(f"{time.time():.3f} from {peer[0]}:{peer[1]}\n")
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nself")
    c.close()
' "$1" "$2" "$3" &
}
# A service of the host itself, on its end of the fake internet's link: what an allowed name
# resolving to the node would reach (self.b3t.test).
SELF_PORT=18080
SELF_LOG=$T/self.log
host_service "$B3T_HOST_SELF" "$SELF_PORT" "$SELF_LOG"
SELF_PID=$!
B3OS_E2E_DAEMON_ARGS="--net-uplinks $UPLINKS --dns-upstream $B3T_DNS --net-warm-pool 1 --net-fork-pool 1 --deny-cidr $B3T_HOST_OPDENY"
export B3OS_E2E_DAEMON_ARGS
start_private_daemon
info "b3osd pid $(daemon_pid) on $URL, uplinks $UPLINKS (table $TABLE), resolver upstream $B3T_DNS, temp dir $T"

# ---- public -----------------------------------------------------------------------------------

s_public() {
  create_sandbox '{"egress": {"mode": "public"}}'
  local id=$CID
  check public.create "want 201 with egress public, got $(snip)" okj 201 '.egress.mode == "public" and .egress.allow == []'
  upload_tools "$id"
  probe "$id" http "http://$B3T_NAME_A/"
  check public.http_by_name "want a.b3t.test served by $B3T_HOST_A, got $P" served_by "$B3T_HOST_A"
  probe "$id" http "https://$B3T_NAME_C/" --ca /workspace/ca.pem
  check public.https_by_name "want c.b3t.test over TLS from $B3T_HOST_C, got $P" \
    pj --arg s "$B3T_HOST_C" '.status == 200 and .body.server == $s and .body.sni == "c.b3t.test"'
  probe "$id" udp "$B3T_HOST_A" 7
  check public.udp "want the UDP echo of $B3T_HOST_A, got $P" pj '.ok and (.reply | startswith("udp"))'
  inside "$id" 'cat /etc/resolv.conf'
  check public.resolver_is_b3osd "want nameserver 10.0.0.1 in /etc/resolv.conf, got $OUT" grep -q 'nameserver 10.0.0.1' <<<"$OUT"

  # Nothing of the always-denied ranges, the host or the resolver's other ports; at once.
  : >"$B3T_CONN_LOG"
  local target name
  for target in "$B3T_HOST_PRIVATE:80:private" "$B3T_HOST_CGNAT:80:cgnat" "$B3T_HOST_META:80:metadata" \
    "$B3T_GW:80:host" "$SERVICE:${PORT}:host_api_port" "$SERVICE:3129:proxy_port_direct" "$SERVICE:22:host_ssh"; do
    name=${target##*:}
    target=${target%:*}
    probe "$id" tcp "${target%:*}" "${target##*:}"
    check "public.refused.$name" "want $target refused within 100 ms, got $P" pj '.ok == false and .ms < 100'
  done
  # Cloud platform endpoints outside link-local, and the operator's own ranges (--deny-cidr).
  probe "$id" tcp "$B3T_HOST_AZURE" 80
  check public.refused.azure_wireserver "want Azure's $B3T_HOST_AZURE refused within 100 ms, got $P" pj '.ok == false and .ms < 100'
  probe "$id" tcp "$B3T_HOST_OPDENY" 80
  check public.refused.operator_deny_cidr "want $B3T_HOST_OPDENY (--deny-cidr) refused within 100 ms, got $P" pj '.ok == false and .ms < 100'
  check public.platform_and_operator_hosts_never_reached "their servers saw: $(grep -E " ($B3T_HOST_AZURE|$B3T_HOST_OPDENY):" "$B3T_CONN_LOG" | head -2)" \
    test "$(($(conn_lines "$B3T_HOST_AZURE") + $(conn_lines "$B3T_HOST_OPDENY")))" = 0
  # An internal zone's answers: no private or host address, and no reverse lookups of
  # private ranges, reach a public sandbox.
  : >"$B3T_DNS_LOG"
  probe "$id" resolve "$B3T_NAME_PRIVATE"
  check public.dns.private_answer_withheld "want $B3T_NAME_PRIVATE ($B3T_HOST_PRIVATE) not to resolve, got $P" pj '.ok == false'
  probe "$id" resolve "$B3T_NAME_SELF"
  check public.dns.host_answer_withheld "want $B3T_NAME_SELF (the host's $B3T_HOST_SELF) not to resolve, got $P" pj '.ok == false'
  probe "$id" resolve "$B3T_NAME_MULTI"
  check public.dns.mixed_answer_filtered "want only $B3T_HOST_MULTI for $B3T_NAME_MULTI, got $P" pj --arg s "$B3T_HOST_MULTI" '.ok and .addrs == [$s]'
  inside "$id" 'python3 -c "
import socket, struct
def ptr(name):
    q = struct.pack(\">HHHHHH\", 7, 0x0100, 1, 0, 0, 0) + b\"\".join(bytes([len(p)]) + p.encode() for p in name.split(\".\")) + b\"\\0\" + struct.pack(\">HH\", 12, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.connect((\"10.0.0.1\", 53)); s.send(q)
    r = s.recv(4096); return \"rcode=%d answers=%d\" % (r[3] & 15, struct.unpack(\">H\", r[6:8])[0])
print(ptr(\"10.0.99.10.in-addr.arpa\"), ptr(\"10.100.51.198.in-addr.arpa\"))"'
  check public.dns.private_ptr_refused "want NXDOMAIN for 10.0.99.10.in-addr.arpa and an answer for 198.51.100.10's, got $OUT" \
    bash -c '[[ $0 == "rcode=3 answers=0 rcode=0 answers=1" ]]' "$OUT"
  check public.dns.private_ptr_never_asked "the test resolver's log: $(grep -m1 '10.0.99.10.in-addr' "$B3T_DNS_LOG")" \
    not grep -q '10.0.99.10.in-addr.arpa' "$B3T_DNS_LOG"
  probe "$id" http "http://$B3T_NAME_PRIVATE/"
  check public.refused.name_to_private "want private.b3t.test ($B3T_HOST_PRIVATE) unreachable, got $P" refused
  check public.denied_hosts_never_reached "the private/CGNAT/metadata hosts saw: $(grep -E "$B3T_HOST_PRIVATE|$B3T_HOST_CGNAT|$B3T_HOST_META" "$B3T_CONN_LOG" | head -3)" \
    test "$(($(conn_lines "$B3T_HOST_PRIVATE") + $(conn_lines "$B3T_HOST_CGNAT") + $(conn_lines "$B3T_HOST_META")))" = 0
  # Another sandbox, by its uplink address.
  create_sandbox '{"egress": {"mode": "public"}}'
  local other=$CID up
  up=$(uplink_of "$other")
  probe "$id" tcp "$up" 80
  check public.refused.other_sandbox "want the other sandbox's uplink $up refused, got $P" pj '.ok == false and .ms < 100'
  probe "$id" tcp 10.0.0.1 53
  check public.dns_over_tcp "want the resolver on 10.0.0.1:53 over TCP too, got $P" pj '.ok'
  inside "$id" 'python3 -c "import socket; s=socket.socket(socket.AF_INET6); s.settimeout(2)
try:
    s.connect((\"2001:db8::10\", 80)); print(\"connected\")
except OSError as e: print(\"refused\", e)"'
  check public.no_ipv6 "want IPv6 refused, got $OUT" grep -q refused <<<"$OUT"
  delete_sandbox "$other"
  delete_sandbox "$id"
}

# ---- allowlist ----------------------------------------------------------------------------------

ALLOW='["a.b3t.test", "*.wild.b3t.test", "c.b3t.test:8080", "203.0.113.10/32:5432", "private.b3t.test", "multi.b3t.test"]'
s_allowlist() {
  create_sandbox "{\"egress\": {\"mode\": \"allowlist\", \"allow\": $ALLOW}}"
  local id=$CID
  check allow.create "want 201 with the list as given, got $(snip)" okj 201 ".egress.mode == \"allowlist\" and .egress.allow == $ALLOW"
  upload_tools "$id"
  : >"$B3T_CONN_LOG"
  : >"$B3T_DNS_LOG"
  probe "$id" http "http://$B3T_NAME_A/"
  check allow.name "want a.b3t.test served, got $P" served_by "$B3T_HOST_A"
  probe "$id" http "https://$B3T_NAME_A/" --ca /workspace/ca.pem
  check allow.name_tls "want https://a.b3t.test served with SNI a.b3t.test, got $P" \
    pj --arg s "$B3T_HOST_A" '.status == 200 and .body.server == $s and .body.sni == "a.b3t.test"'
  probe "$id" http "http://A.B3T.Test/"
  check allow.letter_case "want A.B3T.Test served (names match in any case), got $P" served_by "$B3T_HOST_A"
  probe "$id" http "http://$B3T_NAME_B/"
  check allow.other_name_refused "want b.b3t.test refused, got $P" refused
  probe "$id" http "http://$B3T_NAME_WILD_X/"
  check allow.wildcard_subdomain "want x.wild.b3t.test served, got $P" served_by "$B3T_HOST_WILD"
  probe "$id" http "https://$B3T_NAME_WILD_YZ/" --ca /workspace/ca.pem
  check allow.wildcard_deeper "want y.z.wild.b3t.test served, got $P" served_by "$B3T_HOST_WILD"
  probe "$id" http "http://$B3T_NAME_WILD/"
  check allow.wildcard_not_bare "want the bare wild.b3t.test refused by *.wild.b3t.test, got $P" refused
  probe "$id" http "http://$B3T_NAME_C:8080/"
  check allow.name_port "want c.b3t.test:8080 served, got $P" served_by "$B3T_HOST_C"
  probe "$id" http "http://$B3T_NAME_C/"
  check allow.name_other_port "want c.b3t.test:80 refused (the entry says :8080), got $P" refused
  probe "$id" tcp "$B3T_HOST_C" 5432 --send hello
  check allow.cidr_port "want the TCP echo of $B3T_HOST_C:5432, got $P" pj '.ok and (.reply | startswith("echo"))'
  probe "$id" tcp "$B3T_HOST_A" 5432 --send hello
  check allow.cidr_other_host "want $B3T_HOST_A:5432 refused within 100 ms, got $P" pj '.ok == false and .ms < 100'

  # What must reach nothing else.
  probe "$id" http "http://$B3T_NAME_A/" --connect "$B3T_HOST_B"
  check allow.spoofed_address "a.b3t.test asked of $B3T_HOST_B must reach the real a.b3t.test only, got $P" served_by "$B3T_HOST_A"
  inside "$id" "echo '$B3T_HOST_B a.b3t.test' >>/etc/hosts"
  probe "$id" http "http://$B3T_NAME_A/"
  check allow.etc_hosts_spoof "a forged /etc/hosts entry must not reach $B3T_HOST_B, got $P" served_by "$B3T_HOST_A"
  probe "$id" http "http://$B3T_HOST_B/"
  check allow.bare_ip_http "want a bare IP refused with 403 egress_denied, got $P" pj '.status == 403 and .body.error.code == "egress_denied"'
  probe "$id" http "https://$B3T_HOST_B/"
  check allow.bare_ip_tls "want TLS to a bare IP refused, got $P" pj '.ok == false'
  probe "$id" http "https://$B3T_NAME_A/" --ca /workspace/ca.pem --host "$B3T_NAME_B"
  check allow.fronting "SNI a.b3t.test with Host b.b3t.test must reach a.b3t.test's server only, got $P" served_by "$B3T_HOST_A"
  check allow.b_never_reached "the servers of b.b3t.test saw: $(grep " $B3T_HOST_B:" "$B3T_CONN_LOG" | head -2)" test "$(conn_lines "$B3T_HOST_B")" = 0

  # Plain HTTP is decided for every request, not once per connection: a request naming
  # b.b3t.test on a connection allowed for a.b3t.test would be served by a's server (the fake
  # servers answer any Host, as a shared front end does), so its path must never be in their
  # log. Paths are unique to the run.
  local r=$RANDOM$RANDOM
  probe "$id" requests "$B3T_HOST_A" 80 "$B3T_NAME_A/ka1-$r" "A.B3T.test:80/ka2-$r"
  check allow.keepalive_same_host "want two requests for a.b3t.test served on one connection, got $P; log: $(grep "ka[12]-$r" "$B3T_HTTP_LOG")" \
    same_connection "ka1-$r" "ka2-$r"
  probe "$id" requests "$B3T_HOST_A" 80 "$B3T_NAME_A/kb1-$r" "$B3T_NAME_B/kb2-$r"
  check allow.keepalive_other_host "a keep-alive request for b.b3t.test after one for a.b3t.test must be cut, unserved, got $P; log: $(grep "kb2-$r" "$B3T_HTTP_LOG")" \
    cut_after_first "kb2-$r"
  probe "$id" requests "$B3T_HOST_A" 80 --pipeline "$B3T_NAME_A/pa-$r" "$B3T_NAME_B/pb-$r"
  # In one write the pair is judged before anything is dialled (403); were it split over two
  # reads, a's answer and then a reset. Either way b's request reaches no server.
  check allow.pipelined_other_host "a pipelined request for b.b3t.test must reach no server, got $P; log: $(grep "p[ab]-$r" "$B3T_HTTP_LOG")" \
    eval 'denied_unseen "pb-$r" || cut_after_first "pb-$r"'
  probe "$id" requests "$B3T_HOST_A" 80 "$B3T_NAME_A/h2c-$r|Connection: Upgrade, HTTP2-Settings|Upgrade: h2c|HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA"
  check allow.h2c_refused "want an h2c upgrade refused with 403 egress_denied before reaching the server, got $P" denied_unseen "h2c-$r"
  probe "$id" requests "$B3T_HOST_A" 80 \
    "$B3T_NAME_A/ws-$r|Connection: Upgrade|Upgrade: websocket|Sec-WebSocket-Version: 13|Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" \
    "$B3T_NAME_B/wsb-$r"
  check allow.upgrade_then_other_host "a websocket Upgrade answered 200 (not 101) returns to the check of requests: b.b3t.test next must be cut, got $P" \
    cut_after_first "wsb-$r"
  # A websocket answered 101 is a tunnel to the allowed host: bytes the client sent before the
  # answer are held until it, then go on with the rest (the fake server echoes them).
  probe "$id" websocket "$B3T_HOST_A" 80 "$B3T_NAME_A" "/ws-echo-$r" --send "w$r"
  check allow.websocket_tunnel "want 101 from a.b3t.test, then both the early and the late bytes echoed, got $P" \
    pj --arg e "w$r-earlyw$r-late" '.ok and .status == 101 and .echo == $e'
  probe "$id" requests "$B3T_HOST_A" 80 --lead-crlf "$B3T_NAME_B/crlf-$r"
  check allow.leading_crlf_refused "a request behind an empty line must be read as HTTP and refused (403), got $P" denied_unseen "crlf-$r"
  probe "$id" requests "$B3T_HOST_A" 80 --method get "$B3T_NAME_B/lower-$r"
  check allow.lowercase_method_port80 "a request with a method in small letters on port 80 must be read as HTTP and refused (403), got $P" \
    denied_unseen "lower-$r"

  # TLS: a ClientHello with Encrypted Client Hello (outer server_name a.b3t.test, the inner
  # name hidden) is reset at once and never reaches a server; the same hello without it does.
  probe "$id" tls-hello "$B3T_HOST_A" 443 --sni "$B3T_NAME_A"
  check allow.hello_without_ech "want the hand-made ClientHello for a.b3t.test answered by its server (a handshake record), got $P" \
    pj '.ok and .record == 22'
  local tls_before
  tls_before=$(tls_conns)
  probe "$id" tls-hello "$B3T_HOST_A" 443 --sni "$B3T_NAME_A" --ech
  check allow.ech_refused "want a ClientHello carrying encrypted_client_hello reset within 100 ms and no new connection at a.b3t.test:443 ($tls_before before, $(tls_conns) after), got $P" \
    eval 'pj ".ok == false and .ms < 100 and (.error | test(\"Reset\"))" && [ "$(tls_conns)" = "$tls_before" ]'
  probe "$id" resolve "$B3T_NAME_PRIVATE"
  check allow.name_to_private_not_resolved "an allowed name resolving to $B3T_HOST_PRIVATE must not resolve, got $P" pj '.ok == false'
  probe "$id" http "http://$B3T_NAME_PRIVATE/" --connect "$B3T_HOST_PRIVATE"
  check allow.name_to_private_refused "want private.b3t.test refused, got $P" refused
  check allow.private_never_reached "the private host saw: $(grep " $B3T_HOST_PRIVATE:" "$B3T_CONN_LOG" | head -2)" test "$(conn_lines "$B3T_HOST_PRIVATE")" = 0
  probe "$id" resolve "$B3T_NAME_MULTI"
  check allow.mixed_answer_filtered "want only $B3T_HOST_MULTI for multi.b3t.test, got $P" pj --arg s "$B3T_HOST_MULTI" '.ok and .addrs == [$s]'
  local secret=exfil-$RANDOM$RANDOM
  probe "$id" resolve "$secret.b3t.test"
  probe "$id" http "https://$secret.b3t.test/"
  inside "$id" "getent hosts $secret-2.wild2.b3t.test; curl -s -m 2 http://$secret-3.b3t.test/ >/dev/null; true"
  check allow.exfiltration_name_never_sent "the test resolver's log names $secret: $(grep -m1 "$secret" "$B3T_DNS_LOG")" not grep -q "$secret" "$B3T_DNS_LOG"
  probe "$id" udp "$B3T_HOST_A" 443
  check allow.udp_refused "want UDP 443 refused, got $P" pj '.ok == false'
  check allow.udp_never_reached "the UDP echo saw: $(grep "udp $B3T_HOST_A:443" "$B3T_CONN_LOG" | head -1)" not grep -q "udp $B3T_HOST_A:443" "$B3T_CONN_LOG"
  probe "$id" tcp "$B3T_HOST_B" 22
  check allow.refused_fast "want a connect to $B3T_HOST_B:22 refused within 100 ms, got $P" pj '.ok == false and .ms < 100'
  delete_sandbox "$id"
}

# ---- the node itself ---------------------------------------------------------------------------

# An allowed name that resolves to the node (self.b3t.test: the host's own address on the fake
# internet's link, where a service of the host listens): the proxy dials from the host, so it
# would reach that service, or b3osd's own listeners, on the entry's port.
s_node_self() {
  create_sandbox "{\"egress\": {\"mode\": \"allowlist\", \"allow\": [\"$B3T_NAME_SELF:$SELF_PORT\", \"$B3T_NAME_SELF\", \"$B3T_NAME_LATE:$SELF_PORT\"]}}"
  local id=$CID
  upload_tools "$id"
  : >"$SELF_LOG"
  probe "$id" resolve "$B3T_NAME_SELF"
  check self.not_resolved "want $B3T_NAME_SELF (the host's $B3T_HOST_SELF) not to resolve, got $P" pj '.ok == false'
  probe "$id" http "http://$B3T_NAME_SELF:$SELF_PORT/" --connect "$B3T_HOST_SELF"
  check self.http_refused "want http://$B3T_NAME_SELF:$SELF_PORT/ refused with 403 egress_denied, got $P" \
    pj '.status == 403 and .body.error.code == "egress_denied"'
  probe "$id" http "http://$B3T_NAME_SELF:$SELF_PORT/" --connect 203.0.113.200
  check self.other_address_refused "want the name refused whatever address the sandbox dials, got $P" refused
  probe "$id" tcp "$B3T_HOST_SELF" "$SELF_PORT" --send hello
  check self.tcp_refused "want another protocol to $B3T_HOST_SELF:$SELF_PORT refused, got $P" pj '.ok == false'
  check self.host_service_never_reached "the host's service saw: $(head -2 "$SELF_LOG")" test ! -s "$SELF_LOG"
  # The firewall's own rule, for what the proxy's list of host addresses has not caught up
  # with: a socket with the proxy's mark cannot connect to any address of the host, and one
  # without it can (so the rule, not the service, refused it).
  local marked unmarked
  marked=$(python3 -c '
import socket, sys
s = socket.socket(); s.settimeout(2); s.setsockopt(socket.SOL_SOCKET, 36, 0x62330001)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except OSError as e: print("refused", e.errno)' "$B3T_HOST_SELF" "$SELF_PORT")
  unmarked=$(python3 -c '
import socket, sys
s = socket.socket(); s.settimeout(2)
try: s.connect((sys.argv[1], int(sys.argv[2]))); print("connected")
except OSError as e: print("refused", e.errno)' "$B3T_HOST_SELF" "$SELF_PORT")
  check self.firewall_refuses_marked "want a socket with the proxy's mark refused by the host ($B3T_HOST_SELF) and one without it connected, got marked: $marked, unmarked: $unmarked" \
    test "$marked/$unmarked" = "refused 111/connected"
  # An address the host takes while b3osd runs (a new interface, an address moved to it): the
  # name resolving to it resolves while it is not the host's, then (b3osd re-reads the host's
  # addresses each second) is withheld, even as a hit of the resolver's cache, and the proxy
  # does not dial it.
  probe "$id" resolve "$B3T_NAME_LATE"
  check self.late.resolved_before "want $B3T_NAME_LATE to resolve to $B3T_HOST_LATE while no interface has it, got $P" \
    pj ".ok and .addrs == [\"$B3T_HOST_LATE\"]"
  local late_log=$T/late.log
  ip addr add "$B3T_HOST_LATE/32" dev lo
  host_service "$B3T_HOST_LATE" "$SELF_PORT" "$late_log"
  local late_pid=$!
  sleep 2.5  # past b3osd's one-second re-read of the host's addresses
  probe "$id" resolve "$B3T_NAME_LATE"
  check self.late.withheld_after "want $B3T_NAME_LATE not to resolve once the host has $B3T_HOST_LATE, got $P" pj '.ok == false'
  probe "$id" http "http://$B3T_NAME_LATE:$SELF_PORT/" --connect "$B3T_HOST_LATE"
  check self.late.http_refused "want http://$B3T_NAME_LATE:$SELF_PORT/ refused, got $P" \
    pj '.status == 403 and .body.error.code == "egress_denied"'
  check self.late.never_reached "the service on the new address saw: $(head -2 "$late_log")" test ! -s "$late_log"
  kill "$late_pid" 2>/dev/null || true
  wait "$late_pid" 2>/dev/null || true
  ip addr del "$B3T_HOST_LATE/32" dev lo 2>/dev/null || true
  delete_sandbox "$id"
}

# ---- the policy through the sandbox's life -------------------------------------------------------

# holds NAME ID: the allowlist [a.b3t.test] holds in ID: a served, b refused.
holds() {
  probe "$2" http "http://$B3T_NAME_A/"
  check "$1.allowed" "want a.b3t.test served, got $P" served_by "$B3T_HOST_A"
  probe "$2" http "http://$B3T_NAME_B/" --connect "$B3T_HOST_B"
  check "$1.refused" "want b.b3t.test refused, got $P" refused
}
s_lifecycle() {
  create_sandbox '{"forkable": true, "egress": {"mode": "allowlist", "allow": ["a.b3t.test"]}}'
  local id=$CID f i=0
  upload_tools "$id"
  holds life.created "$id"
  api POST "/v1/sandboxes/$id/pause"
  expect life.pause 200
  api POST "/v1/sandboxes/$id/resume"
  expect life.resume 200
  holds life.after_resume "$id"
  apij POST "/v1/sandboxes/$id/fork" '{"count": 3}'
  expect life.fork 201
  check life.fork.egress "want the source's egress in each fork's object, got $(snip)" \
    jt '[.data[].egress] | length == 3 and all(.mode == "allowlist" and .allow == ["a.b3t.test"])'
  for f in $(j '.data[].id'); do
    echo "$f" >>"$T/ids"
    i=$((i + 1))
    holds "life.fork$i" "$f"
  done
  api POST "/v1/sandboxes/$id/snapshot"
  expect life.snapshot 201
  local snap
  snap=$(j .id)
  create_sandbox "{\"snapshot\": \"$snap\"}"
  check life.restore "want 201 from the snapshot with its egress, got $(snip)" okj 201 '.egress.mode == "allowlist" and .egress.allow == ["a.b3t.test"]'
  holds life.restored "$CID"

  # A live change: tightened to b.b3t.test (a download from a.b3t.test open across it is
  # cut), then the restart keeps it.
  # The change must meet a download under way: bytes have arrived (a download still resolving
  # its name when the change lands would end with NXDOMAIN instead, which proves nothing).
  inside "$id" 'nohup sh -c "curl -s --limit-rate 200k -o /tmp/dl.body -w \"%{http_code} %{size_download}\" http://a.b3t.test/bytes/100000000 >/tmp/dl.out 2>&1; echo \" rc=\$?\" >>/tmp/dl.out" >/dev/null 2>&1 &
for i in $(seq 1 100); do [ -s /tmp/dl.body ] && break; sleep 0.1; done; sleep 0.3
echo "body=$(stat -c %s /tmp/dl.body 2>/dev/null || echo 0) out=$(cat /tmp/dl.out 2>/dev/null)"'
  check life.download_started "the slow download must have begun and still be running before the change, got: $OUT" \
    bash -c '[[ $0 =~ ^body=[1-9][0-9]*\ out=$ ]]' "$OUT"
  apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "allowlist", "allow": ["b.b3t.test"]}}'
  check life.patch "want 200 with the new list, got $(snip)" okj 200 '.egress.allow == ["b.b3t.test"]'
  probe "$id" http "http://$B3T_NAME_B/"
  check life.patch.new_allowed "want b.b3t.test served after the change, got $P" served_by "$B3T_HOST_B"
  probe "$id" http "http://$B3T_NAME_A/" --connect "$B3T_HOST_A"
  check life.patch.old_refused "want a.b3t.test refused after the change, got $P" refused
  # The proxy's reset reaches a download behind a closed receive window only once the sandbox
  # sends again (its reads reopen the window, or it answers the reset with a challenge ACK
  # that the gone socket resets exactly), and curl, limited to 200 kB/s, may first read out
  # what its socket had buffered before the change: up to 20 s seen, so wait up to 60 (a
  # download left uncut would run for 500 s: the check still tells them apart).
  run_exec "$id" "$(jq -nc --arg c 'for i in $(seq 1 600); do [ -s /tmp/dl.out ] && grep -q rc= /tmp/dl.out && break; sleep 0.1; done; cat /tmp/dl.out; rm -f /tmp/dl.body' '{cmd: $c, timeout_ms: 75000}')"
  OUT=$(j .stdout)
  # "CODE BYTES rc=N": a 200 that had started (some bytes) and ended short of its length.
  check life.patch.open_connection_cut "want the download from a.b3t.test begun, then cut by the change, got: $OUT" \
    awk '$1 == 200 && $2 > 0 && $2 < 100000000 { ok = 1 } END { exit !ok }' <<<"${OUT:-none}"
  stop_daemon KILL
  start_daemon || die "b3osd did not start again after SIGKILL"
  api GET "/v1/sandboxes/$id"
  check life.restart.stored "want the changed list after the restart, got $(snip)" okj 200 '.status == "running" and .egress.allow == ["b.b3t.test"]'
  probe "$id" http "http://$B3T_NAME_B/"
  check life.restart.allowed "want b.b3t.test served after SIGKILL and restart, got $P" served_by "$B3T_HOST_B"
  probe "$id" http "http://$B3T_NAME_A/" --connect "$B3T_HOST_A"
  check life.restart.refused "want a.b3t.test still refused after the restart, got $P" refused
  for f in $(cat "$T/ids"); do
    api GET "/v1/sandboxes/$f"
    [ "$(j .status)" = running ] || continue
    [ "$(j '.egress.allow[0]')" = a.b3t.test ] || continue
    holds "life.restart.$(j .id | tail -c 6)" "$f"
  done
  apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "public"}}'
  check life.patch.public "want 200 egress public, got $(snip)" okj 200 '.egress.mode == "public" and .egress.allow == []'
  probe "$id" http "http://$B3T_NAME_C/"
  check life.patch.public_reaches "want c.b3t.test served once public, got $P" served_by "$B3T_HOST_C"
}

# ---- a crash between storing a policy and applying it ----------------------------------------------

# PATCH tightens a public sandbox with a download under way; the wrapper holds b3osd's nft
# transaction (the policy is stored, the firewall still public), b3osd is SIGKILLed there, and
# the restarted b3osd applies the stored policy: the connection the old policy let through must
# be cut, not kept by conntrack as established.
s_crash_window() {
  create_sandbox '{"egress": {"mode": "public"}}'
  local id=$CID held
  upload_tools "$id"
  inside "$id" 'nohup sh -c "curl -s --limit-rate 100k -o /tmp/dl.body -w \"%{http_code} %{size_download}\" http://c.b3t.test/bytes/100000000 >/tmp/dl.out 2>&1; echo \" rc=\$?\" >>/tmp/dl.out" >/dev/null 2>&1 &
for i in $(seq 1 100); do [ -s /tmp/dl.body ] && break; sleep 0.1; done; sleep 0.3
echo "body=$(stat -c %s /tmp/dl.body 2>/dev/null || echo 0) out=$(cat /tmp/dl.out 2>/dev/null)"'
  check crash.download_started "a slow public download must be running before the change, got: $OUT" \
    bash -c '[[ $0 =~ ^body=[1-9][0-9]*\ out=$ ]]' "$OUT"
  : >"$NFT_HOLD"
  rm -f "$NFT_HOLD.held"
  ( apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "allowlist", "allow": ["a.b3t.test"]}}' ) >/dev/null 2>&1 &
  local patch=$!
  eventually 20 test -s "$NFT_HOLD.held" || true
  check crash.transaction_held "want b3osd's nft transaction held by the wrapper, got: $(cat "$NFT_HOLD.held" 2>/dev/null || echo none)" test -s "$NFT_HOLD.held"
  held=$(cat "$NFT_HOLD.held" 2>/dev/null || true)
  stop_daemon KILL
  [ -z "$held" ] || kill "$held" 2>/dev/null || true
  rm -f "$NFT_HOLD" "$NFT_HOLD.held"
  wait "$patch" 2>/dev/null || true
  # The old firewall is still in place (the transaction never ran) until the restart makes the
  # table anew: the download goes on meanwhile.
  start_daemon || die "b3osd did not start again after SIGKILL"
  api GET "/v1/sandboxes/$id"
  check crash.policy_stored "want the tightened list stored before the crash, got $(snip)" okj 200 '.status == "running" and .egress.mode == "allowlist"'
  # The cut comes with the sandbox's next packet on the connection: refused, it gets a reset.
  # That reset carries the sequence number the sandbox had acknowledged; if more of the
  # server's data reached it meanwhile, the sandbox (rightly, RFC 5961) drops it as stale,
  # and the host, which saw the reset, lets no more of the server's packets through: the
  # connection then carries nothing and curl waits for its own timeout. Either way no byte
  # moves under the old policy: cut (curl ended) or dead (no byte for 3 s), within 20 s.
  inside "$id" 'last=-1; still=0; for i in $(seq 1 20); do
  if grep -q rc= /tmp/dl.out 2>/dev/null; then echo "cut $(cat /tmp/dl.out)"; break; fi
  now=$(stat -c %s /tmp/dl.body); if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; fi
  if [ $still -ge 3 ]; then echo "dead at $now bytes"; break; fi
  last=$now; sleep 1; done; pkill curl; rm -f /tmp/dl.body'
  [ -n "$OUT" ] || info "crash: the sandbox's connections on the host: $(conntrack -L -s "$(uplink_of "$id")" 2>/dev/null | grep -v '^conntrack' | head -5 | tr '\n' '|')"
  check crash.open_connection_cut "want the download begun under public cut, or carrying nothing, once the stored policy is applied, got: $OUT" \
    awk '($1 == "cut" && $2 == 200 && $3 > 0 && $3 < 100000000) || ($1 == "dead" && $3 < 100000000) { ok = 1 } END { exit !ok }' <<<"${OUT:-none}"
  probe "$id" http "http://$B3T_NAME_C/"
  check crash.new_policy_holds "want c.b3t.test refused under the stored list, got $P" refused
  probe "$id" http "http://$B3T_NAME_A/"
  check crash.new_policy_allows "want a.b3t.test served under the stored list, got $P" served_by "$B3T_HOST_A"
  delete_sandbox "$id"
}

# ---- bad input -------------------------------------------------------------------------------------

s_bad_input() {
  local before_ns before_el before_n
  before_ns=$(netns_count)
  before_el=$(all_elements)
  api GET '/v1/sandboxes?status=running&limit=100'
  before_n=$(j '.data | length')
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["a.b3t.test", "Bad.Name"]}}'
  expect_error bad.uppercase 400 invalid_request 'egress.allow[1]'
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["10.0.0.0/8"]}}'
  expect_error bad.private_cidr 403 egress_denied 'egress.allow[0]'
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["169.254.169.254"]}}'
  expect_error bad.metadata 403 egress_denied 'egress.allow[0]'
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["168.63.129.16"]}}'
  expect_error bad.azure_wireserver 403 egress_denied 'Azure'
  create_sandbox "{\"egress\": {\"mode\": \"allowlist\", \"allow\": [\"$B3T_HOST_OPDENY:443\"]}}"
  expect_error bad.operator_deny_cidr 403 egress_denied 'deny-cidr'
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["*.com"]}}'
  expect_error bad.wildcard_tld 400 invalid_request
  create_sandbox '{"egress": {"mode": "allowlist", "allow": ["https://a.b3t.test"]}}'
  expect_error bad.scheme 400 invalid_request
  create_sandbox '{"egress": {"mode": "public", "allow": ["a.b3t.test"]}}'
  expect_error bad.allow_with_public 400 invalid_request
  create_sandbox "{\"egress\": {\"mode\": \"allowlist\", \"allow\": $(python3 -c 'import json; print(json.dumps([f"h{i}.b3t.test" for i in range(257)]))')}}"
  expect_error bad.too_many 400 invalid_request
  create_sandbox '{"egress": {"mode": "public"}}'
  local id=$CID
  apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "deny"}}'
  expect_error bad.patch_to_deny 400 invalid_request deny
  apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "allowlist", "allow": ["192.168.0.0/16"]}}'
  expect_error bad.patch_private 403 egress_denied
  apij PATCH "/v1/sandboxes/$id" '{"memory_mib": 1024}'
  expect_error bad.patch_other_field 400 invalid_request memory_mib
  api GET "/v1/sandboxes/$id"
  check bad.patch_changed_nothing "want egress public still, got $(snip)" okj 200 '.egress.mode == "public"'
  create_sandbox '{"egress": {"mode": "deny"}}'
  local deny=$CID
  apij PATCH "/v1/sandboxes/$deny" '{"egress": {"mode": "public"}}'
  expect_error bad.patch_deny_sandbox 409 conflict deny
  apij PATCH /v1/sandboxes/sbx_00000000000000000000000000 '{"egress": {"mode": "public"}}'
  expect_error bad.patch_unknown 404 sandbox_not_found
  delete_sandbox "$id"
  delete_sandbox "$deny"
  apij PATCH "/v1/sandboxes/$id" '{"egress": {"mode": "public"}}'
  expect_error bad.patch_stopped 409 sandbox_not_running
  eventually 30 netns_is "$before_ns" || true
  check bad.no_namespace_left "namespaces: $before_ns before, $(netns_count) after" test "$(netns_count)" = "$before_ns"
  check bad.no_element_left "firewall elements: $before_el before, $(all_elements) after" test "$(all_elements)" = "$before_el"
  api GET '/v1/sandboxes?status=running&limit=100'
  check bad.no_sandbox_left "running: $before_n before, $(j '.data | length') after" test "$(j '.data | length')" = "$before_n"
}

# ---- nothing left ---------------------------------------------------------------------------------

s_cycles() {
  local n before_ns before_up before_el i id f
  local made=""
  for id in $(cat "$T/ids"); do delete_sandbox "$id" >/dev/null 2>&1 || true; done
  # Released behind the deletes' answers, while the pools refill (a claim took a member): the
  # count is read once none of the deleted sandboxes' namespaces is left and the two pools'
  # members both have theirs (--net-warm-pool 1, --net-fork-pool 1), not in between.
  settled() { ! my_netns | grep -qxF -f <(sed 's/^/b3s-/' "$T/ids" $made 2>/dev/null) && netns_is 2; }
  eventually 60 settled || info "namespaces still there: $(my_netns | tr '\n' ' ')"
  sleep 1  # a pool member's host end of its link comes with its namespace
  before_ns=$(netns_count)
  before_up=$(uplink_count)
  before_el=$(all_elements)
  made=$T/cycle.ids
  : >"$made"
  for i in $(seq 1 "$CYCLES"); do
    if [ $((i % 2)) = 0 ]; then
      create_sandbox '{"forkable": true, "egress": {"mode": "allowlist", "allow": ["a.b3t.test", "203.0.113.0/24:5432"]}}'
    else
      create_sandbox '{"forkable": true, "egress": {"mode": "public"}}'
    fi
    id=$CID
    [ -n "$id" ] || { fail cycles.create "cycle $i: $(snip)"; return 0; }
    inside "$id" 'curl -s -m 2 -o /dev/null http://a.b3t.test/; true'
    apij POST "/v1/sandboxes/$id/fork" '{"count": 1}'
    f=$(j '.data[0].id')
    [ "$ST" = 201 ] || { fail cycles.fork "cycle $i: $(snip)"; return 0; }
    printf '%s\n%s\n' "$id" "$f" >>"$made"
    delete_sandbox "$f"
    delete_sandbox "$id"
  done
  pass cycles.ran
  eventually 60 settled || true
  uplinks_back() { [ "$(uplink_count)" = "$before_up" ]; }
  eventually 10 uplinks_back || true
  check cycles.no_netns_left "after $CYCLES create/fork/delete cycles: $before_ns namespaces before, $(netns_count) after" test "$(netns_count)" = "$before_ns"
  check cycles.no_veth_left "uplinks: $before_up before, $(uplink_count) after" test "$(uplink_count)" = "$before_up"
  check cycles.no_nft_element_left "firewall elements: $before_el before, $(all_elements) after" test "$(all_elements)" = "$before_el"
  check cycles.no_conntrack_left "conntrack entries of released sandboxes' addresses: $(stale_conntrack)" test "$(stale_conntrack)" = 0
}

# B3OS_NET_SECTIONS: the sections to run (by hand; the suite runs them all).
for section in ${B3OS_NET_SECTIONS:-s_public s_allowlist s_node_self s_lifecycle s_bad_input s_crash_window s_cycles}; do
  run_section "$section"
done
check_responses

info "$(count_results PASS) passed, $(count_results FAIL) failed, $(count_results SKIP) skipped in $((($(now_ms) - SUITE_START) / 1000)) s"
[ "$(count_results FAIL)" = 0 ]

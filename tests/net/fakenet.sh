#!/usr/bin/env bash
# shellcheck disable=SC2015  # `test && ok ... || bad ...` is fine here: ok() always succeeds.
# The fake internet for b3os network tests: a network namespace of test hosts on TEST-NET
# addresses, a resolver that never forwards, a test CA. See tests/net/README.md.
#
#   fakenet.sh up DIR      build it (an existing one is torn down first)
#   fakenet.sh down DIR    remove every trace of it (safe to repeat, or when nothing is up)
#   fakenet.sh check DIR   self-test; exits non-zero on any failure
#   fakenet.sh env DIR     shell assignments for tests:  eval "$(fakenet.sh env DIR)"
#   fakenet.sh counters DIR  packets that reached each address of the netns (nft counters)
#
# Packets go only to 127.0.0.0/8 and to the addresses this script puts in its own namespaces.
# Needs root, iproute2, dnsmasq(-base), openssl, python3, curl, nft.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
SERVER_PY="$HERE/fakenet_server.py"

NS=b3t-inet            # every test host lives here
CHK_NS=b3t-chk         # throwaway client netns, only while `check` runs
H_IF=b3t-h             # root end of the veth
N_IF=b3t-n             # netns end of the veth
D_IF=lo                # the host addresses sit on $NS's loopback (this kernel has no dummy driver)
CI_IF=b3t-ci           # check link, $NS end
CC_IF=b3t-cc           # check link, $CHK_NS end
H_ADDR=198.51.100.1
N_ADDR=198.51.100.2
DNS_ADDR=198.51.100.53
CI_ADDR=203.0.113.249  # check link: 203.0.113.248/30 (inside a range routed into $NS)
CC_ADDR=203.0.113.250
HOSTS=(198.51.100.10 198.51.100.11 198.51.100.12 198.51.100.77 203.0.113.10 203.0.113.11 10.99.0.10 100.64.0.10 169.254.169.254 168.63.129.16)
ROUTES=(203.0.113.0/24 10.99.0.0/24 100.64.0.0/24 169.254.169.254/32 168.63.129.16/32)
ZONE=b3t.test
# name -> address (host-records: exactly these names). wild.b3t.test is different: it and
# every name under it resolve to $WILD_ADDR.
RECORDS=(
  "a.$ZONE 198.51.100.10"
  "b.$ZONE 198.51.100.11"
  "c.$ZONE 203.0.113.10"
  "private.$ZONE 10.99.0.10"
  "cgnat.$ZONE 100.64.0.10"
  "meta.$ZONE 169.254.169.254"
  "loop.$ZONE 127.0.0.1"
  "multi.$ZONE 198.51.100.12"
  "multi.$ZONE 10.99.0.10"
  "opdeny.$ZONE 198.51.100.77"
  "azure.$ZONE 168.63.129.16"
  "self.$ZONE 198.51.100.1"
  "late.$ZONE 198.51.100.78"
)
WILD="wild.$ZONE"
WILD_ADDR=203.0.113.11
DNS_TTL=${FAKENET_DNS_TTL:-60}
MIN_MBPS=${FAKENET_MIN_MBPS:-100}

die() { echo "fakenet: $*" >&2; exit 1; }
say() { echo "fakenet: $*" >&2; }
nsx() { ip netns exec "$NS" "$@"; }
ns_exists() { [ -e "/run/netns/$1" ]; }

python_bin() {
  # The real interpreter (not a pyenv shim) so that pids and `ip netns exec` stay simple.
  local py=${FAKENET_PYTHON:-python3}
  "$py" -c 'import sys; print(sys.executable)'
}

usage() {
  sed -n '3,11p' "$SELF" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

lock() {
  # One fake internet per host (fixed netns and link names): serialize up/down/check.
  exec 9<"$SELF"
  flock 9
}

# ---- teardown ------------------------------------------------------------------------------

alive() {  # a process that exists and is not a zombie (reaping orphans can take pid 1 a while)
  local st
  st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

kill_pidfile() {  # kill the process named in pid file $1 if its command line mentions $DIR
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  rm -f "$f"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  [ -r "/proc/$pid/cmdline" ] || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$pid" || return 0; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
}

kill_ns_pids() {  # every process still inside netns $1 (only we put processes there)
  local ns=$1 pids
  ns_exists "$ns" || return 0
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 50); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    sleep 0.05
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  sleep 0.1
}

teardown() {
  kill_pidfile "$DIR/server.pid"
  kill_pidfile "$DIR/dnsmasq.pid"
  rm -f "$DIR/server.pid.tmp"
  kill_ns_pids "$CHK_NS"
  kill_ns_pids "$NS"
  if ns_exists "$CHK_NS"; then ip netns del "$CHK_NS"; fi
  if ns_exists "$NS"; then ip netns del "$NS"; fi
  # Deleting the netns destroys its veth end and with it b3t-h and the routes through it;
  # the rest is for a half-built state.
  # The kernel may still be taking it down with the namespace: wait until it is gone.
  local i
  for i in $(seq 1 50); do
    ip link show "$H_IF" >/dev/null 2>&1 || break
    ip link del "$H_IF" 2>/dev/null || true
    sleep 0.05
  done
  local r
  for r in "${ROUTES[@]}"; do
    if ip route show exact "$r" 2>/dev/null | grep -q "via $N_ADDR"; then ip route del "$r" via "$N_ADDR" || true; fi
  done
  if nft list table inet b3t_fakenet_check >/dev/null 2>&1; then nft delete table inet b3t_fakenet_check; fi
  rm -f "$DIR/state"
}

# ---- up ------------------------------------------------------------------------------------

make_certs() {
  local san="" r n
  for n in "a.$ZONE" "b.$ZONE" "c.$ZONE" "$WILD" "x.$WILD" "y.z.$WILD" "*.$WILD" "private.$ZONE" \
           "cgnat.$ZONE" "meta.$ZONE" "loop.$ZONE" "multi.$ZONE" "opdeny.$ZONE" "azure.$ZONE"; do
    san+="DNS:$n,"
  done
  for r in "${HOSTS[@]}"; do san+="IP:$r,"; done
  san=${san%,}
  rm -f "$DIR"/ca.pem "$DIR"/ca.key "$DIR"/server.pem "$DIR"/server.key "$DIR"/server.csr
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -keyout "$DIR/ca.key" -out "$DIR/ca.pem" \
    -subj "/O=b3os tests/CN=b3t fake internet test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -sha256 -keyout "$DIR/server.key" -out "$DIR/server.csr" \
    -subj "/O=b3os tests/CN=a.$ZONE" 2>/dev/null
  cat >"$DIR/server.ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
subjectAltName=$san
EOF
  openssl x509 -req -sha256 -days 30 -in "$DIR/server.csr" -CA "$DIR/ca.pem" -CAkey "$DIR/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -extfile "$DIR/server.ext" -out "$DIR/server.pem" 2>/dev/null
  rm -f "$DIR/server.csr" "$DIR/server.ext"
  chmod 600 "$DIR/ca.key" "$DIR/server.key"
}

write_dnsmasq_conf() {
  local rec name addr
  {
    echo "# generated by fakenet.sh: answers only from this file, never forwards"
    echo "no-resolv"
    echo "no-hosts"
    echo "no-poll"
    echo "listen-address=$DNS_ADDR"
    echo "bind-interfaces"
    echo "port=53"
    echo "user=root"
    echo "group=root"
    echo "pid-file=$DIR/dnsmasq.pid"
    echo "log-queries"
    echo "log-facility=$DIR/dns.log"
    echo "local-ttl=$DNS_TTL"
    echo "no-negcache"
    echo "address=/#/"
    echo "address=/$WILD/$WILD_ADDR"
    # Without this, AAAA (or any non-A) queries under the wildcard fall through to
    # address=/#/ and get NXDOMAIN although the name has an A record; with it: NODATA.
    echo "local=/$WILD/"
    for rec in "${RECORDS[@]}"; do
      read -r name addr <<<"$rec"
      echo "host-record=$name,$addr,$DNS_TTL"
    done
  } >"$DIR/dnsmasq.conf"
}

cmd_up() {
  local py r a
  [ "$(id -u)" = 0 ] || die "run as root"
  for t in ip dnsmasq openssl curl nft flock; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || die "missing $t"
  done
  py=$(python_bin) || die "no python3"
  lock
  teardown
  trap 'rc=$?; if [ $rc != 0 ]; then say "up failed; tearing down"; teardown; fi' EXIT
  : >"$DIR/conn.log"; : >"$DIR/http.log"; : >"$DIR/dns.log"; : >"$DIR/server.log"; : >"$DIR/dnsmasq.out"
  # The static files a.b3t.test serves under /debian/ (a test fills it after up): empty.
  rm -rf "$DIR/www"
  mkdir -p "$DIR/www/debian"
  make_certs

  ip netns add "$NS"
  # Before any interface exists in it: no IPv6 at all (no link-local, no DAD/RS/MLD packets),
  # never forward (a packet routed here that is not for a test host dies here),
  # loose reverse-path filter, answer ARP for the dummy's addresses on the veth.
  nsx sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv4.ip_forward=0 net.ipv4.conf.all.forwarding=0 net.ipv4.conf.default.forwarding=0 \
    net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.default.rp_filter=2 \
    net.ipv4.conf.all.arp_ignore=0 net.ipv4.conf.all.arp_filter=0
  nsx ip link set lo up

  ip link add "$H_IF" type veth peer name "$N_IF" netns "$NS"
  echo 1 >"/proc/sys/net/ipv6/conf/$H_IF/disable_ipv6"
  echo 2 >"/proc/sys/net/ipv4/conf/$H_IF/rp_filter"
  ip addr add "$H_ADDR/24" dev "$H_IF"
  ip link set "$H_IF" up

  nsx ip addr add "$N_ADDR/24" dev "$N_IF"
  nsx ip link set "$N_IF" up
  for a in "${HOSTS[@]}" "$DNS_ADDR"; do nsx ip addr add "$a/32" dev "$D_IF"; done
  nsx ip route add default via "$H_ADDR" dev "$N_IF"

  # Root netns: "private", CGNAT, metadata and the second TEST-NET go into the namespace too.
  for r in "${ROUTES[@]}"; do ip route replace "$r" via "$N_ADDR" dev "$H_IF"; done

  # Packet counters per address (and for packets to no local address, dropped here).
  {
    echo "table inet b3t_fakenet {"
    for a in "${HOSTS[@]}" "$DNS_ADDR" "$N_ADDR"; do echo "  counter h_${a//./_} { }"; done
    echo "  counter stray { }"
    echo "  chain pre {"
    echo "    type filter hook prerouting priority -300; policy accept;"
    for a in "${HOSTS[@]}" "$DNS_ADDR" "$N_ADDR"; do echo "    ip daddr $a counter name h_${a//./_} accept"; done
    echo "    fib daddr type != local counter name stray"
    echo "  }"
    echo "}"
  } | nsx nft -f -

  write_dnsmasq_conf
  if ! nsx dnsmasq --conf-file="$DIR/dnsmasq.conf" </dev/null >"$DIR/dnsmasq.out" 2>&1 9<&-; then
    cat "$DIR/dnsmasq.out" >&2
    teardown
    die "dnsmasq did not start"
  fi

  ip netns exec "$NS" setsid "$py" "$SERVER_PY" serve --dir "$DIR" --cert "$DIR/server.pem" --key "$DIR/server.key" \
    "${HOSTS[@]}" </dev/null >>"$DIR/server.log" 2>&1 9<&- &
  local spid=$!
  for _ in $(seq 200); do
    [ -s "$DIR/server.pid" ] && [ -s "$DIR/dnsmasq.pid" ] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  if ! [ -s "$DIR/server.pid" ]; then
    cat "$DIR/server.log" >&2
    teardown
    die "test hosts did not start"
  fi
  [ -s "$DIR/dnsmasq.pid" ] || { teardown; die "dnsmasq wrote no pid file"; }
  cmd_env >"$DIR/state"
  trap - EXIT
  say "up: netns $NS, resolver $DNS_ADDR, hosts ${HOSTS[*]}, dir $DIR"
}

cmd_down() {
  [ "$(id -u)" = 0 ] || die "run as root"
  lock
  teardown
  say "down"
}

# ---- env -----------------------------------------------------------------------------------

cmd_env() {
  local up=0
  ns_exists "$NS" && [ -s "$DIR/server.pid" ] && up=1
  local -a kv=(
    B3T_FAKENET_UP "$up"
    B3T_FAKENET_DIR "$DIR"
    B3T_FAKENET "$SELF"
    B3T_FAKENET_CLIENT "$SERVER_PY"
    B3T_NETNS "$NS"
    B3T_ZONE "$ZONE"
    B3T_GW "$H_ADDR"
    B3T_NETNS_ADDR "$N_ADDR"
    B3T_DNS "$DNS_ADDR"
    B3T_DNS_TTL "$DNS_TTL"
    B3T_CA "$DIR/ca.pem"
    B3T_CA_KEY "$DIR/ca.key"
    B3T_SERVER_CERT "$DIR/server.pem"
    B3T_SERVER_KEY "$DIR/server.key"
    B3T_DNS_LOG "$DIR/dns.log"
    B3T_CONN_LOG "$DIR/conn.log"
    B3T_HTTP_LOG "$DIR/http.log"
    B3T_WWW "$DIR/www"
    B3T_HOSTS "${HOSTS[*]}"
    B3T_ROUTES "${ROUTES[*]}"
    B3T_HOST_A 198.51.100.10
    B3T_HOST_B 198.51.100.11
    B3T_HOST_MULTI 198.51.100.12
    B3T_HOST_C 203.0.113.10
    B3T_HOST_WILD 203.0.113.11
    B3T_HOST_PRIVATE 10.99.0.10
    B3T_HOST_CGNAT 100.64.0.10
    B3T_HOST_META 169.254.169.254
    B3T_HOST_AZURE 168.63.129.16
    B3T_HOST_OPDENY 198.51.100.77
    B3T_HOST_SELF 198.51.100.1
    B3T_HOST_LATE 198.51.100.78
    B3T_NAME_A "a.$ZONE"
    B3T_NAME_B "b.$ZONE"
    B3T_NAME_C "c.$ZONE"
    B3T_NAME_WILD "$WILD"
    B3T_NAME_WILD_X "x.$WILD"
    B3T_NAME_WILD_YZ "y.z.$WILD"
    B3T_NAME_PRIVATE "private.$ZONE"
    B3T_NAME_CGNAT "cgnat.$ZONE"
    B3T_NAME_META "meta.$ZONE"
    B3T_NAME_AZURE "azure.$ZONE"
    B3T_NAME_OPDENY "opdeny.$ZONE"
    B3T_NAME_SELF "self.$ZONE"
    B3T_NAME_LATE "late.$ZONE"
    B3T_NAME_LOOP "loop.$ZONE"
    B3T_NAME_MULTI "multi.$ZONE"
  )
  local i
  for ((i = 0; i < ${#kv[@]}; i += 2)); do printf '%s=%q\n' "${kv[i]}" "${kv[i+1]}"; done
}

# ---- counters ------------------------------------------------------------------------------

cmd_counters() {
  ns_exists "$NS" || die "not up"
  nsx nft list counters table inet b3t_fakenet | awk '
    /counter h_/ { n = $2; sub(/^h_/, "", n); gsub(/_/, ".", n) }
    /counter stray/ { n = "stray" }
    /packets/ { print n, "packets=" $2, "bytes=" $4 }'
}

stray_count() { cmd_counters | awk '$1 == "stray" { sub(/packets=/, "", $2); print $2 }'; }

# ---- check ---------------------------------------------------------------------------------

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); printf 'ok    %s\n' "$*"; }
bad() { FAIL=$((FAIL + 1)); printf 'FAIL  %s\n' "$*"; }

# Expected A records: "name addr[,addr]".
expected_a() {
  echo "a.$ZONE 198.51.100.10"
  echo "b.$ZONE 198.51.100.11"
  echo "c.$ZONE 203.0.113.10"
  echo "$WILD 203.0.113.11"
  echo "x.$WILD 203.0.113.11"
  echo "y.z.$WILD 203.0.113.11"
  echo "private.$ZONE 10.99.0.10"
  echo "cgnat.$ZONE 100.64.0.10"
  echo "meta.$ZONE 169.254.169.254"
  echo "loop.$ZONE 127.0.0.1"
  echo "multi.$ZONE 10.99.0.10,198.51.100.12"
}
# A name of the zone for each host, to test HTTPS with SNI against it.
name_of() {
  case $1 in
    198.51.100.10) echo "a.$ZONE" ;; 198.51.100.11) echo "b.$ZONE" ;; 198.51.100.12) echo "multi.$ZONE" ;;
    203.0.113.10) echo "c.$ZONE" ;; 203.0.113.11) echo "y.z.$WILD" ;; 10.99.0.10) echo "private.$ZONE" ;;
    100.64.0.10) echo "cgnat.$ZONE" ;; 169.254.169.254) echo "meta.$ZONE" ;;
    198.51.100.77) echo "opdeny.$ZONE" ;; 168.63.129.16) echo "azure.$ZONE" ;;
  esac
}

# run_in WHERE CMD...: WHERE is "root" or a netns name
run_in() {
  local where=$1; shift
  if [ "$where" = root ]; then "$@"; else ip netns exec "$where" "$@"; fi
}

# json_is JSON KEY=VALUE...: every key has that value (VALUE "null" means JSON null)
json_is() {
  "$PY" -c '
import json, sys
d = json.loads(sys.argv[1])
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    want = None if v == "null" else (int(v) if v.isdigit() else v)
    if d.get(k) != want:
        sys.exit(1)
' "$@" 2>/dev/null
}

dns_a() {  # dns_a WHERE NAME [--tcp]: "rcode=X a1,a2" sorted ("error=... " when no answer came)
  local where=$1 name=$2; shift 2
  # A query that gets no answer exits 2 (pipefail: so would dns_a, and got=$(dns_a ...) would
  # end the check there): what it printed is for the caller to judge, as bad().
  run_in "$where" "$PY" "$SERVER_PY" query --server "$DNS_ADDR" "$@" "$name" |
    { read -r rc; printf '%s %s\n' "$rc" "$(awk '$1 == "A" { print $2 }' | sort | paste -sd, -)"; } || true
}

check_dns() {  # check_dns WHERE SRC: resolver answers, NXDOMAIN, log
  local where=$1 src=$2 name addrs got nx
  while read -r name addrs; do
    got=$(dns_a "$where" "$name")
    if [ "$got" = "rcode=NOERROR $addrs" ]; then ok "[$where] dns A $name -> $addrs"
    else bad "[$where] dns A $name -> want '$addrs', got '$got'"; fi
  done < <(expected_a)
  got=$(dns_a "$where" "multi.$ZONE" --tcp)
  [ "$got" = "rcode=NOERROR 10.99.0.10,198.51.100.12" ] && ok "[$where] dns A multi.$ZONE over TCP" ||
    bad "[$where] dns over TCP: got '$got'"
  for name in "a.$ZONE" "multi.$ZONE" "x.$WILD" "$WILD"; do
    got=$(run_in "$where" "$PY" "$SERVER_PY" query --server "$DNS_ADDR" --type AAAA "$name" | tr '\n' ' ') || true
    [ "$got" = "rcode=NOERROR " ] && ok "[$where] dns AAAA $name -> NOERROR, no data" ||
      bad "[$where] dns AAAA $name: got '$got'"
  done
  for nx in "nx-$RANDOM$RANDOM.$ZONE" "nx-$RANDOM$RANDOM.example.com" "nx-$RANDOM$RANDOM.a.$ZONE"; do
    got=$(dns_a "$where" "$nx")
    [ "$got" = "rcode=NXDOMAIN " ] && ok "[$where] dns $nx -> NXDOMAIN" || bad "[$where] dns $nx: got '$got'"
    # no sleep: the query must already be in the log
    grep -qF "query[A] $nx from $src" "$DIR/dns.log" && ok "[$where] dns.log has the query for $nx from $src" ||
      bad "[$where] dns.log lacks 'query[A] $nx from $src'"
  done
}

check_hosts() {  # check_hosts WHERE SRC HOST...: HTTP, HTTPS, echoes, conn.log
  local where=$1 src=$2 h name out; shift 2
  for h in "$@"; do
    name=$(name_of "$h")
    for port in 80 8080; do
      out=$(run_in "$where" curl -q --noproxy '*' -sS --max-time 5 "http://$h:$port/" 2>&1) || true
      local hh="$h:$port"; [ "$port" = 80 ] && hh=$h
      json_is "$out" server="$h" host="$hh" sni=null path=/ scheme=http port="$port" peer="$src" &&
        ok "[$where] http://$h:$port/" || bad "[$where] http://$h:$port/: $out"
    done
    out=$(run_in "$where" curl -q --noproxy '*' -sS --max-time 5 --cacert "$DIR/ca.pem" --resolve "$name:443:$h" "https://$name/" 2>&1) || true
    json_is "$out" server="$h" host="$name" sni="$name" path=/ scheme=https port=443 &&
      ok "[$where] https://$name/ at $h (sni $name)" || bad "[$where] https://$name/ at $h: $out"
    # The echoes exit 2 when nothing answers (as the curls above may fail): bad() says so.
    out=$(run_in "$where" "$PY" "$SERVER_PY" tcp "$h" 5432 "hello $h") || true
    [ "$out" = "echo $h hello $h" ] && ok "[$where] tcp echo $h:5432" || bad "[$where] tcp echo $h:5432: $out"
    for port in 443 7; do
      out=$(run_in "$where" "$PY" "$SERVER_PY" udp "$h" "$port" "ping $port") || true
      [ "$out" = "udp $h ping $port" ] && ok "[$where] udp echo $h:$port" || bad "[$where] udp echo $h:$port: $out"
    done
    local miss=""
    for pp in tcp:80 tcp:8080 tcp:443 tcp:5432 udp:443 udp:7; do
      grep -qE "^[0-9.]+ ${pp%%:*} $h:${pp#*:} from $src:[0-9]+\$" "$DIR/conn.log" || miss+=" $pp"
    done
    [ -z "$miss" ] && ok "[$where] conn.log has all 6 services of $h from $src" ||
      bad "[$where] conn.log lacks$miss for $h from $src"
  done
}

cmd_check() {
  [ "$(id -u)" = 0 ] || die "run as root"
  PY=$(python_bin) || die "no python3"
  lock
  ns_exists "$NS" || die "not up (no netns $NS); run: $SELF up $DIR"
  local pid
  for f in server.pid dnsmasq.pid; do
    pid=$(cat "$DIR/$f" 2>/dev/null || true)
    if [ -n "$pid" ] && alive "$pid"; then ok "process $f ($pid) alive"; else bad "process $f not running"; fi
  done

  trap 'kill_ns_pids "$CHK_NS"; if ns_exists "$CHK_NS"; then ip netns del "$CHK_NS"; fi
        if nft list table inet b3t_fakenet_check >/dev/null 2>&1; then nft delete table inet b3t_fakenet_check; fi' EXIT
  local stray0 stray1 stray2
  stray0=$(stray_count)
  # While the check runs, count in the root netns (our own table, counters only, removed at
  # the end) every packet to the fake internet's ranges that leaves by any interface but
  # b3t-h or lo, and every DNS packet that leaves by any interface but b3t-h or lo.
  nft -f - <<EOF
table inet b3t_fakenet_check {
  counter leak { }
  counter dns_out { }
  chain out {
    type filter hook postrouting priority 300; policy accept;
    oifname { "$H_IF", "lo" } accept
    ip daddr { 198.51.100.0/24, $(IFS=,; echo "${ROUTES[*]}") } counter name leak
    meta l4proto { tcp, udp } th dport 53 counter name dns_out
  }
}
EOF

  # Static: topology and sockets.
  local r a out
  for a in "${HOSTS[@]}" "$DNS_ADDR" 10.99.0.77 100.64.0.99 203.0.113.200; do
    out=$(ip route get "$a" 2>&1) || true  # no route at all: an error, which bad() shows
    [[ "$out" == *"dev $H_IF"* ]] && ok "route to $a goes into $NS" || bad "route to $a: $out"
  done
  out=$(nsx ss -Hlntu)
  local l53
  l53=$(awk '$5 ~ /:53$/ { print $1, $5 }' <<<"$out" | sort -u | tr '\n' ' ')
  [ "$l53" = "tcp 198.51.100.53:53 udp 198.51.100.53:53 " ] && ok "dnsmasq listens only on $DNS_ADDR:53 (udp, tcp)" ||
    bad "port 53 listeners: '$l53'"
  local nsock
  nsock=$(awk '$5 ~ /:(80|443|8080|5432|7)$/' <<<"$out" | wc -l)
  [ "$nsock" = $((${#HOSTS[@]} * 6)) ] && ok "test hosts: $nsock sockets (${#HOSTS[@]} hosts x 6)" ||
    bad "test hosts: $nsock sockets, want $((${#HOSTS[@]} * 6))"
  if nsx sysctl -n net.ipv4.ip_forward | grep -qx 0; then ok "$NS does not forward"; else bad "$NS forwards"; fi

  # From the root netns.
  check_dns root "$H_ADDR"
  check_hosts root "$H_ADDR" "${HOSTS[@]}"
  out=$(curl -q --noproxy '*' -sS --max-time 5 --cacert "$DIR/ca.pem" "https://198.51.100.10/" 2>&1) || true
  json_is "$out" server=198.51.100.10 sni=null scheme=https && ok "[root] https://198.51.100.10/ (IP SAN, no SNI)" ||
    bad "[root] https://198.51.100.10/: $out"
  out=$(curl -q --noproxy '*' -sS --max-time 5 --cacert "$DIR/ca.pem" --resolve "other.example:443:198.51.100.10" https://other.example/ 2>&1) && \
    bad "[root] TLS to a name not in the cert was accepted" || ok "[root] TLS to a name not in the cert fails verification"
  grep -qF "sni=other.example " "$DIR/http.log" && bad "[root] http.log has a request after a failed handshake" ||
    ok "[root] no request after the failed handshake"

  # From a throwaway netns wired straight into $NS (see README: no forwarding anywhere).
  ip netns add "$CHK_NS"
  ip netns exec "$CHK_NS" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
    net.ipv4.ip_forward=0
  ip netns exec "$CHK_NS" ip link set lo up
  nsx ip link add "$CI_IF" type veth peer name "$CC_IF" netns "$CHK_NS"
  nsx ip addr add "$CI_ADDR/30" dev "$CI_IF"
  nsx ip link set "$CI_IF" up
  ip netns exec "$CHK_NS" ip addr add "$CC_ADDR/30" dev "$CC_IF"
  ip netns exec "$CHK_NS" ip link set "$CC_IF" up
  ip netns exec "$CHK_NS" ip route add default via "$CI_ADDR" dev "$CC_IF"
  check_dns "$CHK_NS" "$CC_ADDR"
  check_hosts "$CHK_NS" "$CC_ADDR" 198.51.100.10 10.99.0.10 169.254.169.254
  kill_ns_pids "$CHK_NS"
  ip netns del "$CHK_NS"   # takes b3t-ci with it
  sleep 0.1
  if nsx ip link show "$CI_IF" >/dev/null 2>&1; then bad "$CI_IF left behind"; else ok "check netns $CHK_NS removed"; fi

  # Static files: a.b3t.test serves DIR/www/debian/... as they are at each request, 404 for
  # anything else under /debian/ (missing, a directory, outside www); other hosts do not.
  local sname="b3t-check-$RANDOM$RANDOM" code
  mkdir -p "$DIR/www/debian/sub"
  printf 'static %s\n' "$sname" >"$DIR/www/debian/sub/$sname"
  out=$(curl -q --noproxy '*' -sS --max-time 5 "http://198.51.100.10/debian/sub/$sname" 2>&1) || true
  [ "$out" = "static $sname" ] && ok "[root] a static file of www/debian from 198.51.100.10" ||
    bad "[root] static file: '$out'"
  out=$(curl -q --noproxy '*' -sS --max-time 5 --cacert "$DIR/ca.pem" --resolve "a.$ZONE:443:198.51.100.10" \
    "https://a.$ZONE/debian/sub/$sname" 2>&1) || true
  [ "$out" = "static $sname" ] && ok "[root] the same over HTTPS" || bad "[root] static file over HTTPS: '$out'"
  printf 'changed\n' >"$DIR/www/debian/sub/$sname"
  out=$(curl -q --noproxy '*' -sS --max-time 5 "http://198.51.100.10/debian/sub/$sname" 2>&1) || true
  [ "$out" = changed ] && ok "[root] a static file is read at each request" || bad "[root] static file after a change: '$out'"
  for p in "/debian/sub/nope-$sname" /debian/sub /debian/sub/ /debian/../../ca.pem /debian/%2e%2e/%2e%2e/ca.pem /debian/..%2f..%2fca.pem; do
    code=$(curl -q --noproxy '*' -sS --path-as-is --max-time 5 -o /dev/null -w '%{http_code}' "http://198.51.100.10$p" 2>&1) || true
    [ "$code" = 404 ] && ok "[root] static $p -> 404" || bad "[root] static $p -> $code, want 404"
  done
  out=$(curl -q --noproxy '*' -sS --max-time 5 "http://198.51.100.11/debian/sub/$sname" 2>&1) || true
  json_is "$out" server=198.51.100.11 path="/debian/sub/$sname" && ok "[root] only 198.51.100.10 serves static files" ||
    bad "[root] 198.51.100.11 /debian/: '$out'"
  rm -rf "$DIR/www/debian/sub"

  # Throughput: 256 MiB from the root netns.
  out=$(curl -q --noproxy '*' -sS -o /dev/null --max-time 60 -w '%{size_download} %{time_total} %{speed_download}' \
        "http://198.51.100.10/bytes/268435456" 2>&1) || true
  local size secs bps mbps
  read -r size secs bps <<<"$out"
  if [ "${size:-0}" = 268435456 ]; then
    mbps=$(awk -v b="$bps" 'BEGIN { printf "%.0f", b / 1e6 }')
    if [ "$mbps" -ge "$MIN_MBPS" ]; then ok "throughput: 256 MiB in ${secs}s = $mbps MB/s (>= $MIN_MBPS)"
    else bad "throughput: 256 MiB in ${secs}s = $mbps MB/s (< $MIN_MBPS)"; fi
  else
    bad "throughput: download failed: $out"
  fi

  # Counters: the hosts were reached; nothing arrived for an address that is not there, until
  # we send one packet to a routed address with no host: it must land (and die) in $NS.
  out=$(cmd_counters)
  grep -qE '^198\.51\.100\.10 packets=[1-9]' <<<"$out" && ok "nft counter for 198.51.100.10 counts" ||
    bad "nft counters: $out"
  stray1=$(stray_count)
  [ "$stray1" = "$stray0" ] && ok "no stray packet reached $NS during the check" ||
    bad "stray packets during the check: $((stray1 - stray0))"
  "$PY" "$SERVER_PY" udp 203.0.113.200 9 "stray" --timeout 0.3 >/dev/null || true
  stray2=$(stray_count)
  [ "$stray2" = $((stray1 + 1)) ] && ok "a packet to 203.0.113.200 (no host there) landed in $NS, counted stray" ||
    bad "stray: $stray1 -> $stray2"

  out=$(nft list counters table inet b3t_fakenet_check)
  nft delete table inet b3t_fakenet_check
  local leak dns_out
  leak=$(awk '/counter leak/ { f = 1 } f && /packets/ { print $2; exit }' <<<"$out")
  dns_out=$(awk '/counter dns_out/ { f = 1 } f && /packets/ { print $2; exit }' <<<"$out")
  [ "$leak" = 0 ] && ok "root netns: 0 packets to the fake internet's ranges left by another interface" ||
    bad "root netns: $leak packets to the fake internet's ranges left by another interface"
  # Anything on the host may resolve names meanwhile, so this one only informs.
  echo "info  root netns: $dns_out DNS packets left by another interface during the check (from anyone)"
  echo "check: $PASS ok, $FAIL failed"
  [ "$FAIL" = 0 ]
}

# ---- main ----------------------------------------------------------------------------------

[ $# -eq 2 ] || usage
cmd=$1
case $cmd in up | down | check | env | counters) ;; *) usage ;; esac
[ "$cmd" = up ] && mkdir -p "$2"
DIR=$(realpath -m "$2")
case $cmd in
  up) cmd_up ;;
  down) cmd_down ;;
  check) cmd_check ;;
  env) cmd_env ;;
  counters) cmd_counters ;;
esac

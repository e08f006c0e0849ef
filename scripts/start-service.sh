#!/usr/bin/env bash
# Where systemd runs: installs b3osd.service for this build tree and (re)starts it, then prints
# where b3osd listens and the API key, as scripts/start.sh does for a background b3osd.
# The unit is packaging/b3osd.service with ExecStart pointing at build/bin/b3osd, written to
# /etc/systemd/system/b3osd.service (which overrides a packaged /lib/systemd/system one).
# A restart ends b3osd alone (KillMode=process): running sandboxes are reattached.
#
# Usage: scripts/start-service.sh            (as root, on a host where systemd is PID 1)
#        scripts/start-service.sh --print-unit   (prints the unit it would install; no root)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/build/bin
unit=/etc/systemd/system/b3osd.service
conf=/etc/b3os/b3osd.conf

# The packaged unit with ExecStart on the build tree's b3osd ("%" is systemd's specifier
# character, doubled; the path is quoted for spaces).
render_unit() {
  local exe=${bin//%/%%}
  echo "# Written by $PWD/scripts/start-service.sh from packaging/b3osd.service: b3osd of the"
  echo "# build tree $PWD. Remove this file to fall back to the packaged unit, if any."
  sed "s|^ExecStart=/usr/sbin/b3osd |ExecStart=\"$exe/b3osd\" |" packaging/b3osd.service
}
if [ "${1:-}" = --print-unit ]; then
  render_unit
  exit 0
fi

[ "$(id -u)" = 0 ] || { echo "start-service: run as root" >&2; exit 1; }
[ -d /run/systemd/system ] || { echo "start-service: systemd is not running here; use scripts/start.sh" >&2; exit 1; }
[ -x "$bin/b3osd" ] || { echo "start-service: $bin/b3osd is missing; run scripts/build.sh" >&2; exit 1; }

# A b3osd that scripts/start.sh started in the background would hold the port and the network
# range: end it (SIGTERM; its sandboxes keep running and the service reattaches them).
pidfile=/run/b3osd.pid
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "stopping the b3osd that scripts/start.sh started (pid $(cat "$pidfile"))"
  kill "$(cat "$pidfile")"
  for _ in $(seq 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
  rm -f "$pidfile"
fi

if [ -e /lib/systemd/system/b3osd.service ]; then
  echo "note: the b3os package's unit is installed too; $unit overrides it (b3osd of this build tree runs)"
fi
render_unit >"$unit.tmp"
mv "$unit.tmp" "$unit"
# The default configuration, all commented out, where b3osd looks for it; an existing
# one is kept.
if [ ! -e "$conf" ]; then
  mkdir -p "$(dirname "$conf")"
  cp packaging/b3osd.conf "$conf"
fi

systemctl daemon-reload
systemctl enable --quiet b3osd.service
echo "restarting b3osd.service (Type=notify: this returns once b3osd has reattached its sandboxes and serves)"
since=$(date +%s)
if ! systemctl restart b3osd.service; then
  echo "b3osd.service did not start:" >&2
  systemctl status --no-pager b3osd.service >&2 || true
  journalctl -u b3osd.service -n 40 --no-pager >&2 || true
  exit 1
fi

# What this run of b3osd printed (the unit passes --quiet-key: the key is read from its file).
lines=""
for _ in $(seq 100); do
  # The banner's lines as printed, or inside JSON log lines (--log-format json): unwrapped.
  lines=$(journalctl -u b3osd.service --since "@$since" -o cat --no-pager 2>/dev/null |
    sed -n 's/^{.*"msg":"\([^"]*\)".*}$/\1/; /^\(b3osd listening\|  export\)/p' | tail -n 2 || true)
  grep -q '^b3osd listening' <<<"$lines" && break
  sleep 0.1
done
url=$(sed -n 's/^b3osd listening on \(http[^ ]*\).*/\1/p' <<<"$lines" | head -n 1)
[ -n "$url" ] || { echo "b3osd.service runs but its journal has no 'b3osd listening' line; see: journalctl -u b3osd" >&2; exit 1; }
code=""
for _ in $(seq 300); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$url/healthz" || true)
  [ "$code" = 200 ] && break
  sleep 0.1
done
if [ "$code" != 200 ]; then
  echo "b3osd.service is active but $url/healthz answers ${code:-nothing}, not 200; see: journalctl -u b3osd" >&2
  exit 1
fi
# shellcheck disable=SC2016 # the $(cat ...) is the text b3osd printed
data_dir=$(sed -n 's/.*B3OS_API_KEY=$(cat \(.*\)\/admin\.key).*/\1/p' <<<"$lines" | head -n 1)
echo "b3osd listening on $url"
[ -r "${data_dir:-/var/lib/b3os}/admin.key" ] &&
  echo "API key (project default): $(cat "${data_dir:-/var/lib/b3os}/admin.key")"
grep '^  export' <<<"$lines" || true
echo "service: systemctl status b3osd   log: journalctl -u b3osd   stop: systemctl stop b3osd (sandboxes keep running)"

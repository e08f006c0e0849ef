#!/usr/bin/env bash
# Installs everything b3os needs on Debian 12 (bookworm), as root.
# runsc comes from bookworm-backports, pinned so that nothing else is taken from there.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root" >&2; exit 1; fi

bp=/etc/apt/sources.list.d/b3os-bookworm-backports.sources
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  cat >"$bp" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
# Only runsc may come from backports; everything else stays on bookworm.
cat >/etc/apt/preferences.d/b3os-runsc <<'PIN'
Package: *
Pin: release n=bookworm-backports
Pin-Priority: 100

Package: runsc
Pin: release n=bookworm-backports
Pin-Priority: 990
PIN

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-dev nlohmann-json3-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  libcli11-dev libexpected-dev libgtest-dev libgmock-dev libssl-dev
  libsystemd-dev  # sd_notify: b3osd.service is Type=notify
  clang libclang-rt-14-dev
  runsc debootstrap iproute2 nftables ethtool conntrack
  libc-ares-dev libldns-dev  # egress: the resolver (upstream queries with TTLs; DNS packets)
  libarchive-dev  # templates: reading container image archives (daemon/image)
  zstd  # tests: zstd layers and archives (make_image.py --compress zstd, templates.sh zst-bomb)
  libcurl4-openssl-dev  # the cluster's object storage: S3 requests signed with libcurl's SigV4 (daemon/objstore)
  libpq-dev postgresql-15  # the cluster's shared store (daemon/store/pg_store.cc); the store tests start a Postgres 15 of their own
  mmdebstrap  # templates: from: debian:bookworm (a fresh minbase root, made once per node)
  dnsmasq-base openssl  # network tests: the fake internet's resolver and its test CA
  curl jq python3 ca-certificates procps psmisc util-linux e2fsprogs
  tmux  # tests/e2e: `b3os shell` driven in a real terminal (send keys, read the pane)
  dpkg-dev  # tests/fixtures/make_apt_repo.sh: dpkg-scanpackages indexes the template suite's apt repository
  python3-yaml python3-jsonschema  # tests/e2e/openapi_check.py: responses against docs/openapi.yaml
  prometheus  # tests/e2e/operations.sh: a real Prometheus scrapes b3osd (promtool checks the metrics and the alert rules)
  debhelper help2man lintian systemd  # scripts/package.sh builds the .deb; tests/e2e/package.sh lints it and runs systemd-analyze verify
  nodejs  # the recipes' TypeScript tab (run.mjs); needs node 20, else those checks say SKIP and why
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  apt-get install -y -qq -t bookworm-backports runsc >/dev/null
fi
# Not `| head -1`: head exits after one line, runsc can die of SIGPIPE writing its second, and
# pipefail turns that into a failed install.
version=$(runsc --version)
echo "${version%%$'\n'*}"

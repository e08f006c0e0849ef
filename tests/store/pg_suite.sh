#!/bin/bash
# The store suite against Postgres: starts Debian's Postgres 15 in a temporary directory
# (its own data directory, a unix socket only: no TCP port, nothing outside the machine),
# runs every backend-neutral store test with B3OS_TEST_PG pointing at it, stops it and removes
# the directory. Usage: tests/store/pg_suite.sh [BUILD_BIN_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/bin}
pgbin=/usr/lib/postgresql/15/bin
[ -x "$pgbin/initdb" ] || { echo "SKIP store-postgres: $pgbin/initdb missing (scripts/install-deps.sh installs postgresql-15)"; exit 1; }

dir=$(mktemp -d /tmp/b3os-pg.XXXXXX)
chown postgres: "$dir"
as_pg() { runuser -u postgres -- "$@"; }
cleanup() {
  as_pg "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

as_pg "$pgbin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 ||
  { cat "$dir/initdb.log"; exit 1; }
# listen_addresses='': the socket in $dir only. fsync off: a test database, thrown away after.
as_pg "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
  -o "-c listen_addresses='' -k $dir -c fsync=off -c synchronous_commit=off -c max_connections=200" start >/dev/null ||
  { cat "$dir/server.log"; exit 1; }

export B3OS_TEST_PG="host=$dir port=5432 user=postgres"
echo "# postgres 15 at $dir (unix socket), B3OS_TEST_PG='$B3OS_TEST_PG'"
"$bin/unit_tests" --gtest_filter='Backends/*postgres*:Postgres/*' --gtest_brief=0
rc=$?
# PG_E2E_SECTIONS="s_create s_exec ...": those end-to-end sections too, with b3osd (and the
# CLI's keys) on a database of this Postgres instead of SQLite.
if [ $rc = 0 ] && [ -n "${PG_E2E_SECTIONS:-}" ]; then
  as_pg psql -h "$dir" -q -c "CREATE DATABASE b3e2e" >/dev/null
  B3OS_STORE="postgresql://postgres@/b3e2e?host=$dir" B3OS_BIN=$bin E2E_SECTIONS="$PG_E2E_SECTIONS" \
    B3OS_E2E_BIG=0 "$root/tests/e2e/e2e.sh" || rc=$?
fi
exit $rc

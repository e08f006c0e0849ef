#!/bin/bash
# The store suite against Postgres: starts Debian's Postgres 15 in a temporary directory
# (tests/store/postgres.sh: a unix socket only), runs every backend-neutral store test and the
# Postgres-only ones with B3OS_TEST_PG pointing at it, stops it and removes the directory.
# Usage: tests/store/pg_suite.sh [BUILD_BIN_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/bin}
# shellcheck source=tests/store/postgres.sh
. "$root/tests/store/postgres.sh"
[ -x "$PG_BIN/initdb" ] || { echo "SKIP store-postgres: $PG_BIN/initdb missing (scripts/install-deps.sh installs postgresql-15)"; exit 1; }
trap pg_stop EXIT
pg_start || exit 1

export B3OS_TEST_PG="$PG_LIBPQ"
echo "# postgres 15 at $PG_DIR (unix socket), B3OS_TEST_PG='$B3OS_TEST_PG'"
"$bin/unit_tests" --gtest_filter='Backends/*postgres*:Postgres/*' --gtest_brief=0
rc=$?
# PG_E2E_SECTIONS="s_create s_exec ...": those end-to-end sections too, with b3osd (and the
# CLI's keys) on a database of this Postgres instead of SQLite.
if [ $rc = 0 ] && [ -n "${PG_E2E_SECTIONS:-}" ]; then
  B3OS_STORE=$(pg_createdb b3e2e) B3OS_BIN=$bin E2E_SECTIONS="$PG_E2E_SECTIONS" \
    B3OS_E2E_BIG=0 "$root/tests/e2e/e2e.sh" || rc=$?
fi
exit $rc

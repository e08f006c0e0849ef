# shellcheck shell=bash
# shellcheck disable=SC2034 # PG_LIBPQ, PG_DIR are for the scripts that source this
# A Postgres 15 of Debian's for a test: its own data directory under /tmp, a unix socket in
# that directory only (listen_addresses='': no TCP port, nothing outside the machine), fsync
# off (the data is thrown away). Sourced by tests/store/pg_suite.sh and tests/cluster/.
#
#   pg_start          starts it; sets PG_DIR and PG_LIBPQ ("host=DIR port=5432 user=postgres")
#   pg_createdb NAME  makes a database; prints its URL (postgresql://postgres@/NAME?host=DIR)
#   pg_stop           stops it at once (-m immediate) and removes the directory
#   pg_restart        stops it (fast) and starts it again on the same data (a fault test)

PG_BIN=/usr/lib/postgresql/15/bin

pg_as() { runuser -u postgres -- "$@"; }

pg_start() {
  [ -x "$PG_BIN/initdb" ] || { echo "postgres: $PG_BIN/initdb missing (scripts/install-deps.sh installs postgresql-15)" >&2; return 1; }
  PG_DIR=$(mktemp -d /tmp/b3os-pg.XXXXXX)
  chown postgres: "$PG_DIR"
  pg_as "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust --no-sync >"$PG_DIR/initdb.log" 2>&1 ||
    { cat "$PG_DIR/initdb.log" >&2; return 1; }
  _pg_up || return 1
  PG_LIBPQ="host=$PG_DIR port=5432 user=postgres"
}

_pg_up() {
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 30 \
    -o "-c listen_addresses='' -k $PG_DIR -c fsync=off -c synchronous_commit=off -c max_connections=300" start >/dev/null ||
    { tail -n 20 "$PG_DIR/server.log" >&2; return 1; }
}

pg_createdb() {
  pg_as psql -h "$PG_DIR" -q -c "CREATE DATABASE $1" >/dev/null || return 1
  echo "postgresql://postgres@/$1?host=$PG_DIR"
}

# pg_restart [SECONDS]: stops the server and starts it again, SECONDS later (default at once).
pg_restart() {
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null 2>&1
  [ -z "${1:-}" ] || sleep "$1"
  _pg_up
}

pg_stop() {
  [ -n "${PG_DIR:-}" ] || return 0
  pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
  PG_DIR=
}

#!/usr/bin/env bash
# A throwaway Postgres server on loopback for the platform database: Debian's postgresql, its own data directory,
# trust authentication on 127.0.0.1 only. Tests create a fresh database per test on it.
#
# usage: hack/postgres.sh start | stop | status | url | halt | resume
#
# `halt` shuts the server down and keeps its data, `resume` starts it again on that data: an outage of the server
# (the e2e tier's alert tests), where `stop` throws the server away.
#
# Pods reach it too when SLIPWAY_PG_LISTEN names one more address to listen on (the host's end of the node's link)
# and SLIPWAY_PG_CLIENTS the networks allowed to connect there (comma-separated CIDRs), with a password
# (scram-sha-256) and over TLS only (`hostssl`, a self-signed certificate made at start), as managed Postgres
# services require: the chart-installed platform keeps its database here, reached with sslmode=require.
#
# With SLIPWAY_PG_DATA_SERVER=1 the server is the channels' data server instead (run it on a port of its own, apart
# from the platform database): pgextwlist is preloaded with `extwlist.extensions='postgis'`, so a channel's own
# non-superuser role can create postgis and no other extension it could not create anyway, and the maintenance
# databases are closed to PUBLIC, so a channel role reaches nothing but its own database. pgextwlist's custom script
# for postgis (`extwlist.custom_path`) grants the database's owner (the channel's write role) the rows of
# `spatial_ref_sys`, which the extension's superuser-run script makes: a restored dump loads them back as that role.
#
# Its data lives in memory, under /dev/shm when the machine has it: the server is thrown away, and a test run creates
# and drops hundreds of databases, thousands of files each, which on a journaled disk cost the kernel more than
# Postgres itself. Without /dev/shm the data goes under $SLIPWAY_RUN, or /var/tmp for root. Postgres refuses to run
# as root, so when run as root the server runs as the `postgres` user (root's home is closed to other users). A
# start first stops whatever an earlier run left behind.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
PG_PORT=${SLIPWAY_PG_PORT:-15432}
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ "$(id -u)" -eq 0 ]; then
  PG_DIR="/var/tmp/slipway-postgres-$PG_PORT"
  as_pg() { runuser -u postgres -- "$@"; }
else
  PG_DIR="$SLIPWAY_RUN/postgres-$PG_PORT"
  as_pg() { "$@"; }
fi
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  PG_DIR="/dev/shm/slipway-postgres-$PG_PORT"
fi
URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
EXTRA_LISTEN=${SLIPWAY_PG_LISTEN:-}
CLIENTS=${SLIPWAY_PG_CLIENTS:-}
DATA_SERVER=${SLIPWAY_PG_DATA_SERVER:-}
LISTEN="127.0.0.1${EXTRA_LISTEN:+,$EXTRA_LISTEN}"

log() { printf '[postgres %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

ready() { [ -n "$PG_BIN" ] && "$PG_BIN/pg_isready" -q -h "${1:-127.0.0.1}" -p "$PG_PORT" 2>/dev/null; }

# A data server trusts only its admin on loopback: channel roles sign in with their passwords there too.
data_server_hba() {
  [ -n "$DATA_SERVER" ] || return 0
  cat >"$PG_DIR/data/pg_hba.conf" <<'EOT'
local all postgres trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
EOT
}

# Lets the networks in $CLIENTS connect with a password; the loopback keeps trust. The platform database takes them
# over TLS only; a data server's clients are apps, whose drivers need not speak TLS, so it takes them either way.
allow_clients() {
  local cidr rule hba="$PG_DIR/data/pg_hba.conf"
  [ -n "$DATA_SERVER" ] && rule=host || rule=hostssl
  for cidr in ${CLIENTS//,/ }; do
    grep -q "^$rule all all $cidr scram-sha-256" "$hba" || echo "$rule all all $cidr scram-sha-256" >>"$hba"
  done
}

# Whether clients beyond the loopback must come over TLS (see allow_clients).
tls_for_clients() { [ -n "$CLIENTS" ] && [ -z "$DATA_SERVER" ]; }

# The server's self-signed certificate, for sslmode=require (which encrypts without verifying).
server_certificate() {
  tls_for_clients || return 0
  [ -s "$PG_DIR/tls/server.key" ] && return 0
  mkdir -p "$PG_DIR/tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=slipway-postgres" \
    -keyout "$PG_DIR/tls/server.key" -out "$PG_DIR/tls/server.crt" 2>/dev/null
  chmod 600 "$PG_DIR/tls/server.key"
  [ "$(id -u)" -ne 0 ] || chown -R postgres:postgres "$PG_DIR/tls"
}

pg_options() {
  local extra=""
  [ -z "$DATA_SERVER" ] || extra=" -c local_preload_libraries='\$libdir/plugins/pgextwlist' -c extwlist.extensions=postgis -c extwlist.custom_path=$PG_DIR/extwlist"
  ! tls_for_clients || extra+=" -c ssl=on -c ssl_cert_file=$PG_DIR/tls/server.crt -c ssl_key_file=$PG_DIR/tls/server.key"
  echo "-h $LISTEN -p $PG_PORT -k $PG_DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300$extra"
}

# The script pgextwlist runs as the superuser after a channel role's CREATE EXTENSION postgis.
extwlist_scripts() {
  [ -n "$DATA_SERVER" ] || return 0
  mkdir -p "$PG_DIR/extwlist/postgis"
  echo 'GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.spatial_ref_sys TO @database_owner@;' \
    >"$PG_DIR/extwlist/postgis/after-create.sql"
  [ "$(id -u)" -ne 0 ] || chown -R postgres:postgres "$PG_DIR/extwlist"
}

# A data server keeps channel roles out of every database but their own.
close_maintenance_databases() {
  [ -n "$DATA_SERVER" ] || return 0
  [ -f "$PG_BIN/../lib/plugins/pgextwlist.so" ] \
    || { log "ERROR: pgextwlist is not installed (hack/install-deps.sh installs postgresql-15-pgextwlist)"; exit 1; }
  "$PG_BIN/psql" -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
    -c 'REVOKE CONNECT ON DATABASE postgres FROM PUBLIC' -c 'REVOKE CONNECT ON DATABASE template1 FROM PUBLIC' >/dev/null
}

stop() {
  if [ -n "$PG_BIN" ] && [ -f "$PG_DIR/data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  pkill -f -- "-D $PG_DIR/data" 2>/dev/null || true
  rm -rf "$PG_DIR"
}

start() {
  [ -n "$PG_BIN" ] || { log "ERROR: Debian's postgresql is not installed (hack/install-deps.sh installs it)"; exit 1; }
  if ready && [ -d "$PG_DIR/data" ]; then
    if [ -n "$EXTRA_LISTEN" ] && ! ready "$EXTRA_LISTEN"; then
      log "restarting to listen on $EXTRA_LISTEN as well"
      allow_clients
      server_certificate
      as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 -o "$(pg_options)" restart >/dev/null
    fi
    log "already running on $LISTEN:$PG_PORT (reused)"; echo "$URL"; return
  fi
  stop
  mkdir -p "$PG_DIR"
  [ "$(id -u)" -ne 0 ] || chown postgres:postgres "$PG_DIR"
  log "initdb $($PG_BIN/postgres --version | awk '{print $3}') in $PG_DIR"
  as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; exit 1; }
  data_server_hba
  extwlist_scripts
  allow_clients
  server_certificate
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 -o "$(pg_options)" \
    start >/dev/null || { tail -n 30 "$PG_DIR/server.log" >&2; log "ERROR: postgres failed to start"; exit 1; }
  close_maintenance_databases
  log "ready on $LISTEN:$PG_PORT${DATA_SERVER:+ (data server: pgextwlist for postgis)}"
  echo "$URL"
}

# Shuts the server down (a fast shutdown: sessions are cut off), keeping its data.
halt() {
  [ -f "$PG_DIR/data/postmaster.pid" ] || { log "ERROR: not running on $PG_PORT"; exit 1; }
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 stop >/dev/null
  log "halted on $PG_PORT (its data kept)"
}

# Starts a halted server again on its data.
resume() {
  [ -d "$PG_DIR/data" ] || { log "ERROR: no data to resume at $PG_DIR"; exit 1; }
  as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 -o "$(pg_options)" \
    start >/dev/null || { tail -n 30 "$PG_DIR/server.log" >&2; log "ERROR: postgres failed to start"; exit 1; }
  log "resumed on $LISTEN:$PG_PORT"
}

case "${1:-}" in
  start) start ;;
  stop) stop; log "stopped" ;;
  halt) halt ;;
  resume) resume ;;
  status) ready && log "running on 127.0.0.1:$PG_PORT" || { log "not running"; exit 1; } ;;
  url) echo "$URL" ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

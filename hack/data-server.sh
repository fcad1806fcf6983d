#!/usr/bin/env bash
# The channels' data server of the chart-installed platform: Debian's Postgres on this machine run by
# hack/postgres.sh as a data server (SLIPWAY_PG_DATA_SERVER=1: pgextwlist for postgis, maintenance databases closed)
# on a port of its own, listening on the host's end of the node's link as well, where pods sign in with passwords.
# The operator and the api administer it as `slipway_admin`, a superuser whose password is made once per state
# directory; apps reach it with their channels' roles only.
#
# usage: hack/data-server.sh start    start it (or reuse it) and print the admin URL as pods reach it
#        hack/data-server.sh stop     stop it and remove its data
#        hack/data-server.sh halt     shut it down, keeping its data (an outage)
#        hack/data-server.sh resume   start a halted one again on its data
#
# Its port is $SLIPWAY_DATA_SERVER_PORT (15532 by default); needs a running node (hack/node.sh start) for start.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=data-server

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
PORT=${SLIPWAY_DATA_SERVER_PORT:-15532}
PASSWORD_FILE="$SLIPWAY_RUN/data-server-password"

postgres() { SLIPWAY_PG_DATA_SERVER=1 SLIPWAY_PG_PORT=$PORT "$HACK/postgres.sh" "$@"; }

start() {
  local loopback password
  eval "$("$HACK/node.sh" env)"
  loopback=$(SLIPWAY_PG_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PG_CLIENTS=$SLIPWAY_POD_CIDR postgres start)
  mkdir -p "$SLIPWAY_RUN"
  [ -s "$PASSWORD_FILE" ] || (umask 077 && openssl rand -hex 24 >"$PASSWORD_FILE")
  password=$(cat "$PASSWORD_FILE")
  psql -q -X "$loopback" -v ON_ERROR_STOP=1 -v pw="$password" >/dev/null <<'SQL'
SELECT format('CREATE ROLE slipway_admin SUPERUSER LOGIN PASSWORD %L', :'pw')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'slipway_admin') \gexec
ALTER ROLE slipway_admin SUPERUSER LOGIN PASSWORD :'pw';
SQL
  echo "postgres://slipway_admin:$password@$SLIPWAY_NODE_HOST_IP:$PORT/postgres"
}

case "${1:-}" in
  start) start ;;
  stop) postgres stop ;;
  halt | resume) eval "$("$HACK/node.sh" env)"; SLIPWAY_PG_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PG_CLIENTS=$SLIPWAY_POD_CIDR postgres "$1" ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

#!/bin/sh
# The PostgreSQL source's server in a pod: a new cluster in $PGDATA on first start (the admin role
# $POSTGRES_USER with the password $POSTGRES_PASSWORD, scram-sha-256 for every TCP client, no Unix socket),
# then the server in the foreground on port 5432, tuned for a throw-away sandbox database.
set -eu
: "${POSTGRES_USER:?POSTGRES_USER is not set}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}"
if [ ! -f "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth=scram-sha-256 -E UTF8 --locale=C \
    --no-sync --no-instructions >/dev/null
  rm -f "$pwfile"
  printf 'host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
fi
exec postgres -D "$PGDATA" \
  -c listen_addresses='*' -c port=5432 -c unix_socket_directories='' \
  -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
  -c shared_buffers=16MB -c max_connections=40 -c logging_collector=off -c log_min_messages=warning

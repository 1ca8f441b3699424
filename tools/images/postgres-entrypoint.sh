#!/bin/bash
# The official postgres image's documented start-up, reduced to what it promises: on an empty
# PGDATA, initdb with POSTGRES_USER/POSTGRES_PASSWORD, create POSTGRES_DB, run
# /docker-entrypoint-initdb.d/*.sql and *.sh against a temporary socket-only server, then start
# the real server listening on every address with password authentication.
set -euo pipefail
if [[ ${1:0:1} == - ]]; then set -- postgres "$@"; fi
if [[ $1 != postgres ]]; then exec "$@"; fi
if [[ $(id -u) == 0 ]]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec gosu postgres "$BASH_SOURCE" "$@"
fi

: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [[ -z ${POSTGRES_PASSWORD:-} ]]; then
  echo "postgres stand-in: POSTGRES_PASSWORD must be set, as in the official image" >&2
  exit 1
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
  # The init steps talk to the temporary server over its socket, whatever PG* variables the
  # container got for its clients (compose passes project.env's PGHOST=database, say).
  unset PGHOST PGHOSTADDR PGPORT PGUSER PGPASSWORD PGDATABASE
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA"
  printf '\nhost all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname postgres)
  if [[ $POSTGRES_DB != postgres ]]; then
    "${psql[@]}" --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  psql+=(--dbname "$POSTGRES_DB")
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
    *.sh) echo "running $f"; . "$f" ;;
    *.sql) echo "running $f"; "${psql[@]}" -f "$f" ;;
    *.sql.gz) echo "running $f"; gunzip -c "$f" | "${psql[@]}" ;;
    *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@" -c listen_addresses='*'

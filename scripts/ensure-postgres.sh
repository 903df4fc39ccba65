#!/usr/bin/env bash
# Make sure PostgreSQL is usable for amends; safe to run any number of times.
#
# With AMENDS_PG_DSN set (a server someone else runs, or production): connects
# with it and creates its database when only the database is missing. A server
# that cannot be reached, a wrong password or a pg_hba refusal each ends in one
# line saying what to do. The DSN is never put on a command line or printed.
#
# Without it (local development, tests, CI), for the default DSN
# postgresql://postgres@127.0.0.1:5432/amends it:
#   1. installs the Debian "postgresql" package when no server binaries exist
#      (apt-get; needs root or sudo),
#   2. creates a cluster if none exists and starts a stopped one
#      (pg_ctlcluster --skip-systemctl-redirect, so it works without systemd),
#   3. when the local server does not let "postgres" in over TCP on loopback
#      without a password (Debian's default asks for one), adds a trust rule for
#      exactly that user on 127.0.0.1/::1 and reloads, saying so,
#   4. creates the database "amends" if it is missing, and the Dagster
#      database "amends_dagster" beside it. Nothing else global.
set -euo pipefail

PORT="${AMENDS_PG_PORT:-5432}"  # 5432 is the port of the default DSN
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-$HERE/../.venv/bin/python}"
[ -x "$PY" ] || PY=python3

say() { printf 'ensure-postgres: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}

# Run a client command as the postgres OS user (peer authentication on the socket).
as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"
    elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
    else sudo -u postgres "$@"
    fi
}

# Create (when missing) the databases amends and Dagster use on the DSN's server.
ensure_databases() {
    cd "$HERE/.." && "$PY" -m amends_pipeline.postgres.ensure --with-dagster
}

if [ -n "${AMENDS_PG_DSN:-}" ]; then
    ensure_databases
    exit $?
fi
export AMENDS_PG_DSN="postgresql://postgres@127.0.0.1:$PORT/amends"


if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL binaries and no apt-get; install PostgreSQL 14+ or set AMENDS_PG_DSN"
    say "installing the postgresql package"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql

fi

command -v pg_lsclusters >/dev/null 2>&1 || die "pg_lsclusters missing (postgresql-common not installed?)"

# The cluster that owns our port, else the newest one.
cluster=$(pg_lsclusters -h | awk -v port="$PORT" '$3 == port { print $1, $2, $4; exit }')
if [ -z "$cluster" ]; then
    cluster=$(pg_lsclusters -h | awk '{ print $1, $2, $4 }' | sort -V | tail -n 1)
fi
if [ -z "$cluster" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
    say "creating cluster $version/main on port $PORT"
    as_root pg_createcluster --port "$PORT" "$version" main

    cluster="$version main down"
fi
read -r version name status <<<"$cluster"

if [ "$status" != online ]; then
    say "starting cluster $version/$name"
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start
fi

# Wait until it accepts connections.
for _ in $(seq 1 50); do
    if pg_isready -q -h 127.0.0.1 -p "$PORT"; then break; fi
    sleep 0.2
done
pg_isready -q -h 127.0.0.1 -p "$PORT" || die "cluster $version/$name does not accept connections on 127.0.0.1:$PORT"

tcp_ok() { PGCONNECT_TIMEOUT=5 psql -XAtq -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c 'SELECT 1' >/dev/null 2>&1 </dev/null; }
if ! tcp_ok; then
    hba=$(as_postgres psql -XAtq -p "$PORT" -d postgres -c 'SHOW hba_file')
    say "the local server asks postgres for a password on loopback; adding a trust rule for user postgres on 127.0.0.1/::1 to $hba"
    as_root sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
    as_postgres psql -XAtq -p "$PORT" -d postgres -c 'SELECT pg_reload_conf()' >/dev/null
    for _ in $(seq 1 25); do tcp_ok && break; sleep 0.2; done
    tcp_ok || die "cannot connect to 127.0.0.1:$PORT as postgres without a password; allow it in $hba or set AMENDS_PG_DSN"
fi

ensure_databases
say "PostgreSQL $version/$name ready on 127.0.0.1:$PORT"

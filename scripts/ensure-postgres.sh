#!/usr/bin/env bash
# Make sure PostgreSQL is usable for amends; safe to run any number of times.
#
# With AMENDS_PG_DSN set: only checks that the DSN connects (production or a
# server someone else runs), and exits non-zero with a one-line reason if not.
#
# Without it (local development and tests), for the default DSN
# postgresql://postgres@127.0.0.1:5432/amends it:
#   1. installs the Debian "postgresql" package when no server binaries exist
#      (apt-get; needs root or sudo),
#   2. creates a cluster if none exists and starts a stopped one
#      (pg_ctlcluster --skip-systemctl-redirect, so it works without systemd),
#   3. on a cluster this script itself just installed, lets local TCP
#      connections as "postgres" in without a password (trust on 127.0.0.1/::1),
#      as development machines of this kind are set up,
#   4. creates the database "amends" if it is missing. Nothing else global.
set -euo pipefail

DB_NAME="amends"
PORT="${AMENDS_PG_PORT:-5432}"  # 5432 is the port of the default DSN

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

if [ -n "${AMENDS_PG_DSN:-}" ]; then
    if command -v psql >/dev/null 2>&1; then
        if ! out=$(psql "$AMENDS_PG_DSN" -XAtqc 'SELECT 1' 2>&1); then
            die "AMENDS_PG_DSN does not connect: $(printf '%s' "$out" | tr '\n' ' ')"
        fi
    else
        py="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
        [ -x "$py" ] || py=python3
        "$py" - <<'EOF' || exit 1
import os, sys
import psycopg
try:
    psycopg.connect(os.environ["AMENDS_PG_DSN"], connect_timeout=5).close()
except psycopg.Error as e:
    print("ensure-postgres: AMENDS_PG_DSN does not connect: " + " ".join(str(e).split()), file=sys.stderr)
    sys.exit(1)
EOF
    fi
    say "AMENDS_PG_DSN connects"
    exit 0
fi

installed_now=0
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL binaries and no apt-get; install PostgreSQL 14+ or set AMENDS_PG_DSN"
    say "installing the postgresql package"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
    installed_now=1
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
    installed_now=1
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

tcp_ok() { psql -XAtq -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c 'SELECT 1' >/dev/null 2>&1 </dev/null; }
if ! tcp_ok; then
    if [ "$installed_now" -eq 1 ]; then
        hba=$(as_postgres psql -XAtq -p "$PORT" -d postgres -c 'SHOW hba_file')
        say "allowing passwordless local TCP connections as postgres in $hba"
        as_root sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
        as_postgres psql -XAtq -p "$PORT" -d postgres -c 'SELECT pg_reload_conf()' >/dev/null
        sleep 0.5
    fi
    tcp_ok || die "cannot connect to 127.0.0.1:$PORT as postgres without a password; allow it or set AMENDS_PG_DSN"
fi

exists=$(psql -XAtq -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
    -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" </dev/null)
if [ "$exists" != 1 ]; then
    say "creating database $DB_NAME"
    # A concurrent creator may win the race; only a still-missing database is an error.
    createdb -h 127.0.0.1 -p "$PORT" -U postgres "$DB_NAME" 2>/dev/null || true
    exists=$(psql -XAtq -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
        -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'" </dev/null)
    [ "$exists" = 1 ] || die "could not create database $DB_NAME"
fi
say "PostgreSQL $version/$name ready: postgresql://postgres@127.0.0.1:$PORT/$DB_NAME"

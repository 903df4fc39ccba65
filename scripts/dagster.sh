#!/usr/bin/env bash
# Run the Dagster daemon and webserver for amends in the foreground; Ctrl-C or
# SIGTERM stops both. Started directly (not `dagster dev`, which ignores SIGTERM
# in the background).
#
#   DAGSTER_HOME           default: dagster_home/ of this checkout
#   AMENDS_DAGSTER_PG_URL  default: the amends_dagster database beside AMENDS_PG_DSN
#   AMENDS_CONFIG          the namespace the code location serves (default: the worked example)
#   AMENDS_DAGSTER_PORT    webserver port on 127.0.0.1 (default 3000)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/dagster_home}"
if [ -z "${AMENDS_DAGSTER_PG_URL:-}" ]; then
    AMENDS_DAGSTER_PG_URL=$("$BIN/python" -c 'import os
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.urls import DAGSTER_DB_ENV, DEFAULT_DAGSTER_DB, sqlalchemy_url
print(sqlalchemy_url(dsn_from_env(), os.environ.get(DAGSTER_DB_ENV) or DEFAULT_DAGSTER_DB))')
    export AMENDS_DAGSTER_PG_URL
fi
[ -n "${AMENDS_KAFKA_BOOTSTRAP:-}" ] || { echo "dagster.sh: AMENDS_KAFKA_BOOTSTRAP is not set (amends kafka start prints it)" >&2; exit 2; }
port="${AMENDS_DAGSTER_PORT:-3000}"

pids=()
stop() {
    trap - INT TERM EXIT
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap stop INT TERM EXIT
"$BIN/dagster-daemon" run -w workspace.yaml & pids+=($!)
"$BIN/dagster-webserver" -w workspace.yaml -h 127.0.0.1 -p "$port" & pids+=($!)
echo "dagster.sh: UI at http://127.0.0.1:$port (DAGSTER_HOME=$DAGSTER_HOME); Ctrl-C stops daemon and webserver" >&2
wait -n "${pids[@]}"

"""Produce -> view visible under Dagster's sensors, beside the long-running roles, in one run.

Both modes run on a real Apache Kafka broker and the local PostgreSQL server,
each on a schema and topics of its own:

* role mode: ``amends role worker|relay|view`` as processes (the low-latency path);
* sensor mode: ``dagster-daemon`` on dagster-postgres storage with the amends
  code location; the source sensor requests refold runs, the relay and view
  sensors publish and apply inside their ticks.

One new record at a time (each on a new day, so it creates one new balance
row); latency is from the producer's delivery report to the row being visible
in the view. Sensor ticks cannot come faster than every 5 s and a queued run
takes seconds to start, so sensor mode is measured in seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from amends_core.ledger import Family, OutputID
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.ensure import create_database, drop_database, scratch_database_name
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.postgres.urls import sqlalchemy_url
from benchmarks.e2e_bench import CONFIG, KEY, ORIGIN_DAY, percentile, value
from benchmarks.harness import Figure, figure

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _measure(
    dsn: str, schema: str, bootstrap: str, topic: str, namespace: str, samples: int, first: int, timeout: float
) -> list[float]:
    w = Writer(bootstrap, **{"linger.ms": 0})
    lat: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        for i in range(first, first + samples):
            oid = OutputID(namespace, Family.BALANCE, KEY, ORIGIN_DAY + i).encoded
            w.produce(topic, 0, value(i), KEY.transport_key())
            w.flush()
            t0 = time.perf_counter()
            while not conn.execute("SELECT 1 FROM view_rows WHERE output_id = %s", (oid,)).fetchone():
                if time.perf_counter() - t0 > timeout:
                    msg = f"record {i} not visible after {timeout:.0f}s"
                    raise TimeoutError(msg)
                time.sleep(0.005)
            lat.append((time.perf_counter() - t0) * 1000)
    return lat


def _mode(
    broker: RealBroker, dsn: str, tmp: Path, name: str, start: Callable[[dict[str, str], Path], list[subprocess.Popen[bytes]]],
    samples: int, warmup: int, timeout: float,
) -> list[float]:
    cfg = tmp / f"{name}.json"
    namespace = f"bench-dagster-{name}"  # relay locks are per namespace name across the database
    cfg.write_text(json.dumps(dict(CONFIG, namespace=namespace)))
    src, out = f"bench-{name}-source", f"bench-{name}-output"
    with scratch_schema(dsn, f"bench_{name}") as schema:
        env = dict(broker.env(), AMENDS_PG_DSN=dsn, AMENDS_PG_SCHEMA=schema, AMENDS_CONFIG=str(cfg))
        subprocess.run(
            [str(BIN / "amends"), "provision", "--config", str(cfg), "--source-topic", src, "--output-topic", out],
            env=env, check=True, capture_output=True,
        )
        procs = start(env, cfg)
        try:
            _measure(dsn, schema, broker.bootstrap, src, namespace, warmup, 0, timeout)
            return _measure(dsn, schema, broker.bootstrap, src, namespace, samples, warmup, timeout)
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            for p in procs:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)


def run(samples: int = 10, role_samples: int = 30) -> list[Figure]:
    dsn = dsn_from_env()
    dagster_db = scratch_database_name("bench_dagster")
    create_database(dsn, dagster_db)
    try:
        with tempfile.TemporaryDirectory() as tmp_s:
            tmp = Path(tmp_s)
            broker = RealBroker(tmp / "kafka").start()
            try:
                def roles(env: dict[str, str], cfg: Path) -> list[subprocess.Popen[bytes]]:
                    return [
                        subprocess.Popen(
                            [str(BIN / "amends"), "role", r, "--config", str(cfg), "--quiet"],
                            env=env, start_new_session=True,
                        )
                        for r in ("worker", "relay", "view")
                    ]

                def daemon(env: dict[str, str], cfg: Path) -> list[subprocess.Popen[bytes]]:
                    home = tmp / "dagster_home"
                    home.mkdir(exist_ok=True)
                    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
                    env = dict(env, DAGSTER_HOME=str(home), AMENDS_DAGSTER_PG_URL=sqlalchemy_url(dsn, dagster_db))
                    log = open(home / "daemon.log", "ab")  # noqa: SIM115 - owned by the process
                    p = subprocess.Popen(
                        [str(BIN / "dagster-daemon"), "run", "-w", str(ROOT / "workspace.yaml")],
                        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                    )
                    log.close()
                    return [p]

                role_lat = _mode(broker, dsn, tmp, "roles", roles, role_samples, 5, 30)
                sensor_lat = _mode(broker, dsn, tmp, "sensors", daemon, samples, 2, 120)
            finally:
                broker.stop()
    finally:
        drop_database(dsn, dagster_db)
    cond_r = f"{role_samples} single records, roles as processes, real Kafka broker, local PostgreSQL"
    cond_s = (
        f"{samples} single records, dagster-daemon (sensors every 5 s, queued runs dequeued every 1 s),"
        " real Kafka broker, local PostgreSQL, dagster-postgres storage"
    )
    ratio = statistics.median(sensor_lat) / statistics.median(role_lat)
    return [
        figure("dagster", "produce -> view visible, p50 (sensors)", [statistics.median(sensor_lat)], "ms", cond_s),
        figure("dagster", "produce -> view visible, p95 (sensors)", [percentile(sensor_lat, 0.95)], "ms", cond_s),
        figure("dagster", "produce -> view visible, p50 (roles, same run)", [statistics.median(role_lat)], "ms", cond_r),
        figure("dagster", "produce -> view visible, p95 (roles, same run)", [percentile(role_lat, 0.95)], "ms", cond_r),
        figure("dagster", "sensor-mode p50 / role-mode p50", [ratio], "x", "medians of the two rows above"),
    ]


if __name__ == "__main__":
    for f in run():
        print(f.row())

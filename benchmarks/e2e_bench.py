"""End-to-end latency: source produce -> visible in the PostgreSQL view, with the long-running roles.

Starts the development broker and the three roles as separate processes
against a scratch schema, produces one new record at a time (each on a new
day, so it creates exactly one new balance row) and polls the view for that
row. Latency = time from the producer's delivery report to the row being
visible. Also measures relay and view throughput on a bulk load.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from amends_core import timefmt
from amends_core.ledger import Family, OutputID, StockKey
from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.migrate import scratch_schema
from benchmarks.harness import Figure, figure

AMENDS = str(Path(sys.executable).with_name("amends"))
KEY = StockKey("LAT-ITEM", "DC-1")
CONFIG = {
    "schema_version": 1, "namespace": "bench-e2e", "source_incarnation": "bench-e2e-src", "partitions": 1,
    "origin": "2000-01-01T00:00:00Z",
    "keys": [{"item": KEY.item, "location": KEY.location, "opening_balance": 10**12, "reorder_threshold": 0, "partition": 0}],
}
ORIGIN = timefmt.parse_rfc3339("2000-01-01T00:00:00Z")
ORIGIN_DAY = ORIGIN // timefmt.NS_PER_DAY


def value(i: int) -> bytes:
    return json.dumps({
        "txn_id": f"T{i}", "revision": 1, "kind": "NEW",
        "stock_key": {"item": KEY.item, "location": KEY.location},
        "valid_time": timefmt.format_instant(ORIGIN + i * timefmt.NS_PER_DAY), "qty": -1,
        "source_time": "2000-01-01T00:00:00Z",
    }, separators=(",", ":")).encode()


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(samples: int = 60, bulk: int = 5_000) -> list[Figure]:
    dsn = dsn_from_env()
    with tempfile.TemporaryDirectory() as tmp, scratch_schema(dsn, "bench_e2e") as schema, DevBroker(
        topics={"amends-source": 1, "amends-output": 1}, workdir=tmp
    ) as broker:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(CONFIG))
        env = dict(broker.env(), AMENDS_PG_DSN=dsn, AMENDS_PG_SCHEMA=schema)
        subprocess.run([AMENDS, "provision", "--config", str(cfg_path)], env=env, check=True, capture_output=True)
        procs = [
            subprocess.Popen([AMENDS, "role", r, "--config", str(cfg_path), "--quiet", "--batch-size", "1000"], env=env)
            for r in ("worker", "relay", "view")
        ]
        try:
            w = Writer(broker.bootstrap, **{"linger.ms": 0})
            conn = psycopg.connect(dsn, autocommit=True)
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            lat: list[float] = []
            for i in range(samples + 5):
                oid = OutputID("bench-e2e", Family.BALANCE, KEY, ORIGIN_DAY + i).encoded
                w.produce("amends-source", 0, value(i), KEY.transport_key())
                w.flush()
                t0 = time.perf_counter()
                while True:
                    row = conn.execute("SELECT 1 FROM view_rows WHERE output_id = %s", (oid,)).fetchone()
                    if row:
                        break
                    if time.perf_counter() - t0 > 30:
                        raise TimeoutError(f"record {i} not visible after 30 s")
                    time.sleep(0.002)
                if i >= 5:  # warm-up excluded
                    lat.append((time.perf_counter() - t0) * 1000)
            # bulk: relay publish rate and view apply rate from the roles' own progress
            start = samples + 5
            for i in range(start, start + bulk):
                w.produce("amends-source", 0, value(i), KEY.transport_key())
            w.flush()
            t0 = time.perf_counter()
            last = OutputID("bench-e2e", Family.BALANCE, KEY, ORIGIN_DAY + start + bulk - 1).encoded
            while not conn.execute("SELECT 1 FROM view_rows WHERE output_id = %s", (last,)).fetchone():
                if time.perf_counter() - t0 > 300:
                    raise TimeoutError("bulk load not visible after 300 s")
                time.sleep(0.01)
            bulk_s = time.perf_counter() - t0
            conn.close()
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(30)
    cond = f"{samples} single records, roles as processes, development broker, local PostgreSQL"
    return [
        figure("end to end", "produce -> view visible, p50 (roles)", [statistics.median(lat)], "ms", cond,
               p95=percentile(lat, 0.95), p99=percentile(lat, 0.99)),
        figure("end to end", "produce -> view visible, p95 (roles)", [percentile(lat, 0.95)], "ms", cond),
        figure("end to end", "produce -> view visible, p99 (roles)", [percentile(lat, 0.99)], "ms", cond),
        figure("end to end", "bulk records through worker, relay and view", [bulk / bulk_s], "records/s",
               f"{bulk:,} new records (one new balance each, 2 envelopes on the first), batch size 1,000"),
    ]


if __name__ == "__main__":
    for f in run():
        print(f.row())

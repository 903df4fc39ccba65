"""Start-up is as resilient as steady state: a PostgreSQL session lost at any start-up step is retried.

The real worker process (`amends role worker`) runs against the real
PostgreSQL server and the real Kafka broker. A test session takes a lock that
exactly one start-up step blocks on (namespace registration, the manifest
check, the ownership claim), waits until the worker's backend shows as waiting
for it in ``pg_stat_activity``, terminates that backend and releases the
lock. The worker must log the failure on one line, retry, process the source
and exit 0, and verification must pass.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.e2e.conftest import FIXTURE, Pipeline

CFG = str(FIXTURE / "config.json")
STAGES = ["before.jsonl", "correction.jsonl", "cancel-last-day.jsonl"]

LOCKS = {
    # step: (statement the test session holds, text of the statement the worker blocks in)
    "registration": ("LOCK TABLE namespaces IN ACCESS EXCLUSIVE MODE", "%namespaces%"),
    "manifest": ("LOCK TABLE source_manifest IN ACCESS EXCLUSIVE MODE", "%source_manifest%"),
    "claim": ("SELECT 1 FROM partitions FOR UPDATE", "%UPDATE partitions p SET epoch%"),
}


def session(p: Pipeline) -> psycopg.Connection[Any]:
    conn = psycopg.connect(p.env["AMENDS_PG_DSN"], autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(p.env["AMENDS_PG_SCHEMA"])))
    return conn


def blocked_worker(watcher: psycopg.Connection[Any], pattern: str, worker: subprocess.Popen[str]) -> int:
    """The pid of the worker's backend once it waits for a lock in a statement like ``pattern``."""
    for _ in range(1200):
        row = watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'amends-worker' AND wait_event_type = 'Lock'"
            " AND query ILIKE %s AND pid <> pg_backend_pid()",
            (pattern,),
        ).fetchone()
        if row is not None:
            return int(row[0])
        if worker.poll() is not None:
            raise AssertionError(f"the worker exited {worker.returncode} before blocking: {worker.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"the worker never blocked in a statement like {pattern!r}")


@pytest.mark.parametrize("step", list(LOCKS))
def test_the_worker_survives_losing_its_session_at_each_start_up_step(
    pipeline: Pipeline, step: str
) -> None:
    p = pipeline
    p.provision()
    p.load(*(FIXTURE / s for s in STAGES))
    hold, pattern = LOCKS[step]
    holder, watcher = session(p), session(p)
    try:
        holder.execute("BEGIN")
        holder.execute(hold)
        worker = p.start("role", "worker", "--config", CFG, "--until-idle")
        try:
            pid = blocked_worker(watcher, pattern, worker)
            assert watcher.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
        finally:
            holder.execute("ROLLBACK")
        out, err = worker.communicate(timeout=120)
    finally:
        holder.close()
    assert worker.returncode == 0, err
    failures = [line for line in err.splitlines() if "transient failure" in line]
    assert len(failures) == 1, err
    assert failures[0].startswith("amends worker: start-up: transient failure 1: ")
    assert "Traceback" not in err
    # One claim landed: epoch 1, under a nonce (the killed claim never committed).
    epoch, nonce = watcher.execute(
        "SELECT epoch, claim_nonce FROM partitions JOIN namespaces USING (ns_id)"
        " WHERE name = 'core-demo' AND partition = 0"
    ).fetchone()
    watcher.close()
    assert epoch == 1 and nonce is not None
    p.ok("role", "relay", "--config", CFG, "--until-idle", "--quiet")
    p.ok("role", "view", "--config", CFG, "--until-idle", "--quiet")
    r = p.verify("--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["status"] == "PASS"
    expected = json.loads((FIXTURE / "expected" / "3-cancellation.json").read_text())["view"]
    shown = p.ok("view", "--config", CFG, "--last", "0")
    for row in expected["keys"][0]["balances"]:
        assert f"{row['day']}" in shown and f"{row['close']:,}" in shown

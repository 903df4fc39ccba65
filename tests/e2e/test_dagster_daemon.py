"""Continuous processing under a real Dagster daemon on dagster-postgres storage.

The daemon (and the code location it starts as a gRPC server process) runs
the sensors: source changes become refold runs, relay and view ticks publish
and apply, and a drained boundary launches the verification job. Nothing here
calls a role or a job directly: the test only loads the worked example's
stages into the real Kafka broker and watches.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from amends_pipeline.defs.verification_record import latest_verification
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.postgres.ensure import create_database, drop_database, scratch_database_name
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.postgres.urls import sqlalchemy_url
from tests.e2e.conftest import FIXTURE, ROOT, Pipeline

DAEMON = str(Path(sys.executable).with_name("dagster-daemon"))
CFG = str(FIXTURE / "config.json")
STAGES = ["before.jsonl", "correction.jsonl", "cancel-last-day.jsonl"]
EXPECTED = ["1-initial.json", "2-amendment.json", "3-cancellation.json"]


@dataclass
class Dagster:
    home: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.home / "daemon.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [DAEMON, "run", "-w", str(ROOT / "workspace.yaml")],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the daemon's whole process group and wait until every member has ended.

        The code server the daemon starts lives in the same group and may outlive the
        daemon (it waits for its run executions); it must be gone before the fixture
        drops the Dagster database under it, so after a grace period it is killed.
        """
        if self.proc is None:
            return
        _signal_group(self.proc.pid, sig)
        if not _group_gone(self.proc, 60):
            _signal_group(self.proc.pid, signal.SIGKILL)
            assert _group_gone(self.proc, 30), f"process group {self.proc.pid} survived SIGKILL"

    def log_tail(self) -> str:
        return (self.home / "daemon.log").read_text(errors="replace")[-3000:]

    def instance(self) -> dg.DagsterInstance:
        os.environ["AMENDS_DAGSTER_PG_URL"] = self.env["AMENDS_DAGSTER_PG_URL"]
        return dg.DagsterInstance.from_config(str(self.home))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_gone(leader: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether every process of the leader's group has ended within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader.poll()  # a zombie leader keeps its group alive until it is reaped
        try:
            os.killpg(leader.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def dagster_db(pg_dsn: str) -> Iterator[str]:
    name = scratch_database_name("amends_dagster_test")
    create_database(pg_dsn, name)
    yield sqlalchemy_url(pg_dsn, name)
    drop_database(pg_dsn, name)


@pytest.fixture
def under_dagster(
    pg_dsn: str, dagster_db: str, tmp_path: Path, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[tuple[Pipeline, Dagster]]:
    with scratch_schema(pg_dsn, "t_dag") as schema:
        env = kafka_broker.env()
        env.update({
            "AMENDS_PG_DSN": pg_dsn, "AMENDS_PG_SCHEMA": schema, "AMENDS_CONFIG": CFG,
            "AMENDS_DAGSTER_PG_URL": dagster_db, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        })
        env.pop("AMENDS_DEBUG", None)
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        p = Pipeline(env, kafka_broker, tmp_path, source_topic=topic_name("source"), output_topic=topic_name("output"))
        d = Dagster(home, env)
        p.provision()
        try:
            yield p, d
        finally:
            d.stop()


def _expected(stage: int) -> dict[str, Any]:
    return json.loads((FIXTURE / "expected" / EXPECTED[stage]).read_text())["view"]["keys"][0]


def _wait_for_certified(p: Pipeline, d: Dagster, stage: int, deadline_s: float = 120) -> None:
    """Poll until the latest verification passed at the boundary of this stage and the view shows it."""
    want = _expected(stage)
    deadline = time.monotonic() + deadline_s
    last: Any = None
    with d.instance() as instance:
        while time.monotonic() < deadline:
            last = latest_verification(instance)
            if last and last.passed and p.verify().returncode == 0:
                shown = p.ok("view", "--config", CFG, "--last", "0")
                if all(f"{b['close']:,}" in shown for b in want["balances"]) and _certified_matches(p, want):
                    return
            time.sleep(1)
    pytest.fail(f"stage {stage + 1} not certified in {deadline_s:.0f}s; last check {last}\n{d.log_tail()}")


def _certified_matches(p: Pipeline, want: dict[str, Any]) -> bool:
    import psycopg
    from psycopg import sql

    with psycopg.connect(p.env["AMENDS_PG_DSN"], autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(p.env["AMENDS_PG_SCHEMA"])))
        rows = conn.execute("SELECT day::text, close FROM certified_balances ORDER BY day").fetchall()
    return [(d, c) for d, c in rows] == [(b["day"], b["close"]) for b in want["balances"]]


@pytest.mark.slow
def test_the_daemon_processes_each_stage_by_sensors_alone_and_survives_its_own_sigkill(
    under_dagster: tuple[Pipeline, Dagster],
) -> None:
    p, d = under_dagster
    d.start()
    p.load(FIXTURE / STAGES[0])
    _wait_for_certified(p, d, 0)

    # Kill the daemon right after the correction arrives, then start it again.
    p.load(FIXTURE / STAGES[1])
    time.sleep(2)
    d.stop(signal.SIGKILL)
    d.start()
    # A refold run killed with the daemon is failed by run monitoring after its
    # maximum runtime (120 s); the sensor then requests a fresh one.
    _wait_for_certified(p, d, 1, deadline_s=420)

    p.load(FIXTURE / STAGES[2])
    _wait_for_certified(p, d, 2)

    with d.instance() as instance:
        # One run per stage and job was launched by the sensors. A run killed with
        # the daemon may already have recorded its results (stage 2 can be
        # certified by a boundary run that monitoring later marks failed), so only
        # the stages without a kill need a successful run of each job.
        for job in ("refold_job", "boundary_job"):
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=job))
            done = [r for r in runs if r.status == dg.DagsterRunStatus.SUCCESS]
            assert len(runs) >= 3 and len(done) >= 2, (job, [r.status for r in runs])
        for key in ("published_envelopes", "view"):
            mats = instance.fetch_materializations(dg.AssetKey(key), limit=100).records
            assert len(mats) >= 3, key


@pytest.mark.slow
def test_a_rebuild_by_dagster_backfill_verifies_and_leaves_the_original_untouched(
    under_dagster: tuple[Pipeline, Dagster],
) -> None:
    p, d = under_dagster
    d.start()
    for stage in STAGES:
        p.load(FIXTURE / stage)
    _wait_for_certified(p, d, 2)
    rebuilt = p.output_topic + "-rebuilt"
    out = p.ok(
        "rebuild", "--config", CFG, "--new-namespace", "core-demo-rebuilt", "--output-topic", rebuilt,
        "--execute", timeout=600,
    )
    assert "backfill" in out and "verification PASS" in out, out
    with d.instance() as instance:
        backfills = instance.get_backfills()
        assert len(backfills) == 1 and backfills[0].tags.get("amends/namespace") == "core-demo-rebuilt"
        runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfills[0].backfill_id}))
        assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        mats = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("refold"), asset_partitions=["0"]), limit=50
        ).records
        rebuilt_refolds = [
            m for m in mats if m.run_id in {r.run_id for r in runs}
        ]
        assert rebuilt_refolds and rebuilt_refolds[0].asset_materialization is not None
        md = rebuilt_refolds[0].asset_materialization.metadata
        assert md["namespace"].value == "core-demo-rebuilt" and md["records"].value == 5
    assert p.verify().returncode == 0  # the original namespace still verifies

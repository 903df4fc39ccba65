"""The Dagster definitions in process, against the real PostgreSQL server and a real Kafka broker.

Each worked-example stage flows through the refold job, the relay and view
sensors and the boundary job; the blocking verification check gates the
certified balances.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from amends_pipeline.defs.assets import published_envelopes, view
from amends_pipeline.defs.definitions import build
from amends_pipeline.defs.jobs import boundary_job, refold_job
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.defs.sensors import boundary_sensor, relay_sensor, source_sensor, view_sensor
from amends_pipeline.defs.verification_record import VERIFICATION_KEY
from amends_pipeline.kafka.load import plan_file
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.ops import orchestration
from amends_pipeline.ops.provision import provision
from amends_pipeline.postgres.reports import read_certified

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "worked-example"
STAGES = ["before.jsonl", "correction.jsonl", "cancel-last-day.jsonl"]
EXPECTED = ["1-initial.json", "2-amendment.json", "3-cancellation.json"]


@dataclass
class Harness:
    res: AmendsResource
    defs: dg.Definitions
    instance: dg.DagsterInstance
    dsn: str
    schema: str

    def load(self, stage: str) -> None:
        rt = self.res.runtime()
        w = rt.writer()
        with rt.store("test-load") as store:
            topic = rt.manifest(store).source_topic
        for m in plan_file(rt.cfg, stage, (FIXTURE / stage).read_bytes()):
            w.produce(topic, m.partition, m.value, m.key)
        w.flush()

    def refold(self, partition: str = "0") -> dg.ExecuteInProcessResult:
        job = self.defs.resolve_job_def(refold_job.name)
        return job.execute_in_process(instance=self.instance, partition_key=partition)

    def tick(self, sensor: dg.SensorDefinition, cursor: str | None = None) -> Any:
        ctx = dg.build_sensor_context(instance=self.instance, cursor=cursor, resources={"amends": self.res})
        return sensor(ctx)

    def boundary(self) -> dg.ExecuteInProcessResult:
        job = self.defs.resolve_job_def(boundary_job.name)
        return job.execute_in_process(instance=self.instance, raise_on_error=False)

    def certified(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with self.res.runtime().store("test") as store:
            return read_certified(store)


@pytest.fixture
def harness(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[Harness]:
    res = AmendsResource(
        config_path=str(FIXTURE / "config.json"), pg_dsn=pg_dsn, pg_schema=pg_schema,
        kafka_bootstrap=kafka_broker.bootstrap,
    )
    provision(res.runtime(), topic_name("source"), topic_name("output"))
    with dg.DagsterInstance.ephemeral() as instance:
        yield Harness(res, build(res), instance, pg_dsn, pg_schema)


def _expected(stage: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    key = json.loads((FIXTURE / "expected" / EXPECTED[stage]).read_text())["view"]["keys"][0]
    bal = [(key["item"], key["location"], b["day"], b["close"]) for b in key["balances"]]
    al = [(key["item"], key["location"], a["day"], a["threshold"], a["close"]) for a in key["alerts"]]
    return bal, al


def _check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    evals = result.get_asset_check_evaluations()
    assert [e.asset_check_key for e in evals] == [VERIFICATION_KEY]
    return evals[0]


def _materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


@pytest.mark.slow
def test_each_worked_example_stage_refolds_relays_applies_verifies_and_certifies(harness: Harness) -> None:
    h = harness
    for i, stage in enumerate(STAGES):
        h.load(stage)
        r = h.refold()
        assert r.success
        md = r.asset_materializations_for_node("refold")[0].metadata
        assert md["reached_target"].value is True and md["records"].value >= 1
        relay = h.tick(relay_sensor)
        assert [e.asset_key for e in relay.asset_events] == [published_envelopes.key, view.key]
        assert relay.asset_events[0].metadata["envelopes_published"].value > 0
        applied = relay.asset_events[1].metadata
        assert applied["envelopes_applied"].value > 0
        assert applied["view_frontier_after"].value == applied["output_end"].value
        assert h.tick(view_sensor).asset_events == []  # the relay tick already applied them
        b = h.boundary()
        check = _check(b)
        assert check.passed, check.metadata["report"].value
        assert check.metadata["status"].value == "PASS"
        assert "certified_balances" in _materialized(b)
        assert h.certified() == _expected(i), f"stage {i + 1}"


@pytest.mark.slow
def test_a_corrupted_view_row_fails_the_check_with_that_row_and_blocks_certification(harness: Harness) -> None:
    h = harness
    h.load(STAGES[0])
    assert h.refold().success
    h.tick(relay_sensor)
    h.tick(view_sensor)
    assert _check(h.boundary()).passed
    certified_before = h.certified()
    with psycopg.connect(h.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(h.schema)))
        n = conn.execute(
            # a wrong view row: the envelope and the value stored beside it both say 31
            "UPDATE view_rows SET envelope = convert_to(replace(convert_from(envelope, 'UTF8'),"
            " '\"close\":30', '\"close\":31'), 'UTF8'), close = 31"
            " WHERE family = 'balance' AND day IS NOT NULL"
            " AND convert_from(envelope, 'UTF8') LIKE '%\"close\":30%'"
        ).rowcount
    assert n == 1
    b = h.boundary()
    check = _check(b)
    assert not check.passed and check.severity is dg.AssetCheckSeverity.ERROR
    assert check.metadata["status"].value == "DRIFT"
    report = check.metadata["report"].value
    assert "2026-01-02" in report and "31" in report and "30" in report
    assert "certified_balances" not in _materialized(b)
    assert h.certified() == certified_before  # the earlier certification stands, nothing new written


def test_the_source_sensor_requests_one_refold_per_lagging_partition_and_none_when_caught_up(
    harness: Harness,
) -> None:
    h = harness
    assert h.tick(source_sensor).run_requests == []
    h.load(STAGES[0])
    reqs = h.tick(source_sensor).run_requests
    assert [(r.partition_key, r.tags["amends/target"]) for r in reqs] == [("0", "4")]
    assert reqs[0].run_key.endswith(":0:4")
    assert h.refold().success
    assert h.tick(source_sensor).run_requests == []


def test_the_boundary_sensor_waits_for_a_drained_pipeline_and_launches_once_per_boundary(harness: Harness) -> None:
    h = harness
    h.load(STAGES[0])
    assert h.tick(boundary_sensor).run_requests == []  # source not refolded yet
    h.refold()
    assert h.tick(boundary_sensor).run_requests == []  # outbox pending
    orchestration.relay(h.res.runtime())  # publish only
    assert h.tick(boundary_sensor).run_requests == []  # view behind the output end
    moved = h.tick(view_sensor)
    assert [e.asset_key for e in moved.asset_events] == [view.key]
    first = h.tick(boundary_sensor)
    assert len(first.run_requests) == 1
    again = h.tick(boundary_sensor, cursor=first.cursor)
    assert again.run_requests == []


def test_a_stopped_view_partition_is_materialized_once_as_stopped_then_as_resumed(harness: Harness) -> None:
    """The view asset never looks healthy while a partition is stopped (issue 13, staleness)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    h = harness
    h.load(STAGES[0])
    assert h.refold().success
    h.tick(relay_sensor)
    rt = h.res.runtime()
    with rt.store("test") as store:
        topic = rt.manifest(store).output_topic
    # Forge the last envelope: same output ID and version, other content -> a protocol stop.
    c = Consumer({"bootstrap.servers": h.res.kafka_bootstrap, "group.id": "t", "enable.auto.commit": False})
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    c.assign([TopicPartition(topic, 0, high - 1)])
    msg = c.poll(30)
    c.close()
    assert msg is not None and msg.error() is None
    forged = json.loads(msg.value())
    forged["cause"]["offset"] += 1_000_000
    producer = Producer({"bootstrap.servers": h.res.kafka_bootstrap})
    producer.produce(topic, json.dumps(forged, separators=(",", ":")).encode(), msg.key(), partition=0)
    assert producer.flush(30) == 0

    first = h.tick(view_sensor)
    (event,) = first.asset_events
    state = event.metadata["view_state"].value
    assert state.startswith(f"stopped: offset {high}: "), state
    assert event.metadata["view_frontier"].value == high
    again = h.tick(view_sensor, cursor=first.cursor)
    assert again.asset_events == []
    assert again.skip_reason is not None and "stopped" in again.skip_reason.skip_message
    # A lost cursor costs one repeated report, never silence.
    assert len(h.tick(view_sensor).asset_events) == 1


def test_a_boundary_run_computes_the_oracle_once_and_the_check_comes_from_that_computation(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amends_pipeline.ops import verify as verify_ops

    h = harness
    h.load(STAGES[0])
    r = h.refold()
    snap = r.asset_materializations_for_node("source_snapshot")[0].metadata
    assert snap["appended_records"].value >= 1 and snap["snapshot_lag_records"].value == 0
    assert snap["snapshot_rows"].value >= snap["appended_records"].value and snap["snapshot_bytes"].value > 0
    h.tick(relay_sensor)
    calls: list[int] = []
    real = verify_ops.partition_from_rows

    def counted(cfg: Any, p: int, rows: Any) -> Any:
        calls.append(p)
        return real(cfg, p, rows)

    monkeypatch.setattr(verify_ops, "partition_from_rows", counted)
    b = h.boundary()
    assert _check(b).passed
    assert calls == [0], "the oracle and the verification check each recomputed the history"
    check_steps = {e.step_key for e in b.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert check_steps == {"oracle"}
    md = b.asset_materializations_for_node("oracle")[0].metadata
    assert md["records"].value >= 1


def test_an_unusable_snapshot_location_is_reported_on_the_asset_and_the_refold_goes_on(harness: Harness) -> None:
    h = harness
    res = AmendsResource(
        config_path=h.res.config_path, pg_dsn=h.res.pg_dsn, pg_schema=h.res.pg_schema,
        kafka_bootstrap=h.res.kafka_bootstrap, snapshot_uri="s3://",
    )
    defs = build(res)
    h.load(STAGES[0])
    r = defs.resolve_job_def(refold_job.name).execute_in_process(instance=h.instance, partition_key="0")
    assert r.success
    snap = r.asset_materializations_for_node("source_snapshot")[0].metadata
    assert "AMENDS_SNAPSHOT_URI" in snap["snapshot_error"].value
    assert r.asset_materializations_for_node("refold")[0].metadata["reached_target"].value is True

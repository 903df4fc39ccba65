"""The compacted output topic, and views rebuilt from it, with real processes on a real broker.

Provision creates the output topic log-compacted; the relay keys every
envelope by its output ID; Kafka's log cleaner (really running, with settings
that make it act within seconds) then keeps only the latest envelope per
output ID, withdrawals included. A view rebuilt from offset 0 of that log
equals the original view, and a view that hit ``OutputLost`` recovers with
``amends view --rebuild``. Every scenario ends with ``amends verify``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from amends_core import wire
from amends_core.ledger import Config
from amends_core.view import ViewState
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.postgres.view_store import PgViewStore
from tests.e2e.conftest import Pipeline

KEYS = [("PART-1", "DEPOT-A", 0), ("PART-2", "DEPOT-B", 1)]

COMPACTING_BROKER = {
    # every relay run lands in a new segment, so earlier segments become cleanable
    "log.roll.ms": "300",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.cleaner.delete.retention.ms": "100",
}


def write_config(tmp: Path) -> Path:
    cfg = {
        "schema_version": 1,
        "namespace": "compaction-demo",
        "source_incarnation": "compaction-source-v1",
        "partitions": 2,
        "origin": "2026-01-01T00:00:00Z",
        "keys": [
            {"item": i, "location": loc, "opening_balance": 100, "reorder_threshold": 60, "partition": p}
            for i, loc, p in KEYS
        ],
    }
    path = tmp / "compaction-config.json"
    path.write_text(json.dumps(cfg))
    return path


def txn(item: str, loc: str, txn_id: str, rev: int, kind: str, qty: int, day: int) -> str:
    return json.dumps({
        "txn_id": txn_id, "revision": rev, "kind": kind,
        "stock_key": {"item": item, "location": loc},
        "valid_time": f"2026-{1 + (day - 1) // 31:02d}-{1 + (day - 1) % 31:02d}T12:00:00Z",
        "qty": qty, "source_time": f"2026-03-{rev:02d}T00:00:00Z",
    })


# Per key: opening 100, threshold 60. ISSUE-1 is amended twice, so every output the
# first amendment touches (closes of days 1-3, the day-1 alert it withdraws, the
# day-2 alert it restates) is touched again by the second; the cancellation
# withdraws day 3's close (a deletion version); the late receipt adds only new IDs.
STAGES: dict[str, list[tuple[str, int, str, int, int]]] = {
    "initial": [("ISSUE-1", 1, "NEW", -50, 1), ("ISSUE-2", 1, "NEW", -20, 2), ("RECEIPT-3", 1, "NEW", 50, 3)],
    "amend": [("ISSUE-1", 2, "AMEND", -30, 1)],
    "amend-again": [("ISSUE-1", 3, "AMEND", -45, 1)],
    "cancel-day-3": [("RECEIPT-3", 2, "CANCEL", 0, 3)],
    "late-receipt": [("RECEIPT-9", 1, "NEW", 5, 40)],
}


def load(p: Pipeline, stage: str) -> None:
    path = p.tmp / f"{stage}.jsonl"
    path.write_text("".join(
        txn(item, loc, tid, rev, kind, qty, day) + "\n"
        for item, loc, _ in KEYS for tid, rev, kind, qty, day in STAGES[stage]
    ))
    p.load(path)


def role(p: Pipeline, name: str) -> None:
    p.ok("role", name, "--config", str(p.config), "--until-idle", "--quiet")


def cfg_of(p: Pipeline) -> Config:
    return wire.decode_config(Path(p.config).read_bytes())


def view_snapshot(p: Pipeline) -> ViewState:
    with PgViewStore.open(p.env["AMENDS_PG_DSN"], cfg_of(p), schema=p.env["AMENDS_PG_SCHEMA"]) as v:
        return v.snapshot()


def output_log(p: Pipeline, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record the output partition still holds."""
    with Reader(p.broker.bootstrap, p.output_topic) as r:
        wm = r.watermarks(partition)
        return [(m.offset(), m.key(), m.value()) for m in r.messages(partition, wm.low, wm.high)]


def output_end(p: Pipeline, partition: int) -> int:
    with Reader(p.broker.bootstrap, p.output_topic) as r:
        return r.watermarks(partition).high


def wait_until(what: str, ready: Callable[[], bool], deadline_s: float = 180.0) -> None:
    """Poll until ``ready()`` (the cleaner works in the background), failing after a deadline."""
    deadline = time.monotonic() + deadline_s
    while not ready():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.5)


def topic_config(p: Pipeline, topic: str) -> dict[str, str]:
    admin = p.broker.admin()
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = next(iter(admin.describe_configs([res]).values())).result(timeout=30)
    return {k: e.value for k, e in entries.items()}


def set_output_policy(p: Pipeline, policy: str) -> None:
    admin = p.broker.admin()
    res = ConfigResource(ResourceType.TOPIC, p.output_topic, incremental_configs=[
        ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET),
    ])
    next(iter(admin.incremental_alter_configs([res]).values())).result(timeout=30)


def delete_output_records(p: Pipeline, partition: int, before: int) -> None:
    """Delete the output partition's records below ``before`` (what time retention does)."""
    admin = p.broker.admin()
    fut = admin.delete_records([TopicPartition(p.output_topic, partition, before)])
    for f in fut.values():
        f.result(timeout=30)


# ---------------------------------------------------------------- provisioning


def test_provision_creates_the_output_topic_compacted_and_the_source_topic_with_delete_retention(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.env["AMENDS_KAFKA_MIN_INSYNC_REPLICAS"] = "1"
    p.provision()
    out = topic_config(p, p.output_topic)
    src = topic_config(p, p.source_topic)
    assert out["cleanup.policy"] == "compact"
    assert src["cleanup.policy"] == "delete"
    assert out["min.insync.replicas"] == src["min.insync.replicas"] == "1"
    assert "already provisioned" in p.provision()  # idempotent: the compacted topic is accepted


def test_a_replication_factor_above_the_broker_count_is_a_one_line_provision_error(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.env["AMENDS_KAFKA_REPLICATION_FACTOR"] = "2"
    r = p.run("provision", "--config", str(p.config), "--source-topic", p.source_topic,
              "--output-topic", p.output_topic)
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "AMENDS_KAFKA_REPLICATION_FACTOR" in r.stderr and "replication factor 2" in r.stderr
    assert "1 broker" in r.stderr


def test_unusable_topic_settings_are_refused_in_one_line_before_the_cluster_is_touched(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    for env, needle in [
        ({"AMENDS_KAFKA_REPLICATION_FACTOR": "0"}, "AMENDS_KAFKA_REPLICATION_FACTOR"),
        ({"AMENDS_KAFKA_REPLICATION_FACTOR": "three"}, "AMENDS_KAFKA_REPLICATION_FACTOR"),
        ({"AMENDS_KAFKA_MIN_INSYNC_REPLICAS": "2"}, "exceeds AMENDS_KAFKA_REPLICATION_FACTOR=1"),
    ]:
        q = Pipeline(dict(p.env, **env), p.broker, p.tmp, p.source_topic, p.output_topic, p.config)
        r = q.run("provision", "--config", str(p.config), "--source-topic", p.source_topic,
                  "--output-topic", p.output_topic)
        assert r.returncode == 2 and needle in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert p.output_topic not in p.broker.admin().list_topics(timeout=10).topics


def test_provision_refuses_an_existing_output_topic_that_is_not_compacted(pipeline: Pipeline) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.broker.create_topic(p.output_topic, 2)  # the broker's default policy: delete
    r = p.run("provision", "--config", str(p.config), "--source-topic", p.source_topic,
              "--output-topic", p.output_topic)
    assert r.returncode == 1
    assert "cleanup.policy=delete" in r.stderr and "cleanup.policy=compact" in r.stderr
    set_output_policy(p, "compact")
    p.provision()  # the fix the message names is enough


# ---------------------------------------------------------------- real compaction


@pytest.mark.slow
def test_the_compacted_output_log_keeps_only_the_latest_envelope_per_output_id_and_a_view_rebuilt_from_it_equals_the_original(  # noqa: E501
    pipeline_on: Callable[..., Pipeline],
) -> None:
    p = pipeline_on(COMPACTING_BROKER)
    p.config = write_config(p.tmp)
    p.provision()
    for stage in STAGES:
        load(p, stage)
        p.roles_until_idle()
    assert p.verify().returncode == 0
    original = view_snapshot(p)
    ids = {oid.encoded.encode() for oid in original.rows}

    def compacted() -> bool:
        keys = [k for part in (0, 1) for _, k, _ in output_log(p, part)]
        return len(keys) == len(set(keys)) == len(ids)

    # Every partition's newest segment holds only the late receipt's new IDs; the
    # cleaner has to remove every superseded version below it.
    wait_until("the log cleaner keeps one envelope per output ID", compacted)
    retained: dict[str, bytes] = {}
    for part in (0, 1):
        log = output_log(p, part)
        assert len(log) < output_end(p, part)  # superseded versions really went
        for _, key, value in log:
            assert key is not None and value is not None  # no Kafka null tombstones
            env = wire.decode_envelope(value)
            assert not isinstance(env, wire.DecodeError)
            assert key == env.output_id.encoded.encode()
            retained[key.decode()] = value
    # the retained envelope of each ID is the one the view holds: deletion versions included
    assert {oid.encoded: env.to_bytes() for oid, env in original.rows.items()} == {
        k: v for k, v in retained.items()
    }
    withdrawn = [env for env in original.rows.values() if not env.payload.present]
    assert withdrawn and all(env.version > 1 for env in withdrawn)

    out = p.ok("view", "--config", str(p.config), "--rebuild", "--discard-rows")
    assert "discarded" in out and "re-applied" in out
    rebuilt = view_snapshot(p)
    assert rebuilt.rows == original.rows
    assert rebuilt.frontiers == original.frontiers and not rebuilt.stopped
    assert p.verify().returncode == 0


# ---------------------------------------------------------------- OutputLost
#
# Kafka refuses to delete records of a compact-only topic (DeleteRecords is a
# policy violation there), so a view on a topic that provision created cannot
# lose its place. It can when the output topic also deletes: one provisioned
# before output topics were compacted, or altered afterwards. These scenarios
# alter it to ``compact,delete`` and delete records as time retention would.


def test_records_of_a_compacted_output_topic_cannot_be_deleted_so_the_view_never_loses_its_place(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    load(p, "initial")
    p.roles_until_idle()
    admin = p.broker.admin()
    fut = admin.delete_records([TopicPartition(p.output_topic, 0, output_end(p, 0))])
    err = next(iter(fut.values())).exception(timeout=30)
    assert err is not None and "POLICY_VIOLATION" in str(err)
    assert p.verify().returncode == 0


@pytest.mark.slow
def test_a_view_that_hit_output_lost_recovers_with_view_rebuild_and_verification_is_accepted(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    set_output_policy(p, "compact,delete")  # a topic whose retention deletes
    load(p, "initial")
    p.roles_until_idle()
    stopped_at = {part: output_end(p, part) for part in (0, 1)}
    load(p, "amend")  # the view is stopped from here on
    role(p, "worker")
    role(p, "relay")
    cut = {part: output_end(p, part) for part in (0, 1)}
    load(p, "amend-again")
    role(p, "worker")
    role(p, "relay")
    for part in (0, 1):
        # precondition of this scenario: every output the deleted stretch carried is
        # published again after it, so the retained log still holds its latest version
        log = output_log(p, part)
        lost = {k for off, k, _ in log if stopped_at[part] <= off < cut[part]}
        kept = {k for off, k, _ in log if off >= cut[part]}
        assert lost and lost <= kept
        delete_output_records(p, part, cut[part])

    r = p.run("role", "view", "--config", str(p.config), "--until-idle")
    assert r.returncode == 1 and "OutputLost" in r.stderr
    assert "amends view --config CONFIG --rebuild --partition" in r.stderr
    assert p.verify().returncode == 1

    out = p.ok("view", "--config", str(p.config), "--rebuild")
    for part in (0, 1):
        assert f"output partition {part}: frontier {stopped_at[part]} -> {cut[part]} (log start)" in out
    assert "warning" in out  # the log does not start at 0: the command says what that means
    report = json.loads(p.verify("--json").stdout)
    assert report["status"] == "PASS", report
    role(p, "view")  # the view role carries on normally afterwards


@pytest.mark.slow
def test_a_rebuild_cannot_bring_back_outputs_deleted_before_the_view_applied_them_and_verify_says_so(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    set_output_policy(p, "compact,delete")  # a topic whose retention deletes
    load(p, "initial")
    p.roles_until_idle()
    load(p, "amend")
    role(p, "worker")
    role(p, "relay")
    for part in (0, 1):  # the amendment's envelopes go before the view saw them
        delete_output_records(p, part, output_end(p, part))
    r = p.run("view", "--config", str(p.config), "--rebuild", "--discard-rows")
    assert r.returncode == 1 and "RebuildRefused" in r.stderr  # rows are all that is left
    p.ok("view", "--config", str(p.config), "--rebuild")
    report = json.loads(p.verify("--json").stdout)
    assert report["status"] == "DRIFT"  # never a silent PASS: rebuild the namespace from source
    out = p.ok("rebuild", "--config", str(p.config), "--new-namespace", "compaction-demo-2",
               "--output-topic", p.output_topic + "-2", "--execute", "--in-process", timeout=180)
    assert "verification PASS" in out

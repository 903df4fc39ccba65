"""The source as a real Kafka broker keeps it: topic IDs, time retention, transactions, compaction.

Every command is the real `amends` console script against the real Apache
Kafka broker and PostgreSQL. Upstream producers that `amends load` does not
imitate (a transactional producer, records with chosen timestamps, a forged
marker header) are confluent-kafka clients in the test, as they would be in
another system. Waits poll a durable fact until a deadline; nothing asserts
how long something took.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from amends_pipeline.kafka.topics import MARKER_HEADER, Marker, Reader
from tests.e2e.conftest import FIXTURE, Pipeline

KEY = b'["DEMO-PART","DEPOT-A"]'


def txn(txn_id: str, qty: int, day: int = 2, revision: int = 1, kind: str = "NEW") -> bytes:
    return json.dumps(
        {
            "txn_id": txn_id, "revision": revision, "kind": kind,
            "stock_key": {"item": "DEMO-PART", "location": "DEPOT-A"},
            "valid_time": f"2026-01-{day:02d}T12:00:00Z", "qty": qty,
            "source_time": f"2026-01-{day:02d}T12:00:01Z",
        },
        separators=(",", ":"),
    ).encode()


def many(prefix: str, n: int) -> list[bytes]:
    """``n`` small movements over January (receipts and issues that never leave int64)."""
    return [txn(f"{prefix}-{i}", 1 if i % 3 else -1, day=1 + i % 28) for i in range(n)]


def produce(p: Pipeline, values: list[bytes], *, timestamp_ms: int | None = None,
            headers: list[tuple[str, bytes]] | None = None, key: bytes | None = KEY) -> None:
    """An upstream producer: values to partition 0 of the source topic."""
    prod = Producer({"bootstrap.servers": p.broker.bootstrap, "enable.idempotence": True, "log_level": 3})
    failures: list[str] = []
    for v in values:
        kw: dict[str, Any] = {"timestamp": timestamp_ms} if timestamp_ms is not None else {}
        prod.produce(p.source_topic, v, key=key, partition=0, headers=headers,
                     on_delivery=lambda err, _m: failures.append(str(err)) if err else None, **kw)
    assert prod.flush(30) == 0 and not failures, failures


def future_ms(minutes: int = 20) -> int:
    """A record timestamp that time retention will not reach while the test runs."""
    return int(time.time() * 1000) + minutes * 60_000


def watermarks(p: Pipeline) -> tuple[int, int]:
    with Reader(p.broker.bootstrap, p.source_topic) as r:
        wm = r.watermarks(0)
    return wm.low, wm.high


def alter_topic(p: Pipeline, **settings: str) -> None:
    res = ConfigResource(
        ResourceType.TOPIC, p.source_topic,
        incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in settings.items()
        ],
    )
    admin = p.broker.admin()
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


@contextmanager
def database(p: Pipeline) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(p.env["AMENDS_PG_DSN"], autocommit=True)
    conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(p.env["AMENDS_PG_SCHEMA"])))
    try:
        yield conn
    finally:
        conn.close()


def frontier(p: Pipeline) -> int:
    with database(p) as db:
        row = db.execute("SELECT next_offset FROM partitions WHERE partition = 0").fetchone()
    return -1 if row is None else int(row[0])


def wait_for(what: str, cond: Callable[[], bool], deadline_s: float = 120) -> None:
    """Poll ``cond`` until it holds; fail naming ``what`` if it never does."""
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.25)


def verify_json(p: Pipeline, *extra: str) -> tuple[int, dict[str, Any]]:
    r = p.verify("--json", *extra)
    return r.returncode, json.loads(r.stdout)


def expect_file(p: Pipeline, report: dict[str, Any]) -> str:
    path = p.tmp / "expect.json"
    path.write_text(json.dumps({
        "rejections": [
            {"partition": x["partition"], "offset": x["offset"], "reason": x["reason"]}
            for x in report["rejections"]
        ],
        "conflicts": [],
    }))
    return str(path)


def start_worker(p: Pipeline) -> subprocess.Popen[str]:
    return p.start("role", "worker", "--config", str(p.config), "--quiet")


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM a role and require a clean exit (it ran without error the whole time)."""
    assert proc.poll() is None, f"the role had already stopped: {proc.stderr.read() if proc.stderr else ''}"
    proc.terminate()
    code = proc.wait(60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


# ---------------------------------------------------------------- incarnation


@pytest.mark.slow
def test_a_recreated_source_topic_is_refused_by_topic_id_naming_both_ids_even_with_a_copied_marker(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    p.roles_until_idle()
    old_id = p.broker.topic_id(p.source_topic)
    p.broker.delete_topic(p.source_topic)
    p.broker.create_topic(p.source_topic, 1)
    # the new topic even carries a faithful copy of the marker at the recorded offset 0
    with database(p) as db:
        nonce, ns, inc = db.execute("SELECT nonce, marker_namespace, source_incarnation FROM source_manifest").fetchone()
    produce(p, [Marker(ns, inc, nonce, 0).to_bytes()], headers=[(MARKER_HEADER, b"1")], key=None)
    p.load(FIXTURE / "before.jsonl", FIXTURE / "correction.jsonl")
    new_id = p.broker.topic_id(p.source_topic)
    r = p.run("role", "worker", "--config", str(p.config), "--until-idle")
    assert r.returncode == 1 and "IncarnationMismatch" in r.stderr
    assert old_id in r.stderr and new_id in r.stderr
    code, report = verify_json(p)
    assert code == 1 and report["status"] == "INCOMPLETE"
    assert any(old_id in x and new_id in x for x in report["boundary_reasons"])


# ---------------------------------------------------------------- time retention


@pytest.mark.slow
def test_time_retention_deleting_the_marker_segment_keeps_the_worker_running_and_verification_passes(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.broker.create_topic(p.source_topic, 1, {"segment.ms": "100", "retention.ms": "-1"})
    p.provision()  # the marker, alone in the first segment
    time.sleep(0.3)  # older than segment.ms: the next append starts a new segment
    produce(p, many("A", 300), timestamp_ms=future_ms())
    worker = start_worker(p)
    wait_for("the worker processed the first records", lambda: frontier(p) == watermarks(p)[1])
    alter_topic(p, retention_ms="1000")  # the marker's segment is older than that, the rest is not
    wait_for("time retention deleted the marker segment", lambda: watermarks(p)[0] >= 1)
    assert frontier(p) >= 300  # the worker was far past it
    produce(p, many("B", 200), timestamp_ms=future_ms())
    wait_for("the running worker processed records after the deletion",
             lambda: frontier(p) == watermarks(p)[1])
    p.roles_until_idle()  # a fresh worker confirms the incarnation from scratch, then relay and view
    stop(worker)
    code, report = verify_json(p)
    assert report["status"] == "PASS" and code == 0, report


@pytest.mark.slow
def test_time_retention_deleting_consumed_records_keeps_the_worker_running_and_makes_verification_incomplete(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.broker.create_topic(p.source_topic, 1, {"segment.ms": "100", "retention.ms": "-1"})
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    p.roles_until_idle()
    assert verify_json(p)[0] == 0
    worker = start_worker(p)
    high = watermarks(p)[1]
    alter_topic(p, retention_ms="1000")
    wait_for("time retention deleted every record", lambda: watermarks(p)[0] == high)
    alter_topic(p, retention_ms="-1")
    correction = (FIXTURE / "correction.jsonl").read_bytes().strip()
    produce(p, [correction], timestamp_ms=future_ms())  # kept whenever the new setting lands
    wait_for("the running worker processed the new records", lambda: frontier(p) == watermarks(p)[1])
    p.roles_until_idle()
    stop(worker)
    code, report = verify_json(p)
    assert code == 1 and report["status"] == "INCOMPLETE", report
    consumed = [x for x in report["boundary_reasons"] if "no longer in the topic" in x]
    assert consumed and "3 records the pipeline consumed" in consumed[0], report["boundary_reasons"]


# ---------------------------------------------------------------- the marker header


@pytest.mark.slow
def test_a_message_with_a_forged_marker_header_is_quarantined_with_its_reason_and_shown_by_verification(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    produce(p, [txn("HIDDEN", -90, day=3)], headers=[(MARKER_HEADER, b"1")])
    p.load(FIXTURE / "correction.jsonl")
    p.roles_until_idle()
    assert frontier(p) == watermarks(p)[1]  # the forged message did not stop the partition
    code, report = verify_json(p)
    assert code == 1 and report["status"] == "PASS_WITH_EXCLUSIONS", report
    assert [(x["offset"], x["reason"]) for x in report["rejections"]] == [(4, "RESERVED_HEADER")]
    assert '"txn_id":"HIDDEN"' in report["rejections"][0]["value"]
    assert p.verify("--expect", expect_file(p, report)).returncode == 0


# ---------------------------------------------------------------- gaps in offsets


@pytest.mark.slow
def test_a_transactional_upstream_producer_has_its_aborted_records_never_applied_and_the_frontier_reaches_the_end(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.provision()
    prod = Producer({
        "bootstrap.servers": p.broker.bootstrap, "transactional.id": p.source_topic, "log_level": 3,
    })
    prod.init_transactions(30)

    def transaction(values: list[bytes], commit: bool) -> None:
        prod.begin_transaction()
        for v in values:
            prod.produce(p.source_topic, v, key=KEY, partition=0)
        prod.flush(30)  # on the log before the outcome: aborted records really exist there
        (prod.commit_transaction if commit else prod.abort_transaction)(30)

    transaction([txn("C-1", -10), txn("C-2", -5, day=3)], commit=True)
    transaction([txn("ABORTED-1", -80), txn("C-1", -70, revision=2, kind="AMEND")], commit=False)
    p.roles_until_idle()
    # the log ends in the abort control record: the frontier is at the end all the same
    assert frontier(p) == watermarks(p)[1] == 7  # marker; 2 records + commit; 2 records + abort
    transaction([txn("ABORTED-2", -60, day=4)], commit=False)
    p.roles_until_idle()  # a range with no deliverable record at all still moves the frontier
    assert frontier(p) == watermarks(p)[1] == 9
    transaction([txn("C-3", 40, day=5)], commit=True)
    p.roles_until_idle()
    assert frontier(p) == watermarks(p)[1] == 11
    with database(p) as db:
        applied = sorted(r[0] for r in db.execute("SELECT txn_id FROM observations"))
        quarantined = db.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    assert applied == ["C-1", "C-2", "C-3"] and quarantined == 0
    code, report = verify_json(p)
    assert report["status"] == "PASS" and code == 0, report


@pytest.mark.slow
def test_a_compacted_source_topic_with_gaps_is_read_to_its_end_and_verification_passes(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    config = json.loads(p.config.read_text())
    config["keys"] = [
        {"item": f"PART-{k}", "location": "DEPOT-A", "opening_balance": 100, "reorder_threshold": 60,
         "partition": 0}
        for k in range(3)
    ]
    p.config = p.tmp / "compacted-config.json"
    p.config.write_text(json.dumps(config))
    p.broker.create_topic(p.source_topic, 1, {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100",
    })
    p.provision()  # the keyed marker survives compaction: nothing else shares its key

    def movement(k: int, txn_id: str, qty: int, day: int) -> tuple[bytes, bytes]:
        key = json.dumps([f"PART-{k}", "DEPOT-A"], separators=(",", ":")).encode()
        value = json.dumps({
            "txn_id": txn_id, "revision": 1, "kind": "NEW",
            "stock_key": {"item": f"PART-{k}", "location": "DEPOT-A"},
            "valid_time": f"2026-01-{day:02d}T08:00:00Z", "qty": qty,
            "source_time": f"2026-01-{day:02d}T08:00:01Z",
        }, separators=(",", ":")).encode()
        return key, value

    prod = Producer({"bootstrap.servers": p.broker.bootstrap, "enable.idempotence": True, "log_level": 3})
    for i in range(30):  # ten movements per stock key: compaction keeps each key's last
        key, value = movement(i % 3, f"T-{i}", -1, 1 + i)
        prod.produce(p.source_topic, value, key=key, partition=0)
    prod.flush(30)
    time.sleep(0.3)
    key, value = movement(0, "LAST", 5, 30)  # rolls the segment so the cleaner may compact the rest
    prod.produce(p.source_topic, value, key=key, partition=0)
    prod.flush(30)

    def present() -> int:
        with Reader(p.broker.bootstrap, p.source_topic) as r:
            return len(list(r.messages(0, 0, r.watermarks(0).high)))

    wait_for("compaction removed superseded records", lambda: present() < watermarks(p)[1])
    p.roles_until_idle()
    low, high = watermarks(p)
    assert frontier(p) == high
    with database(p) as db:
        applied = db.execute("SELECT count(*) FROM observations").fetchone()[0]
    assert applied == present() - 1 < high - 1  # every retained record but the marker, across the gaps
    code, report = verify_json(p)
    assert report["status"] == "PASS" and code == 0, report

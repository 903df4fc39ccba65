"""`amends rebuild` after retention deleted the early history: the rebuild's worker reads the source
snapshot up to its captured end, then the topic, and the rebuilt namespace verifies PASS.

Real broker, real PostgreSQL, real Delta tables in the test's folder. Retention is
imitated with delete-records (the broker's own deletion of a log's prefix); the
snapshot is taken by `amends snapshot` before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from amends_core.ledger import Record
from amends_pipeline.inputs import load_config
from amends_pipeline.kafka.topics import MARKER_HEADER, Marker, Reader
from amends_pipeline.manifest import Manifest, SourceLost
from amends_pipeline.ops import orchestration
from amends_pipeline.ops.replay import rebuild
from amends_pipeline.ops.snapshot import take
from amends_pipeline.roles.worker import KafkaSource
from amends_pipeline.runtime import Runtime
from tests.e2e.conftest import FIXTURE, Pipeline
from tests.e2e.test_dagster_daemon import _wait_for_certified as wait_for_certified
from tests.e2e.test_dagster_daemon import dagster_db, under_dagster  # noqa: F401 (fixtures)
from tests.e2e.test_real_kafka_source import KEY, many, produce, txn
from tests.e2e.test_source_snapshot import snapshot

STAGES = [s["source"] for s in json.loads((FIXTURE / "stages.json").read_text())["stages"]]


def delete_every_record(p: Pipeline) -> dict[int, int]:
    """Retention deleted every record of the source topic (each partition up to its end); the ends."""
    with Reader(p.broker.bootstrap, p.source_topic) as r:
        ends = {partition: r.watermarks(partition).high for partition in range(r.partitions())}
    for partition, high in ends.items():
        p.delete_records(partition, high)
    return ends


def processed_snapshotted_and_deleted(p: Pipeline, where: Path) -> dict[int, int]:
    """The worked example's stages loaded and processed, the snapshot taken, then the topic emptied."""
    p.provision()
    for stage in STAGES:
        p.load(FIXTURE / stage)
    p.roles_until_idle()
    taken = snapshot(p, str(where))
    assert taken.returncode == 0, taken.stderr
    return delete_every_record(p)


def rebuild_cli(p: Pipeline, namespace: str, uri: Path, *extra: str) -> Any:
    return p.run(
        "rebuild", "--config", str(p.config), "--new-namespace", namespace,
        "--output-topic", f"{p.output_topic}-{namespace}", *extra, timeout=300,
        env_extra={"AMENDS_SNAPSHOT_URI": str(uri)},
    )


def runtime(p: Pipeline, where: Path) -> Runtime:
    return Runtime(
        load_config(p.config), dsn=p.env["AMENDS_PG_DSN"], schema=p.env["AMENDS_PG_SCHEMA"],
        bootstrap=p.broker.bootstrap, snapshot_uri=str(where),
    )


def manifest(rt: Runtime) -> Manifest:
    with rt.store("amends-test", read_only=True) as store:
        return rt.manifest(store)


@pytest.mark.slow
def test_a_rebuild_after_retention_deleted_every_record_reads_the_snapshot_and_verifies_pass(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Without the snapshot the same rebuild is refused with the reason, before anything is registered."""
    p = pipeline
    where = tmp_path / "snap"
    ends = processed_snapshotted_and_deleted(p, where)

    refused = rebuild_cli(p, "rebuilt-without", tmp_path / "none", "--execute", "--in-process")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "SourceLost" in refused.stderr and "still needed" in refused.stderr, refused.stderr
    assert "no source snapshot holds it" in refused.stderr, refused.stderr

    done = rebuild_cli(p, "rebuilt", where, "--execute", "--in-process", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["accepted"] is True and doc["report"]["status"] == "PASS", doc
    assert doc["report"]["counts"]["rows"] > 0 and doc["report"]["source"].startswith(f"snapshot {where}")
    table = where / p.source_topic
    assert f"partition 0: offsets below {ends[0]} from the source snapshot {table} version" in done.stderr

    # the rebuilt namespace verifies PASS on its own, as any namespace does
    cfg = json.loads(p.config.read_text())
    rebuilt_config = tmp_path / "rebuilt.json"
    rebuilt_config.write_text(json.dumps({**cfg, "namespace": "rebuilt"}))
    verified = p.run("verify", "--config", str(rebuilt_config), env_extra={"AMENDS_SNAPSHOT_URI": str(where)})
    assert verified.returncode == 0 and "verification PASS" in verified.stdout, verified.stdout + verified.stderr
    original = p.run("verify", "--config", str(p.config), env_extra={"AMENDS_SNAPSHOT_URI": str(where)})
    assert original.returncode == 0, original.stdout  # the original is untouched


@pytest.mark.slow
def test_the_refold_a_dagster_backfill_runs_reads_the_snapshot_too(pipeline: Pipeline, tmp_path: Path) -> None:
    """The backfill's refold runs call ``orchestration.refold`` on the rebuild namespace: here directly."""
    p = pipeline
    where = tmp_path / "snap"
    processed_snapshotted_and_deleted(p, where)
    summaries: list[orchestration.RefoldSummary] = []

    def refold(nrt: Runtime) -> str:
        summaries.extend(orchestration.refold(nrt, partition) for partition in range(nrt.cfg.partitions))
        return "refold of every partition"

    plan = rebuild(runtime(p, where), "rebuilt-by-refold", f"{p.output_topic}-r", execute=True, refold=refold)
    assert summaries and all(s.reached_target for s in summaries), summaries
    assert sum(s.records for s in summaries) == sum(
        len((FIXTURE / stage).read_text().splitlines()) for stage in STAGES
    )
    assert plan.report is not None and plan.report.status.value == "PASS" and plan.accepted


@pytest.mark.slow
def test_a_rebuild_by_dagster_backfill_after_retention_reads_the_snapshot_and_verifies_pass(
    request: pytest.FixtureRequest,
) -> None:
    """The backfill's refold runs (dagster-daemon, code server) read the snapshot their
    source_snapshot assets kept: the code location and the commands share AMENDS_SNAPSHOT_URI."""
    p, d = request.getfixturevalue("under_dagster")  # test_dagster_daemon's fixture, imported above
    d.start()
    for stage in STAGES:
        p.load(FIXTURE / stage)
    wait_for_certified(p, d, 2)
    p.ok("snapshot", "--config", str(p.config))  # up to the topic's end, whatever the assets took
    delete_every_record(p)
    out = p.ok(
        "rebuild", "--config", str(p.config), "--new-namespace", "rebuilt-by-backfill",
        "--output-topic", f"{p.output_topic}-rebuilt", "--execute", timeout=600,
    )
    assert "backfill" in out and "verification PASS" in out and "source: snapshot" in out, out


def read_batches(log: Any, limit: int, max_bytes: int) -> list[tuple[list[Record], int]]:
    """Every batch a worker reads from the start to the end: its records and the position reached."""
    position = 0
    high = log.end(position)
    batches = []
    while position < high:
        records, position = log.read(position, high, limit, max_bytes)
        batches.append((records, position))
    return batches


def test_the_snapshot_then_topic_source_reads_the_records_and_positions_the_topic_read(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Forged marker headers, missing keys and values, transaction control records and aborted
    records: below the captured end the table gives what the topic gave, batch by batch."""
    p = pipeline
    p.provision()
    rt = runtime(p, tmp_path / "snap")
    m = manifest(rt)
    forged = Marker("someone-else", m.source_incarnation, "not-the-nonce", 0).to_bytes()
    produce(p, many("a", 5))
    produce(p, [forged], headers=[(MARKER_HEADER, b"1")])
    produce(p, [txn("no-key", -1)], key=None)
    produce(p, [None, b""], key=KEY)  # type: ignore[list-item]  # a tombstone and an empty value
    tx = Producer({"bootstrap.servers": p.broker.bootstrap, "transactional.id": p.source_topic, "log_level": 3})
    tx.init_transactions(30)
    for commit in (True, False, True):
        tx.begin_transaction()
        for v in many("t", 3):
            tx.produce(p.source_topic, v, key=KEY, partition=0)
        tx.flush(30)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)
    del tx  # the producer is closed here, not at the interpreter's exit
    produce(p, many("b", 4))
    captured = take(rt, [0]).appended[0].end
    produce(p, many("c", 6))  # beyond the captured end: only the topic holds these

    budgets = [(1000, 1 << 30), (3, 1 << 30), (1, 1), (1000, 3 * len(many("a", 1)[0]))]
    with rt.reader(p.source_topic) as reader:
        from_topic = {b: read_batches(KafkaSource(reader, m, 0), *b) for b in budgets}
    p.delete_records(0, captured)
    with rt.reader(p.source_topic) as reader:
        with pytest.raises(SourceLost):
            KafkaSource(reader, m, 0).end(0)  # the topic alone no longer holds the start
        for b in budgets:
            source = rt.source(reader, m, 0)
            assert read_batches(source, *b) == from_topic[b], b
            assert source.rows is not None and source.rows.end == captured  # the table was read
    offsets = [r.coords.offset for r in from_topic[budgets[0]][0][0]]
    assert any(o >= captured for o in offsets) and any(r.reserved_header for r in from_topic[budgets[0]][0][0])


@pytest.mark.parametrize(
    ("steps", "needed", "reason"),
    [
        (("forget", "more", "snapshot"), 0, "offsets 0..10 were deleted by retention before the source snapshot"),
        (("snapshot", "more"), 11, "the source snapshot holds offsets below 11 only, but offset 11 is still needed"),
    ],
    ids=["deleted-before-the-first-capture", "deleted-past-the-captured-end"],
)
def test_offsets_that_neither_the_snapshot_nor_the_topic_holds_are_source_lost_never_passed_over(
    pipeline: Pipeline, tmp_path: Path, steps: tuple[str, ...], needed: int, reason: str
) -> None:
    """Retention deleted them before the first capture (a named gap in the table), or after the
    last capture (between the captured end and the topic's start): the rebuild refuses up front
    and a worker's source stops there."""
    p = pipeline
    p.provision()
    where = tmp_path / "snap"
    produce(p, many("r", 10))  # offsets 1..10, after the marker
    for step in steps:
        if step == "forget":
            p.delete_records(0, 11)
        elif step == "more":
            produce(p, many("s", 10))  # offsets 11..20
        else:
            assert snapshot(p, str(where)).returncode == 0
    delete_every_record(p)

    refused = rebuild_cli(p, "rebuilt-lost", where)  # the dry run checks what the rebuild needs
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert reason in refused.stderr, refused.stderr
    rt = runtime(p, where)
    with rt.reader(p.source_topic) as reader:
        with pytest.raises(SourceLost, match="never skipped"):
            rt.source(reader, manifest(rt), 0).end(needed)

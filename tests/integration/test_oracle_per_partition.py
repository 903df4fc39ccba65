"""The oracle at a boundary: a run per partition and one verdict, and records decoded once.

With ``AMENDS_ORACLE_RUNS=per-partition`` the boundary sensor asks for one
``oracle_part_job`` run per source partition (the run launcher may put each on
another host); each run stores its partition's part in PostgreSQL, and the
``oracle`` asset's blocking check combines the parts that match its boundary,
computing only the partitions no matching part covers. Real PostgreSQL, a real
Kafka broker, Dagster in process.

The code location's partitions come from ``AMENDS_CONFIG`` when it is imported
(the worked example's one partition here), so the Dagster flow runs on that
namespace; combining several partitions' parts is checked on a namespace of
three partitions through the same operations the assets call.

The snapshot's records are classified once and kept beside the snapshot (a Delta
table per oracle code version and configuration); later boundaries decode only
the records captured since, and ``amends verify`` reads the kept rows without
ever writing them.
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

from amends_pipeline.defs.definitions import build
from amends_pipeline.defs.jobs import boundary_job, oracle_part_job
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.defs.sensors import boundary_sensor
from amends_pipeline.defs.verification_record import VERIFICATION_KEY
from amends_pipeline.kafka.load import plan_file
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.manifest import check_source
from amends_pipeline.ops import orchestration
from amends_pipeline.ops import snapshot as snapshots
from amends_pipeline.ops import verify as verify_ops
from amends_pipeline.ops.provision import provision
from amends_pipeline.ops.sensing import oracle_part_plan
from amends_pipeline.postgres.oracle_parts import load_coverage
from amends_pipeline.snapshot.decoded import Classified, DecodedRows, decoded_uri

WORKED = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"
STAGES = ["before.jsonl", "correction.jsonl"]
PARTITIONS = 3
KEYS = [("P-A", "D-1", 0), ("P-B", "D-1", 1), ("P-C", "D-2", 2), ("P-D", "D-2", 0)]


def _config(path: Path) -> Path:
    path.write_text(json.dumps({
        "schema_version": 1, "namespace": "split-oracle", "source_incarnation": "split-v1",
        "partitions": PARTITIONS, "origin": "2026-01-01T00:00:00Z",
        "keys": [
            {"item": i, "location": loc, "opening_balance": 100, "reorder_threshold": 60, "partition": p}
            for i, loc, p in KEYS
        ],
    }))
    return path


def _lines(stage: int) -> bytes:
    """Records of every key; stage 1 amends stage 0's first record of each key."""
    out = []
    for n, (item, loc, _) in enumerate(KEYS):
        for day in range(1, 4):
            out.append({
                "txn_id": f"{item}-{day}", "revision": 1 + stage if day == 1 else 1,
                "kind": "NEW" if stage == 0 or day != 1 else "AMEND",
                "stock_key": {"item": item, "location": loc}, "valid_time": f"2026-01-0{day}T10:00:00Z",
                "qty": -(10 + n + 5 * stage) if day == 1 else 7 - day, "source_time": f"2026-01-0{day}T10:01:00Z",
            })
            if stage and day != 1:
                out.pop()
    return "".join(json.dumps(o) + "\n" for o in out).encode()


@dataclass
class Split:
    res: AmendsResource
    defs: dg.Definitions
    instance: dg.DagsterInstance
    dsn: str
    schema: str
    partitions: int

    def load(self, stage: int) -> None:
        rt = self.res.runtime()
        w = rt.writer()
        with rt.store("test-load") as store:
            topic = rt.manifest(store).source_topic
        data = _lines(stage) if self.partitions == PARTITIONS else (WORKED / STAGES[stage]).read_bytes()
        for m in plan_file(rt.cfg, f"stage-{stage}", data):
            w.produce(topic, m.partition, m.value, m.key)
        w.flush()

    def drain(self) -> None:
        rt = self.res.runtime()
        for p in range(self.partitions):
            assert orchestration.refold(rt, p).reached_target
        orchestration.relay(rt)
        orchestration.apply_view(rt)

    def drained_with_parts(self) -> None:
        """The first stage processed, and every partition's part stored by the runs the sensor asked for."""
        self.load(0)
        self.drain()
        for r in self.tick().run_requests:
            assert self.run(r).success

    def tick(self, cursor: str | None = None) -> Any:
        ctx = dg.build_sensor_context(instance=self.instance, cursor=cursor, resources={"amends": self.res})
        return boundary_sensor(ctx)

    def run(self, req: dg.RunRequest) -> dg.ExecuteInProcessResult:
        job = self.defs.resolve_job_def(req.job_name or "")
        return job.execute_in_process(
            instance=self.instance, partition_key=req.partition_key, tags=req.tags, raise_on_error=False
        )


def _split(
    config: Path, partitions: int, pg_dsn: str, pg_schema: str, kafka_broker: RealBroker,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> Iterator[Split]:
    res = AmendsResource(
        config_path=str(config), pg_dsn=pg_dsn, pg_schema=pg_schema,
        kafka_bootstrap=kafka_broker.bootstrap, oracle_runs="per-partition",
        snapshot_uri=str(tmp_path / "snapshots"),
    )
    kafka_broker.create_topic(source := topic_name("source"), partitions)
    provision(res.runtime(), source, topic_name("output"))
    with dg.DagsterInstance.ephemeral() as instance:
        yield Split(res, build(res), instance, pg_dsn, pg_schema, partitions)


@pytest.fixture
def split(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Split]:
    """The worked example's namespace (the code location's), oracle runs per partition."""
    yield from _split(WORKED / "config.json", 1, pg_dsn, pg_schema, kafka_broker, topic_name, tmp_path)


@pytest.fixture
def three(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Split]:
    """A namespace of three source partitions and four keys."""
    cfg = _config(tmp_path / "config.json")
    yield from _split(cfg, PARTITIONS, pg_dsn, pg_schema, kafka_broker, topic_name, tmp_path)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Partitions the oracle computes from now on (``partition_from_rows`` calls)."""
    computed: list[int] = []
    real = verify_ops.partition_from_rows

    def counted(cfg: Any, p: int, rows: Any) -> Any:
        computed.append(p)
        return real(cfg, p, rows)

    monkeypatch.setattr(verify_ops, "partition_from_rows", counted)
    return computed


def _check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (ev,) = result.get_asset_check_evaluations()
    assert ev.asset_check_key == VERIFICATION_KEY
    return ev


def test_the_sensor_runs_each_partition_s_oracle_then_one_check_combines_them_without_recomputing(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = split
    s.load(0)
    s.drain()
    first = s.tick()
    parts = [r for r in first.run_requests if r.job_name == oracle_part_job.name]
    assert [r.partition_key for r in parts] == ["0"]
    assert len(first.run_requests) == 1  # no verification yet: the part is missing
    # Asked again until the run exists, under the same run key: the daemon launches it once.
    assert [r.run_key for r in s.tick().run_requests] == [parts[0].run_key]
    computed = _counting(monkeypatch)
    result = s.run(parts[0])
    assert result.success
    md = result.asset_materializations_for_node("oracle_partition")[0].metadata
    assert md["source_end"].value == 4 and md["records"].value == 3 and md["part_bytes"].value > 0
    assert computed == [0]

    # The part matches now: the sensor launches the verification, which computes nothing.
    second = s.tick()
    (verify_req,) = second.run_requests
    assert verify_req.job_name == boundary_job.name
    computed.clear()
    b = s.run(verify_req)
    check = _check(b)
    assert check.passed, check.metadata["report"].value
    assert computed == [], "the check recomputed a partition whose stored part matches its boundary"
    md = b.asset_materializations_for_node("oracle")[0].metadata
    assert md["partitions_from_stored_parts"].value == [0]
    assert md["records"].value == 3
    assert "certified_balances" in {e.asset_key.to_user_string() for e in b.get_asset_materialization_events()}
    assert s.tick(cursor=second.cursor).run_requests == []  # verified: nothing more


def test_a_failed_partition_run_delays_the_verdict_by_one_run_never_blocks_it(
    split: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = split
    s.load(0)
    s.drain()
    (part_req,) = s.tick().run_requests

    def broken(*_: Any) -> Any:
        raise RuntimeError("this host lost its disk")

    monkeypatch.setattr(verify_ops, "oracle_part", broken)
    assert not s.run(part_req).success
    monkeypatch.undo()
    (verify_req,) = s.tick().run_requests
    assert verify_req.job_name == boundary_job.name
    computed = _counting(monkeypatch)
    b = s.run(verify_req)
    assert _check(b).passed
    assert computed == [0]  # computed by the verification itself
    assert b.asset_materializations_for_node("oracle")[0].metadata["partitions_from_stored_parts"].value == []


def test_a_stored_part_whose_bytes_are_damaged_fails_the_check_with_the_reason(split: Split) -> None:
    s = split
    s.drained_with_parts()
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(s.schema)))
        assert conn.execute("UPDATE oracle_parts SET part = '\\x00ff'::bytea").rowcount == 1
    (verify_req,) = s.tick().run_requests
    check = _check(s.run(verify_req))
    assert not check.passed and check.metadata["status"].value == "ERROR"
    assert "not an encoded oracle partition result" in check.metadata["error"].value


def test_three_partitions_parts_of_an_older_boundary_are_computed_again_and_the_verdict_equals_the_unsplit_one(
    three: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = three
    s.load(0)
    s.drain()
    rt = s.res.runtime()
    assert verify_ops.stale_parts(rt) == [0, 1, 2]
    for p in range(PARTITIONS):
        verify_ops.oracle_part(rt, p)
    assert verify_ops.stale_parts(rt) == []
    computed = _counting(monkeypatch)
    first = verify_ops.check_namespace(rt.reading(), use_parts=True)
    assert computed == [] and first.reused == (0, 1, 2)
    assert first.report.status.value == "PASS" and first.records == len(KEYS) * 3

    s.load(1)  # amends the first record of every key: every partition moved
    s.drain()
    assert verify_ops.stale_parts(rt) == [0, 1, 2]
    verify_ops.oracle_part(rt, 1)  # one part brought up to date
    computed.clear()
    checked = verify_ops.check_namespace(rt.reading(), use_parts=True)
    assert computed == [0, 2] and checked.reused == (1,)
    unsplit = verify_ops.check_namespace(rt.reading())
    assert checked.report.status.value == unsplit.report.status.value == "PASS"
    assert checked.oracle == unsplit.oracle and checked.records == unsplit.records
    assert "partition 1: " in checked.report.source and "stored" in checked.report.source


def test_three_partitions_a_view_that_disagrees_in_one_partition_fails_the_combined_verdict(three: Split) -> None:
    s = three
    s.load(0)
    s.drain()
    rt = s.res.runtime()
    for p in range(PARTITIONS):
        verify_ops.oracle_part(rt, p)
    with psycopg.connect(s.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(s.schema)))
        n = conn.execute(
            # a wrong view row: the envelope and the value the view stored beside it (what
            # verification reads) both say 90
            "UPDATE view_rows SET envelope = convert_to(replace(convert_from(envelope, 'UTF8'),"
            " '\"close\":89', '\"close\":90'), 'UTF8'), close = 90"
            " WHERE family = 'balance' AND day IS NOT NULL"
            " AND item = 'P-B' AND convert_from(envelope, 'UTF8') LIKE '%\"close\":89%'"
        ).rowcount
    assert n == 1
    checked = verify_ops.check_namespace(rt.reading(), use_parts=True)
    assert checked.reused == (0, 1, 2)
    assert checked.report.status.value == "DRIFT"
    assert [d.subject for d in checked.report.differences if "P-B" in d.subject]


def test_the_plan_waits_for_runs_in_flight_and_never_for_runs_that_ended_without_a_part() -> None:
    assert oracle_part_plan([0, 1, 2], {}) == ([0, 1, 2], False)
    assert oracle_part_plan([1, 2], {0: False, 1: True, 2: True}) == ([], False)
    # partition 2's run failed (ended, part still stale): verification computes it itself
    assert oracle_part_plan([2], {0: False, 1: False, 2: False}) == ([], True)
    assert oracle_part_plan([], {}) == ([], True)


# ---------------------------------------------------------------- kept classified rows


def _history(rt: Any, p: int, *, keep: bool) -> Classified:
    """Partition ``p``'s history as a verification reads it (snapshot pinned now, then the topic)."""
    with rt.store("test-history", read_only=True) as store:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as src:
            wm = check_source(src, m)[p]
            pinned = snapshots.pin(rt, m)
            return verify_ops.read_history(rt, src, m, p, wm.low, wm.high, pinned, keep=keep)


def test_records_are_decoded_once_then_read_from_the_kept_rows_and_a_new_code_version_decodes_again(
    three: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    s.load(1)  # beyond the snapshot: read from the topic, decoded every time
    first = [_history(rt, p, keep=True) for p in range(PARTITIONS)]
    assert sum(h.decoded for h in first) == len(KEYS) * 4  # 3 records per key in the snapshot, 1 in the topic
    again = [_history(rt, p, keep=True) for p in range(PARTITIONS)]
    assert sum(h.decoded for h in again) == len(KEYS)  # only the topic's records
    for a, b in zip(first, again, strict=True):
        assert a.rows.sort("offset").collect().equals(b.rows.sort("offset").collect())
    snapshots.take(rt)
    assert sum(_history(rt, p, keep=True).decoded for p in range(PARTITIONS)) == len(KEYS)  # the new ones, once
    assert sum(_history(rt, p, keep=True).decoded for p in range(PARTITIONS)) == 0
    s.drain()
    kept = verify_ops.check_namespace(rt.reading())
    monkeypatch.setattr(verify_ops.parts, "code_version", lambda: "another-oracle")
    assert sum(_history(rt, p, keep=False).decoded for p in range(PARTITIONS)) == len(KEYS) * 4
    fresh = verify_ops.check_namespace(rt.reading())
    assert kept.report.status.value == fresh.report.status.value == "PASS"
    assert kept.oracle == fresh.oracle


def test_verify_reads_kept_rows_but_never_writes_them(three: Split) -> None:
    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    s.drain()
    with rt.store("test", read_only=True) as store:
        m = rt.manifest(store)
    pinned = snapshots.pin(rt, m)
    assert pinned is not None
    folder = Path(decoded_uri(pinned.table, m.config_digest, verify_ops.parts.code_version()))
    assert verify_ops.check_namespace(rt.reading()).report.status.value == "PASS"
    assert not folder.exists()  # amends verify and the read-only check keep nothing
    checked = verify_ops.check_namespace(rt.reading(), keep_decoded=True)
    assert checked.report.status.value == "PASS" and (folder / "_delta_log").is_dir()
    assert sum(_history(rt, p, keep=False).decoded for p in range(PARTITIONS)) == 0


def test_two_appenders_of_one_range_keep_it_once(three: Split) -> None:
    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    with rt.store("test", read_only=True) as store:
        m = rt.manifest(store)
    pinned = snapshots.pin(rt, m)
    assert pinned is not None
    rows = _history(rt, 1, keep=False).rows.collect()
    end = int(rows["offset"].max()) + 1
    a = DecodedRows(pinned.table, m.config_digest, "race")
    b = DecodedRows(pinned.table, m.config_digest, "race")
    assert a.append(1, 0, end, rows) is True
    assert b.append(1, 0, end, rows) is False  # the kept end is no longer 0
    assert len(a.rows(1, end).collect()) == len(rows) and a.end(1) == end


def test_a_long_range_is_decoded_and_kept_chunk_by_chunk_with_the_same_rows(
    three: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amends_pipeline.snapshot import decoded

    s = three
    rt = s.res.runtime()
    s.load(0)
    s.load(1)
    snapshots.take(rt)
    whole = [_history(rt, p, keep=False).rows.sort("offset").collect() for p in range(PARTITIONS)]
    monkeypatch.setattr(decoded, "DECODE_CHUNK", 2)
    chunked = [_history(rt, p, keep=True) for p in range(PARTITIONS)]
    assert sum(c.decoded for c in chunked) == len(KEYS) * 4
    for want, got in zip(whole, chunked, strict=True):
        assert got.rows.sort("offset").collect().equals(want)
    with rt.store("test", read_only=True) as store:
        m = rt.manifest(store)
    pinned = snapshots.pin(rt, m)
    assert pinned is not None
    kept = DecodedRows(pinned.table, m.config_digest, verify_ops.parts.code_version())
    ends = pinned.ends
    assert all(kept.end(p) == ends[p] for p in range(PARTITIONS))  # every chunk kept
    assert sum(_history(rt, p, keep=True).decoded for p in range(PARTITIONS)) == 0


def _coverage(s: Split) -> dict[int, Any]:
    with s.res.runtime().store("test", read_only=True) as store:
        return load_coverage(store)


def _delete_topic_records(s: Split, kafka_broker: RealBroker) -> None:
    """Delete every record the source topic holds (what retention does, all at once)."""
    from confluent_kafka import TopicPartition

    rt = s.res.runtime()
    with rt.store("test", read_only=True) as store:
        m = rt.manifest(store)
    with rt.reader(m.source_topic) as r:
        ends = {p: r.watermarks(p).high for p in range(s.partitions)}
    admin = kafka_broker.admin()  # kept while its futures run: a destroyed client never completes them
    futures = admin.delete_records([TopicPartition(m.source_topic, p, e) for p, e in ends.items()])
    for f in futures.values():
        f.result(timeout=30)


def test_the_oracle_records_how_far_the_snapshot_holds_what_was_consumed_and_later_checks_compare_only_newer_offsets(
    three: Split, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    s.drain()
    assert verify_ops.check_namespace(rt.reading()).report.status.value == "PASS"
    assert _coverage(s) == {}  # amends verify (and any check that keeps nothing) records nothing
    assert verify_ops.check_namespace(rt.reading(), keep_decoded=True).report.status.value == "PASS"
    with rt.store("test", read_only=True) as store:
        m = rt.manifest(store)
    pinned = snapshots.pin(rt, m)
    assert pinned is not None and pinned.table_id
    covered = _coverage(s)
    assert {p: (c.table_id, c.version, c.below) for p, c in covered.items()} == {
        p: (pinned.table_id, pinned.version, pinned.ends[p]) for p in range(PARTITIONS) if pinned.ends[p]
    }
    s.load(1)
    snapshots.take(rt)
    s.drain()
    asked: list[tuple[int, int, int]] = []
    real = verify_ops.PgStore.consumed_offsets

    def spied(self: Any, partition: int, below: int, since: int = 0) -> list[int]:
        asked.append((partition, below, since))
        return real(self, partition, below, since)

    monkeypatch.setattr(verify_ops.PgStore, "consumed_offsets", spied)
    checked = verify_ops.check_namespace(rt.reading())
    assert checked.report.status.value == "PASS", checked.report.boundary_reasons
    assert {p: since for p, _, since in asked} == {p: covered[p].below for p in covered}
    assert all(below > since for _, below, since in asked)  # each partition consumed records since
    assert checked.records == len(KEYS) * 4  # the record count still counts the whole history


def test_records_consumed_after_the_coverage_that_neither_the_snapshot_nor_the_topic_holds_are_still_reported(
    three: Split, kafka_broker: RealBroker
) -> None:
    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    s.drain()
    assert verify_ops.check_namespace(rt.reading(), keep_decoded=True).report.status.value == "PASS"
    assert _coverage(s)
    s.load(1)
    s.drain()  # consumed, never captured: retention takes them before the next snapshot
    _delete_topic_records(s, kafka_broker)
    report = verify_ops.check_namespace(rt.reading()).report
    assert report.status.value == "INCOMPLETE"
    assert any("records the pipeline consumed are no longer in the topic" in r for r in report.boundary_reasons)


def test_a_snapshot_table_created_again_at_the_same_location_is_not_vouched_for_by_the_old_coverage(
    three: Split, kafka_broker: RealBroker, tmp_path: Path
) -> None:
    """The coverage names the Delta table's ID: a table deleted and taken again after retention
    deleted the topic's records starts with a gap, and the consumed records in it are lost."""
    import shutil

    s = three
    rt = s.res.runtime()
    s.load(0)
    snapshots.take(rt)
    s.drain()
    assert verify_ops.check_namespace(rt.reading(), keep_decoded=True).report.status.value == "PASS"
    old = set(c.table_id for c in _coverage(s).values())
    _delete_topic_records(s, kafka_broker)
    shutil.rmtree(tmp_path / "snapshots")
    snapshots.take(rt)
    with rt.store("test", read_only=True) as store:
        pinned = snapshots.pin(rt, rt.manifest(store))
    assert pinned is not None and pinned.table_id not in old
    report = verify_ops.check_namespace(rt.reading(), keep_decoded=True).report
    assert report.status.value == "INCOMPLETE"
    assert any("records the pipeline consumed are no longer in the topic" in r for r in report.boundary_reasons)
    assert set(c.table_id for c in _coverage(s).values()) == old  # nothing new was vouched for

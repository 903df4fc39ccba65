"""`amends snapshot` keeps the raw source in a Delta Lake table on disk, each offset exactly once.

Real broker, real PostgreSQL, real Delta tables in the test's folder; the table
is read back with Polars and compared with what the topic holds, offset by offset.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from amends_pipeline.kafka.topics import Reader
from amends_pipeline.snapshot.capture import RETAINED_GAP, capture_partition
from amends_pipeline.snapshot.table import Identity, SnapshotTable
from tests.e2e.conftest import AMENDS, FIXTURE, Pipeline
from tests.e2e.test_real_kafka_source import many, produce


def snapshot(p: Pipeline, uri: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return p.run("snapshot", "--config", str(p.config), *extra, timeout=300, env_extra={"AMENDS_SNAPSHOT_URI": uri})


def table_rows(path: Path) -> pl.DataFrame:
    return pl.read_delta(str(path)).sort("partition", "offset")


def topic_messages(p: Pipeline, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    with Reader(p.broker.bootstrap, p.source_topic) as r:
        wm = r.watermarks(partition)
        return [(m.offset(), m.key(), m.value()) for run in r.scan(partition, wm.low, wm.high) for m in run]


def assert_each_offset_once(p: Pipeline, rows: pl.DataFrame, partition: int) -> None:
    """Record rows equal the topic's messages; records and gaps tile [0, end) with no overlap."""
    part = rows.filter(pl.col("partition") == partition)
    records = part.filter(pl.col("gap_end").is_null())
    assert [(o, k, v) for o, k, v in records.select("offset", "key", "value").iter_rows()] == topic_messages(
        p, partition
    )
    covered = 0
    for off, gap_end in part.select("offset", "gap_end").iter_rows():
        assert off == covered, f"partition {partition}: offset {off} where {covered} was next"
        covered = gap_end if gap_end is not None else off + 1
    with Reader(p.broker.bootstrap, p.source_topic) as r:
        assert covered == r.watermarks(partition).high


def test_a_snapshot_holds_each_source_offset_once_and_a_second_run_appends_nothing(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline.provision()
    pipeline.load(FIXTURE / "before.jsonl")
    where = tmp_path / "snap"
    first = snapshot(pipeline, str(where))
    assert first.returncode == 0, first.stderr
    assert "partition 0: offsets 0.." in first.stdout and f"table {where / pipeline.source_topic}" in first.stdout
    rows = table_rows(where / pipeline.source_topic)
    for partition in (0,):
        assert_each_offset_once(pipeline, rows, partition)

    again = snapshot(pipeline, str(where))
    assert again.returncode == 0 and again.stdout.count("nothing new") == 1, again.stdout
    assert table_rows(where / pipeline.source_topic).height == rows.height

    pipeline.load(FIXTURE / "correction.jsonl")
    third = snapshot(pipeline, str(where))
    assert third.returncode == 0, third.stderr
    grown = table_rows(where / pipeline.source_topic)
    assert grown.height > rows.height
    for partition in (0,):
        assert_each_offset_once(pipeline, grown, partition)


def test_two_concurrent_appenders_capture_each_offset_once(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.provision()
    produce(pipeline, many("c", 6000))
    path = str(tmp_path / "t")
    ident = Identity(pipeline.source_topic, "test-topic", 1)
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            with Reader(pipeline.broker.bootstrap, pipeline.source_topic) as r:
                capture_partition(SnapshotTable.open(path, ident), r, 0, chunk=500)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=appender) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert_each_offset_once(pipeline, pl.read_delta(path).sort("partition", "offset"), 0)


def test_an_appender_killed_at_random_moments_never_duplicates_or_skips_an_offset(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline.provision()
    produce(pipeline, many("k", 20_000))
    where = tmp_path / "snap"
    env = {**pipeline.env, "AMENDS_SNAPSHOT_URI": str(where)}
    rng = random.Random(int(os.environ.get("AMENDS_KILL_SEED", "43")))
    log = where / pipeline.source_topic / "_delta_log"
    killed = 0
    for _ in range(4):
        # The kill waits for a random number of new commits, then lands wherever the appender
        # is by then (mid-write, mid-commit or between chunks): a wall-clock delay would depend
        # on how fast this machine appends, and a fast one finishes before any kill.
        commits = len(list(log.glob("*.json"))) if log.is_dir() else 0
        target = commits + rng.randint(1, 8)
        proc = subprocess.Popen(
            [AMENDS, "snapshot", "--config", str(pipeline.config), "--chunk", "700"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if log.is_dir() and len(list(log.glob("*.json"))) >= target:
                time.sleep(rng.uniform(0, 0.05))
                break
            time.sleep(0.002)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait(30)
    done = snapshot(pipeline, str(where), "--chunk", "700")
    assert done.returncode == 0, done.stderr
    rows = table_rows(where / pipeline.source_topic)
    assert_each_offset_once(pipeline, rows, 0)
    assert killed >= 1, "no appender was killed part way: the test did not test what it says"


def test_records_retention_deleted_before_the_first_capture_are_a_named_gap(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline.provision()
    produce(pipeline, many("r", 50))
    with Reader(pipeline.broker.bootstrap, pipeline.source_topic) as r:
        high = r.watermarks(0).high
    pipeline.delete_records(0, high - 10)
    where = tmp_path / "snap"
    out = snapshot(pipeline, str(where))
    assert out.returncode == 0, out.stderr
    assert f"gap 0..{high - 11}: {RETAINED_GAP}" in out.stdout
    rows = table_rows(where / pipeline.source_topic).filter(pl.col("partition") == 0)
    gaps = rows.filter(pl.col("gap_end").is_not_null()).select("offset", "gap_end", "gap_reason").rows()
    assert gaps == [(0, high - 10, RETAINED_GAP)]
    assert rows.filter(pl.col("gap_end").is_null()).height == 10


def test_a_table_of_another_topic_id_is_refused_naming_both(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.provision()
    where = tmp_path / "snap"
    SnapshotTable.open(str(where / pipeline.source_topic), Identity(pipeline.source_topic, "an-older-topic-id", 1))
    out = snapshot(pipeline, str(where))
    assert out.returncode == 1
    assert "an-older-topic-id" in out.stderr and "AMENDS_SNAPSHOT_URI" in out.stderr, out.stderr


@pytest.mark.parametrize("form", ["file-uri", "relative-path"])
def test_a_file_uri_and_a_relative_path_both_hold_the_table(pipeline: Pipeline, tmp_path: Path, form: str) -> None:
    pipeline.provision()
    pipeline.load(FIXTURE / "before.jsonl")
    where = tmp_path / "snap"
    uri = where.as_uri() if form == "file-uri" else os.path.relpath(where)
    out = snapshot(pipeline, uri)
    assert out.returncode == 0, out.stderr
    assert table_rows(where / pipeline.source_topic).height > 0


@pytest.mark.parametrize(
    "uri", ["s3://", "file://somehost/x", "/proc/amends-snapshot-cannot-be-here"],
)
def test_a_malformed_or_unreachable_snapshot_uri_is_one_line_exit_2_naming_the_setting(
    pipeline: Pipeline, uri: str
) -> None:
    pipeline.provision()
    out = snapshot(pipeline, uri)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "AMENDS_SNAPSHOT_URI" in out.stderr, out.stderr


def test_after_retention_deleted_consumed_records_the_snapshot_keeps_the_boundary_verifiable(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """Without the snapshot the same boundary is INCOMPLETE; with it, PASS, naming the table version."""
    pipeline.provision()
    for stage in ("before.jsonl", "correction.jsonl"):
        pipeline.load(FIXTURE / stage)
    pipeline.roles_until_idle()
    where = tmp_path / "snap"
    assert snapshot(pipeline, str(where)).returncode == 0
    for partition in (0,):
        with Reader(pipeline.broker.bootstrap, pipeline.source_topic) as r:
            pipeline.delete_records(partition, r.watermarks(partition).high)

    without = pipeline.run("verify", "--config", str(pipeline.config), "--json",
                           env_extra={"AMENDS_SNAPSHOT_URI": str(tmp_path / "none")})
    assert without.returncode == 1 and '"INCOMPLETE"' in without.stdout, without.stdout
    assert "no longer in the topic" in without.stdout

    with_it = pipeline.run(
        "verify", "--config", str(pipeline.config), env_extra={"AMENDS_SNAPSHOT_URI": str(where)}
    )
    assert with_it.returncode == 0, with_it.stdout + with_it.stderr
    assert "verification PASS" in with_it.stdout
    assert f"source: snapshot {where / pipeline.source_topic} version " in with_it.stdout


def test_compact_and_vacuum_keep_every_row_of_the_current_version(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.provision()
    produce(pipeline, many("v", 3000))
    where = tmp_path / "snap"
    assert snapshot(pipeline, str(where), "--chunk", "500").returncode == 0
    before = table_rows(where / pipeline.source_topic)
    files_before = len(list((where / pipeline.source_topic).rglob("*.parquet")))
    compact = snapshot(pipeline, str(where), "--compact")
    assert compact.returncode == 0 and "compacted:" in compact.stdout, compact.stderr
    vacuum = snapshot(pipeline, str(where), "--vacuum", "0")
    assert vacuum.returncode == 0 and "vacuumed:" in vacuum.stdout, vacuum.stderr
    assert table_rows(where / pipeline.source_topic).equals(before)
    assert len(list((where / pipeline.source_topic).rglob("*.parquet"))) < files_before
    assert_each_offset_once(pipeline, before, 0)


def test_amends_view_shows_each_partitions_captured_end_and_lag(pipeline: Pipeline, tmp_path: Path) -> None:
    pipeline.provision()
    pipeline.load(FIXTURE / "before.jsonl")
    where = tmp_path / "snap"
    env = {"AMENDS_SNAPSHOT_URI": str(where)}
    before = pipeline.run("view", "--config", str(pipeline.config), env_extra=env)
    assert before.returncode == 0 and "source snapshot: none yet at" in before.stdout, before.stdout
    assert snapshot(pipeline, str(where)).returncode == 0
    pipeline.load(FIXTURE / "correction.jsonl")
    shown = pipeline.run("view", "--config", str(pipeline.config), env_extra=env).stdout
    with Reader(pipeline.broker.bootstrap, pipeline.source_topic) as r:
        high = r.watermarks(0).high
    captured = high - 1  # the correction is one record, not captured yet
    assert f"partition 0: captured to offset {captured}, 1 behind, oldest not captured from " in shown, shown

"""`amends skip` against real Kafka and PostgreSQL: which offsets it refuses, idempotence, fencing.

One source partition: the marker at offset 0, then A (applies), B (its daily
close leaves signed 64-bit: an operation error) and C (applies once B is
skipped). The command runs in-process through the real CLI entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amends_core import wire
from amends_core.errors import FenceError
from amends_core.ledger import INT64_MAX
from amends_pipeline.cli import main
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.ops.provision import provision
from amends_pipeline.postgres.errors import BatchAborted
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime
from tests import builders as b

A, B, C = 1, 2, 3
"""Offsets of the three records (the marker is at 0)."""


class Setup:
    def __init__(self, rt: Runtime, src: str, config: Path) -> None:
        self.rt = rt
        self.src = src
        self.config = str(config)

    def skip(self, offset: int, *extra: str, reason: str = "bad opening balance, ticket 7") -> int:
        return main([
            "skip", "--config", self.config, "--partition", "0", "--offset", str(offset),
            "--reason", reason, *extra,
        ])

    def worker(self) -> WorkerPartition:
        store = self.rt.store("amends-worker")
        m = self.rt.manifest(store)
        w = WorkerPartition(store, self.rt.reader(m.source_topic), m, 0)
        w.claim()
        return w

    def frontier(self) -> int:
        with self.rt.store("t", read_only=True) as s:
            return s.frontier(0)

    def epoch(self) -> int:
        with self.rt.store("t", read_only=True) as s:
            return s.progress(0).epoch


@pytest.fixture
def setup(
    pg_dsn: str,
    pg_schema: str,
    kafka_broker: RealBroker,
    topic_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Setup]:
    cfg = b.config([(b.K1, INT64_MAX - 10, 0, 0)])
    path = tmp_path / "config.json"
    path.write_bytes(wire.encode_config(cfg))
    rt = Runtime(cfg, dsn=pg_dsn, schema=pg_schema, bootstrap=kafka_broker.bootstrap)
    src, out = topic_name("source"), topic_name("output")
    assert provision(rt, src, out).manifest.markers[0] == 0
    w = Writer(kafka_broker.bootstrap)
    for t in (
        b.txn("A", qty=-5, valid=b.day(1)),
        b.txn("B", qty=100, valid=b.day(2)),  # close INT64_MAX + 85
        b.txn("C", qty=-1, valid=b.day(3)),
    ):
        w.produce(src, 0, b.value(t), b.K1.transport_key())
    w.flush()
    monkeypatch.setenv("AMENDS_PG_DSN", pg_dsn)
    monkeypatch.setenv("AMENDS_PG_SCHEMA", pg_schema)
    monkeypatch.setenv("AMENDS_KAFKA_BOOTSTRAP", kafka_broker.bootstrap)
    yield Setup(rt, src, path)


def stop_at_b(s: Setup) -> WorkerPartition:
    w = s.worker()
    with pytest.raises(BatchAborted) as caught:
        w.step()
    assert caught.value.offset == B
    assert s.frontier() == B  # A committed, B not
    return w


def test_a_record_that_processes_normally_cannot_be_skipped(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    epoch = setup.epoch()
    assert setup.skip(A) == 1
    err = capsys.readouterr().err
    assert err.startswith("amends skip: refused: processing offset 1 of partition 0 does not fail")
    assert setup.frontier() == 0 and setup.epoch() == epoch  # nothing changed, nobody fenced


def test_only_the_offset_the_partition_is_stopped_on_can_be_skipped(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    stop_at_b(setup)
    capsys.readouterr()
    assert setup.skip(C) == 1
    assert capsys.readouterr().err == (
        "amends skip: refused: offset 3 is not the record partition 0 processes next: that is"
        " offset 2 (frontier 2); only the record a partition is stopped on can be skipped\n"
    )
    assert setup.skip(A) == 1
    assert "is below the frontier 2: it was processed already" in capsys.readouterr().err
    assert setup.skip(99) == 1
    assert "offset 99 is not in source partition 0 (it ends at 4)" in capsys.readouterr().err
    assert setup.skip(B, reason="   ") == 2  # a reason is required
    assert "--reason must not be empty" in capsys.readouterr().err
    assert setup.skip(B, reason="x" * 501) == 2
    assert "--reason has 501 characters; at most 500" in capsys.readouterr().err
    assert setup.frontier() == B


def test_a_repeated_skip_is_idempotent_and_keeps_the_first_audit_entry(
    setup: Setup, capsys: pytest.CaptureFixture[str]
) -> None:
    stop_at_b(setup)
    assert setup.skip(B, "--operator", "alice") == 0
    out = capsys.readouterr().out
    assert out.startswith("skipped partition 0 offset 2 (CloseOutOfRange: ")
    assert "frontier 2 -> 3" in out and "recorded by alice at " in out
    epoch = setup.epoch()
    assert setup.skip(B, "--operator", "bob", reason="another reason") == 0
    again = capsys.readouterr().out
    assert again.startswith("partition 0 offset 2 was already skipped by alice at ")
    assert again.rstrip().endswith("('bad opening balance, ticket 7'); nothing changed")
    assert setup.frontier() == B + 1 and setup.epoch() == epoch  # no second claim
    with setup.rt.store("t", read_only=True) as s:
        (entry,) = s.skips()
    assert (entry.operator, entry.reason, entry.offset) == ("alice", "bad opening balance, ticket 7", B)


def test_a_live_worker_holding_the_old_epoch_is_fenced_out_by_a_skip(setup: Setup) -> None:
    old = stop_at_b(setup)
    assert setup.skip(B) == 0
    assert setup.epoch() > old.token.epoch  # type: ignore[union-attr]
    with pytest.raises(FenceError, match="was replaced"):
        old.step()  # C is next for it, but its epoch no longer owns the partition
    assert setup.frontier() == B + 1
    fresh = setup.worker()  # a worker that claims again goes on after the skipped offset
    r = fresh.step()
    assert (r.records, r.accepted, r.frontier) == (1, 1, C + 1)


def test_the_worker_records_the_operation_error_it_stopped_on_until_a_skip_passes_it(setup: Setup) -> None:
    stop_at_b(setup)
    with setup.rt.store("t", read_only=True) as s:
        (stop,) = s.stops()
    assert (stop.partition, stop.offset) == (0, B) and stop.error.startswith("CloseOutOfRange: ")
    assert setup.skip(B) == 0
    with setup.rt.store("t", read_only=True) as s:
        assert s.stops() == []

"""The OutputLog and OutputSource contract: what a relay publishes is what a view reads, unchanged.

Every test runs on each output log (``TestMemory``, ``TestSim``, ``TestKafka``: a
log-compacted topic on the shared real broker). A relay hands the log outbox
rows of the type its outbox gives (``row``); a view reads (offset, value)
pairs, where a value is the envelope's bytes or, in the simulator's log, the
envelope itself.
"""

from __future__ import annotations

from typing import Any

from amends_core import wire
from amends_core.adapters import MemoryProcessing
from amends_core.ledger import Envelope
from amends_core.store.memory import MemoryStore
from tests import builders as b
from tests.contract.kinds import OnKafka, OnMemory, OnSim

TWO = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2)


def envelopes(partition: int = 0) -> list[Envelope]:
    """Five envelopes a partition's worker commits (balances of days 1 to 4 and a status)."""
    store = MemoryProcessing(MemoryStore(TWO))
    key = (b.K1, b.K2)[partition]
    objs = [b.txn(f"T{i}", valid=b.day(i + 1), key=key) for i in range(4)]
    res = store.process(store.claim(partition), 0, b.records(objs, partition=partition))
    return [r.envelope for r in res.rows]


def decoded(value: Any) -> Envelope:
    if isinstance(value, Envelope):
        return value
    env = wire.decode_envelope(value)
    assert not isinstance(env, wire.DecodeError), env
    return env


def read(out: Any, partition: int) -> list[tuple[int, Envelope]]:
    """Everything the partition retains, as a view reads it."""
    marks = out.source.watermarks(partition)
    return [(off, decoded(v)) for off, v in out.source.records(partition, marks.low, marks.high)]


class OutputLogContract:
    """The OutputLog and OutputSource rules, asked of ``make_output``'s logs."""

    def test_published_rows_are_delivered_in_order_and_read_back_unchanged(self, make_output):
        out = make_output(2)
        envs = envelopes()
        rows = [out.row(0, seq, e) for seq, e in enumerate(envs, start=1)]
        delivery = out.log.publish(0, rows)
        assert delivery.failures == []
        assert sorted(delivery.delivered) == [1, 2, 3, 4, 5]
        got = read(out, 0)
        assert [e for _, e in got] == envs
        # each receipt names the offset its row landed at, in sequence order
        assert [delivery.delivered[seq] for seq in range(1, 6)] == [off for off, _ in got]
        marks = out.source.watermarks(0)
        assert marks.high - marks.low == 5
        values = [v for _, v in out.source.records(0, marks.low, marks.high)]
        assert all(v in (e, e.to_bytes()) for v, e in zip(values, envs, strict=True))  # the stored bytes

    def test_a_row_published_again_lands_again_as_an_identical_record(self, make_output):
        out = make_output(2)
        envs = envelopes()[:2]
        rows = [out.row(0, seq, e) for seq, e in enumerate(envs, start=1)]
        first = out.log.publish(0, rows)
        again = out.log.publish(0, rows)  # a retry after a lost delivery report
        assert sorted(again.delivered) == [1, 2]
        assert min(again.delivered.values()) > max(first.delivered.values())
        assert [e for _, e in read(out, 0)] == envs + envs

    def test_records_gives_exactly_the_offsets_of_the_range_asked_for(self, make_output):
        out = make_output(2)
        envs = envelopes()
        delivery = out.log.publish(0, [out.row(0, seq, e) for seq, e in enumerate(envs, start=1)])
        at = [delivery.delivered[seq] for seq in range(1, 6)]
        middle = out.source.records(0, at[1], at[4])
        assert [(off, decoded(v)) for off, v in middle] == list(zip(at[1:4], envs[1:4], strict=True))
        assert out.source.records(0, at[2], at[2]) == []

    def test_each_partition_is_its_own_log(self, make_output):
        out = make_output(2)
        zero, one = envelopes(0), envelopes(1)
        out.log.publish(1, [out.row(1, seq, e) for seq, e in enumerate(one, start=1)])
        out.log.publish(0, [out.row(0, seq, e) for seq, e in enumerate(zero[:1], start=1)])
        assert [e for _, e in read(out, 0)] == zero[:1]
        assert [e for _, e in read(out, 1)] == one


class TestMemory(OnMemory, OutputLogContract):
    pass


class TestSim(OnSim, OutputLogContract):
    pass


class TestKafka(OnKafka, OutputLogContract):
    pass

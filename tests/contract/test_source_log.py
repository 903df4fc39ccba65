"""The SourceLog contract: one source partition read in bounded batches, every record once, in order.

Every test runs on each source log (``TestMemory``, ``TestSim``, ``TestKafka``: a
provisioned topic on the shared real broker, whose first offset holds the
namespace's marker message; ``TestSnapshotThenTopic``: the same topic after its
first records were captured into the source snapshot and deleted from it, read
as a worker reads it, the snapshot first). Nothing here assumes where the first record lies:
reads start at a frontier, as a worker's do, and the marker is never a record.
"""

from __future__ import annotations

from typing import Any

from tests import builders as b
from tests.contract.kinds import OnKafka, OnMemory, OnSim, OnSnapshot

KEY = b.K1.transport_key()


def messages(n: int, first: int = 0) -> list[tuple[bytes | None, bytes]]:
    """``n`` movements of equal size (ids of equal length)."""
    return [(KEY, b.value(b.txn(f"T{i:04d}", qty=-1, valid=b.day(2)))) for i in range(first, first + n)]


def read_all(log: Any, frontier: int, limit: int, max_bytes: int = 1 << 30) -> tuple[list[Any], list[int]]:
    """Read from ``frontier`` to the end in batches, as a worker does: every record, and each
    batch's size."""
    high = log.end(frontier)
    position = frontier
    out: list[Any] = []
    sizes: list[int] = []
    while position < high:
        recs, position = log.read(position, high, limit, max_bytes)
        assert recs, "a read came back empty before the end"
        out += recs
        sizes.append(len(recs))
    return out, sizes


class SourceLogContract:
    """The SourceLog rules, asked of ``make_source``'s logs."""

    def test_an_empty_source_ends_where_its_reading_starts(self, make_source):
        src = make_source()
        start = src.log.start(0)
        assert src.log.end(start) == start
        assert src.log.read(start, start, 10, 1 << 20) == ([], start)

    def test_every_record_is_read_once_in_offset_order_in_batches_of_at_most_the_limit(self, make_source):
        src = make_source()
        sent = messages(7)
        src.append(sent)
        recs, sizes = read_all(src.log, 0, limit=3)
        assert max(sizes) == 3 and len(sizes) == 3  # (a marker read in the first batch takes a place)
        assert [(r.key, r.value) for r in recs] == sent
        offsets = [r.coords.offset for r in recs]
        assert offsets == sorted(set(offsets)) and offsets[0] >= src.log.start(0)
        assert {(r.coords.source, r.coords.partition) for r in recs} == {(b.SOURCE, 0)}
        assert src.log.end(offsets[-1] + 1) == offsets[-1] + 1

    def test_a_read_cut_by_the_limit_ends_just_past_its_last_record(self, make_source):
        src = make_source()
        src.append(messages(5))
        start = src.log.start(0)
        high = src.log.end(start)
        recs, position = src.log.read(start, high, 2, 1 << 20)
        assert len(recs) == 2 and position == recs[-1].coords.offset + 1 < high
        rest, end = src.log.read(position, high, 10, 1 << 20)
        assert len(rest) == 3 and end == high
        assert [r.value for r in recs + rest] == [v for _, v in messages(5)]

    def test_a_read_ends_at_the_record_that_reaches_the_byte_budget(self, make_source):
        src = make_source()
        sent = messages(10)
        src.append(sent)
        size = len(sent[0][1]) + len(KEY)
        # the third record reaches the budget; the limit (1000) never does
        _, sizes = read_all(src.log, 0, limit=1000, max_bytes=3 * size - 1)
        assert sizes == [3, 3, 3, 1]

    def test_a_record_larger_than_the_byte_budget_is_read_alone(self, make_source):
        src = make_source()
        src.append(messages(3))
        recs, sizes = read_all(src.log, 0, limit=1000, max_bytes=1)
        assert sizes == [1, 1, 1]
        assert [r.value for r in recs] == [v for _, v in messages(3)]

    def test_the_end_moves_as_the_source_grows_and_reading_goes_on_from_the_frontier(self, make_source):
        src = make_source()
        src.append(messages(2))
        first, _ = read_all(src.log, 0, limit=10)
        frontier = first[-1].coords.offset + 1
        assert src.log.end(frontier) == frontier
        src.append(messages(3, first=2))
        assert src.log.end(frontier) > frontier
        later, _ = read_all(src.log, frontier, limit=10)
        assert [r.value for r in first + later] == [v for _, v in messages(5)]


class TestMemory(OnMemory, SourceLogContract):
    pass


class TestSim(OnSim, SourceLogContract):
    pass


class TestKafka(OnKafka, SourceLogContract):
    pass


class TestSnapshotThenTopic(OnSnapshot, SourceLogContract):
    pass

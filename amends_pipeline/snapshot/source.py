"""The source a worker reads: the topic, and below what the topic still retains, the snapshot.

``SnapshotThenTopic`` is the ``SourceLog`` of one source partition that a
worker gets from ``Runtime.worker``. It reads the topic exactly as
``KafkaSource`` does until the topic no longer holds an offset the worker
needs (retention deleted it: ``SourceLost``). Then it opens the source snapshot
as of its latest table version and, below that version's captured end E of
the partition, reads the table instead (``snapshot.read.PartitionRows``), with
the same records (coordinates, reserved flag, the recorded marker left out),
the same limits and the same positions as a read of the topic; a read that
reaches E goes on in the topic within the same limits. The snapshot is opened
only when it is needed, so a worker that keeps up with the topic never reads
it, and a rebuild into a new namespace after retention deleted the early
history reads that history from the table.

Resume contract: as ``KafkaSource``'s. Below E the snapshot counts as retaining
(``KafkaSource.held``: the topic is still confirmed as the provisioned
incarnation, but its low watermark may be anywhere below E); at and above E
the topic must retain the offset needed next, as always. Offsets neither holds
are SourceLost, never skipped: a range retention deleted before the snapshot
captured it (a ``RETAINED_GAP`` row), or offsets between E and the topic's low
watermark (a newer table version is opened first, in case it holds them).
``reset`` forgets the opened snapshot with the topic's confirmations.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from amends_core.ledger import Record
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.manifest import Manifest, SourceLost, check_range, check_source
from amends_pipeline.roles.worker import KafkaSource, read_on

if TYPE_CHECKING:
    from amends_pipeline.snapshot.read import PartitionRows


class SnapshotThenTopic:
    """One source partition: the snapshot below its captured end, the topic beyond (``SourceLog``)."""

    def __init__(self, topic: KafkaSource, open_rows: Callable[[], PartitionRows]) -> None:
        """``open_rows``: the partition's rows in the snapshot's latest version; NoSnapshot when
        none was taken, SnapshotError when it cannot be read."""
        self.topic = topic
        self.partition = topic.partition
        self._open = open_rows
        self.rows: PartitionRows | None = None
        """The snapshot opened when the topic stopped holding an offset needed; None before."""

    def reset(self) -> None:
        self.topic.reset()
        self.rows = None
        self.topic.held = 0

    def start(self, frontier: int) -> int:
        return self.topic.start(frontier)

    def end(self, frontier: int) -> int:
        need = self.start(frontier)
        if self.rows is None or need >= self.rows.end:
            try:
                return self.topic.end(frontier)
            except SourceLost as e:
                self._take_snapshot(need, e)
        assert self.rows is not None
        self.rows.check(need)
        return self.topic.end(frontier)  # the incarnation, and the end; held below the captured end

    def read(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        return read_on(self._read_once, frontier, high, limit, max_bytes)

    def _read_once(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        need = self.start(frontier)
        if self.rows is None or need >= self.rows.end:
            try:
                return self.topic.read_once(frontier, high, limit, max_bytes)
            except SourceLost as e:  # retention overtook the read
                self._take_snapshot(need, e)
        rows = self.rows
        assert rows is not None
        rows.check(need)
        part = rows.read(frontier, high, limit, max_bytes)
        if part.cut or part.position >= high or part.position < rows.end:
            return part.records, part.position  # cut, at the end, or at a range retention deleted
        try:  # the same read goes on in the topic from the captured end
            more, position = self.topic.read_once(
                part.position, high, limit - part.messages, max_bytes - part.size
            )
        except SourceLost:
            if not part.records:
                raise
            return part.records, part.position  # what the snapshot holds; the next read says the rest
        return part.records + more, position

    def _take_snapshot(self, need: int, lost: SourceLost) -> None:
        """Open the snapshot for ``need``, which the topic no longer holds (``lost``)."""
        self.rows = holding(self._open, self.partition, need, lost)
        self.topic.held = self.rows.end


def holding(
    open_rows: Callable[[], PartitionRows], partition: int, need: int, lost: SourceLost
) -> PartitionRows:
    """The snapshot's rows of ``partition`` when they hold ``need``, which the topic no longer
    holds (``lost``); otherwise SourceLost: ``lost`` with why the snapshot does not hold it either."""
    from amends_pipeline.snapshot.table import NoSnapshot, SnapshotError  # deltalake: only when needed

    try:
        rows = open_rows()
    except NoSnapshot as e:
        msg = f"{lost}; and no source snapshot holds it: {e}"
        raise SourceLost(msg) from e
    except SnapshotError as e:
        msg = f"{lost}; the source snapshot cannot be read: {e}"
        raise SourceLost(msg) from e
    if need >= rows.end:
        msg = f"{lost}; {rows.describe()} holds partition {partition} below offset {rows.end} only"
        raise SourceLost(msg) from lost
    rows.check(need)
    return rows


def check_whole_source(
    reader: Reader, m: Manifest, open_rows: Callable[[int], PartitionRows]
) -> list[str]:
    """Confirm that every offset of every partition from the first is held: by the topic, or
    below its captured end by the source snapshot (``open_rows(p)``), and the topic beyond it.

    SourceLost naming the first offsets neither holds. Returns one line per partition
    whose early history comes from the snapshot.
    """
    wms = check_source(reader, m)  # the incarnation
    lines = []
    for p, wm in wms.items():
        try:
            check_range(m, p, wm, 0)
            continue
        except SourceLost as e:
            first = m.needed(p, 0)
            rows = holding(partial(open_rows, p), p, first, e)
        if rows.lost:  # a range retention deleted before any capture: all of it is needed
            rows.check(max(rows.lost[0][0], first))
        check_range(m, p, wm, rows.end, rows.end)  # and the topic from the captured end on
        lines.append(f"partition {p}: offsets below {rows.end} from {rows.describe()}, then the topic")
    return lines


__all__ = ["SnapshotThenTopic", "check_whole_source", "holding"]

"""Reading a snapshot: the oracle's ``Columns`` and a worker's ``Record`` batches.

The table keeps messages raw; reading them applies exactly what the topic's
readers apply (``kafka.topics.to_record`` for the worker,
``ops.verify.read_partition`` for the oracle): the recorded marker of the
namespace is left out, any other message carrying the marker header (or headers
the client could not read) is flagged ``reserved``, and a message without a
value reads as empty bytes. Gap rows hold no record and are passed over, except
that offsets retention deleted before any capture (``capture.RETAINED_GAP``)
are never passed over by a worker: they are SourceLost.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl

from amends_core.ledger import Coordinates, Record
from amends_core.oracle import Columns
from amends_pipeline.kafka.topics import MARKER_HEADER, Marker
from amends_pipeline.manifest import Manifest, SourceLost
from amends_pipeline.snapshot.capture import RETAINED_GAP
from amends_pipeline.snapshot.table import SnapshotTable


def reserved() -> pl.Expr:
    """Whether a row's message counts as carrying the reserved marker header (``reserved_flag``):
    headers the client could not read, or a header of that name."""
    return (
        pl.col("headers_unreadable")
        | pl.col("headers")
        .list.eval(pl.element().struct.field("name") == MARKER_HEADER)
        .list.any()
        .fill_null(False)
    ).alias("reserved")


def message_rows(table: SnapshotTable, version: int, partition: int) -> pl.LazyFrame:
    """(offset, key, value, reserved) of one partition's messages in table version ``version``
    (gap rows left out; a message without a value has a null one)."""
    return (
        table.scan(version)
        .filter((pl.col("partition") == partition) & pl.col("gap_end").is_null())
        .select("offset", "key", "value", reserved())
    )


def is_recorded_marker(
    offset: int, value: bytes | None, flag: bool, marker: tuple[int, Marker] | None
) -> bool:
    """Whether a message is the namespace's recorded marker, which readers leave out
    (``reserved_flag`` gives None for it): the recorded offset, the header and the content."""
    return marker is not None and flag and offset == marker[0] and Marker.parse(value) == marker[1]


def snapshot_columns(
    table: SnapshotTable, version: int, partition: int, end: int, marker: tuple[int, Marker] | None,
    start: int = 0,
) -> Columns:
    """The records of one partition in [start, end) held by table version ``version``."""
    df = (
        message_rows(table, version, partition)
        .filter(pl.col("offset").is_between(start, end, "left"))
        .with_columns(pl.col("value").fill_null(b""))
        .sort("offset")
        .collect(engine="streaming")
    )
    if marker is not None:
        hit = df.filter(pl.col("offset") == marker[0])
        if hit.height and is_recorded_marker(marker[0], hit["value"][0], hit["reserved"][0], marker):
            df = df.filter(pl.col("offset") != marker[0])
    return Columns(
        df["offset"].cast(pl.Int64), df["key"], df["value"], df["reserved"].cast(pl.Boolean)
    )


FIRST_WINDOW = 256
"""Offsets a worker's reader of the table decodes in its first window (record sizes unknown yet)."""
MAX_WINDOW = 100_000
"""The most offsets decoded in one window (``capture.CHUNK``: about one data file of a partition)."""
WINDOW_BYTES = 64 * 1024 * 1024
"""About how many key and value bytes one window holds: later windows are sized by the last one's."""


@dataclass(frozen=True, slots=True)
class Part:
    """One bounded read of a partition's rows (``PartitionRows.read``)."""

    records: list[Record]
    messages: int
    """Messages read, the recorded marker among them (it takes a place in the limit, as in the topic)."""
    size: int
    """Their key and value bytes."""
    position: int
    """Exclusive: every record below it has been returned."""
    cut: bool
    """The read ended at the limit or at the message that reached the byte budget."""


class PartitionRows:
    """One source partition of a snapshot table version, read in bounded batches as a worker reads
    the topic (``Reader.read`` and ``to_records``: the same records, limits and positions).

    Offsets below ``end`` are all accounted for by the table. Rows are decoded in windows of
    consecutive offsets kept between reads, since a worker reads on from where it stopped.
    """

    def __init__(self, table: SnapshotTable, version: int, m: Manifest, partition: int, end: int) -> None:
        self.uri = table.uri
        self.version = version
        self.partition = partition
        self.end = end
        """The partition's captured end in ``version``."""
        self.topic = m.source_topic
        self.source = m.source_incarnation
        self.marker = m.marker_at(partition)
        self.lost = [
            (a, b) for a, b, why in table.gaps(partition, version)
            if why == RETAINED_GAP and m.needed(partition, a) < b
        ]
        """[start, end) of each range retention deleted before a capture (a range holding only
        the recorded marker is not a loss)."""
        self._scan = message_rows(table, version, partition)
        self._rows = pl.DataFrame()
        self._from = self._to = 0
        self._span = FIRST_WINDOW

    def describe(self) -> str:
        return f"the source snapshot {self.uri} version {self.version}"

    def check(self, need: int) -> None:
        """SourceLost when ``need`` lies in a range retention deleted before any capture."""
        for a, b in self.lost:
            if a <= need < b:
                msg = (
                    f"{self.topic}[{self.partition}] offsets {a}..{b - 1} were deleted by retention"
                    f" before {self.describe()} captured them, but offset {need} is still needed:"
                    " the source prefix was lost (never skipped)"
                )
                raise SourceLost(msg)

    def read(self, frontier: int, stop: int, limit: int, max_bytes: int) -> Part:
        """The records of [frontier, stop) up to ``limit`` messages, cut after the message that
        reaches ``max_bytes``; never past ``end`` nor into a range retention deleted."""
        stop = min([stop, self.end, *(a for a, _ in self.lost if a > frontier)])
        records: list[Record] = []
        n = size = 0
        for off, key, value, flag in self._rows_from(frontier, stop):
            n += 1
            size += len(key or b"") + len(value or b"")
            if not is_recorded_marker(off, value, flag, self.marker):
                records.append(Record(value or b"", key, Coordinates(self.source, self.partition, off), flag))
            if n >= limit or size >= max_bytes:
                return Part(records, n, size, off + 1, True)
        return Part(records, n, size, max(frontier, stop), False)

    def _rows_from(self, at: int, stop: int) -> Iterator[tuple[Any, ...]]:
        """(offset, key, value, reserved) of the messages of [at, stop), in offset order."""
        while at < stop:
            if not self._from <= at < self._to:
                self._window(at)
            upto = min(stop, self._to)
            offsets = self._rows["offset"]
            i, j = offsets.search_sorted(at), offsets.search_sorted(upto)
            yield from self._rows.slice(i, j - i).iter_rows()
            at = upto

    def _window(self, at: int) -> None:
        """Decode the messages of [at, at + span); the next span follows this window's sizes."""
        to = min(self.end, at + self._span)
        rows = self._scan.filter(pl.col("offset").is_between(at, to, "left")).sort("offset").collect()
        self._rows, self._from, self._to = rows, at, to
        if rows.height == 0:  # only gaps: nothing to size the next window by
            self._span = min(MAX_WINDOW, 2 * self._span)
            return
        size = sum(int(rows[c].bin.size().sum() or 0) for c in ("key", "value"))
        self._span = max(FIRST_WINDOW, min(MAX_WINDOW, WINDOW_BYTES * rows.height // max(1, size)))

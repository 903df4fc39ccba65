"""Capture: append what a source partition holds past the snapshot's captured end, exactly once.

``capture`` reads the partition's captured end E from the table, the topic's
watermarks, and the messages of [max(E, low), high), and commits them in
chunks (each chunk's rows and the new end in one Delta commit, see
``table.SnapshotTable.append``). Offsets without a message become gap rows:
below the low watermark (retention deleted them before any capture: a named
loss) and between messages (transaction control records, aborted or
compacted records: no record was ever there to lose).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from amends_pipeline.kafka.topics import UNREADABLE, OffsetLost, Reader, read_headers
from amends_pipeline.snapshot.table import SCHEMA, Concurrent, SnapshotTable, captured

CHUNK = 100_000
"""Messages per Delta commit: bounds the appender's memory and makes a commit's files large."""

RETAINED_GAP = "retention deleted these offsets from the topic before the snapshot captured them"
EMPTY_GAP = "no message at these offsets (transaction control records, aborted or compacted records)"


@dataclass(frozen=True, slots=True)
class Appended:
    """What one partition's capture committed."""

    partition: int
    start: int
    """The captured end before the capture."""
    end: int
    """The captured end after it (the topic's end when it ran)."""
    records: int
    gaps: list[tuple[int, int, str]] = field(default_factory=list)


def capture(
    table: SnapshotTable, reader: Reader, partitions: Sequence[int], *, chunk: int = CHUNK
) -> list[Appended]:
    """Append every partition of ``partitions`` up to the topic's current end."""
    return [capture_partition(table, reader, p, chunk=chunk) for p in partitions]


def capture_partition(
    table: SnapshotTable, reader: Reader, partition: int, *, chunk: int = CHUNK
) -> Appended:
    """Append one partition up to the topic's end; a concurrent appender's work is taken over.

    A chunk another appender committed first (``Concurrent``) is not an error: the
    captured end is read again and the capture goes on from there, so two appenders
    of one partition together capture each offset once.
    """
    first: int | None = None
    records = 0
    gaps: list[tuple[int, int, str]] = []
    while True:
        base = table.table()
        start = captured(base, partition)
        if first is None:
            first = start
        wm = reader.watermarks(partition)
        if start >= wm.high:
            return Appended(partition, first, start, records, gaps)
        try:
            rows, stop, new_gaps, n = _chunk(reader, partition, start, wm.low, wm.high, chunk)
        except OffsetLost:
            continue  # retention moved the low watermark while reading: start again, a gap now
        try:
            table.append(partition, start, stop, rows, base=base)
        except Concurrent:
            continue
        records += n
        gaps += new_gaps


def _chunk(
    reader: Reader, partition: int, start: int, low: int, high: int, limit: int
) -> tuple[pa.Table, int, list[tuple[int, int, str]], int]:
    """The rows of the next chunk from ``start``, where it stops, its gaps and its record count."""
    cols: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    gaps: list[tuple[int, int, str]] = []

    def gap(a: int, b: int, why: str) -> None:
        gaps.append((a, b, why))
        for name, v in (("partition", partition), ("offset", a), ("key", None), ("value", None),
                        ("headers", None), ("headers_unreadable", False), ("timestamp_ms", None),
                        ("timestamp_type", None), ("gap_end", b), ("gap_reason", why)):
            cols[name].append(v)

    at = start
    if at < low:
        gap(at, low, RETAINED_GAP)
        at = low
    n = 0
    for run in reader.scan(partition, at, high, limit=limit):
        for m in run:
            off = m.offset()
            if off > at:
                gap(at, off, EMPTY_GAP)
            headers = read_headers(m)
            kind, ts = m.timestamp()
            cols["partition"].append(partition)
            cols["offset"].append(off)
            cols["key"].append(m.key())
            cols["value"].append(m.value())
            cols["headers"].append(
                None if headers is None or headers is UNREADABLE
                else [{"name": k, "value": v} for k, v in headers]
            )
            cols["headers_unreadable"].append(headers is UNREADABLE)
            cols["timestamp_ms"].append(ts if kind else None)
            cols["timestamp_type"].append(kind)
            cols["gap_end"].append(None)
            cols["gap_reason"].append(None)
            at = off + 1
            n += 1
    stop = at if n >= limit else high
    if n < limit and at < high:
        gap(at, high, EMPTY_GAP)
    return pa.Table.from_pydict(cols, schema=SCHEMA), stop, gaps, n

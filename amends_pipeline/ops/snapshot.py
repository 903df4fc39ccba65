"""Taking and reading source snapshots for a namespace (the command, the asset and verification).

The table is bound to the namespace's source topic by the topic ID recorded at
provisioning (``table.identity_of``), so a recreated topic is refused instead of
being mixed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from amends_pipeline.kafka.topics import Reader
from amends_pipeline.manifest import Manifest, check_source
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot.capture import CHUNK, Appended, capture
from amends_pipeline.snapshot.table import NoSnapshot, SnapshotError, SnapshotTable, location, namespace_table


def _manifest(rt: Runtime) -> Manifest:
    with rt.store("amends-snapshot", read_only=True) as store:
        return rt.manifest(store)


@dataclass(frozen=True, slots=True)
class Lag:
    """How far the snapshot is behind the topic right after a capture."""

    records: int
    """Offsets between the captured end and the topic's end."""
    oldest_ms: int | None
    """Timestamp of the oldest message not captured yet (None: nothing is behind)."""


@dataclass(frozen=True, slots=True)
class Taken:
    table: SnapshotTable
    appended: list[Appended]
    version: int
    lag: dict[int, Lag]

    @property
    def uri(self) -> str:
        return self.table.uri


def take(rt: Runtime, partitions: Sequence[int] | None = None, *, chunk: int | None = None) -> Taken:
    """Append every partition (or ``partitions``) of the namespace's source up to the topic's end."""
    m = _manifest(rt)
    parts = list(range(m.partitions)) if partitions is None else list(partitions)
    table = namespace_table(rt.snapshot_uri, m)
    with rt.reader(m.source_topic) as reader:
        check_source(reader, m)
        appended = capture(table, reader, parts, chunk=chunk or CHUNK)
        lag = {a.partition: _lag(reader, a.partition, a.end) for a in appended}
    return Taken(table, appended, table.version(), lag)


def _lag(reader: Reader, partition: int, end: int) -> Lag:
    high = reader.watermarks(partition).high
    if high <= end:
        return Lag(0, None)
    first = next(iter(reader.scan(partition, end, high, limit=1)), [])
    return Lag(high - end, first[0].timestamp()[1] if first else None)


@dataclass(frozen=True, slots=True)
class Pinned:
    """A snapshot table read as of one version: what verification and the oracle read first."""

    table: SnapshotTable
    version: int
    ends: dict[int, int]
    """Captured end of each partition in that version."""
    table_id: str = ""
    """The Delta table's ID (``SnapshotTable.pinned``), which a recorded coverage must name."""

    def describe(self) -> str:
        return f"snapshot {self.table.uri} version {self.version}, then the topic"


def pin(rt: Runtime, m: Manifest, version: int | None = None) -> Pinned | None:
    """The namespace's snapshot as of ``version`` (None: the latest); None when there is no table.

    Raises SnapshotError when the table cannot be read or holds another topic.
    """
    try:
        table = namespace_table(rt.snapshot_uri, m, create=False)
    except NoSnapshot:
        return None
    v, table_id, ends = table.pinned(range(m.partitions), version)
    return Pinned(table, v, ends, table_id)


def table_stats(taken: Taken, partition: int) -> tuple[int, int]:
    """(rows, bytes) of one partition in the table ``take`` left (read from its log)."""
    return taken.table.stats(partition, taken.version)


def existing_table(rt: Runtime) -> SnapshotTable:
    """The namespace's snapshot table; NoSnapshot when none was taken yet."""
    return namespace_table(rt.snapshot_uri, _manifest(rt), create=False)


def status_lines(rt: Runtime) -> list[str]:
    """What ``amends view`` shows of the snapshot: per partition, its captured end and lag."""
    m = _manifest(rt)
    try:
        pinned = pin(rt, m)
    except SnapshotError as e:
        return [f"source snapshot: cannot be read: {e}"]
    if pinned is None:
        where = location(rt.snapshot_uri, m.source_topic)
        return [f"source snapshot: none yet at {where} (`amends snapshot` or the source_snapshot asset)"]
    lines = [f"source snapshot: {pinned.table.uri} version {pinned.version}"]
    with rt.reader(m.source_topic) as reader:
        for p in range(m.partitions):
            lag = _lag(reader, p, pinned.ends[p])
            age = "" if lag.oldest_ms is None else f", oldest not captured from {_utc(lag.oldest_ms)}"
            lines.append(f"  partition {p}: captured to offset {pinned.ends[p]}, {lag.records} behind{age}")
    return lines


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

"""The worker role in production: the core worker step over PostgreSQL and Kafka.

The logic and its resume contract are ``amends_core.roles.worker``; this
module is the Kafka side of it (``KafkaSource``: incarnation, retention and
the recorded marker of one source partition, read through a ``Reader``) and
``WorkerPartition``, the core ``Worker`` wired to a ``PgStore``. Kafka
consumer offsets are never committed or trusted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from amends_core.ledger import Record
from amends_core.ports import SourceLog
from amends_core.roles.worker import BATCH_BYTES, CLAIM_ATTEMPTS, StepResult, Worker
from amends_pipeline.kafka.topics import OffsetLost, Reader, to_records
from amends_pipeline.manifest import Manifest, SourceLost, check_range, check_source
from amends_pipeline.postgres.store import PgStore

AHEAD = 4
"""Batches a worker step runs back to back when the source holds that much, each folded
while the one before it commits (``Worker.ahead``): the commit's wait on PostgreSQL (its
COPYs, upserts and COMMIT, about a tenth of a large batch's time) overlaps the next fold.
A step still returns only when all of them are settled."""


class KafkaSource:
    """One source partition of the provisioned source topic (the ``SourceLog`` port)."""

    def __init__(
        self, reader: Reader, manifest: Manifest, partition: int, *, recheck_seconds: float = 5.0
    ) -> None:
        self.reader = reader
        self.manifest = manifest
        self.partition = partition
        self.recheck_seconds = recheck_seconds
        self._checked_at = float("-inf")
        self.held = 0
        """Offsets below this are held by a source snapshot: the topic need not retain them
        (``check_range``). Set by ``snapshot.source.SnapshotThenTopic``, which reads them."""

    def reset(self) -> None:
        self._checked_at = float("-inf")

    def start(self, frontier: int) -> int:
        """The frontier with the marker offset stepped over (markers are never applied)."""
        return self.manifest.needed(self.partition, frontier)

    def end(self, frontier: int) -> int:
        """High watermark; the incarnation itself is re-confirmed at most every ``recheck_seconds``."""
        p = self.partition
        now = time.monotonic()
        if now - self._checked_at >= self.recheck_seconds:
            wm = check_source(self.reader, self.manifest, {p: frontier}, {p: self.held})[p]
            self._checked_at = now
        else:
            wm = self.reader.watermarks(p)
            check_range(self.manifest, p, wm, frontier, self.held)
        return wm.high

    def read(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        """Records of [frontier, high) and the position reached.

        At most ``limit`` messages, cut after the one that reaches ``max_bytes``.
        """
        return read_on(self.read_once, frontier, high, limit, max_bytes)

    def read_once(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        """One bounded read of [frontier, high): ``read`` without reading on past a lone marker."""
        p = self.partition
        try:
            msgs, position = self.reader.read(p, frontier, high, limit, max_bytes)
        except OffsetLost:
            # Retention overtook the read: report it as the check would, never skip.
            self.reset()
            check_range(self.manifest, p, self.reader.watermarks(p), frontier, self.held)
            raise
        return to_records(self.manifest.source_incarnation, p, msgs, self.manifest.marker_at(p)), position


def read_on(
    read_once: Callable[[int, int, int, int], tuple[list[Record], int]],
    frontier: int, high: int, limit: int, max_bytes: int,
) -> tuple[list[Record], int]:
    """``read_once(position, high, limit, max_bytes)`` from ``frontier`` until a read gives records
    or reaches ``high``: a read that met only the recorded marker reads on (``SourceLog.read``)."""
    records: list[Record] = []
    position = frontier
    while not records and position < high:
        records, position = read_once(position, high, limit, max_bytes)
    return records, position


class WorkerPartition(Worker):
    """The core worker over a ``PgStore`` and one partition of the source topic."""

    def __init__(
        self,
        store: PgStore,
        reader: Reader,
        manifest: Manifest,
        partition: int,
        *,
        batch_size: int = 1000,
        batch_bytes: int = BATCH_BYTES,
        recheck_seconds: float = 5.0,
        ahead: int = AHEAD,
        source: SourceLog | None = None,
    ) -> None:
        """``source``: the partition's SourceLog (default: the topic alone, ``KafkaSource``);
        ``Runtime.worker`` gives the topic with the source snapshot below it."""
        if source is None:
            source = KafkaSource(reader, manifest, partition, recheck_seconds=recheck_seconds)
        super().__init__(
            store, source, partition, batch_size=batch_size, batch_bytes=batch_bytes,
            clock=time.perf_counter, ahead=ahead,
        )
        self.reader = reader
        self.manifest = manifest


__all__ = [
    "AHEAD", "BATCH_BYTES", "CLAIM_ATTEMPTS", "KafkaSource", "SourceLost", "StepResult", "WorkerPartition",
]

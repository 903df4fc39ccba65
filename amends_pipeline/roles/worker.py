"""The worker role in production: the core worker step over PostgreSQL and Kafka.

The logic and its resume contract are ``amends_core.roles.worker``; this
module is the Kafka side of it (``KafkaSource``: incarnation, retention and
the recorded marker of one source partition, read through a ``Reader``) and
``WorkerPartition``, the core ``Worker`` wired to a ``PgStore``. Kafka
consumer offsets are never committed or trusted.
"""

from __future__ import annotations

import time

from amends_core.ledger import Record
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
            wm = check_source(self.reader, self.manifest, {p: frontier})[p]
            self._checked_at = now
        else:
            wm = self.reader.watermarks(p)
            check_range(self.manifest, p, wm, frontier)
        return wm.high

    def read(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        """Records of [frontier, high) and the position reached.

        At most ``limit`` messages, cut after the one that reaches ``max_bytes``.
        """
        p = self.partition
        source = self.manifest.source_incarnation
        marker = self.manifest.marker_at(p)
        records: list[Record] = []
        position = frontier
        while not records and position < high:  # only the marker read: read on
            try:
                msgs, position = self.reader.read(p, position, high, limit, max_bytes)
            except OffsetLost:
                # Retention overtook the read: report it as the check would, never skip.
                self.reset()
                check_range(self.manifest, p, self.reader.watermarks(p), position)
                raise
            records += to_records(source, p, msgs, marker)
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
    ) -> None:
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

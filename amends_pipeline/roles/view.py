"""The view role: output topic -> version-aware view rows in PostgreSQL.

Resume contract: the view frontier per output partition (exclusive) is the
only progress; it is committed with the rows it covers. Reading restarts at
the frontier, so a crash between reading and committing re-applies the same
records, which the version rule turns into duplicates. A stopped partition
(protocol diagnostic) stays stopped until an operator intervenes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from amends_core.errors import OperationError
from amends_core.view import Effect
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.postgres.errors import CommitUnknown
from amends_pipeline.postgres.view_store import PgViewStore


class ViewStopped(OperationError):
    """The output partition is stopped by a protocol diagnostic."""


class OutputLost(OperationError):
    """Output records the view still needs are no longer retained."""


@dataclass(frozen=True, slots=True)
class ViewResult:
    partition: int
    frontier_before: int
    frontier: int
    output_end: int
    applied: int
    stored: int
    seconds: float


class ViewPartition:
    def __init__(self, store: PgViewStore, reader: Reader, partition: int, *, batch_size: int = 5000) -> None:
        self.store = store
        self.reader = reader
        self.partition = partition
        self.batch_size = batch_size

    def step(self) -> ViewResult:
        t0 = time.perf_counter()
        p = self.partition
        frontier, stopped = self.store.progress(p)
        if stopped is not None:
            msg = f"output partition {p} is stopped: {stopped}"
            raise ViewStopped(msg)
        wm = self.reader.watermarks(p)
        if wm.low > frontier:
            msg = f"output partition {p} retains offsets from {wm.low}; offset {frontier} was lost"
            raise OutputLost(msg)
        end = min(wm.high, frontier + self.batch_size)
        if end <= frontier:
            return ViewResult(p, frontier, frontier, wm.high, 0, 0, time.perf_counter() - t0)
        recs = [(m.offset(), m.value() or b"") for m in self.reader.messages(p, frontier, end)]
        try:
            decisions = self.store.apply(p, recs)
        except CommitUnknown:
            decisions = []
        after, stopped = self.store.progress(p)
        if stopped is not None:
            msg = f"output partition {p} stopped: {stopped}"
            raise ViewStopped(msg)
        stored = sum(1 for d in decisions if d.effect is Effect.STORED)
        return ViewResult(p, frontier, after, wm.high, len(recs), stored, time.perf_counter() - t0)

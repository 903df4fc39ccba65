"""The view role: output topic -> version-aware view rows in PostgreSQL.

Resume contract: the view frontier per output partition (exclusive) is the
only progress; it is committed with the rows it covers. Reading restarts at
the frontier, so a crash between reading and committing re-applies the same
records, which the version rule turns into duplicates. A batch reads the
range [frontier, end) and, once committed, the frontier is ``end`` even when
compaction left no record at its last offsets. A stopped partition (protocol
diagnostic) stays stopped until an operator intervenes.

Rebuild (``rebuild_view``, ``amends view --rebuild``): the output topic is
log-compacted and keyed by output ID, so it keeps the latest envelope of every
output ID, withdrawals included. Moving the frontier back to the start of the
retained log and re-applying is safe because the version rule only ever moves
a row to a higher version; it is how a view that lost its place (``OutputLost``)
or was discarded catches up without the source.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from amends_core.errors import OperationError
from amends_core.view import Effect
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.postgres.errors import CommitUnknown
from amends_pipeline.postgres.view_store import PgViewStore, ViewRebuilt


class ViewStopped(OperationError):
    """The output partition is stopped by a protocol diagnostic."""


class OutputLost(OperationError):
    """Output records the view still needs are no longer retained."""


class RebuildRefused(OperationError):
    """A rebuild would lose information (rows discarded while the log misses its start)."""


REBUILD_HINT = (
    "recover with `amends view --config CONFIG --rebuild --partition {p}` (re-applies the"
    " retained output log from its start; see docs/operations.md), then `amends verify`"
)


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
        """Apply at most one batch; a range compaction emptied entirely is stepped over.

        ``applied`` is 0 only when the view is at the end of the output log.
        """
        t0 = time.perf_counter()
        p = self.partition
        first: int | None = None
        while True:
            frontier, stopped = self.store.progress(p)
            if stopped is not None:
                msg = f"output partition {p} is stopped: {stopped}"
                raise ViewStopped(msg)
            first = frontier if first is None else first
            wm = self.reader.watermarks(p)
            if wm.low > frontier:
                msg = (
                    f"output partition {p} retains offsets from {wm.low}; offset {frontier} was"
                    f" lost before this view applied it; {REBUILD_HINT.format(p=p)}"
                )
                raise OutputLost(msg)
            end = min(wm.high, frontier + self.batch_size)
            if end <= frontier:
                return ViewResult(p, first, frontier, wm.high, 0, 0, time.perf_counter() - t0)
            recs = [(m.offset(), m.value() or b"") for m in self.reader.messages(p, frontier, end)]
            try:
                decisions = self.store.apply(p, recs, start=frontier, end=end)
            except CommitUnknown as e:
                # The batch may or may not have landed: end the abandoned session (it
                # holds the progress lock) and go on from the frontier as installed.
                self.store.resolve_unknown(e)
                decisions = []
            if recs or end >= wm.high:
                break
        after, stopped = self.store.progress(p)
        if stopped is not None:
            msg = f"output partition {p} stopped: {stopped}"
            raise ViewStopped(msg)
        stored = sum(1 for d in decisions if d.effect is Effect.STORED)
        return ViewResult(p, first, after, wm.high, len(recs), stored, time.perf_counter() - t0)


@dataclass(frozen=True, slots=True)
class ViewRebuild:
    """One output partition reset by ``rebuild_view``."""

    reset: ViewRebuilt
    log_end: int
    """High watermark when the reset was made."""

    @property
    def log_start(self) -> int:
        return self.reset.frontier


def rebuild_view(
    store: PgViewStore, reader: Reader, partitions: Sequence[int], *, discard_rows: bool = False
) -> list[ViewRebuild]:
    """Reset the frontier of each partition to the start of its retained output log.

    Nothing is applied here: the view role (or a drain) re-applies from there.
    With ``discard_rows`` the partitions' rows go too, which is refused for a
    partition whose log no longer starts at offset 0, because rows whose
    latest envelope lay in the missing prefix could not come back. Every
    partition is checked before any is reset.
    """
    marks = {p: reader.watermarks(p) for p in partitions}
    if discard_rows:
        cut = {p: wm.low for p, wm in marks.items() if wm.low > 0}
        if cut:
            where = ", ".join(f"partition {p} from offset {low}" for p, low in sorted(cut.items()))
            msg = (
                f"the output log no longer starts at offset 0 ({where}): discarding the view's"
                " rows would lose every output whose latest envelope lay before that;"
                " rebuild without --discard-rows (rows are kept and only move forward)"
            )
            raise RebuildRefused(msg)
    return [
        ViewRebuild(store.rebuild(p, wm.low, discard_rows=discard_rows), wm.high)
        for p, wm in marks.items()
    ]

"""The view step: output log -> version-aware view rows.

Resume contract: the view frontier per output partition (exclusive) is the
only progress; it is committed with the rows it covers. Reading restarts at
the frontier, so a crash between reading and committing re-applies the same
records, which the version rule turns into duplicates. A batch reads the
range [frontier, end) and, once committed, the frontier is ``end`` even when
compaction left no record at its last offsets. A lost apply reply is settled
through the store, and the step goes on from the frontier as installed. A
stopped partition (protocol diagnostic) stays stopped until an operator
intervenes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from amends_core.errors import CommitUnknown, OperationError
from amends_core.ports import OutputSource, ViewStore
from amends_core.roles.worker import no_clock
from amends_core.view import Effect


class ViewStopped(OperationError):
    """The output partition is stopped by a protocol diagnostic."""


class OutputLost(OperationError):
    """Output records the view still needs are no longer retained."""


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


class View:
    def __init__(
        self,
        store: ViewStore,
        log: OutputSource,
        partition: int,
        *,
        batch_size: int = 5000,
        clock: Callable[[], float] = no_clock,
    ) -> None:
        self.store = store
        self.log = log
        self.partition = partition
        self.batch_size = batch_size
        self.clock = clock

    def step(self) -> ViewResult:
        """Apply at most one batch; a range compaction emptied entirely is stepped over.

        ``applied`` is 0 only when the view is at the end of the output log.
        """
        t0 = self.clock()
        p = self.partition
        first: int | None = None
        decisions: Sequence[Any] = []
        while True:
            frontier, stopped = self.store.progress(p)
            if stopped is not None:
                msg = f"output partition {p} is stopped: {stopped}"
                raise ViewStopped(msg)
            first = frontier if first is None else first
            wm = self.log.watermarks(p)
            if wm.low > frontier:
                msg = (
                    f"output partition {p} retains offsets from {wm.low}; offset {frontier} was"
                    f" lost before this view applied it; {REBUILD_HINT.format(p=p)}"
                )
                raise OutputLost(msg)
            end = min(wm.high, frontier + self.batch_size)
            if end <= frontier:
                return ViewResult(p, first, frontier, wm.high, 0, 0, self.clock() - t0)
            recs = self.log.records(p, frontier, end)
            try:
                decisions = self.store.apply(p, recs, start=frontier, end=end)
            except CommitUnknown as e:
                # The batch may or may not have landed: settle it (the abandoned session
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
        return ViewResult(p, first, after, wm.high, len(recs), stored, self.clock() - t0)


__all__ = ["REBUILD_HINT", "OutputLost", "View", "ViewResult", "ViewStopped"]

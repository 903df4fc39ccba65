"""The view role in production: the core view step over PostgreSQL and the output topic.

The logic and its resume contract are ``amends_core.roles.view``; here the
output topic is read as an ``OutputSource`` and rows are kept by a
``PgViewStore``.

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
from typing import Any

from amends_core.errors import OperationError
from amends_core.roles.view import REBUILD_HINT, OutputLost, View, ViewResult, ViewStopped
from amends_pipeline.kafka.topics import Reader, Watermarks
from amends_pipeline.postgres.view_store import PgViewStore, ViewRebuilt


class RebuildRefused(OperationError):
    """A rebuild would lose information (rows discarded while the log misses its start)."""


class KafkaOutputSource:
    """The output topic as a view reads it (the ``OutputSource`` port)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader

    def watermarks(self, partition: int) -> Watermarks:
        return self.reader.watermarks(partition)

    def records(self, partition: int, start: int, end: int) -> list[tuple[int, Any]]:
        return [
            (m.offset(), m.value() or b"") for run in self.reader.scan(partition, start, end) for m in run
        ]


class ViewPartition(View):
    """The core view over a ``PgViewStore`` and one partition of the output topic."""

    def __init__(self, store: PgViewStore, reader: Reader, partition: int, *, batch_size: int = 5000) -> None:
        super().__init__(
            store, KafkaOutputSource(reader), partition, batch_size=batch_size, clock=time.perf_counter
        )
        self.reader = reader


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


__all__ = [
    "REBUILD_HINT", "KafkaOutputSource", "OutputLost", "RebuildRefused", "ViewPartition",
    "ViewRebuild", "ViewResult", "ViewStopped", "rebuild_view",
]

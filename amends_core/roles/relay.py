"""The relay step: ordered outbox rows -> the output log, bytes unchanged.

Resume contract: the acknowledged outbox prefix is the only progress. A relay
publishes the earliest pending rows in sequence order, waits for the log's
delivery reports, then acknowledges exactly the consecutive delivered prefix.
A retry republishes the stored envelopes (same sequence, version and
content), so a lost delivery report can only duplicate a message in the
output log, which the view recognises; it can never skip or reorder intent.
Only one relay may publish a partition; the production wiring enforces it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from amends_core.errors import OperationError
from amends_core.ports import Delivery, Outbox, OutputLog
from amends_core.roles.worker import no_clock


@dataclass(frozen=True, slots=True)
class RelayResult:
    partition: int
    published: int
    acknowledged: int
    pending_after: int
    seconds: float


class Relay:
    def __init__(
        self,
        outbox: Outbox,
        log: OutputLog,
        partition: int,
        *,
        batch_size: int = 1000,
        clock: Callable[[], float] = no_clock,
    ) -> None:
        self.outbox = outbox
        self.log = log
        self.partition = partition
        self.batch_size = batch_size
        self.clock = clock

    def pending(self) -> Sequence[Any]:
        """The rows to publish now: the earliest pending ones, in sequence order."""
        return self.outbox.pending(self.partition, limit=self.batch_size)

    def receipts(self, rows: Sequence[Any], delivery: Delivery) -> list[tuple[int, int | None]]:
        """What to acknowledge: the consecutive delivered prefix of ``rows``, nothing after a gap."""
        out: list[tuple[int, int | None]] = []
        for r in rows:
            if r.sequence not in delivery.delivered:
                break
            out.append((r.sequence, delivery.delivered[r.sequence]))
        return out

    def step(self) -> RelayResult:
        """Publish and acknowledge at most one batch of pending rows."""
        t0 = self.clock()
        p = self.partition
        rows = self.pending()
        if not rows:
            return RelayResult(p, 0, 0, 0, self.clock() - t0)
        delivery = self.log.publish(p, rows)
        receipts = self.receipts(rows, delivery)
        if receipts:
            self.outbox.acknowledge_many(p, receipts)
        if len(receipts) < len(rows):
            why = delivery.failures[0] if delivery.failures else "no delivery report in time"
            msg = f"published {len(receipts)} of {len(rows)} rows on partition {p}: {why}"
            if delivery.unanswered:
                # Nothing refused the rows, the log just did not answer in time: retrying
                # (transient) republishes the same stored envelopes.
                raise self.log.unavailable(msg)
            raise OperationError(msg)
        return RelayResult(p, len(rows), len(receipts), self.outbox.pending_count(p), self.clock() - t0)


__all__ = ["Relay", "RelayResult"]

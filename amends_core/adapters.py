"""Memory adapters of the ports: the role logic of ``amends_core.roles`` without I/O.

``amends_core.pipeline`` (``amends compute --engine incremental``, the demo)
runs the worker, relay and view steps over these; the simulator runs the same
steps over subclasses that inject its faults at these boundaries. Nothing
here decides anything the role logic or the stores decide: each class only
carries a call to the memory store, the view state or a list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from amends_core import fence
from amends_core.errors import BatchAborted, CommitUnknown, PredecessorFailed, SourceMismatch, Transient
from amends_core.ledger import CloseOutOfRange, Record
from amends_core.ports import BatchResult, Delivery, OutboxRow, Token
from amends_core.store.memory import MemoryStore
from amends_core.view import ViewDecision, ViewState


class Unanswered(Transient):
    """A memory log that did not answer a publication (only the simulator makes one)."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A memory batch's commit outcome, known from the start (the ``CommitInFlight`` port)."""

    outcome: BatchResult | CommitUnknown

    def done(self) -> bool:
        return True

    def committed(self) -> bool:
        return isinstance(self.outcome, BatchResult)

    def result(self) -> BatchResult:
        if isinstance(self.outcome, CommitUnknown):
            raise self.outcome
        return self.outcome


class MemoryProcessing:
    """A ``MemoryStore`` as the ``ProcessingStore`` and ``Outbox`` ports."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._nonces = 0

    def new_nonce(self) -> str:
        self._nonces += 1
        return f"memory-claim-{self._nonces}"

    def claim(self, partition: int, nonce: str | None = None) -> Token:
        return self.store.claim(partition, nonce)

    def settle_claim(
        self, partition: int, nonce: str, unknown: CommitUnknown | None = None
    ) -> Token | None:
        del unknown
        return self.store.settle_claim(partition, nonce)

    def frontier(self, partition: int) -> int:
        return self.store.frontier(partition)

    def process(
        self, token: Token, expected_next: int, records: Sequence[Record], until: int | None = None
    ) -> BatchResult:
        """All of the batch or none of it, under the store's guard for every record."""
        if len(records) <= 1:
            return self._process(token, expected_next, records, until)
        saved = self.store.snapshot()
        try:
            return self._process(token, expected_next, records, until)
        except BaseException:
            self.store.restore(saved)
            raise

    def _process(
        self, token: Token, expected_next: int, records: Sequence[Record], until: int | None
    ) -> BatchResult:
        store = self.store
        p = token.partition
        frontier = expected_next
        rows: list[OutboxRow] = []
        first = held = len(store.rejections)
        accepted = 0
        for r in records:
            try:
                decision = store.prepare(token, frontier, r)
            except CloseOutOfRange as e:
                c = r.coords
                msg = f"record {c.partition}/{c.offset}: {e}"
                raise BatchAborted(msg, partition=p, offset=c.offset) from e
            if until is not None and until <= r.coords.offset:
                # checked before the commit: a batch of one record has no snapshot to restore
                msg = f"range end {until} lies below record offset {r.coords.offset} on partition {p}"
                raise SourceMismatch(msg)
            rows += store.commit(decision)
            frontier = r.coords.offset + 1
            accepted += int(len(store.rejections) == held)
            held = len(store.rejections)
        if not records or (until is not None and until != frontier):
            # a batch without records is fenced like any other, and may still move the frontier
            end = frontier if until is None else until
            store.advance(token, frontier, end)
            frontier = end
        return BatchResult(p, frontier, tuple(rows), tuple(store.rejections[first:]), accepted)

    def process_ahead(
        self,
        token: Token,
        expected_next: int,
        records: Sequence[Record],
        until: int | None = None,
        after: Any = None,
    ) -> Decided:
        """``process`` at once (memory has nothing to overlap); a lost reply is the outcome."""
        if isinstance(after, Decided) and not after.committed():
            msg = f"partition {token.partition}: the batch before this one did not commit"
            raise PredecessorFailed(msg)
        try:
            return Decided(self.process(token, expected_next, records, until))
        except CommitUnknown as e:
            return Decided(e)

    def resolve_unknown(self, unknown: CommitUnknown) -> bool:
        p = unknown.partition
        if p is None or unknown.before is None or unknown.after is None:
            msg = f"{unknown.operation}: not a processing commit; re-read state instead"
            raise ValueError(msg)
        return fence.settled(p, self.store.frontier(p), before=unknown.before, after=unknown.after)

    # the outbox

    def pending(self, partition: int, limit: int = 1) -> list[OutboxRow]:
        return self.store.pending_rows(partition, limit)

    def pending_count(self, partition: int) -> int:
        return self.store.pending_count(partition)

    def acknowledge_many(self, partition: int, receipts: Sequence[tuple[int, int | None]]) -> None:
        self.store.acknowledge_many(partition, [seq for seq, _ in receipts])


class MemorySource:
    """One partition of a memory source log: records sorted by offset (``SourceLog``).

    ``records`` and ``offsets`` are the owner's lists, read live: appending to
    them extends the source.
    """

    def __init__(self, records: list[Record], offsets: list[int]) -> None:
        self.records = records
        self.offsets = offsets

    def reset(self) -> None:
        """Nothing is cached."""

    def start(self, frontier: int) -> int:
        return frontier

    def end(self, frontier: int) -> int:
        del frontier
        return self.offsets[-1] + 1 if self.offsets else 0

    def read(self, frontier: int, high: int, limit: int, max_bytes: int) -> tuple[list[Record], int]:
        i = bisect.bisect_left(self.offsets, frontier)
        out: list[Record] = []
        size = 0
        while i < len(self.offsets) and self.offsets[i] < high and len(out) < limit and size < max_bytes:
            r = self.records[i]
            out.append(r)
            size += len(r.value) + len(r.key or b"")
            i += 1
        position = out[-1].coords.offset + 1 if out and (len(out) == limit or size >= max_bytes) else high
        return out, position


@dataclass(frozen=True, slots=True)
class Marks:
    low: int
    high: int


class MemoryOutput:
    """Output logs as lists, one per partition (``OutputLog`` and ``OutputSource``).

    ``as_bytes`` keeps encoded envelopes, so that a view decodes the wire
    format as it would from Kafka; otherwise the envelopes themselves.
    """

    def __init__(self, logs: dict[int, list[Any]], *, as_bytes: bool = True) -> None:
        self.logs = logs
        self.as_bytes = as_bytes

    def publish(self, partition: int, rows: Sequence[OutboxRow]) -> Delivery:
        log = self.logs[partition]
        delivery = Delivery()
        for r in rows:
            log.append(r.envelope.to_bytes() if self.as_bytes else r.envelope)
            delivery.delivered[r.sequence] = len(log) - 1
        return delivery

    def unavailable(self, message: str) -> Exception:
        return Unanswered(message)

    def watermarks(self, partition: int) -> Marks:
        return Marks(0, len(self.logs[partition]))

    def records(self, partition: int, start: int, end: int) -> list[tuple[int, Any]]:
        log = self.logs[partition]
        return [(i, log[i]) for i in range(start, min(end, len(log)))]


class MemoryView:
    """A ``ViewState`` as the ``ViewStore`` port."""

    def __init__(self, state: ViewState) -> None:
        self.state = state

    def progress(self, partition: int) -> tuple[int, str | None]:
        return self.state.frontier(partition), self.state.stopped.get(partition)

    def apply(
        self, partition: int, records: Iterable[tuple[int, Any]], *, start: int, end: int
    ) -> list[ViewDecision]:
        st = self.state
        if st.frontier(partition) != start:
            return []  # read before the frontier moved
        out = [st.apply(partition, off, raw) for off, raw in records]
        if partition not in st.stopped and st.frontier(partition) < end:
            st.frontiers[partition] = end
        return out

    def resolve_unknown(self, unknown: CommitUnknown) -> tuple[int, str | None]:
        """Nothing is left in flight in memory: the installed progress is the answer."""
        if unknown.partition is None:
            msg = f"{unknown.operation}: names no output partition"
            raise ValueError(msg)
        return self.progress(unknown.partition)

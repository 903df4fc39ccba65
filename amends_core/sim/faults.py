"""The simulator's faults, injected at the port boundary around the memory adapters.

Each adapter here is the memory adapter the fault-free pipeline uses, plus an
``outcome`` the model arms for one step. Every commit (or publication) the
step makes then has that fate:

  commit             it lands and its reply arrives;
  abort              it does not land and the caller hears so (a transient error);
  unknown-committed  it lands, but its reply is lost (CommitUnknown, or no
                     delivery report);
  unknown-aborted    it does not land and its reply is lost.

A worker step that runs more than one batch (``Worker(ahead=N)``) makes more
than one commit. Then the processing adapter gives the armed fate to one of
them only (``Injected.fault_at``: 0 is the step's first commit); the others commit.

The adapters also record what really happened (``installed``, ``lost``) for
the event log, which the role logic itself never sees.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from amends_core.adapters import MemoryOutput, MemoryProcessing, MemorySource, MemoryView
from amends_core.errors import CommitUnknown, OperationError, Transient
from amends_core.ledger import Record
from amends_core.ports import BatchResult, Delivery, OutboxRow, Token
from amends_core.store.memory import MemoryStore
from amends_core.view import ViewDecision, ViewState


class Outcome(enum.StrEnum):
    COMMIT = "commit"
    ABORT = "abort"
    UNKNOWN_COMMITTED = "unknown-committed"
    UNKNOWN_ABORTED = "unknown-aborted"

    @property
    def installed(self) -> bool:
        """Whether the effect really happens."""
        return self in (Outcome.COMMIT, Outcome.UNKNOWN_COMMITTED)

    @property
    def known(self) -> bool:
        """Whether the actor receives the reply."""
        return self in (Outcome.COMMIT, Outcome.ABORT)


class Aborted(Transient):
    """An injected abort: nothing landed and the caller was told."""


class Injected:
    """The outcome armed for the current step, and what it did."""

    def __init__(self) -> None:
        self.outcome = Outcome.COMMIT
        self.installed = False
        self.lost = False
        self.detail = ""
        self.fault_at: int | None = None
        """Which of the step's attempts (``fate``) has the armed outcome (None: every one)."""
        self.attempts = 0
        """Attempts of the step that asked ``fate`` so far."""

    def arm(self, outcome: Outcome, fault_at: int | None = None) -> None:
        self.outcome = outcome
        self.installed = False
        self.lost = False
        self.detail = ""
        self.fault_at = fault_at
        self.attempts = 0

    def fate(self) -> Outcome:
        """The outcome of the attempt being made now: the armed one, or ``commit`` for an
        attempt other than ``fault_at``."""
        at = self.attempts
        self.attempts += 1
        return self.outcome if self.fault_at is None or at == self.fault_at else Outcome.COMMIT

    def disarm(self) -> None:
        self.outcome = Outcome.COMMIT


class FaultyProcessing(MemoryProcessing, Injected):
    """The processing store and outbox; claims and batches obey the armed outcome."""

    def __init__(
        self,
        store: MemoryStore,
        installs: list[tuple[int, int, int]],
        acks: dict[int, list[int]],
    ) -> None:
        MemoryProcessing.__init__(self, store)
        Injected.__init__(self)
        self.installs = installs
        """Where installed batches are noted: (partition, batch epoch, epoch installed at commit)."""
        self.acks = acks
        """Where acknowledged sequences are noted, per partition, in order."""

    def claim(self, partition: int, nonce: str | None = None) -> Token:
        o = self.outcome
        if o is Outcome.ABORT:
            msg = f"claiming partition {partition}: aborted"
            raise Aborted(msg)
        if o.installed:
            tok = super().claim(partition, nonce)
            self.installed = True
            if o.known:
                return tok
        self.lost = True
        msg = f"claiming partition {partition}: the reply was lost"
        raise CommitUnknown(msg, operation="claim", partition=partition)

    def process(
        self, token: Token, expected_next: int, records: Sequence[Record], until: int | None = None
    ) -> BatchResult:
        o = self.fate()  # each batch commit of the step asks
        p = token.partition
        if o is Outcome.ABORT:
            msg = f"batch of partition {p}: aborted"
            raise Aborted(msg)
        after = until if until is not None else (records[-1].coords.offset + 1 if records else expected_next)
        if o.installed:
            epoch = self.store.observe(p).epoch
            try:
                result = super().process(token, expected_next, records, until)
            except OperationError as e:
                if o.known:
                    raise
                self.detail = str(e)  # the actor never hears it: its reply is lost
            else:
                self.installs.append((p, token.epoch, epoch))
                self.installed = True
                if o.known:
                    return result
        self.lost = True
        msg = f"batch of partition {p}: the reply was lost"
        raise CommitUnknown(msg, operation="batch", partition=p, before=expected_next, after=after)

    def acknowledge_many(self, partition: int, receipts: Sequence[tuple[int, int | None]]) -> None:
        super().acknowledge_many(partition, receipts)
        self.acks[partition].extend(seq for seq, _ in receipts)


class FaultyLog(MemoryOutput, Injected):
    """The output logs; a publication obeys the armed outcome (lost = no delivery report)."""

    def __init__(self, logs: dict[int, list[Any]]) -> None:
        MemoryOutput.__init__(self, logs, as_bytes=False)
        Injected.__init__(self)

    def publish(self, partition: int, rows: Sequence[OutboxRow]) -> Delivery:
        o = self.outcome
        log = self.logs[partition]
        delivery = Delivery()
        self.detail = ", ".join(f"sequence {r.sequence}" for r in rows)
        for r in rows:
            if o.installed:
                log.append(r.envelope)
                self.installed = True
            if o is Outcome.COMMIT:
                delivery.delivered[r.sequence] = len(log) - 1
        if o is Outcome.ABORT:
            delivery.failures.append("aborted")
        self.lost = not o.known
        return delivery


class FaultyView(MemoryView, Injected):
    """The view store; an apply obeys the armed outcome."""

    def __init__(self, state: ViewState) -> None:
        MemoryView.__init__(self, state)
        Injected.__init__(self)

    def apply(
        self, partition: int, records: Iterable[tuple[int, Any]], *, start: int, end: int
    ) -> list[ViewDecision]:
        o = self.outcome
        recs = list(records)
        if o is Outcome.ABORT:
            self.detail = self._where(self._decide(partition, recs))
            msg = f"applying output partition {partition}: aborted"
            raise Aborted(msg)
        if o.installed:
            out = super().apply(partition, recs, start=start, end=end)
            self.installed = True
        else:
            out = self._decide(partition, recs)
        self.detail = self._where(out)
        if o.known:
            return out
        self.lost = True
        msg = f"applying output partition {partition}: the reply was lost"
        raise CommitUnknown(msg, operation="view", partition=partition)

    def _decide(self, partition: int, recs: list[tuple[int, Any]]) -> list[ViewDecision]:
        return [self.state.decide(partition, off, raw) for off, raw in recs]

    @staticmethod
    def _where(decisions: list[ViewDecision]) -> str:
        return ", ".join(f"offset {d.offset} {d.effect.value}" for d in decisions)


class SimSource(MemorySource):
    """A partition of the declared source (read live from the model's lists)."""


__all__ = [
    "Aborted", "FaultyLog", "FaultyProcessing", "FaultyView", "Injected", "Outcome", "SimSource",
]

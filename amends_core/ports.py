"""The ports: what the role logic needs from a store or a log, and the values they trade in.

The worker, relay and view steps (``amends_core.roles``) are written once
against these Protocols. Two sets of adapters implement them:

  port               production adapter                      memory adapter
  ProcessingStore    postgres.store.PgStore                  adapters.MemoryProcessing
  AheadStore         postgres.store.PgStore                  adapters.MemoryProcessing
  Outbox             postgres.store.PgStore                  adapters.MemoryProcessing
  SourceLog          snapshot.source.SnapshotThenTopic       adapters.MemorySource
                     (over roles.worker.KafkaSource)
  OutputLog          roles.relay.KafkaOutput                 adapters.MemoryOutput
  OutputSource       roles.view.KafkaOutputSource            adapters.MemoryOutput
  ViewStore          postgres.view_store.PgViewStore         adapters.MemoryView

(production adapters live in ``amends_pipeline``; the memory ones in
``amends_core.adapters``, and the simulator's fault-injecting ones subclass
those). ``Token``, ``OutboxRow`` and ``BatchResult`` are produced and
accepted by every store, so they live here rather than in any one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from amends_core.errors import CommitUnknown
from amends_core.ledger import Envelope, Record, Rejection, fast_init


@dataclass(frozen=True, slots=True)
class Token:
    """Proof of ownership of one partition at one epoch."""

    namespace: str
    digest: str
    partition: int
    epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One envelope waiting in a partition's outbox, in commit order (``sequence`` from 1)."""

    partition: int
    sequence: int
    envelope: Envelope


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What one committed batch installed."""

    partition: int
    frontier: int
    """The exclusive source frontier after the batch."""
    rows: tuple[OutboxRow, ...]
    """Outbox rows committed, in sequence order."""
    rejections: tuple[Rejection, ...]
    accepted: int


class ProcessingStore(Protocol):
    """Ownership, the source frontier and fenced batches of one namespace (the worker's store)."""

    def new_nonce(self) -> str:
        """A claimant nonce never handed out before by this store."""
        ...

    def claim(self, partition: int, nonce: str | None = None) -> Token:
        """Install a new epoch under ``nonce``; older tokens stop committing."""
        ...

    def settle_claim(
        self, partition: int, nonce: str, unknown: CommitUnknown | None = None
    ) -> Token | None:
        """After a lost claim reply: the installed token if ``nonce`` installed it, else None."""
        ...

    def frontier(self, partition: int) -> int:
        """The installed exclusive source frontier."""
        ...

    def process(
        self, token: Token, expected_next: int, records: Sequence[Record], until: int | None = None
    ) -> BatchResult:
        """One fenced, all-or-nothing batch; the frontier moves to ``until`` (or past the last record)."""
        ...

    def resolve_unknown(self, unknown: CommitUnknown) -> bool:
        """Settle a lost batch reply for good: True when the batch committed."""
        ...


class CommitInFlight(Protocol):
    """A batch folded and sealed whose commit may still be running (``process_ahead``)."""

    def done(self) -> bool:
        """The outcome is known: ``result`` returns without waiting."""
        ...

    def committed(self) -> bool:
        """Wait for the outcome; True when the batch committed."""
        ...

    def result(self) -> BatchResult:
        """Wait for the outcome: what the batch installed, or the error its commit raised
        (CommitUnknown among them, to settle with ``resolve_unknown``)."""
        ...


class AheadStore(ProcessingStore, Protocol):
    """A processing store that can fold a partition's next batch while the last one commits."""

    def process_ahead(
        self,
        token: Token,
        expected_next: int,
        records: Sequence[Record],
        until: int | None = None,
        after: Any = None,
    ) -> CommitInFlight:
        """``process`` whose commit outcome arrives through the returned value. ``after``: the
        partition's previous batch (as returned here): if it did not commit, nothing of
        this one is written and PredecessorFailed is raised."""
        ...


class Pending(Protocol):
    """An outbox row as an outbox hands it to a relay (the log adapter knows its full type)."""

    @property
    def sequence(self) -> int: ...


class Outbox(Protocol):
    """The ordered outbox of each partition (the relay's store)."""

    def pending(self, partition: int, limit: int = 1) -> Sequence[Any]:
        """The earliest unacknowledged rows (``Pending``), in sequence order."""
        ...

    def pending_count(self, partition: int) -> int: ...

    def acknowledge_many(
        self, partition: int, receipts: Sequence[tuple[int, int | None]]
    ) -> None:
        """Acknowledge the pending prefix (sequence, output offset or None), or refuse all of it."""
        ...


class SourceLog(Protocol):
    """One source partition as the worker reads it."""

    def reset(self) -> None:
        """Forget every cached confirmation: a new owner re-confirms the source."""
        ...

    def start(self, frontier: int) -> int:
        """The frontier with offsets that are never applied (a recorded marker) stepped over."""
        ...

    def end(self, frontier: int) -> int:
        """Confirm that the source still is the provisioned one and retains ``frontier``;
        return the end of the partition (exclusive)."""
        ...

    def read(
        self, frontier: int, high: int, limit: int, max_bytes: int
    ) -> tuple[list[Record], int]:
        """At most ``limit`` records of [frontier, high) (cut after the one reaching
        ``max_bytes``) and the position the scan reached; never empty unless the
        position reached ``high``."""
        ...


@dataclass(slots=True)
class Delivery:
    """What a log reported back for a publication."""

    delivered: dict[int, int | None] = field(default_factory=dict)
    """Outbox sequence -> output offset (None when the log has no offsets to give)."""
    failures: list[str] = field(default_factory=list)
    """Why rows were not delivered, one line each."""
    unanswered: bool = True
    """Whether every failure only says that the log did not answer in time."""


class OutputLog(Protocol):
    """The output log as a relay publishes to it."""

    def publish(self, partition: int, rows: Sequence[Any]) -> Delivery:
        """Publish the rows' stored envelopes, in order, and wait for their reports."""
        ...

    def unavailable(self, message: str) -> Exception:
        """The adapter's transient error for a publication the log did not answer."""
        ...


class Marks(Protocol):
    @property
    def low(self) -> int: ...

    @property
    def high(self) -> int: ...


class OutputSource(Protocol):
    """The output log as a view reads it."""

    def watermarks(self, partition: int) -> Marks: ...

    def records(self, partition: int, start: int, end: int) -> list[tuple[int, Any]]:
        """(offset, value) of the records retained in [start, end), in offset order."""
        ...


class ViewStore(Protocol):
    """The view's rows and its frontier per output partition."""

    def progress(self, partition: int) -> tuple[int, str | None]:
        """(frontier, why the partition is stopped or None)."""
        ...

    def apply(
        self, partition: int, records: Iterable[tuple[int, Any]], *, start: int, end: int
    ) -> Sequence[Any]:
        """Apply records of [start, end) and move the frontier to ``end``, atomically;
        returns one view decision per record."""
        ...

    def resolve_unknown(self, unknown: CommitUnknown) -> tuple[int, str | None]:
        """Settle a lost apply reply for good; returns the installed progress."""
        ...


__all__ = [
    "AheadStore", "BatchResult", "CommitInFlight", "Delivery", "Marks", "OutboxRow", "Outbox",
    "OutputLog", "OutputSource", "Pending", "ProcessingStore", "SourceLog", "Token", "ViewStore",
]

"""Serial in-memory processing store: the reference model of the durable store.

Resume contract: ``frontier(p)`` is the exclusive next source offset of
partition ``p``. Every offset below it is either applied (its evidence is in a
key state) or quarantined (its raw record is in ``rejections``), never both and
never neither; offsets that were never delivered (gaps) are simply absent.
A commit whose guard fails installs nothing at all.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from amends_core import fold, preflight, process
from amends_core.errors import OutboxOrderError, SourceMismatch
from amends_core.fence import check_coordinates, guard
from amends_core.ledger import (
    Config,
    Conflict,
    Envelope,
    OutputID,
    Projection,
    Record,
    Rejection,
    StockKey,
)
from amends_core.ports import OutboxRow, Token

__all__ = ["Decision", "MemoryStore", "OutboxRow", "PartitionState", "Token"]


@dataclass(slots=True)
class PartitionState:
    epoch: int = 0
    next: int = 0
    """Exclusive source frontier."""
    sequence: int = 0
    """Last outbox sequence committed on this partition (0 = none yet)."""
    acked: int = 0
    """Number of leading outbox rows acknowledged (rows are 1-based by sequence)."""
    claimant: str | None = None
    """Nonce of the claim that installed ``epoch`` (None: none given, never adopted)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A prepared, isolated step; installing it is ``MemoryStore.commit``."""

    token: Token
    expected_next: int
    record: Record
    outcome: process.Outcome


@dataclass(slots=True)
class MemoryStore:
    cfg: Config
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    keys: dict[StockKey, fold.KeyState] = field(default_factory=dict)
    outputs: dict[OutputID, Envelope] = field(default_factory=dict)
    outbox: dict[int, list[OutboxRow]] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)

    def __post_init__(self) -> None:
        for p in range(self.cfg.partitions):
            self.partitions.setdefault(p, PartitionState())
            self.outbox.setdefault(p, [])
        for kc in self.cfg.keys:
            self.keys.setdefault(kc.key, fold.new_key_state(kc))

    # ------------------------------------------------------------ ownership

    def _partition(self, p: int) -> PartitionState:
        try:
            return self.partitions[p]
        except KeyError:
            msg = f"partition {p} is not configured (0..{self.cfg.partitions - 1})"
            raise SourceMismatch(msg) from None

    def claim(self, partition: int, nonce: str | None = None) -> Token:
        """Install a new ownership epoch; any older token stops committing.

        ``nonce`` names the claimant (the caller makes it up: the core draws
        nothing at random); it is installed with the epoch, so that after a
        lost claim reply ``settle_claim`` can tell its own epoch from another's.
        """
        ps = self._partition(partition)
        ps.epoch += 1
        ps.claimant = nonce or None
        return self.observe(partition)

    def observe(self, partition: int) -> Token:
        """The currently installed token, whoever claimed it (inspection)."""
        ps = self._partition(partition)
        return Token(self.cfg.namespace, self.cfg.digest(), partition, ps.epoch)

    def settle_claim(self, partition: int, nonce: str) -> Token | None:
        """After an unknown claim outcome: the installed token if the claim with ``nonce`` installed it.

        None means the installed epoch is not this claimant's (its claim did not
        land, or another claimant's landed since): claim again, never adopt it.
        """
        if not nonce:
            msg = "settling a claim needs the claimant's nonce"
            raise ValueError(msg)
        if self._partition(partition).claimant != nonce:
            return None
        return self.observe(partition)

    def frontier(self, partition: int) -> int:
        return self._partition(partition).next

    def _guard(self, token: Token, expected_next: int) -> PartitionState:
        ps = self._partition(token.partition)
        guard(
            token, namespace=self.cfg.namespace, digest=self.cfg.digest(), epoch=ps.epoch,
            installed=ps.next, expected_next=expected_next,
        )
        return ps

    # ------------------------------------------------------------ processing

    def prepare(self, token: Token, expected_next: int, record: Record) -> Decision:
        """Guarded, isolated decision; installed state is not modified."""
        self._guard(token, expected_next)
        check_coordinates(
            record, source=self.cfg.source_incarnation, partition=token.partition, frontier=expected_next
        )
        outcome = process.decide(self.cfg, record, self.keys.__getitem__, self._latest)
        return Decision(token, expected_next, record, outcome)

    def _latest(self, output_id: OutputID) -> Envelope | None:
        """The committed output a decision diffs against (its latest envelope)."""
        return self.outputs.get(output_id)

    def commit(self, decision: Decision) -> list[OutboxRow]:
        """Re-check the guard, then install state or quarantine, outbox and frontier."""
        ps = self._guard(decision.token, decision.expected_next)
        rows: list[OutboxRow] = []
        out = decision.outcome
        if isinstance(out, process.Rejected):
            self.rejections.append(out.rejection)
        else:
            self.keys[out.delta.key].install(out.delta)
            for env in out.envelopes:
                ps.sequence += 1
                row = OutboxRow(decision.token.partition, ps.sequence, env)
                self.outbox[decision.token.partition].append(row)
                self.outputs[env.output_id] = env
                rows.append(row)
        ps.next = decision.record.coords.offset + 1
        return rows

    def process(self, token: Token, record: Record) -> list[OutboxRow]:
        """Prepare and commit in one call (the common, fault-free path)."""
        return self.commit(self.prepare(token, self.frontier(token.partition), record))

    def advance(self, token: Token, expected_next: int, until: int) -> None:
        """Move the frontier to ``until`` over offsets that delivered nothing (guarded)."""
        ps = self._guard(token, expected_next)
        if until < ps.next:
            msg = f"cannot move partition {token.partition} back from {ps.next} to {until}"
            raise SourceMismatch(msg)
        ps.next = until

    def restore(self, saved: MemoryStore) -> None:
        """Put back everything ``saved`` (a ``snapshot`` of this store) held: an aborted batch."""
        self.partitions = saved.partitions
        self.keys = saved.keys
        self.outputs = saved.outputs
        self.outbox = saved.outbox
        self.rejections = saved.rejections

    # ------------------------------------------------------------ outbox

    def pending(self, partition: int) -> OutboxRow | None:
        """The earliest unacknowledged outbox row of a partition."""
        ps = self._partition(partition)
        rows = self.outbox[partition]
        return rows[ps.acked] if ps.acked < len(rows) else None

    def pending_rows(self, partition: int, limit: int) -> list[OutboxRow]:
        """The earliest ``limit`` unacknowledged rows of a partition, in sequence order."""
        acked = self._partition(partition).acked
        return self.outbox[partition][acked : acked + max(0, limit)]

    def pending_count(self, partition: int) -> int:
        return len(self.outbox[partition]) - self._partition(partition).acked

    def acknowledge_many(self, partition: int, sequences: list[int]) -> None:
        """Acknowledge the pending prefix named by ``sequences``, or nothing at all."""
        want = [r.sequence for r in self.pending_rows(partition, len(sequences))]
        for i, seq in enumerate(sequences):
            if i >= len(want) or want[i] != seq:
                shown = want[i] if i < len(want) else None
                msg = f"acknowledge {seq} on partition {partition}, pending is {shown}"
                raise OutboxOrderError(msg)
        self.partitions[partition].acked += len(sequences)

    def acknowledge(self, partition: int, sequence: int) -> None:
        """Acknowledge exactly the pending row; anything else is refused."""
        row = self.pending(partition)
        if row is None or row.sequence != sequence:
            want = None if row is None else row.sequence
            msg = f"acknowledge {sequence} on partition {partition}, pending is {want}"
            raise OutboxOrderError(msg)
        self.partitions[partition].acked += 1

    # ------------------------------------------------------------ inspection

    def snapshot(self) -> MemoryStore:
        """A deep copy; changing it never changes installed state."""
        return copy.deepcopy(self)

    def projection(self, key: StockKey) -> Projection:
        return self.keys[key].projection()

    def conflicts(self) -> list[Conflict]:
        """Every conflict observed, current and superseded, sorted."""
        return sorted(
            Conflict(k, ref.txn_id, ref.revision)
            for k, st in self.keys.items()
            for ref in st.conflicts
        )

    # ------------------------------------------------------------ replay

    def check_replay(self, record: Record) -> None:
        """Require that an already-consumed record is fully reflected in state.

        Accepted input must match held canonical evidence at the same coordinates
        and must produce no new envelope; rejected input must match the held raw
        rejection and reason. Raises ReplayMismatch otherwise.
        """
        c = record.coords
        ps = self.partitions.get(c.partition)
        preflight.check_replayed(
            self.cfg, record,
            frontier=None if ps is None else ps.next,
            state_of=self.keys.__getitem__,
            latest=self.outputs.get,
            held_rejection=lambda: next((r for r in self.rejections if r.record.coords == c), None),
        )

    def replay(self, partition: int, records: Iterable[Record]) -> Token:
        """Check a consumed interval against intact state, then claim a new epoch.

        Preflight happens before the claim, so a failing replay leaves ownership
        untouched. Frontier, evidence and output versions never change.
        """
        for r in preflight.check_one_partition(partition, records):
            self.check_replay(r)
        return self.claim(partition)

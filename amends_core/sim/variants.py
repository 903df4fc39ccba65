"""Deliberately broken variants, used only by sensitivity tests.

Each variant is a ``Model`` subclass that swaps one component for a subclass
of the production one: the memory store, its processing port or the view
state, or the production worker or relay step of ``amends_core.roles`` with
one rule overridden. So
each variant breaks a code path production runs, and no core module is
edited for it. A variant that no scenario or seed catches is a gap in the
checks. Nothing in the library or the command line switches these on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from amends_core import fold, process
from amends_core.adapters import Decided
from amends_core.errors import CommitUnknown
from amends_core.ledger import Config, Envelope, OutputID, Record, Transaction
from amends_core.oracle import OracleResult
from amends_core.ports import Delivery, OutboxRow, Token
from amends_core.roles.relay import Relay
from amends_core.roles.worker import Batch, Worker
from amends_core.sim.faults import FaultyProcessing
from amends_core.sim.model import Model
from amends_core.store.memory import Decision, MemoryStore, PartitionState
from amends_core.view import Effect, ViewDecision, ViewState

# ---------------------------------------------------------------- stores


class _NoEpochStore(MemoryStore):
    """Fence every batch without checking the ownership epoch."""

    def _guard(self, token: Token, expected_next: int) -> PartitionState:
        current = self.observe(token.partition)
        return super()._guard(replace(token, epoch=current.epoch), expected_next)


class _ViewDiffStore(MemoryStore):
    """Diff against what the view shows instead of committed intent."""

    view: ViewState | None = None

    def _latest(self, output_id: OutputID) -> Envelope | None:
        assert self.view is not None
        return self.view.rows.get(output_id)


class _NoWithdrawalStore(MemoryStore):
    """Drop withdrawal envelopes from every decision."""

    def prepare(self, token: Token, expected_next: int, record: Record) -> Decision:
        d = super().prepare(token, expected_next, record)
        if isinstance(d.outcome, process.Accepted):
            kept = tuple(e for e in d.outcome.envelopes if e.payload.present)
            d = replace(d, outcome=replace(d.outcome, envelopes=kept))
        return d


class _AnyOrderAckStore(MemoryStore):
    """Accept acknowledgements of any pending row (and say which rows are pending)."""

    def __post_init__(self) -> None:
        MemoryStore.__post_init__(self)
        self.acked_rows: dict[int, set[int]] = {p: set() for p in self.partitions}

    def unacked(self, partition: int) -> list[OutboxRow]:
        done = self.acked_rows[partition]
        return [r for r in self.outbox[partition] if r.sequence not in done]

    def pending(self, partition: int) -> OutboxRow | None:
        rows = self.unacked(partition)
        return rows[0] if rows else None

    def pending_rows(self, partition: int, limit: int) -> list[OutboxRow]:
        return self.unacked(partition)[:limit]

    def pending_count(self, partition: int) -> int:
        return len(self.unacked(partition))

    def acknowledge(self, partition: int, sequence: int) -> None:
        self.acked_rows[partition].add(sequence)

    def acknowledge_many(self, partition: int, sequences: list[int]) -> None:
        self.acked_rows[partition].update(sequences)


# ---------------------------------------------------------------- views


class _ForgetfulView(ViewState):
    """Delete a row on withdrawal instead of keeping its version as a tombstone."""

    def install(self, d: ViewDecision) -> None:
        ViewState.install(self, d)
        if d.effect is Effect.STORED and d.envelope is not None and not d.envelope.payload.present:
            self.rows.pop(d.envelope.output_id, None)


# ---------------------------------------------------------------- models


class NoEpochCheck(Model):
    """The store's fence skips the epoch check: a replaced owner can still commit."""

    def new_store(self, cfg: Config) -> MemoryStore:
        return _NoEpochStore(cfg)


class DiffAgainstView(Model):
    """Versions are allocated against the view, mixing transport lag into intent."""

    def new_store(self, cfg: Config) -> MemoryStore:
        return _ViewDiffStore(cfg)

    def new_view(self, cfg: Config) -> ViewState:
        v = ViewState(cfg)
        assert isinstance(self.store, _ViewDiffStore)
        self.store.view = v
        return v


class ForgetsWithdrawals(Model):
    """The worker never commits withdrawal envelopes."""

    def new_store(self, cfg: Config) -> MemoryStore:
        return _NoWithdrawalStore(cfg)


class ForgetsTombstones(Model):
    """The view drops withdrawn rows, so a stale statement can resurrect them."""

    def new_view(self, cfg: Config) -> ViewState:
        return _ForgetfulView(cfg)


class _SkippingRelay(Relay):
    """Acknowledges every row it tried to publish, delivered or not."""

    def receipts(self, rows: Sequence[Any], delivery: Delivery) -> list[tuple[int, int | None]]:
        return [(r.sequence, delivery.delivered.get(r.sequence)) for r in rows]


class _NewestFirstRelay(Relay):
    """Publishes the newest pending row first."""

    def pending(self) -> Sequence[Any]:
        store = self.outbox.store  # type: ignore[attr-defined]
        assert isinstance(store, _AnyOrderAckStore)
        rows = store.unacked(self.partition)
        return rows[-1:]


class _IgnoresFailedPredecessor(FaultyProcessing):
    """Folds and commits a batch run ahead even when the batch before it did not commit."""

    def process_ahead(
        self,
        token: Token,
        expected_next: int,
        records: Sequence[Record],
        until: int | None = None,
        after: Any = None,
    ) -> Decided:
        return super().process_ahead(token, expected_next, records, until)


class _AssumesAbortedWorker(Worker):
    """After a lost commit reply, keeps its local frontier where the batch started."""

    def settle_lost_commit(self, unknown: CommitUnknown, batch: Batch) -> bool:
        self.cursor = batch.frontier
        return False


class _KeepsTokenWorker(Worker):
    """After a lost claim reply, keeps the token it held before claiming."""

    def claim(self) -> Token:
        self._previous = self.token
        return super().claim()

    def settle_claim(self, nonce: str, unknown: CommitUnknown) -> Token | None:
        return self._previous


class RelaySkips(Model):
    """The relay acknowledges a row even when its publication was refused."""

    def new_relay(self, partition: int) -> Relay:
        return _SkippingRelay(self.processing, self.log, partition, batch_size=1)


class RelayOutOfOrder(Model):
    """The relay publishes and acknowledges the newest pending row first."""

    def new_store(self, cfg: Config) -> MemoryStore:
        return _AnyOrderAckStore(cfg)

    def new_relay(self, partition: int) -> Relay:
        return _NewestFirstRelay(self.processing, self.log, partition, batch_size=1)


class WorkerAssumesAborted(Model):
    """After a lost commit reply the worker keeps its local frontier (assumes nothing landed)."""

    def new_worker(self, partition: int) -> Worker:
        w = super().new_worker(partition)
        return _AssumesAbortedWorker(w.store, w.source, partition, batch_size=1, ahead=self.ahead)


class ClaimKeepsToken(Model):
    """After a lost claim reply the worker keeps its old token instead of settling by nonce."""

    def new_worker(self, partition: int) -> Worker:
        w = super().new_worker(partition)
        return _KeepsTokenWorker(w.store, w.source, partition, batch_size=1, ahead=self.ahead)


class AheadIgnoresFailedPredecessor(Model):
    """A batch folded while the one before it commits is committed even when that commit failed
    or its reply was lost (only with worker steps of more than one batch: ``VARIANT_AHEAD``)."""

    def new_processing(self) -> FaultyProcessing:
        return _IgnoresFailedPredecessor(self.store, self.installs, self.acks)


class LatestDeliveryOracle(Model):
    """The oracle takes each identity's latest delivery instead of its highest revision."""

    def oracle(self, by_partition: Mapping[int, Sequence[Record]]) -> OracleResult:
        last: dict[tuple[object, str], int] = {}
        flat = [r for p in sorted(by_partition) for r in by_partition[p]]
        for i, r in enumerate(flat):
            v = fold.validate(self.cfg, r)
            if isinstance(v, Transaction):
                last[(v.stock_key, v.txn_id)] = i
        keep = set(last.values())
        kept: dict[int, list[Record]] = {p: [] for p in by_partition}
        for i, r in enumerate(flat):
            v = fold.validate(self.cfg, r)
            if not isinstance(v, Transaction) or i in keep:
                kept[r.coords.partition].append(r)
        return super().oracle(kept)


VARIANTS: dict[str, type[Model]] = {
    "no-epoch-check": NoEpochCheck,
    "diff-against-view": DiffAgainstView,
    "forgets-withdrawals": ForgetsWithdrawals,
    "forgets-tombstones": ForgetsTombstones,
    "relay-skips": RelaySkips,
    "relay-out-of-order": RelayOutOfOrder,
    "worker-assumes-aborted": WorkerAssumesAborted,
    "claim-keeps-token": ClaimKeepsToken,
    "latest-delivery-oracle": LatestDeliveryOracle,
    "ahead-ignores-failed-predecessor": AheadIgnoresFailedPredecessor,
}

VARIANT_AHEAD: dict[str, int] = {"ahead-ignores-failed-predecessor": 2}
"""Batches per worker step a variant needs to show its defect (others: 1)."""

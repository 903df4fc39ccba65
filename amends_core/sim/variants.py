"""Deliberately broken variants, used only by sensitivity tests.

Each variant is a ``Model`` subclass that wraps or subclasses one component
(store, view, relay, worker recovery, oracle); no core module is edited. A
variant that no scenario or seed catches is a gap in the checks. Nothing in
the library or the command line switches these on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from amends_core import fold, process
from amends_core.ledger import Config, Envelope, OutputID, Record, Transaction
from amends_core.oracle import OracleResult
from amends_core.ports import OutboxRow, Token
from amends_core.sim.model import Model, Observation, Outcome
from amends_core.store.memory import Decision, MemoryStore
from amends_core.view import Effect, ViewDecision, ViewState

# ---------------------------------------------------------------- stores


class _NoEpochStore(MemoryStore):
    """Commit without re-checking the ownership epoch."""

    def commit(self, decision: Decision) -> list[OutboxRow]:
        current = self.observe(decision.token.partition)
        return super().commit(replace(decision, token=current))


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

    def pending_count(self, partition: int) -> int:
        return len(self.unacked(partition))

    def acknowledge(self, partition: int, sequence: int) -> None:
        self.acked_rows[partition].add(sequence)


# ---------------------------------------------------------------- views


class _ForgetfulView(ViewState):
    """Delete a row on withdrawal instead of keeping its version as a tombstone."""

    def install(self, d: ViewDecision) -> None:
        ViewState.install(self, d)
        if d.effect is Effect.STORED and d.envelope is not None and not d.envelope.payload.present:
            self.rows.pop(d.envelope.output_id, None)


# ---------------------------------------------------------------- models


class NoEpochCheck(Model):
    """The store's commit skips the epoch check: a replaced owner can still commit."""

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


class RelaySkips(Model):
    """The relay acknowledges a row even when its publication was refused."""

    def relay_publish(
        self, partition: int, sequence: int, env: Envelope, outcome: Outcome
    ) -> tuple[Observation, bool, str]:
        if outcome is Outcome.ABORT:
            self.acknowledge(partition, sequence)
            return (Observation.ABORTED, False, f"sequence {sequence} acknowledged anyway")
        return super().relay_publish(partition, sequence, env, outcome)


class RelayOutOfOrder(Model):
    """The relay publishes and acknowledges the newest pending row first."""

    def new_store(self, cfg: Config) -> MemoryStore:
        return _AnyOrderAckStore(cfg)

    def _relay(self, step):  # type: ignore[no-untyped-def]
        assert isinstance(self.store, _AnyOrderAckStore)
        rows = self.store.unacked(step.partition)
        if not rows:
            return (Observation.IDLE, False, "")
        row = rows[-1]
        return self.relay_publish(step.partition, row.sequence, row.envelope, step.outcome)


class WorkerAssumesAborted(Model):
    """After a lost commit reply the worker keeps its local frontier (assumes nothing landed)."""

    def after_lost_worker_reply(self, partition: int, d: Decision) -> None:
        self.cursor[partition] = d.record.coords.offset


class ClaimKeepsToken(Model):
    """After a lost claim reply the worker keeps its old token instead of observing."""

    def after_lost_claim_reply(self, partition: int) -> None:
        self.cursor[partition] = None


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
}

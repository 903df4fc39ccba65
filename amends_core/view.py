"""The version-aware materialized view.

Resume contract: ``frontiers[p]`` is the *exclusive* next output offset of
output partition ``p``: every offset below it has been applied (stored,
recognised as a duplicate, or ignored as older). An envelope at an offset
below the frontier is already reflected and is skipped without effect.

Version rule per output ID:
  no stored version, or a higher one  -> store (withdrawals are stored too)
  equal version, identical envelope   -> duplicate, no change
  equal version, different content    -> protocol error; the partition stops
                                         before the offending offset
  lower version                       -> ignored (stale delivery)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import starmap

from amends_core import limits, wire
from amends_core.ledger import (
    ENVELOPE_SCHEMA_VERSION,
    MESSAGE_FAMILY,
    AlertRow,
    BalanceRow,
    Config,
    ConflictRef,
    Envelope,
    Family,
    MessageType,
    OutputID,
    Projection,
    Status,
    StockKey,
)


class Effect(enum.StrEnum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    STALE = "stale"
    ALREADY_APPLIED = "already-applied"
    PROTOCOL_ERROR = "protocol-error"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class ViewDecision:
    """What applying one output record does; install with ``ViewState.install``."""

    partition: int
    offset: int
    effect: Effect
    envelope: Envelope | None
    diagnostic: str = ""

    @property
    def advances(self) -> bool:
        return self.effect in (Effect.STORED, Effect.DUPLICATE, Effect.STALE)


ACCEPTED_SCHEMA_VERSIONS = frozenset(range(1, ENVELOPE_SCHEMA_VERSION + 1))
"""Envelope versions the view applies: the current one and version 1 (every reason, no count)."""


def check_envelope(cfg: Config, partition: int, env: Envelope) -> str | None:
    """Shape and routing checks; returns a diagnostic or None when acceptable."""
    oid = env.output_id
    if env.schema_version not in ACCEPTED_SCHEMA_VERSIONS:
        return f"schema_version {env.schema_version} is not one of 1..{ENVELOPE_SCHEMA_VERSION}"
    if oid.namespace != cfg.namespace:
        return f"namespace {oid.namespace!r} is not {cfg.namespace!r}"
    kc = cfg.key_config(oid.key)
    if kc is None:
        return f"stock key {oid.key} is not configured"
    if kc.partition != partition:
        return f"output for partition {kc.partition} arrived on partition {partition}"
    if MESSAGE_FAMILY[env.type] is not oid.family:
        return f"type {env.type.value} does not belong to family {oid.family.value}"
    if (oid.day is None) != (oid.family is Family.STATUS):
        return "only key-status outputs may (and must) omit the day"
    if env.version < 1:
        return f"version {env.version} is below 1"
    if env.cause.source != cfg.source_incarnation:
        return f"cause names source {env.cause.source!r}"
    if env.cause.revision < 1 or env.cause.offset < 0:
        return "cause has an impossible revision or offset"
    p = env.payload
    t = env.type
    # only the envelope's own type is evaluated (every output record passes here)
    if t is MessageType.BALANCE_STATED:
        ok = p.present and p.close is not None and p.threshold is None
    elif t is MessageType.ALERT_RAISED:
        ok = p.present and p.close is not None and p.threshold is not None
    elif t is MessageType.BALANCE_RETRACTED or t is MessageType.ALERT_RETRACTED:
        ok = not p.present and p.close is None
    else:
        ok = t is MessageType.KEY_STATUS_STATED and p.present and p.status is not None
    if not ok:
        return f"payload shape does not fit {t.value}"
    if t is MessageType.KEY_STATUS_STATED:
        if (p.status is Status.BLOCKED) != bool(p.reasons):
            return "BLOCKED status must carry reasons and READY none"
        carried = min(p.reason_count, limits.MAX_STATUS_REASONS)
        if env.schema_version >= 2 and len(p.reasons) != carried:
            return (
                f"key status carries {len(p.reasons)} of {p.reason_count} reasons,"
                f" not the first {carried}"
            )
    return None


@dataclass(slots=True)
class ViewState:
    """Retained envelopes (including withdrawals), frontiers and stop diagnostics."""

    cfg: Config
    rows: dict[OutputID, Envelope] = field(default_factory=dict)
    frontiers: dict[int, int] = field(default_factory=dict)
    stopped: dict[int, str] = field(default_factory=dict)

    def frontier(self, partition: int) -> int:
        return self.frontiers.get(partition, 0)

    def decide(self, partition: int, offset: int, raw: bytes | Envelope) -> ViewDecision:
        """Pure decision for one output record at (partition, offset)."""
        if partition in self.stopped:
            return ViewDecision(partition, offset, Effect.STOPPED, None, self.stopped[partition])
        if offset < self.frontier(partition):
            return ViewDecision(partition, offset, Effect.ALREADY_APPLIED, None)
        if isinstance(raw, Envelope):
            env = raw
        else:
            dec = wire.decode_envelope(raw)
            if isinstance(dec, wire.DecodeError):
                return ViewDecision(partition, offset, Effect.PROTOCOL_ERROR, None, dec.message)
            env = dec
        problem = check_envelope(self.cfg, partition, env)
        if problem is not None:
            return ViewDecision(partition, offset, Effect.PROTOCOL_ERROR, env, problem)
        cur = self.rows.get(env.output_id)
        if cur is None or env.version > cur.version:
            return ViewDecision(partition, offset, Effect.STORED, env)
        if env.version < cur.version:
            return ViewDecision(partition, offset, Effect.STALE, env)
        if env == cur:
            return ViewDecision(partition, offset, Effect.DUPLICATE, env)
        return ViewDecision(
            partition,
            offset,
            Effect.PROTOCOL_ERROR,
            env,
            f"output {env.output_id.encoded} version {env.version} arrived with different content",
        )

    def install(self, d: ViewDecision) -> None:
        if d.effect is Effect.STORED and d.envelope is not None:
            self.rows[d.envelope.output_id] = d.envelope
        if d.advances:
            self.frontiers[d.partition] = d.offset + 1
        elif d.effect is Effect.PROTOCOL_ERROR:
            self.stopped[d.partition] = f"offset {d.offset}: {d.diagnostic}"

    def apply(self, partition: int, offset: int, raw: bytes | Envelope) -> ViewDecision:
        d = self.decide(partition, offset, raw)
        self.install(d)
        return d

    def copy(self) -> ViewState:
        return ViewState(self.cfg, dict(self.rows), dict(self.frontiers), dict(self.stopped))

    def projections(self) -> dict[StockKey, Projection]:
        return project(self.cfg, self.rows.values())


def project(cfg: Config, rows: Iterable[Envelope]) -> dict[StockKey, Projection]:
    """Visible per-key projection of retained envelopes (withdrawals hidden).

    Verification projects the whole view (hundreds of thousands of envelopes at ten
    million records), so the loop collects plain (day, ...) tuples per key and builds
    the rows once they are sorted (a day appears once per family and key).
    """
    status: dict[StockKey, tuple[Status, tuple[ConflictRef, ...]]] = {}
    balances: dict[StockKey, list[tuple[int, int]]] = {}
    alerts: dict[StockKey, list[tuple[int, int, int]]] = {}
    status_family, balance_family = Family.STATUS, Family.BALANCE
    for env in rows:
        oid, p = env.output_id, env.payload
        family = oid.family
        if family is status_family:
            assert p.status is not None
            status[oid.key] = (p.status, p.reasons)
        elif not p.present:
            continue
        elif family is balance_family:
            assert oid.day is not None and p.close is not None
            days = balances.get(oid.key)
            if days is None:
                days = balances[oid.key] = []
            days.append((oid.day, p.close))
        else:
            assert oid.day is not None and p.close is not None and p.threshold is not None
            crossed = alerts.get(oid.key)
            if crossed is None:
                crossed = alerts[oid.key] = []
            crossed.append((oid.day, p.threshold, p.close))
    return projections(cfg, status, balances, alerts)


def projections(
    cfg: Config,
    status: Mapping[StockKey, tuple[Status, tuple[ConflictRef, ...]]],
    balances: Mapping[StockKey, list[tuple[int, int]]],
    alerts: Mapping[StockKey, list[tuple[int, int, int]]],
) -> dict[StockKey, Projection]:
    """Each configured key's projection from its visible rows: key status and reasons,
    (day, close) balances and (day, threshold, close) alerts, in any order."""
    out: dict[StockKey, Projection] = {}
    for kc in cfg.keys:
        k = kc.key
        st, reasons = status.get(k, (Status.READY, ()))
        out[k] = Projection(
            k,
            st,
            tuple(sorted(reasons))[: limits.MAX_STATUS_REASONS],
            tuple(starmap(BalanceRow, sorted(balances.get(k, ())))),
            tuple(starmap(AlertRow, sorted(alerts.get(k, ())))),
        )
    return out


@dataclass(frozen=True, slots=True)
class Projected:
    """A view already projected per key, with each key's total conflict reference count:
    what verification compares when a store reads the view's values as columns instead of
    decoding every envelope (``verify`` takes it in place of the envelopes)."""

    projections: Mapping[StockKey, Projection]
    reason_counts: Mapping[StockKey, int]


def reason_counts(rows: Iterable[Envelope]) -> dict[StockKey, int]:
    """Total current conflict references per key, from the key-status envelopes among ``rows``."""
    return {
        env.output_id.key: env.payload.reason_count
        for env in rows
        if env.output_id.family is Family.STATUS
    }

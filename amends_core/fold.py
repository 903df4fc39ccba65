"""Business validation, revision evidence, authority and suffix repair.

``apply`` is pure: it reads a ``KeyState`` and returns a ``FoldDelta`` describing
every change (evidence, authority, status, the repaired suffix of daily closes
and alerts). Stores install a delta with ``KeyState.install`` only when their
commit succeeds. The cost of a delta follows the repaired suffix, not the
key's whole history: per-day totals are kept in sorted parallel lists, and a
repair starting at day ``d`` touches only days ``>= d``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from amends_core import limits, timefmt, wire
from amends_core.ledger import (
    KINDS,
    AlertRow,
    BalanceRow,
    CloseOutOfRange,
    Config,
    ConflictRef,
    Coordinates,
    KeyConfig,
    Kind,
    Projection,
    Record,
    Rejection,
    RejectReason,
    Status,
    StockKey,
    Transaction,
    fast_init,
    in_int64,
)

# ---------------------------------------------------------------- validation

_CANCEL = Kind.CANCEL.value
_READY, _BLOCKED = Status.READY, Status.BLOCKED


def validate(cfg: Config, record: Record) -> Transaction | Rejection:
    """Decode and check one record; the first broken rule names the rejection."""

    def reject(reason: RejectReason, detail: str) -> Rejection:
        return Rejection(record, reason, detail)

    if record.reserved_header:
        return reject(
            RejectReason.RESERVED_HEADER,
            "carries the reserved amends-marker header without being the recorded marker,"
            " or headers the Kafka client cannot read (a header name that is not UTF-8)",
        )
    txn = wire.decode_transaction(record.value)
    if isinstance(txn, wire.DecodeError):
        return reject(RejectReason.MALFORMED, txn.message)
    if not txn.txn_id or not txn.stock_key.item or not txn.stock_key.location:
        return reject(RejectReason.IDENTITY, "txn_id, item and location must be non-empty")
    if txn.revision < 1:
        return reject(RejectReason.REVISION, f"revision {txn.revision} is below 1")
    if txn.kind not in KINDS:
        return reject(RejectReason.KIND, f"kind {txn.kind[:32]!r} is not NEW, AMEND or CANCEL")
    if txn.kind == _CANCEL and txn.qty != 0:
        return reject(RejectReason.CANCEL_QUANTITY, f"CANCEL carries qty {txn.qty}, not 0")
    if not timefmt.day_in_range(txn.day):
        return reject(RejectReason.VALID_TIME, "valid_time is outside years 1-9999 in UTC")
    if txn.valid_ns < cfg.origin_ns:
        return reject(RejectReason.VALID_TIME, "valid_time is before the ledger origin")
    kc = cfg.key_config(txn.stock_key)
    if kc is None:
        return reject(RejectReason.UNKNOWN_KEY, "stock key is not configured")
    tk = wire.decode_transport_key(record.key)
    if isinstance(tk, wire.DecodeError):
        return reject(RejectReason.KEY_MISMATCH, tk.message)
    if tk != txn.stock_key:
        return reject(RejectReason.KEY_MISMATCH, "transport key names another stock key")
    if record.coords.partition != kc.partition:
        return reject(
            RejectReason.ROUTING,
            f"record is on partition {record.coords.partition}, key belongs to {kc.partition}",
        )
    return txn


# ---------------------------------------------------------------- evidence


@dataclass(slots=True)
class Candidate:
    """One distinct canonical assertion and every place it was delivered."""

    txn: Transaction
    _where: Coordinates | list[Coordinates] | None
    """Where it was delivered: the one place (the usual case, kept without a list) or, once
    delivered again, every place in delivery order; None in a compact key state, which
    leaves the places to the store's durable evidence."""

    @property
    def sources(self) -> list[Coordinates]:
        """Every place it was delivered, in delivery order (a new list; empty when not held)."""
        w = self._where
        if w is None:
            return []
        return list(w) if isinstance(w, list) else [w]

    def delivered_at(self, coords: Coordinates) -> None:
        """Record one more delivery of this assertion."""
        w = self._where
        if isinstance(w, list):
            w.append(coords)
        elif w is not None:
            self._where = [w, coords]


@dataclass(slots=True)
class Identity:
    """All revisions seen for one (stock key, txn_id)."""

    highest: int
    _groups: Candidate | list[Candidate] | dict[int, list[Candidate]]
    """The one candidate seen so far, the candidates of the only revision seen so far (which
    is then ``highest``) or, once another revision arrives, the candidates per revision. Most
    identities never see a second candidate, and a key state keeps every identity of its
    key's history: a dictionary and a list each cost about 300 bytes per record of history."""
    dropped_below: int = 0
    """Revisions below this one may have candidates that are not held here (a compact key
    state keeps only the highest revision's); 0 when every revision seen is held."""

    @property
    def revisions(self) -> dict[int, list[Candidate]]:
        """The candidates per revision (a new dictionary; a new list for a single candidate)."""
        g = self._groups
        if isinstance(g, dict):
            return dict(g)
        return {self.highest: [g] if isinstance(g, Candidate) else g}

    def candidates(self, revision: int) -> list[Candidate] | None:
        """The candidates at ``revision``, or None when that revision was never seen."""
        g = self._groups
        if isinstance(g, dict):
            return g.get(revision)
        if revision != self.highest:
            return None
        return [g] if isinstance(g, Candidate) else g

    def top(self) -> list[Candidate]:
        """The candidates at the highest revision."""
        g = self._groups
        if isinstance(g, Candidate):
            return [g]
        return g if isinstance(g, list) else g[self.highest]

    def add_candidate(self, txn: Transaction, coords: Coordinates | None) -> None:
        """Hold a new distinct candidate at ``txn.revision``, delivered at ``coords`` (None:
        the place is not held)."""
        cand = Candidate(txn, coords)
        revision = txn.revision
        g = self._groups
        if isinstance(g, dict):
            g.setdefault(revision, []).append(cand)
        elif revision == self.highest:
            if isinstance(g, Candidate):
                self._groups = [g, cand]
            else:
                g.append(cand)
        else:
            self._groups = {self.highest: [g] if isinstance(g, Candidate) else g, revision: [cand]}
        if revision > self.highest:
            self.highest = revision

    def add_delivery(self, revision: int, index: int, coords: Coordinates) -> None:
        """One more delivery of the held candidate ``index`` at ``revision``."""
        group = self.candidates(revision)
        assert group is not None
        group[index].delivered_at(coords)

    def compact(self) -> None:
        """Keep only what deciding the next assertion needs: the highest revision's candidates,
        without the places they were delivered. Lower revisions' candidates are dropped (a
        store that compacts keeps them durably and restores them with ``restore``)."""
        g = self._groups
        if isinstance(g, dict):
            top = g[self.highest]
            self._groups = top[0] if len(top) == 1 else top
            self.dropped_below = self.highest
            g = self._groups
        for cand in [g] if isinstance(g, Candidate) else g:
            cand._where = None

    def restore(self, lower: dict[int, list[Candidate]]) -> None:
        """Hold again the candidates of every revision below ``dropped_below`` (all of them,
        from the store's durable evidence), so that any revision can be decided."""
        groups = self.revisions
        for rev, group in lower.items():
            if rev >= self.dropped_below or rev in groups:
                msg = f"revision {rev} of {self.top()[0].txn.txn_id!r} is already held"
                raise ValueError(msg)
            groups[rev] = group
        self._groups = groups if len(groups) > 1 else groups[self.highest]
        if isinstance(self._groups, list) and len(self._groups) == 1:
            self._groups = self._groups[0]
        self.dropped_below = 0


class EvidenceNotHeld(LookupError):
    """An assertion names a revision whose candidates a compact key state no longer holds.

    Not an error of the input: the store restores the identity's lower revisions
    (``Identity.restore``) from its durable evidence and decides the record again.
    """

    def __init__(self, key: StockKey, txn_id: str, revision: int, below: int) -> None:
        super().__init__(
            f"{key}: revision {revision} of {txn_id!r} is below {below}, the lowest held"
        )
        self.key = key
        self.txn_id = txn_id
        self.revision = revision
        self.below = below


def new_identity(txn: Transaction, coords: Coordinates | None) -> Identity:
    """The identity of a first assertion of its txn_id, delivered at ``coords`` (None: the
    place is not held)."""
    return Identity(txn.revision, Candidate(txn, coords))


Contribution = tuple[int, int]
"""An active identity's (day, qty)."""


def _authority(ident: Identity) -> tuple[bool, Contribution | None]:
    """(conflicted, active contribution) at the identity's highest revision."""
    group = ident.top()
    if len(group) > 1:
        return True, None
    t = group[0].txn
    return False, ((t.day, t.qty) if t.active else None)


@dataclass(slots=True)
class KeyState:
    """Evidence and current projection of one stock key (mutable; owned by a store)."""

    cfg: KeyConfig
    identities: dict[str, Identity] = field(default_factory=dict)
    active: dict[str, Contribution] = field(default_factory=dict)
    """Unique highest-revision active contribution per identity (kept even while BLOCKED)."""
    blocked: set[str] = field(default_factory=set)
    """Identities whose highest revision has distinct candidates."""
    conflicts: set[ConflictRef] = field(default_factory=set)
    """Every conflict ever observed on this key, current and superseded."""
    touched: bool = False
    # Projection: frozen while BLOCKED. Parallel sorted lists over activity days.
    days: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    closes: list[int] = field(default_factory=list)
    alerts: dict[int, AlertRow] = field(default_factory=dict)
    status: Status = Status.READY
    reasons: tuple[ConflictRef, ...] = ()
    """Every current conflict reference, sorted (projections and envelopes carry the first
    ``limits.MAX_STATUS_REASONS``)."""
    compact: bool = False
    """Keep only the evidence deciding needs (``Identity.compact`` after every install): a
    store that holds the rest durably bounds its memory by the live state, not the history."""

    @property
    def key(self) -> StockKey:
        return self.cfg.key

    def projection(self) -> Projection:
        return Projection(
            self.key,
            self.status,
            self.reasons[: limits.MAX_STATUS_REASONS],
            tuple(BalanceRow(d, c) for d, c in zip(self.days, self.closes, strict=True)),
            tuple(self.alerts[d] for d in sorted(self.alerts)),
        )

    def install(self, delta: FoldDelta) -> None:
        """Install a delta computed by ``apply`` against this very state."""
        txn = delta.txn
        tid = txn.txn_id
        ident = self.identities.get(tid)
        if self.compact:
            if ident is None:
                self.identities[tid] = new_identity(txn, None)
            else:
                if delta.duplicate_of is None:
                    ident.add_candidate(txn, None)
                ident.compact()
        elif ident is None:
            self.identities[tid] = new_identity(txn, delta.coords)
        elif delta.duplicate_of is None:
            ident.add_candidate(txn, delta.coords)
        else:
            ident.add_delivery(txn.revision, delta.duplicate_of, delta.coords)
        if delta.active_after is None:
            self.active.pop(tid, None)
        else:
            self.active[tid] = delta.active_after
        if delta.conflicted_after:
            self.blocked.add(tid)
        else:
            self.blocked.discard(tid)
        if delta.new_conflict is not None:
            self.conflicts.add(delta.new_conflict)
        self.touched = True
        self.status = delta.status
        self.reasons = delta.reasons
        rep = delta.repair
        if rep is not None:
            i = bisect.bisect_left(self.days, rep.from_day)
            self.days[i:] = rep.days
            self.totals[i:] = rep.totals
            self.counts[i:] = rep.counts
            self.closes[i:] = rep.closes
            for d in rep.old_alert_days:
                del self.alerts[d]
            for a in rep.alerts:
                self.alerts[a.day] = a


def new_key_state(kc: KeyConfig) -> KeyState:
    return KeyState(kc)


# ---------------------------------------------------------------- deltas


@fast_init
@dataclass(frozen=True, slots=True)
class Repair:
    """The recomputed suffix of days ``>= from_day`` (old and new sides for the diff)."""

    from_day: int
    days: tuple[int, ...]
    totals: tuple[int, ...]
    counts: tuple[int, ...]
    closes: tuple[int, ...]
    alerts: tuple[AlertRow, ...]
    old_days: tuple[int, ...]
    old_alert_days: tuple[int, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class FoldDelta:
    """Everything one accepted assertion changes on its key."""

    key: StockKey
    txn: Transaction
    coords: Coordinates
    duplicate_of: int | None
    """Index of the canonical-equal candidate already held, or None for a new one."""
    active_after: Contribution | None
    conflicted_after: bool
    new_conflict: ConflictRef | None
    status: Status
    reasons: tuple[ConflictRef, ...]
    repair: Repair | None
    """None when no business fact changes."""


def _suffix_closes(
    kc: KeyConfig, start: int, days: list[int], totals: list[int]
) -> tuple[list[int], list[AlertRow]]:
    """Closes and crossings of a run of days starting from the close ``start``."""
    thr = kc.reorder_threshold
    closes: list[int] = []
    alerts: list[AlertRow] = []
    before = start
    for d, t in zip(days, totals, strict=True):
        close = before + t  # exact: Python integers never wrap
        if not in_int64(close):
            raise CloseOutOfRange(kc.key, d, close)
        if before >= thr > close:
            alerts.append(AlertRow(d, thr, close))
        closes.append(close)
        before = close
    return closes, alerts


def _repair(
    state: KeyState,
    from_day: int,
    remove: Contribution | None,
    add: Contribution | None,
) -> Repair:
    """Move one identity's contribution and recompute days ``>= from_day``."""
    i = bisect.bisect_left(state.days, from_day)
    days = state.days[i:]
    totals = state.totals[i:]
    counts = state.counts[i:]
    old_days = tuple(days)
    if remove is not None:
        j = bisect.bisect_left(days, remove[0])
        totals[j] -= remove[1]
        counts[j] -= 1
        if counts[j] == 0:
            del days[j], totals[j], counts[j]
    if add is not None:
        j = bisect.bisect_left(days, add[0])
        if j < len(days) and days[j] == add[0]:
            totals[j] += add[1]
            counts[j] += 1
        else:
            days.insert(j, add[0])
            totals.insert(j, add[1])
            counts.insert(j, 1)
    start = state.closes[i - 1] if i > 0 else state.cfg.opening_balance
    closes, alerts = _suffix_closes(state.cfg, start, days, totals)
    alerts_held = state.alerts
    old_alert_days = tuple(d for d in old_days if d in alerts_held) if alerts_held else ()
    return Repair(
        from_day, tuple(days), tuple(totals), tuple(counts), tuple(closes), tuple(alerts),
        old_days, old_alert_days,
    )


def _full_refold(state: KeyState, active: dict[str, Contribution]) -> Repair:
    """Recompute the whole key from its opening balance (used when a block resolves)."""
    per_day: dict[int, list[int]] = {}
    for d, q in active.values():
        slot = per_day.setdefault(d, [0, 0])
        slot[0] += q
        slot[1] += 1
    days = sorted(per_day)
    totals = [per_day[d][0] for d in days]
    counts = [per_day[d][1] for d in days]
    closes, alerts = _suffix_closes(state.cfg, state.cfg.opening_balance, days, totals)
    firsts = [d[0] for d in (days, state.days) if d]
    from_day = min(firsts) if firsts else timefmt.MAX_DAY
    return Repair(
        from_day, tuple(days), tuple(totals), tuple(counts), tuple(closes), tuple(alerts),
        tuple(state.days), tuple(sorted(state.alerts)),
    )


def apply(state: KeyState, txn: Transaction, coords: Coordinates) -> FoldDelta:
    """Fold one validated assertion into a key without modifying ``state``.

    Raises CloseOutOfRange when a repaired daily close leaves signed 64-bit, and
    EvidenceNotHeld when ``state`` is compact and the assertion's revision was dropped.
    """
    tid = txn.txn_id
    ident = state.identities.get(tid)
    if ident is not None and txn.revision < ident.dropped_below:
        raise EvidenceNotHeld(state.key, tid, txn.revision, ident.dropped_below)
    held = ident.candidates(txn.revision) if ident is not None else None
    group = held if held is not None else []
    duplicate_of = None
    for idx, cand in enumerate(group):
        if cand.txn.canonical == txn.canonical:
            duplicate_of = idx
            break

    # Authority before and after, for this identity only.
    if ident is None:
        conflicted_before, active_before = False, None
        highest_after = txn.revision
        group_after_size = 1
        top = txn
    else:
        conflicted_before, active_before = _authority(ident)
        highest_after = max(ident.highest, txn.revision)
        if txn.revision == highest_after:
            group_after_size = len(group) + (duplicate_of is None)
            top = group[0].txn if group else txn
        else:
            top_group = ident.top()  # highest_after is ident.highest here
            group_after_size = len(top_group)
            top = top_group[0].txn
    conflicted_after = group_after_size > 1
    active_after: Contribution | None
    if conflicted_after:
        active_after = None
    else:
        active_after = (top.day, top.qty) if top.active else None

    new_conflict = None
    if duplicate_of is None and group:
        ref = ConflictRef(tid, txn.revision)
        if ref not in state.conflicts:
            new_conflict = ref

    blocked = state.blocked
    blocked_before = bool(blocked)
    blocked_after_set: set[str] | frozenset[str]
    if conflicted_after:
        blocked_after_set = blocked | {tid}
    elif tid in blocked:
        blocked_after_set = blocked - {tid}
    else:
        blocked_after_set = blocked  # only read below: no copy when nothing changes
    blocked_after = bool(blocked_after_set)

    if blocked_after:
        status = _BLOCKED
        reasons = tuple(
            sorted(
                ConflictRef(t, (highest_after if t == tid else state.identities[t].highest))
                for t in blocked_after_set
            )
        )
    else:
        status, reasons = _READY, ()

    repair: Repair | None = None
    if blocked_after:
        repair = None  # values stay frozen while authority is unresolved
    elif blocked_before:
        merged = dict(state.active)
        if active_after is None:
            merged.pop(tid, None)
        else:
            merged[tid] = active_after
        repair = _full_refold(state, merged)
    elif active_before != active_after:
        if active_before is None:
            assert active_after is not None  # they differ
            from_day = active_after[0]
        elif active_after is None:
            from_day = active_before[0]
        else:
            from_day = min(active_before[0], active_after[0])
        repair = _repair(state, from_day, active_before, active_after)

    # In FoldDelta's field order: positional arguments cost less than keywords, once a record.
    return FoldDelta(
        state.cfg.key, txn, coords, duplicate_of, active_after, conflicted_after,
        new_conflict, status, reasons, repair,
    )

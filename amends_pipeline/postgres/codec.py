"""KeyState and output intent to table rows and back.

A key's durable state is split by how it changes:

* ``observations``: one append-only row per accepted source record (the
  revision evidence). Authority, blocked identities, conflicts and status are
  all derived from it on load, so nothing about them is stored twice.
* ``key_days``: one row per activity day (total, active count, close, alert
  flag). A repair from day ``d`` rewrites only rows ``>= d``.
* ``outputs``: the latest committed envelope per output ID, as columns. The
  cause's source and partition are those of the key (accepted records are
  checked for both), so only offset, transaction and revision are stored.

Instants are stored as (UTC day, nanoseconds of day) because years 1..9999
in nanoseconds leave 64 bits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from amends_core import fold, timefmt
from amends_core.ledger import (
    SCHEMA_VERSION,
    AlertRow,
    Cause,
    ConflictRef,
    Coordinates,
    Envelope,
    Family,
    KeyConfig,
    MessageType,
    OutputID,
    Payload,
    Status,
    StockKey,
    Transaction,
    compact_json,
)

NS_PER_DAY = timefmt.NS_PER_DAY

FAMILY_CODE: dict[Family, int] = {Family.BALANCE: 0, Family.ALERT: 1, Family.STATUS: 2}
CODE_FAMILY: dict[int, Family] = {v: k for k, v in FAMILY_CODE.items()}
WITHDRAWN = Payload(present=False)


# ---------------------------------------------------------------- evidence


def observation_row(key_id: int, txn: Transaction, offset: int, candidate: int) -> tuple[Any, ...]:
    """Row of ``observations`` for one accepted record."""
    vd, vn = divmod(txn.valid_ns, NS_PER_DAY)
    sd, sn = divmod(txn.source_ns, NS_PER_DAY)
    return (key_id, offset, txn.txn_id, txn.revision, candidate, txn.kind, vd, vn, txn.qty, sd, sn)


def _transaction(
    key: StockKey, tid: str, rev: int, kind: str, vd: int, vn: int, qty: int, sd: int, sn: int
) -> Transaction:
    """The assertion an ``observations`` row holds (``observation_row`` the other way)."""
    return Transaction(tid, rev, kind, key, vd * NS_PER_DAY + vn, qty, sd * NS_PER_DAY + sn)


def rebuild_key_state(
    kc: KeyConfig,
    source: str,
    observations: Iterable[tuple[Any, ...]],
    days: Iterable[tuple[Any, ...]],
    *,
    compact: bool = False,
) -> fold.KeyState:
    """A KeyState equal to the one the installs produced, from stored rows.

    ``observations``: (offset, txn_id, revision, candidate, kind, valid_day,
    valid_nod, qty, source_day, source_nod) in offset order.
    ``days``: (day, total, active_count, close, alert) in day order.
    ``compact``: build the compact state (``KeyState.compact``) the installs of a compact
    state produce: per identity only the highest revision's candidates, no delivery places.
    """
    st = fold.new_key_state(kc)
    st.compact = compact
    key = kc.key
    part = kc.partition
    idents = st.identities
    conflicts = st.conflicts
    for off, tid, rev, cand, kind, vd, vn, qty, sd, sn in observations:
        if cand > 0:  # a second distinct candidate at a revision: a conflict there
            conflicts.add(ConflictRef(tid, rev))
        ident = idents.get(tid)
        if ident is not None and rev < ident.dropped_below:
            continue  # compact: a lower revision, no longer held
        coords = None if compact else Coordinates(source, part, off)
        held = ident.candidates(rev) if ident is not None else None
        n = 0 if held is None else len(held)
        if cand == n:
            txn = _transaction(key, tid, rev, kind, vd, vn, qty, sd, sn)
            if ident is None:
                idents[tid] = fold.new_identity(txn, coords)
            else:
                ident.add_candidate(txn, coords)
        elif ident is not None and cand < n:
            if coords is not None:
                ident.add_delivery(rev, cand, coords)
        else:
            msg = f"observation at offset {off} names candidate {cand} of {n}"
            raise ValueError(msg)
        if compact:
            idents[tid].compact()
    for tid, ident in idents.items():
        top = ident.top()
        if len(top) > 1:
            st.blocked.add(tid)
        elif top[0].txn.active:
            t = top[0].txn
            st.active[tid] = (t.day, t.qty)
    st.touched = bool(idents)
    if st.blocked:
        st.status = Status.BLOCKED
        st.reasons = tuple(sorted(ConflictRef(t, idents[t].highest) for t in st.blocked))
    thr = kc.reorder_threshold
    for day, total, count, close, alert in days:
        st.days.append(day)
        st.totals.append(int(total))
        st.counts.append(count)
        st.closes.append(close)
        if alert:
            st.alerts[day] = AlertRow(day, thr, close)
    return st


def lower_revisions(
    key: StockKey, source: str, partition: int, observations: Iterable[tuple[Any, ...]]
) -> dict[int, list[fold.Candidate]]:
    """The candidates (with every place delivered) per revision, from one identity's
    ``observations`` rows (same columns as ``rebuild_key_state``'s, in offset order):
    what ``Identity.restore`` takes back into a compact key state."""
    groups: dict[int, list[fold.Candidate]] = {}
    for off, tid, rev, cand, kind, vd, vn, qty, sd, sn in observations:
        coords = Coordinates(source, partition, off)
        group = groups.setdefault(rev, [])
        if cand == len(group):
            group.append(fold.Candidate(_transaction(key, tid, rev, kind, vd, vn, qty, sd, sn), coords))
        elif cand < len(group):
            group[cand].delivered_at(coords)
        else:
            msg = f"observation at offset {off} names candidate {cand} of {len(group)}"
            raise ValueError(msg)
    return groups


def day_rows(key_id: int, st: fold.KeyState, start: int) -> list[tuple[Any, ...]]:
    """Rows of ``key_days`` for the key's days from index ``start`` on."""
    alerts = st.alerts
    return [
        (key_id, d, t, c, cl, d in alerts)
        for d, t, c, cl in zip(
            st.days[start:], st.totals[start:], st.counts[start:], st.closes[start:], strict=True
        )
    ]


# ---------------------------------------------------------------- outputs


def output_row(key_id: int, env: Envelope) -> tuple[Any, ...]:
    """Row of ``outputs`` for the latest envelope of an output ID."""
    oid, p, c = env.output_id, env.payload, env.cause
    reasons = None
    status = None
    if p.status is not None:
        status = p.status.value
        refs = [[r.txn_id, r.revision] for r in p.reasons]
        # a status carries the first references only: keep the total beside them
        kept: Any = refs if p.reason_count == len(refs) else {"refs": refs, "count": p.reason_count}
        reasons = compact_json(kept)
    return (
        key_id,
        FAMILY_CODE[oid.family],
        0 if oid.day is None else oid.day,
        env.version,
        p.present,
        p.close,
        p.threshold,
        status,
        reasons,
        c.offset,
        c.txn_id,
        c.revision,
    )


_STATED = {Family.BALANCE: MessageType.BALANCE_STATED, Family.ALERT: MessageType.ALERT_RAISED}
_RETRACTED = {
    Family.BALANCE: MessageType.BALANCE_RETRACTED,
    Family.ALERT: MessageType.ALERT_RETRACTED,
}


def envelope_from_row(namespace: str, kc: KeyConfig, source: str, row: tuple[Any, ...]) -> Envelope:
    """Inverse of ``output_row`` (without the key id): the committed envelope."""
    family_code, day, version, present, close, threshold, status, reasons, c_off, c_txn, c_rev = row
    family = CODE_FAMILY[family_code]
    cause = Cause(source, kc.partition, c_off, c_txn, c_rev)
    if family is Family.STATUS:
        doc = json.loads(reasons or "[]")
        pairs, count = (doc["refs"], doc["count"]) if isinstance(doc, dict) else (doc, len(doc))
        refs = tuple(ConflictRef(t, r) for t, r in pairs)
        payload = Payload(True, status=Status(status), reasons=refs, reason_count=count)
        oid = OutputID(namespace, family, kc.key, None)
        mtype = MessageType.KEY_STATUS_STATED
    else:
        oid = OutputID(namespace, family, kc.key, day)
        if present:
            payload = Payload(True, close=close, threshold=threshold)
            mtype = _STATED[family]
        else:
            payload = WITHDRAWN
            mtype = _RETRACTED[family]
    return Envelope(SCHEMA_VERSION, oid, version, mtype, payload, cause)

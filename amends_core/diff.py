"""Reconcile a fold delta against committed output intent into versioned envelopes.

The comparison is against what this namespace has *committed* (latest envelope
per output ID), never against what a downstream view has applied: transport
lag must not leak into version allocation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from amends_core import limits
from amends_core.fold import FoldDelta
from amends_core.ledger import (
    INT64_MAX,
    SCHEMA_VERSION,
    Cause,
    ConflictRef,
    Envelope,
    Family,
    MessageType,
    OutputID,
    Payload,
    Status,
    StockKey,
)
from amends_core.memo import remember

Latest = Callable[[OutputID], Envelope | None]
"""Lookup of the latest committed envelope for an output ID."""

WITHDRAWN = Payload(present=False)


class OutputOperationError(ArithmeticError):
    """An output cannot be committed: an operation error, never a rejection."""


class VersionExhausted(OutputOperationError):
    """An output ID reached the largest signed 64-bit version."""


class EnvelopeTooLarge(OutputOperationError):
    """An envelope would exceed ``limits.MAX_ENVELOPE_BYTES`` (a defect: limits forbid it)."""


def _status_fields(delta: FoldDelta) -> tuple[bool, None, None, Status, tuple[ConflictRef, ...], int]:
    """The key-status payload's fields in ``Payload``'s order: present, close, threshold,
    status, the first ``MAX_STATUS_REASONS`` references and their total."""
    reasons = delta.reasons
    return True, None, None, delta.status, reasons[: limits.MAX_STATUS_REASONS], len(reasons)


def status_payload(delta: FoldDelta) -> Payload:
    """The key-status payload: the first ``MAX_STATUS_REASONS`` references and their total."""
    return Payload(*_status_fields(delta))


def check_size(env: Envelope) -> None:
    """Raise EnvelopeTooLarge unless ``env`` encodes within ``limits.MAX_ENVELOPE_BYTES``."""
    size = len(env.to_bytes())
    if size > limits.MAX_ENVELOPE_BYTES:
        msg = (
            f"output {env.output_id.encoded[:200]} version {env.version} would be {size} bytes,"
            f" above the {limits.MAX_ENVELOPE_BYTES} byte envelope limit"
        )
        raise EnvelopeTooLarge(msg)


def _next_version(cur: Envelope | None, oid: OutputID) -> int:
    if cur is None:
        return 1
    if cur.version >= INT64_MAX:
        msg = f"output {oid.encoded} has no version left"
        raise VersionExhausted(msg)
    return cur.version + 1


_ALERT, _BALANCE, _STATUS = Family.ALERT, Family.BALANCE, Family.STATUS
_ALERT_RAISED, _ALERT_RETRACTED = MessageType.ALERT_RAISED, MessageType.ALERT_RETRACTED
_BALANCE_STATED, _BALANCE_RETRACTED = MessageType.BALANCE_STATED, MessageType.BALANCE_RETRACTED
_STATUS_STATED = MessageType.KEY_STATUS_STATED


def reconcile(namespace: str, delta: FoldDelta, latest: Latest, cause: Cause) -> list[Envelope]:
    """Envelopes for every output whose payload differs from committed intent.

    Order: business IDs by encoded output ID (alert before balance, then day,
    which is exactly the lexicographic order of the encoded JSON tuples inside
    one key), the key-status ID last.

    Raises VersionExhausted, or EnvelopeTooLarge when the key-status envelope
    (the only one whose size depends on data beyond bounded identifiers)
    would exceed the envelope limit.
    """
    out: list[Envelope] = []
    key = delta.key
    rep = delta.repair
    if rep is not None:
        if rep.alerts or rep.old_alert_days:
            new_alerts = {a.day: a for a in rep.alerts}
            for d in sorted(set(rep.old_alert_days).union(new_alerts)):
                a = new_alerts.get(d)
                _emit(
                    out, latest, cause, OutputID(namespace, _ALERT, key, d),
                    None if a is None else Payload(True, close=a.close, threshold=a.threshold),
                    _ALERT_RAISED, _ALERT_RETRACTED,
                )
        days = rep.days
        changed: Iterable[tuple[int, int | None]]
        if days == rep.old_days:
            changed = zip(days, rep.closes, strict=True)  # same days: every one is restated
        else:
            new_closes = dict(zip(days, rep.closes, strict=True))
            changed = ((d, new_closes.get(d)) for d in sorted(set(rep.old_days).union(days)))
        for d, c in changed:
            _emit(
                out, latest, cause, OutputID(namespace, _BALANCE, key, d),
                None if c is None else Payload(True, close=c),
                _BALANCE_STATED, _BALANCE_RETRACTED,
            )
    oid = _status_ids.get((namespace, key))
    if oid is None:
        oid = _status_id(namespace, key)
    cur = latest(oid)
    if cur is not None and _same_status(cur.payload, delta):
        return out
    env = Envelope(SCHEMA_VERSION, oid, _next_version(cur, oid), _STATUS_STATED, status_payload(delta), cause)
    out.append(env)
    if env.payload.reasons or unreferenced_bound() > limits.MAX_ENVELOPE_BYTES:
        # Without references a status envelope is bounded by its identifiers: encoding
        # it only to measure it is needed when the limits allow that bound past the limit.
        check_size(env)
    return out


_status_ids: dict[tuple[str, StockKey], OutputID] = {}
"""One key-status output ID per namespace and key, made once: every record looks its key's up.
The same object each time also makes dictionaries keyed by it find it by identity."""
_STATUS_IDS_REMEMBERED = 1 << 14


def _status_id(namespace: str, key: StockKey) -> OutputID:
    oid = OutputID(namespace, _STATUS, key, None)
    return remember(_status_ids, (namespace, key), oid, _STATUS_IDS_REMEMBERED)


def _same_status(committed: Payload, delta: FoldDelta) -> bool:
    """``committed == status_payload(delta)`` without building the payload (most records
    leave the status as it is): the comparison the dataclass makes, field by field."""
    return committed.__class__ is Payload and (
        committed.present, committed.close, committed.threshold, committed.status,
        committed.reasons, committed.reason_count,
    ) == _status_fields(delta)


def _emit(
    out: list[Envelope], latest: Latest, cause: Cause, oid: OutputID, want: Payload | None,
    stated: MessageType, retracted: MessageType,
) -> None:
    """Append the envelope that moves ``oid`` from its committed payload to ``want`` (None:
    withdrawn), if any."""
    cur = latest(oid)
    if cur is not None:
        oid = cur.output_id  # equal; the committed one is what dictionaries already hold
    if want is None:
        if cur is None or not cur.payload.present:
            return
        out.append(Envelope(SCHEMA_VERSION, oid, _next_version(cur, oid), retracted, WITHDRAWN, cause))
        return
    if cur is not None and cur.payload == want:
        return
    out.append(Envelope(SCHEMA_VERSION, oid, _next_version(cur, oid), stated, want, cause))


def unreferenced_bound() -> int:
    """Most bytes a key-status envelope without references can encode to under ``limits``.

    Its variable parts are two names (namespace in the output ID, source in the
    cause) and three identifiers (item, location, transaction); JSON writes a
    character as at most 6 bytes (``\\u001f``). 2 KiB covers member names,
    six 64-bit numbers, the type and the status.
    """
    return 6 * (2 * limits.MAX_NAME_BYTES + 3 * limits.MAX_ID_BYTES) + 2048

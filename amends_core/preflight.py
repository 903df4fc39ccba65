"""Replay preflight: a consumed record must already be fully reflected in state.

A replay re-reads part of a partition that was consumed, to prove that the
state in the store is intact before a new owner takes over. Accepted input must
match held canonical evidence at the same coordinates and emit nothing;
rejected input must match the held raw rejection and its reason. One copy of
the rule for every store: the store supplies how to read its state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from amends_core import fold, process
from amends_core.errors import ReplayMismatch
from amends_core.ledger import Config, Envelope, OutputID, Record, Rejection, StockKey


def check_one_partition(partition: int, records: Iterable[Record]) -> list[Record]:
    """``records`` as a list; ReplayMismatch if one belongs to another partition."""
    recs = list(records)
    for r in recs:
        if r.coords.partition != partition:
            msg = f"record of partition {r.coords.partition} in a replay of {partition}"
            raise ReplayMismatch(msg)
    return recs


def check_replayed(
    cfg: Config,
    record: Record,
    *,
    frontier: int | None,
    state_of: Callable[[StockKey], fold.KeyState],
    latest: Callable[[OutputID], Envelope | None],
    held_rejection: Callable[[], Rejection | None],
    skipped_sha256: str | None = None,
) -> None:
    """ReplayMismatch unless ``record`` is consumed and reflected exactly.

    ``frontier``: the installed frontier of the record's partition (None: no such
    partition). ``held_rejection``: the quarantined record held at the record's
    coordinates, read only when the record is rejected again. ``skipped_sha256``: set
    when an operator skipped the record at these coordinates (the SHA-256 of the
    value skipped); it was never applied, so only its bytes are compared.
    """
    c = record.coords
    if c.source != cfg.source_incarnation or frontier is None or c.offset >= frontier:
        msg = f"offset {c.offset} of partition {c.partition} has not been consumed"
        raise ReplayMismatch(msg)
    if skipped_sha256 is not None:
        if hashlib.sha256(record.value).hexdigest() != skipped_sha256:
            msg = f"the operator-skipped record at {c.partition}/{c.offset} has other bytes"
            raise ReplayMismatch(msg)
        return
    out = process.decide(cfg, record, state_of, latest)
    if isinstance(out, process.Rejected):
        if held_rejection() != out.rejection:
            msg = f"no matching quarantine record at {c.partition}/{c.offset}"
            raise ReplayMismatch(msg)
        return
    d = out.delta
    ident = state_of(d.key).identities.get(d.txn.txn_id)
    group = (ident.candidates(d.txn.revision) if ident else None) or []
    if d.duplicate_of is None or c not in group[d.duplicate_of].sources:
        msg = f"no matching evidence at {c.partition}/{c.offset}"
        raise ReplayMismatch(msg)
    if out.envelopes:
        msg = f"replaying {c.partition}/{c.offset} would emit {len(out.envelopes)} envelopes"
        raise ReplayMismatch(msg)


__all__ = ["check_one_partition", "check_replayed"]

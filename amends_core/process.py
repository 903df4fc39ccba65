"""One record through validation, fold and diff: the decision every store installs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amends_core import diff, fold
from amends_core.ledger import Cause, Config, Envelope, Record, Rejection, StockKey, fast_init


@fast_init
@dataclass(frozen=True, slots=True)
class Accepted:
    record: Record
    delta: fold.FoldDelta
    envelopes: tuple[Envelope, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class Rejected:
    rejection: Rejection


Outcome = Accepted | Rejected


def decide(
    cfg: Config,
    record: Record,
    state_of: Callable[[StockKey], fold.KeyState],
    latest: diff.Latest,
) -> Outcome:
    """Validate, fold and reconcile one record; nothing is modified.

    Raises CloseOutOfRange / VersionExhausted (operation errors).
    """
    v = fold.validate(cfg, record)
    if isinstance(v, Rejection):
        return Rejected(v)
    state = state_of(v.stock_key)
    delta = fold.apply(state, v, record.coords)
    c = record.coords
    cause = Cause(c.source, c.partition, c.offset, v.txn_id, v.revision)
    envs = diff.reconcile(cfg.namespace, delta, latest, cause)
    return Accepted(record, delta, tuple(envs))

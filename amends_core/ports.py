"""Value types the processing stores and the roles trade in, whatever store backs them.

``Token`` and ``OutboxRow`` are what a worker holds and what a relay publishes;
both the memory store and the PostgreSQL store produce and accept them, so they
live here rather than in either store.
"""

from __future__ import annotations

from dataclasses import dataclass

from amends_core.ledger import Envelope


@dataclass(frozen=True, slots=True)
class Token:
    """Proof of ownership of one partition at one epoch."""

    namespace: str
    digest: str
    partition: int
    epoch: int


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One envelope waiting in a partition's outbox, in commit order (``sequence`` from 1)."""

    partition: int
    sequence: int
    envelope: Envelope


__all__ = ["OutboxRow", "Token"]

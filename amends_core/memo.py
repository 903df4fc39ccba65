"""Bounded memos: dictionaries in which a hot path keeps what it computed, up to a bound.

They hold day numbers, stock keys and texts that repeat from record to record. Two of
the modules that keep them (``ledger`` and ``timefmt``) are imported by the oracle too,
so this module imports nothing of amends: it stays a leaf of the oracle's import graph.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remember(memo: dict[K, V], key: K, value: V, bound: int) -> V:
    """Keep ``value`` under ``key`` and return it.

    A memo that already holds ``bound`` entries is emptied first: the simplest bound
    that hostile or unusually varied input cannot grow, and what is used again is
    soon remembered again. Call it on a miss only: a hit is one dictionary lookup.
    """
    if len(memo) >= bound:
        memo.clear()
    memo[key] = value
    return value

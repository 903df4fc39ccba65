"""Reduce a failing trace by deleting steps and records while it still fails.

The reduction is deterministic delta debugging over two lists: first steps,
then records, each with halving chunk sizes down to single items, repeated
until a whole pass deletes nothing (or the attempt budget runs out). A deletion
is kept only when the predicate still reports the *same* failure, so the result
replays to the failure the original showed. Deleting a record leaves a gap in
its partition's offsets, which every component already allows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from amends_core.sim.trace import Trace

T = TypeVar("T")


def _reduce(
    items: Sequence[T], fails: Callable[[tuple[T, ...]], bool], budget: list[int]
) -> tuple[tuple[T, ...], bool]:
    cur = tuple(items)
    changed = False
    chunk = max(1, len(cur) // 2)
    while chunk >= 1 and budget[0] > 0:
        i = 0
        while i < len(cur) and budget[0] > 0:
            cand = cur[:i] + cur[i + chunk :]
            budget[0] -= 1
            if fails(cand):
                cur = cand
                changed = True
            else:
                i += chunk
        chunk //= 2
    return cur, changed


def shrink(trace: Trace, fails: Callable[[Trace], bool], max_attempts: int = 5000) -> Trace:
    """The smallest trace this search finds for which ``fails`` stays true.

    ``fails`` must be deterministic and true for ``trace`` itself.
    """
    budget = [max_attempts]
    cur = trace
    while budget[0] > 0:
        cur, a = _pass(cur, fails, budget)
        if not a:
            break
    return cur


def _pass(t: Trace, fails: Callable[[Trace], bool], budget: list[int]) -> tuple[Trace, bool]:
    """One reduction pass: steps first, then records."""
    steps, a = _reduce(t.steps, lambda s: fails(t.with_parts(steps=s)), budget)
    t = t.with_parts(steps=steps)
    records, b = _reduce(t.records, lambda r: fails(t.with_parts(records=r)), budget)
    return t.with_parts(records=records), a or b

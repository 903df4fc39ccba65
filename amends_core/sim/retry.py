"""Retry state on the simulator's logical clock.

Each (actor, partition) pair has its own state. An unsuccessful reply (a known
abort, a lost reply, a refused guard) sets the next eligible tick to
``now + DELAYS[n-1]`` for the n-th consecutive failure; the third consecutive
failure also parks the pair. A parked pair does no work until an explicit
resume, which clears the park and the failure count but keeps the outstanding
delay: the 4-tick backoff of the third failure is still honoured afterwards.
An attempt before the eligible tick is only a backoff observation and changes
nothing. Any successful reply resets the pair completely.

No wall clock, sleep or jitter is involved: time moves only by ``tick`` steps.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DELAYS = (1, 2, 4)
"""Backoff after the first, second and third consecutive unsuccessful reply."""
PARK_AFTER = len(DELAYS)


class Gate(enum.StrEnum):
    """Why an attempt did no work."""

    BACKOFF = "backoff"
    PARKED = "parked"


@dataclass(slots=True)
class RetryState:
    failures: int = 0
    """Consecutive unsuccessful replies since the last success or resume."""
    next_at: int = 0
    """First logical tick at which another attempt does work."""
    parked: bool = False


class RetryBook:
    """Retry states keyed by (actor name, partition)."""

    __slots__ = ("_states",)

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], RetryState] = {}

    def state(self, actor: str, partition: int) -> RetryState:
        """A copy of the current state (a fresh state when the pair never failed)."""
        s = self._states.get((actor, partition))
        return RetryState() if s is None else RetryState(s.failures, s.next_at, s.parked)

    def gate(self, actor: str, partition: int, now: int) -> Gate | None:
        """None when an attempt at ``now`` may do work."""
        s = self._states.get((actor, partition))
        if s is None:
            return None
        if s.parked:
            return Gate.PARKED
        if now < s.next_at:
            return Gate.BACKOFF
        return None

    def fail(self, actor: str, partition: int, now: int) -> RetryState:
        s = self._states.setdefault((actor, partition), RetryState())
        s.failures += 1
        s.next_at = now + DELAYS[min(s.failures, PARK_AFTER) - 1]
        if s.failures >= PARK_AFTER:
            s.parked = True
        return RetryState(s.failures, s.next_at, s.parked)

    def succeed(self, actor: str, partition: int) -> None:
        self._states.pop((actor, partition), None)

    def resume(self, actor: str, partition: int) -> bool:
        """Unpark a pair; False when it was not parked (nothing changes then)."""
        s = self._states.get((actor, partition))
        if s is None or not s.parked:
            return False
        s.parked = False
        s.failures = 0
        return True

    def parked(self) -> list[tuple[str, int]]:
        return sorted(k for k, s in self._states.items() if s.parked)

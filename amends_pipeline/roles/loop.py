"""A long-running loop around bounded steps: idle waits, retries, signal-aware stop.

Transient failures (database or broker unreachable, lock conflicts) are
retried with capped exponential backoff, at most ``max_retries`` times in a
row; everything else (a replaced owner, a recreated topic, lost retention, a
stopped view partition, an arithmetic operation error) ends the loop with
that error, because retrying cannot fix it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from amends_core.errors import Transient
from amends_pipeline.kafka.topics import KafkaUnavailable

TRANSIENT: tuple[type[BaseException], ...] = (Transient, KafkaUnavailable)
"""Store unavailable or in conflict, claims unsettled (all ``Transient``), broker unreachable."""


@dataclass
class Stop:
    """Set by SIGTERM/SIGINT (or a caller); loops finish their current step and return."""

    event: threading.Event = field(default_factory=threading.Event)

    def install(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            self.event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> None:
        self.event.wait(seconds)


def run_loop(
    steps: Sequence[Callable[[], int]],
    stop: Stop,
    *,
    idle_sleep: float = 0.05,
    until_idle: bool = False,
    max_retries: int = 8,
    on_error: Callable[[BaseException, int], None] | None = None,
) -> int:
    """Call every step round-robin; each returns how much work it did.

    Returns the total work done. With ``until_idle`` the loop returns after a
    full round in which no step did any work.
    """
    total = 0
    failures = 0
    while not stop.requested:
        did = 0
        try:
            for step in steps:
                did += step()
            failures = 0
        except TRANSIENT as e:
            failures += 1
            if on_error is not None:
                on_error(e, failures)
            if failures > max_retries:
                raise
            stop.wait(min(5.0, 0.1 * 2 ** (failures - 1)))
            continue
        total += did
        if did == 0:
            if until_idle:
                return total
            stop.wait(idle_sleep)
    return total

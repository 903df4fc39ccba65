"""A long-running loop around bounded steps: idle waits, retries, signal-aware stop.

Transient failures (database or broker unreachable, lock conflicts) are
retried with capped exponential backoff, at most ``max_retries`` times in a
row; everything else (a replaced owner, a recreated topic, lost retention, a
stopped view partition, an arithmetic operation error) ends the loop with
that error, because retrying cannot fix it.

Idle waiting: after a round in which no step did any work the loop waits for
work instead of sleeping a fixed time, when the role gives it a ``wait``: the
worker and the view wait in a Kafka fetch for the next message past their
frontiers, the relay for the worker's commit notification (PostgreSQL
``LISTEN``). A wait is only a wake-up: whatever it says, the steps find the
work themselves, and after ``fallback_poll`` seconds without a wake-up the
loop runs its steps anyway, so a lost wake-up delays work, never stalls it.
A wait that fails is a missed wake-up too: the loop sleeps ``idle_sleep`` and
runs its steps, and reports the failure once through ``on_wait_error`` (again
only after a wait has succeeded in between, so a lasting failure is one line,
not one per idle round). The wait is sliced (at most ``WAIT_SLICE`` seconds per call) so that a stop
request is honoured promptly. Without a ``wait`` the loop sleeps ``idle_sleep``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from amends_core.errors import Transient
from amends_pipeline.kafka.topics import KafkaUnavailable

TRANSIENT: tuple[type[BaseException], ...] = (Transient, KafkaUnavailable)
"""Store unavailable or in conflict, claims unsettled (all ``Transient``), broker unreachable."""

Wait = Callable[[float], bool]
"""Blocks up to the given seconds for a sign of work; True when woken before the time was up."""

WAIT_SLICE = 0.2
"""Longest single ``wait`` call: a stop request waits at most about this long."""

FALLBACK_POLL = 1.0
"""Default seconds an idle role waits for a wake-up before it runs its steps anyway."""


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
    wait: Wait | None = None,
    fallback_poll: float = FALLBACK_POLL,
    until_idle: bool = False,
    max_retries: int = 8,
    on_error: Callable[[BaseException, int], None] | None = None,
    on_wait_error: Callable[[BaseException], None] | None = None,
) -> int:
    """Call every step round-robin; each returns how much work it did.

    Returns the total work done. With ``until_idle`` the loop returns after a
    full round in which no step did any work. Otherwise an idle round is
    followed by ``wait`` (up to ``fallback_poll`` seconds, see the module text)
    or, without one, by ``idle_sleep`` seconds of sleep. ``on_wait_error``
    hears the first failure of ``wait`` after a success (or the start).
    """
    total = 0
    failures = 0
    wait_failing = False

    def wait_failed(e: BaseException) -> None:
        nonlocal wait_failing
        if not wait_failing and on_wait_error is not None:
            on_wait_error(e)
        wait_failing = True

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
            if wait is None:
                stop.wait(idle_sleep)
            elif idle(wait, stop, fallback_poll, idle_sleep, wait_failed) is not None:
                wait_failing = False
    return total


def idle(
    wait: Wait,
    stop: Stop,
    fallback_poll: float,
    idle_sleep: float = 0.05,
    on_wait_error: Callable[[BaseException], None] | None = None,
) -> bool | None:
    """Wait for a wake-up, in slices, for at most ``fallback_poll`` seconds.

    True when woken, False when the time was up or a stop was requested, None
    when ``wait`` failed. A failing wait is only a missed wake-up: it is
    handed to ``on_wait_error``, then the loop sleeps ``idle_sleep`` and runs
    its steps, which meet (and report) whatever failed that they depend on.
    """
    deadline = time.monotonic() + fallback_poll
    while not stop.requested:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            if wait(min(left, WAIT_SLICE)):
                return True
        except Exception as e:
            if on_wait_error is not None:
                on_wait_error(e)
            stop.wait(idle_sleep)
            return None
    return False

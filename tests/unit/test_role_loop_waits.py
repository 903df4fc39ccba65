"""How an idle role loop waits (``run_loop`` with a ``wait``): woken early, polled anyway, stoppable.

No clock is asserted on: the waits are fakes that record what they were asked.
"""

from __future__ import annotations

from amends_pipeline.roles.loop import WAIT_SLICE, Stop, idle, run_loop


class Script:
    """Steps that do the given amounts of work, then stop the loop."""

    def __init__(self, work: list[int], stop: Stop) -> None:
        self.work = work
        self.stop = stop
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if not self.work:
            self.stop.event.set()
            return 0
        return self.work.pop(0)


def test_an_idle_round_waits_and_a_wake_up_runs_the_steps_again() -> None:
    stop = Stop()
    step = Script([1, 0, 0, 2], stop)
    asked: list[float] = []

    def wait(seconds: float) -> bool:
        asked.append(seconds)
        return True  # work arrived

    assert run_loop([step], stop, wait=wait, fallback_poll=3600) == 3
    assert len(asked) == 2  # one wait per idle round, each ended by its wake-up
    assert all(0 < s <= WAIT_SLICE for s in asked)  # sliced: a stop is honoured promptly


def test_a_wait_that_never_wakes_ends_at_the_fallback_poll() -> None:
    stop = Stop()
    slices: list[float] = []

    def silent(seconds: float) -> bool:
        slices.append(seconds)
        stop.event.wait(seconds)
        return False

    assert idle(silent, stop, fallback_poll=0.05) is False
    assert slices and all(s <= 0.05 for s in slices)


def test_a_failing_wait_is_a_missed_wake_up_not_an_error() -> None:
    stop = Stop()
    step = Script([0, 0], stop)

    def broken(seconds: float) -> bool:
        raise OSError("the listening session is gone")

    assert run_loop([step], stop, wait=broken, fallback_poll=3600, idle_sleep=0.001) == 0
    assert step.calls == 3  # the steps ran again after each failed wait


def test_a_requested_stop_ends_the_wait() -> None:
    stop = Stop()
    calls: list[float] = []

    def wait(seconds: float) -> bool:
        calls.append(seconds)
        stop.event.set()  # SIGTERM arrives while waiting
        return False

    assert idle(wait, stop, fallback_poll=3600) is False
    assert len(calls) == 1


def test_until_idle_never_waits() -> None:
    stop = Stop()

    def wait(seconds: float) -> bool:
        raise AssertionError("a drain must not wait")

    assert run_loop([lambda: 0], stop, wait=wait, until_idle=True) == 0


def test_a_lasting_wait_failure_is_reported_once_and_again_after_a_recovery() -> None:
    stop = Stop()
    step = Script([0, 0, 0, 0, 0], stop)
    outcomes = [OSError("gone"), OSError("still gone"), True, OSError("gone again"), OSError("x")]
    heard: list[str] = []

    def wait(seconds: float) -> bool:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    run_loop([step], stop, wait=wait, fallback_poll=3600, idle_sleep=0.001,
             on_wait_error=lambda e: heard.append(str(e)))
    assert heard == ["gone", "gone again"]  # one line per failing stretch, not one per idle round
    assert step.calls == 6

"""Retry state on the logical clock: delays 1, 2, 4; the third failure parks; success resets."""

from __future__ import annotations

from amends_core.sim.retry import DELAYS, Gate, RetryBook


def test_the_delays_after_consecutive_unsuccessful_replies_are_one_two_and_four_ticks() -> None:
    book = RetryBook()
    assert DELAYS == (1, 2, 4)
    assert book.fail("relay", 0, now=10).next_at == 11
    assert book.fail("relay", 0, now=11).next_at == 13
    assert book.fail("relay", 0, now=13).next_at == 17


def test_an_attempt_before_the_eligible_tick_is_only_a_backoff_observation() -> None:
    book = RetryBook()
    book.fail("worker", 1, now=0)
    assert book.gate("worker", 1, now=0) is Gate.BACKOFF
    assert book.state("worker", 1).failures == 1  # observing backoff changes nothing
    assert book.gate("worker", 1, now=1) is None


def test_the_third_unsuccessful_reply_parks_the_actor_until_an_explicit_resume() -> None:
    book = RetryBook()
    for t in range(3):
        book.fail("view", 0, now=t * 10)
    assert book.gate("view", 0, now=1000) is Gate.PARKED
    assert book.parked() == [("view", 0)]
    assert book.resume("view", 0)
    st = book.state("view", 0)
    assert not st.parked and st.failures == 0


def test_resume_keeps_the_outstanding_four_tick_delay() -> None:
    book = RetryBook()
    for t in (0, 1, 3):
        book.fail("view", 0, now=t)
    book.resume("view", 0)
    assert book.gate("view", 0, now=6) is Gate.BACKOFF
    assert book.gate("view", 0, now=7) is None


def test_a_successful_reply_resets_the_retry_state() -> None:
    book = RetryBook()
    book.fail("relay", 0, now=0)
    book.fail("relay", 0, now=1)
    book.succeed("relay", 0)
    assert book.state("relay", 0).failures == 0
    assert book.fail("relay", 0, now=5).next_at == 6


def test_retry_state_is_kept_per_actor_and_partition() -> None:
    book = RetryBook()
    book.fail("relay", 0, now=0)
    assert book.gate("relay", 1, now=0) is None
    assert book.gate("view", 0, now=0) is None


def test_resuming_an_actor_that_is_not_parked_changes_nothing() -> None:
    book = RetryBook()
    book.fail("worker", 0, now=0)
    assert not book.resume("worker", 0)
    assert book.state("worker", 0).failures == 1

"""Timestamps whose date was seen before parse exactly as the full route parses them.

``timefmt.parse_rfc3339`` remembers the day number of date parts it parsed in
full and then checks only the time of day. Every input below is parsed with
its date already remembered and compared with the full route
(``_parse_rfc3339``): the same nanoseconds, or the same error message.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import timefmt

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
DATES = ["2026-01-01", "0001-01-01", "9999-12-31", "2024-02-29", "1970-01-01"]


def outcome(parse: object, text: str) -> int | str:
    try:
        return parse(text)  # type: ignore[operator, no-any-return]
    except timefmt.TimestampError as e:
        return f"error: {e}"


def agree(text: str) -> int | str:
    for d in DATES:  # remember every date the inputs use
        timefmt._parse_rfc3339(d + "T00:00:00Z")
    assert text[:10] not in DATES or text[:10] in timefmt._dates_seen
    full = outcome(timefmt._parse_rfc3339, text)
    assert outcome(timefmt.parse_rfc3339, text) == full, text
    return full


clock_chars = st.sampled_from(list("0123456789:.+-TtZz ") + ["٣", "\x00", "é"])


@FUZZ
@given(st.sampled_from(DATES), st.text(clock_chars, max_size=40))
def test_any_tail_after_a_known_date(date: str, tail: str) -> None:
    agree(date + tail)


@FUZZ
@given(
    st.sampled_from(DATES),
    st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
    st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=12)),
    st.one_of(st.just("Z"), st.just("z"), st.tuples(st.sampled_from("+-"), st.integers(0, 99), st.integers(0, 99))),
)
def test_plausible_times_after_a_known_date(
    date: str, h: int, mi: int, s: int, frac: str | None, zone: object
) -> None:
    z = zone if isinstance(zone, str) else f"{zone[0]}{zone[1]:02d}:{zone[2]:02d}"  # type: ignore[index]
    agree(f"{date}T{h:02d}:{mi:02d}:{s:02d}{'' if frac is None else '.' + frac}{z}")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-01-01T12:00:00Z", 1767268800 * 10**9),
        ("2026-01-01t12:00:00.123456789123z", 1767268800 * 10**9 + 123456789),
        ("2026-01-01T00:30:00+01:00", (1767225600 - 1800) * 10**9),
        ("2026-01-01T23:59:59-23:59", (1767225600 + 86399 + 86340) * 10**9),
        ("2026-01-01T24:00:00Z", "error: time of day out of range in '2026-01-01T24:00:00Z'"),
        ("2026-01-01T23:59:60Z", "error: time of day out of range in '2026-01-01T23:59:60Z'"),
        ("2026-01-01T12:00:00+24:00", "error: offset out of range in '2026-01-01T12:00:00+24:00'"),
        ("2026-01-01T12:00:00", "error: not an RFC 3339 timestamp with offset: '2026-01-01T12:00:00'"),
        ("2026-01-01 12:00:00Z", "error: not an RFC 3339 timestamp with offset: '2026-01-01 12:00:00Z'"),
    ],
)
def test_named_times_after_a_known_date(text: str, want: int | str) -> None:
    assert agree(text) == want


def test_the_memory_of_dates_is_bounded() -> None:
    for day in range(timefmt._DATES_REMEMBERED + 10):
        timefmt.parse_rfc3339(timefmt.format_day(day) + "T00:00:00Z")
    assert len(timefmt._dates_seen) <= timefmt._DATES_REMEMBERED


@pytest.mark.parametrize(
    "text",
    ["2024-1-01", "2024-01-01 ", " 2024-01-01", "２０２４-01-01", "2024/01/01", "20240101", "2024-01-01T00:00:00Z"],
)
def test_a_day_is_exactly_four_two_and_two_ascii_digits(text: str) -> None:
    with pytest.raises(ValueError, match="not a YYYY-MM-DD day"):
        timefmt.parse_day(text)


@pytest.mark.parametrize("text", ["2024-02-30", "2023-02-29", "2024-13-01", "2024-00-10", "0000-01-01"])
def test_a_day_of_the_right_shape_that_no_calendar_has_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        timefmt.parse_day(text)


@pytest.mark.parametrize("day", [timefmt.MIN_DAY, -1, 0, 19_723, timefmt.MAX_DAY])
def test_parse_day_inverts_format_day(day: int) -> None:
    assert timefmt.parse_day(timefmt.format_day(day)) == day


def test_formatted_days_are_remembered_without_changing_what_is_refused() -> None:
    """``format_day`` remembers the text of days it formatted: a day formats the same again,
    ``True`` as day 1 (as before), while ``1.0`` is refused even once day 1 is remembered."""
    first = timefmt.format_day(1)
    assert timefmt.format_day(1) == first == "1970-01-02"
    assert timefmt.format_day(True) == first
    with pytest.raises(TypeError):
        timefmt.format_day(1.0)  # type: ignore[arg-type]
    with pytest.raises((ValueError, OverflowError)):
        timefmt.format_day(timefmt.MAX_DAY + 1)
    assert timefmt.format_day(timefmt.MAX_DAY) == "9999-12-31"


def test_parsed_days_are_remembered_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """``parse_day`` remembers the day numbers of texts it parsed (a bounded number): parsing
    again gives the same day, and a text it refused is refused again, never remembered."""
    monkeypatch.setattr(timefmt, "_DATES_REMEMBERED", 3)
    monkeypatch.setattr(timefmt, "_days_parsed", {})
    texts = [f"2024-01-{d:02d}" for d in range(1, 11)]
    first = [timefmt.parse_day(t) for t in texts]
    assert first == [timefmt.parse_day("2024-01-01") + i for i in range(10)]
    assert [timefmt.parse_day(t) for t in texts] == first
    assert len(timefmt._days_parsed) <= 3
    for _ in range(2):
        with pytest.raises(ValueError):
            timefmt.parse_day("2024-02-30")
    assert "2024-02-30" not in timefmt._days_parsed

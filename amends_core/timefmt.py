"""RFC 3339 instants as exact integer nanoseconds, and UTC calendar days.

Instants are kept as integers (nanoseconds since 1970-01-01T00:00:00Z) so that
canonical equality is exact to the nanosecond and no year range of the
standard library leaks into parsing. Days are integers (days since 1970-01-01).
"""

from __future__ import annotations

import re
from datetime import date

from amends_core.memo import remember

NS_PER_SECOND = 1_000_000_000
NS_PER_DAY = 86_400 * NS_PER_SECOND
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
MIN_DAY = date(1, 1, 1).toordinal() - _EPOCH_ORDINAL
MAX_DAY = date(9999, 12, 31).toordinal() - _EPOCH_ORDINAL

# RFC 3339 section 5.6 date-time; an offset is mandatory. ASCII digits only.
_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[Tt]"
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]+))?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))"
)
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# What follows the fixed-width date: ``_RFC3339`` matches a text exactly when its first ten
# characters match the date part and the rest matches this.
_CLOCK = re.compile(
    r"[Tt](?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]+))?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))"
)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
"""Strict ``YYYY-MM-DD`` (compiled once: every output ID's day is parsed by relay and view)."""
_dates_seen: dict[str, int] = {}
"""Date parts (``YYYY-MM-DD``) of timestamps already parsed in full, and their day numbers."""
_DATES_REMEMBERED = 4096


class TimestampError(ValueError):
    """Text is not an RFC 3339 timestamp with an offset."""


def _is_leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_rfc3339(text: str) -> int:
    """Parse an RFC 3339 date-time with offset to UTC nanoseconds since the epoch.

    Fractional seconds beyond nanoseconds are truncated. Leap seconds (second 60)
    are refused, like most production parsers.

    A text whose date part was parsed before only has its time of day checked;
    anything that does not succeed that way takes the full route, which words
    every error.
    """
    day = _dates_seen.get(text[:10])
    if day is not None:
        m = _CLOCK.fullmatch(text, 10)
        if m is not None:
            hs, mis, ss, frac, z, sign, ohs, oms = m.groups()
            h, mi, s = int(hs), int(mis), int(ss)
            if h <= 23 and mi <= 59 and s <= 59:
                offset_s = 0
                if z is None:
                    oh, om = int(ohs), int(oms)
                    if oh > 23 or om > 59:
                        return _parse_rfc3339(text)
                    offset_s = (oh * 3600 + om * 60) * (1 if sign == "+" else -1)
                nanos = int((frac + "000000000")[:9]) if frac else 0
                return (day * 86_400 + h * 3600 + mi * 60 + s - offset_s) * NS_PER_SECOND + nanos
    return _parse_rfc3339(text)


def _parse_rfc3339(text: str) -> int:
    """``parse_rfc3339`` by the full route; remembers the date part of a text that parses."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        msg = f"not an RFC 3339 timestamp with offset: {text[:64]!r}"
        raise TimestampError(msg)
    ys, mos, ds, hs, mis, ss, frac, z, sign, ohs, oms = m.groups()
    y, mo, d, h, mi, s = int(ys), int(mos), int(ds), int(hs), int(mis), int(ss)
    if not 1 <= mo <= 12:
        msg = f"month out of range in {text!r}"
        raise TimestampError(msg)
    dim = 29 if mo == 2 and _is_leap(y) else _DAYS_IN_MONTH[mo - 1]
    if not 1 <= d <= dim:
        msg = f"day out of range in {text!r}"
        raise TimestampError(msg)
    if h > 23 or mi > 59 or s > 59:
        msg = f"time of day out of range in {text!r}"
        raise TimestampError(msg)
    offset_s = 0
    if z is None:
        oh, om = int(ohs), int(oms)
        if oh > 23 or om > 59:
            msg = f"offset out of range in {text!r}"
            raise TimestampError(msg)
        offset_s = (oh * 3600 + om * 60) * (1 if sign == "+" else -1)
    nanos = int((frac + "000000000")[:9]) if frac else 0
    day = remember(_dates_seen, text[:10], days_from_civil(y, mo, d), _DATES_REMEMBERED)
    return (day * 86_400 + h * 3600 + mi * 60 + s - offset_s) * NS_PER_SECOND + nanos


def day_in_range(day: int) -> bool:
    """True when the day lies in years 1..9999 (what ``YYYY-MM-DD`` can show)."""
    return MIN_DAY <= day <= MAX_DAY


_day_texts: dict[int, str] = {}
"""Day numbers already formatted, and their text: most outputs name one of a few recent days."""


def format_day(day: int) -> str:
    """``YYYY-MM-DD`` of a day number; the day must be in range."""
    text = _day_texts.get(day) if type(day) is int else None  # 1.0 == 1, but is no day
    if text is None:
        text = date.fromordinal(day + _EPOCH_ORDINAL).isoformat()
        remember(_day_texts, day, text, _DATES_REMEMBERED)
    return text


_days_parsed: dict[str, int] = {}
"""Day texts already parsed, and their day numbers (relay and view parse every output ID's day)."""


def parse_day(text: str) -> int:
    """Inverse of format_day for strict ``YYYY-MM-DD`` text."""
    day = _days_parsed.get(text)
    if day is not None:
        return day
    if _DAY.fullmatch(text) is None:
        msg = f"not a YYYY-MM-DD day: {text[:32]!r}"
        raise ValueError(msg)
    day = date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL
    return remember(_days_parsed, text, day, _DATES_REMEMBERED)


def format_instant(ns: int) -> str:
    """RFC 3339 UTC text of an instant in years 1..9999, with nanoseconds when nonzero."""
    day, rem = divmod(ns, NS_PER_DAY)
    secs, nanos = divmod(rem, NS_PER_SECOND)
    h, rem_s = divmod(secs, 3600)
    mi, s = divmod(rem_s, 60)
    frac = f".{nanos:09d}".rstrip("0") if nanos else ""
    return f"{format_day(day)}T{h:02d}:{mi:02d}:{s:02d}{frac}Z"

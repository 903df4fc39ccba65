"""Envelope bytes written directly are exactly the general route's bytes.

``Envelope.to_bytes`` writes envelopes of the expected field types without
building dictionaries first (``ledger._envelope_text``). Those bytes are what
the outbox stores and the view compares, so every envelope below is encoded
both ways: directly and as ``compact_json(env.to_json())``. Strings cover the
characters JSON must escape, non-ASCII text and lone surrogates (which neither
route can encode); numbers the signed 64-bit bounds and beyond.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import ledger, timefmt
from amends_core.ledger import (
    Cause,
    ConflictRef,
    Envelope,
    Family,
    MessageType,
    OutputID,
    Payload,
    Status,
    StockKey,
    compact_json,
)

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def general(env: Envelope) -> bytes:
    return compact_json(env.to_json()).encode("utf-8")


def both(env: Envelope) -> bytes | type[BaseException]:
    """The bytes, after checking that both routes give them (or fail the same way)."""
    try:
        want: bytes | type[BaseException] = general(env)
    except Exception as e:  # noqa: BLE001 - both routes must fail alike
        want = type(e)
    try:
        got: bytes | type[BaseException] = env.to_bytes()
    except Exception as e:  # noqa: BLE001 - both routes must fail alike
        got = type(e)
    assert got == want, (env, got, want)
    return got


texts = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x7F),
        st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "\x7f", "\u2028", "é", "𝄞", "\ud800"]),
        st.characters(),
    ),
    max_size=24,
)
ints = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**64, -(2**70)]),
)
days = st.one_of(st.none(), st.integers(min_value=timefmt.MIN_DAY, max_value=timefmt.MAX_DAY))
refs = st.lists(st.builds(ConflictRef, texts, ints), max_size=4)


@st.composite
def payloads(draw: st.DrawFn) -> Payload:
    shape = draw(st.sampled_from(["withdrawn", "balance", "alert", "status"]))
    if shape == "withdrawn":
        return Payload(present=False)
    if shape == "balance":
        return Payload(True, close=draw(ints))
    if shape == "alert":
        return Payload(True, close=draw(ints), threshold=draw(ints))
    rs = tuple(draw(refs))
    return Payload(True, status=draw(st.sampled_from(list(Status))), reasons=rs,
                   reason_count=draw(st.integers(min_value=0, max_value=10**6)))


envelopes = st.builds(
    Envelope,
    st.sampled_from([1, 2]),
    st.builds(OutputID, texts, st.sampled_from(list(Family)), st.builds(StockKey, texts, texts), days),
    ints,
    st.sampled_from(list(MessageType)),
    payloads(),
    st.builds(Cause, texts, ints, ints, texts, ints),
)


@FUZZ
@given(envelopes)
def test_direct_bytes_equal_the_general_route(env: Envelope) -> None:
    both(env)


KEY = StockKey("ITEM-1", "DC-1")
CAUSE = Cause("src", 0, 7, "T1", 2)


@pytest.mark.parametrize(
    "env",
    [
        Envelope(2, OutputID("ns", Family.BALANCE, KEY, 19_000), 1, MessageType.BALANCE_STATED, Payload(True, close=5), CAUSE),
        Envelope(2, OutputID("ns", Family.ALERT, KEY, 19_000), 3, MessageType.ALERT_RAISED,
                 Payload(True, close=-1, threshold=0), CAUSE),
        Envelope(2, OutputID("ns", Family.ALERT, KEY, 19_000), 4, MessageType.ALERT_RETRACTED, Payload(False), CAUSE),
        Envelope(2, OutputID("ns", Family.STATUS, KEY, None), 2, MessageType.KEY_STATUS_STATED,
                 Payload(True, status=Status.BLOCKED, reasons=(ConflictRef("T1", 2), ConflictRef("T9", 1)),
                         reason_count=5), CAUSE),
        Envelope(1, OutputID("ns", Family.STATUS, KEY, None), 2, MessageType.KEY_STATUS_STATED,
                 Payload(True, status=Status.READY), CAUSE),
        Envelope(2, OutputID("n\"s\\\n", Family.BALANCE, StockKey("é𝄞", "\x00\u2028"), timefmt.MIN_DAY), 1,
                 MessageType.BALANCE_STATED, Payload(True, close=0), Cause("s\x1f", 1, 2**63 - 1, "", 1)),
        Envelope(2, OutputID("ns", Family.BALANCE, KEY, timefmt.MAX_DAY), 2**63 - 1, MessageType.BALANCE_STATED,
                 Payload(True, close=-(2**63)), CAUSE),
    ],
)
def test_named_envelopes_take_the_direct_route(env: Envelope) -> None:
    assert ledger._envelope_text(env) is not None
    assert both(env) == general(env)


def test_unexpected_types_take_the_general_route() -> None:
    """A bool where a number belongs (JSON ``true``), or a plain string for an enum, is not
    written directly: the general route decides (writes it or fails), so nothing can differ."""
    base = Envelope(2, OutputID("ns", Family.BALANCE, KEY, 19_000), 1, MessageType.BALANCE_STATED,
                    Payload(True, close=5), CAUSE)
    odd = [
        Envelope(2, base.output_id, True, base.type, base.payload, base.cause),  # type: ignore[arg-type]
        Envelope(2, base.output_id, 1, base.type, Payload(True, close=True), base.cause),  # type: ignore[arg-type]
        Envelope(2, base.output_id, 1, base.type, base.payload, Cause("src", 0, 7, "T1", False)),  # type: ignore[arg-type]
        Envelope(2, OutputID("ns", "balance", KEY, 19_000), 1, base.type, base.payload, base.cause),  # type: ignore[arg-type]
        Envelope(2, base.output_id, 1, "BalanceStated", base.payload, base.cause),  # type: ignore[arg-type]
    ]
    for env in odd:
        assert ledger._envelope_text(env) is None
        both(env)


def test_a_day_outside_the_calendar_fails_like_the_general_route() -> None:
    env = Envelope(2, OutputID("ns", Family.BALANCE, KEY, timefmt.MAX_DAY + 1), 1, MessageType.BALANCE_STATED,
                   Payload(True, close=5), CAUSE)
    with pytest.raises(ValueError):
        general(env)
    with pytest.raises(ValueError):
        env.to_bytes()


@FUZZ
@given(st.lists(envelopes, min_size=1, max_size=6))
def test_remembered_texts_give_the_same_bytes_again(envs: list[Envelope]) -> None:
    """The direct route remembers the text of each (schema, namespace, family), stock key and
    day it wrote; the second pass over the same envelopes reads those texts."""
    for env in envs + envs:
        both(env)


def test_remembered_texts_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger, "_TEXTS_REMEMBERED", 3)
    monkeypatch.setattr(timefmt, "_DATES_REMEMBERED", 3)
    for module, name in ((ledger, "_heads"), (ledger, "_key_texts"), (timefmt, "_day_texts")):
        monkeypatch.setattr(module, name, {})
    for i in range(12):
        env = Envelope(2, OutputID(f"ns{i}", Family.BALANCE, StockKey(f"I{i}", "L"), 19_000 + i), 1,
                       MessageType.BALANCE_STATED, Payload(True, close=i), CAUSE)
        assert both(env) == general(env)
        assert len(ledger._heads) <= 3
        assert len(ledger._key_texts) <= 3
        assert len(timefmt._day_texts) <= 3

"""The fast envelope route agrees with the strict one on every input, and is taken for plain envelopes.

``wire.decode_envelope`` tries ``_fast_envelope`` (msgspec structs and
post-checks) before the strict route; the fast route may only ever answer
what the strict route answers. Each input below is decoded both ways.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import wire
from amends_core.ledger import MessageType
from tests.unit.test_diff import run_keys
from tests.unit.test_wire_fuzz import json_value

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))

ENVELOPES = run_keys()
SEEDS = [e.to_bytes() for e in ENVELOPES]
BALANCE = next(e.to_bytes() for e in ENVELOPES if e.type is MessageType.BALANCE_STATED)
ALERT = next(e.to_bytes() for e in ENVELOPES if e.type is MessageType.ALERT_RAISED)


def agree(raw: bytes) -> wire.Envelope | wire.DecodeError:
    strict = wire.decode_envelope_strictly(raw)
    fast = wire._fast_envelope(raw)
    assert fast is None or fast == strict, (raw, fast, strict)
    assert wire.decode_envelope(raw) == strict
    return strict


def test_every_type_but_key_status_takes_the_fast_route() -> None:
    types = {e.type for e in ENVELOPES}
    assert types == set(MessageType), "the seeds must hold every envelope type"
    assert any(b"\\" in raw for raw in SEEDS), "and an escaped string"
    for e, raw in zip(ENVELOPES, SEEDS, strict=True):
        fast = wire._fast_envelope(raw)
        if e.type is MessageType.KEY_STATUS_STATED or b"\\" in raw:
            assert fast is None  # key statuses and escaped text take the strict route
        else:
            assert fast == e
        assert agree(raw) == e


def test_reordered_and_spaced_members_take_the_fast_route_with_the_same_values() -> None:
    obj = json.loads(ALERT)
    for raw in (
        json.dumps(dict(reversed(list(obj.items())))).encode(),
        json.dumps(obj, indent=2).encode(),
        json.dumps({**obj, "payload": dict(reversed(list(obj["payload"].items())))}).encode(),
    ):
        assert wire._fast_envelope(raw) is not None
        assert wire._fast_envelope(raw) == agree(raw)


def _with(raw: bytes, path: tuple[str, ...], value: Any) -> bytes:
    obj = json.loads(raw)
    at = obj
    for name in path[:-1]:
        at = at[name]
    at[path[-1]] = value
    return json.dumps(obj).encode()


def _without(raw: bytes, path: tuple[str, ...]) -> bytes:
    obj = json.loads(raw)
    at = obj
    for name in path[:-1]:
        at = at[name]
    del at[path[-1]]
    return json.dumps(obj).encode()


NAMED = [
    BALANCE.replace(b'"version":', b'"version":7,"version":', 1),  # duplicate member: msgspec keeps the last
    ALERT.replace(b'"item":', b'"item":"X","item":', 1),  # duplicate in a nested object
    ALERT.replace(b'"threshold":', b'"threshold":1,"threshold":', 1),  # duplicate in the payload
    BALANCE.replace(b'"day":', b'"day":null,"day":', 1),  # a duplicate whose first value has no quotes
    _with(BALANCE, ("version",), 2**63 - 1),
    _with(BALANCE, ("version",), 2**63),
    _with(BALANCE, ("version",), -(2**63)),
    _with(BALANCE, ("payload", "close"), 2**63),
    _with(ALERT, ("payload", "threshold"), -(2**63) - 1),
    _with(BALANCE, ("cause", "offset"), 10**30),
    BALANCE.replace(b'"version":', b'"version":' + b"9" * 5000 + b",\"x\":", 1),
    _with(BALANCE, ("version",), 1.0),
    _with(BALANCE, ("version",), True),
    _with(BALANCE, ("version",), None),
    _with(BALANCE, ("payload", "present"), 1),
    _with(BALANCE, ("payload", "present"), None),
    _with(BALANCE, ("payload", "close"), None),
    _with(BALANCE, ("payload", "threshold"), 5),  # a member this type does not carry
    _without(BALANCE, ("payload", "close")),
    _without(ALERT, ("payload", "threshold")),
    _with(BALANCE, ("output_id", "day"), None),  # a balance without a day: the strict route decides
    _with(BALANCE, ("output_id", "day"), "2026-02-30"),
    _with(BALANCE, ("output_id", "day"), "2026-1-01"),
    _with(BALANCE, ("output_id", "day"), "２０２６-01-01"),
    _with(BALANCE, ("output_id", "day"), 3),
    _without(BALANCE, ("output_id", "day")),
    _with(BALANCE, ("output_id", "family"), "Balance"),
    _with(BALANCE, ("output_id", "family"), "status"),
    _with(BALANCE, ("type", ), "balanceStated"),
    _with(BALANCE, ("type", ), "KeyStatusStated"),
    _with(BALANCE, ("output_id", "namespace"), None),
    _with(BALANCE, ("output_id", "stock_key"), ["a", "b"]),
    _with(BALANCE, ("cause", "txn_id"), "T\u0000"),  # NUL through an escape
    _with(BALANCE, ("cause", "txn_id"), "\ud800"),  # lone surrogate (json.dumps escapes it)
    BALANCE.replace(b'"cause":{"source":"', b'"cause":{"source":"\xed\xa0\x80', 1),
    _with(BALANCE, ("cause", "txn_id"), "é" * 300),
    _with(BALANCE, ("cause", "txn_id"), "version"),  # a value spelled like a member name
    _with(BALANCE, ("extra",), 1),
    _with(BALANCE, ("cause", "extra"), 1),
    b"\xef\xbb\xbf" + BALANCE,
    BALANCE + b" ",
    BALANCE + b"x",
    b" \t\r\n" + BALANCE,
    BALANCE.replace(b"{", b"{\x0c", 1),
    BALANCE.replace(b'"version"', b'"Version"', 1),
    b"{}",
    b"[]",
    b"",
    b"x" * (wire.MAX_VALUE_BYTES + 1),
]


def test_named_edge_cases_decode_alike_both_ways() -> None:
    for raw in NAMED:
        agree(raw)


def test_legal_extremes_take_the_fast_route() -> None:
    for raw in (
        _with(BALANCE, ("version",), 2**63 - 1),
        _with(ALERT, ("payload", "threshold"), -(2**63)),
        _with(BALANCE, ("output_id", "day"), None),
        _with(BALANCE, ("cause", "txn_id"), "version"),
        b" \t\r\n" + BALANCE + b" ",
    ):
        assert isinstance(agree(raw), wire.Envelope)
        assert wire._fast_envelope(raw) == agree(raw)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "splice"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "dup":
            j = draw(st.integers(i, len(data)))
            data[j:j] = data[i:j]
        else:
            data[i:i] = draw(
                st.sampled_from([
                    b"\\ud800", b"\x00", b"\\u0000", b"NaN", b"1e400", b"\xef\xbb\xbf", b"[" * 50,
                    b'"close":1,', b'"day":null,', b"\xed\xa0\x80", b"-0", b"9" * 30, b'"', b"null",
                ])
            )
    return bytes(data)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_alike(raw: bytes) -> None:
    agree(raw)


@FUZZ
@given(mutated())
def test_mutations_of_valid_envelopes_decode_alike(raw: bytes) -> None:
    agree(raw)


PLACES = [
    (), ("output_id",), ("output_id", "stock_key"), ("payload",), ("cause",),
]
NAMES = [
    "schema_version", "output_id", "version", "type", "payload", "cause", "namespace", "family",
    "stock_key", "day", "item", "location", "present", "close", "threshold", "status", "reasons",
    "source", "partition", "offset", "txn_id", "revision", "extra",
]


@FUZZ
@given(
    st.sampled_from(SEEDS), st.sampled_from(PLACES),
    st.dictionaries(st.sampled_from(NAMES), json_value, max_size=4), st.booleans(),
)
def test_plausible_objects_decode_alike(seed: bytes, place: tuple[str, ...], changes: dict[str, Any], spaced: bool) -> None:
    obj = json.loads(seed)
    at = obj
    for name in place:
        at = at[name]
    at.update(changes)
    agree(json.dumps(obj, indent=1 if spaced else None, ensure_ascii=False).encode("utf-8", "surrogatepass"))


@FUZZ
@given(mutated())
def test_the_relay_keys_every_envelope_the_strict_route_accepts_by_its_output_id(raw: bytes) -> None:
    """``output_key`` reads only the output ID (leniently), but never keys a valid envelope otherwise."""
    from amends_core.errors import OperationError
    from amends_pipeline.roles.relay import output_key

    strict = wire.decode_envelope_strictly(raw)
    try:
        key = output_key(raw)
    except OperationError:
        assert isinstance(strict, wire.DecodeError)
        return
    if isinstance(strict, wire.Envelope):
        assert key == strict.output_id.encoded.encode("utf-8")


def test_the_relay_keys_the_seed_envelopes_by_their_output_ids() -> None:
    from amends_pipeline.roles.relay import output_key

    for e, raw in zip(ENVELOPES, SEEDS, strict=True):
        assert output_key(raw) == e.output_id.encoded.encode("utf-8")


def test_an_output_id_with_a_lone_surrogate_is_refused_by_the_relay_with_a_reason() -> None:
    """The plain JSON parse the relay used before kept the surrogate, and encoding the key crashed."""
    from amends_core.errors import OperationError
    from amends_pipeline.roles.relay import output_key

    raw = BALANCE.replace(b'"PART-1"', b'"P\\ud800"')
    assert raw != BALANCE
    with pytest.raises(OperationError, match="lone surrogate"):
        output_key(raw)


def test_an_unknown_family_is_refused_by_the_relay_with_the_strict_decoders_reason() -> None:
    """The relay checks the family by its value, without building the enum member: a name
    that differs only in case is still refused, in the strict decoder's words."""
    from amends_core.errors import OperationError
    from amends_pipeline.roles.relay import output_key

    raw = BALANCE.replace(b'"family":"balance"', b'"family":"Balance"')
    assert raw != BALANCE
    with pytest.raises(OperationError, match="unknown family or type: 'Balance' is not a valid Family"):
        output_key(raw)

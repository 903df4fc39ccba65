"""The fast decoding route agrees with the strict one on every input, and is taken for plain values.

``wire.decode_transaction`` tries ``_fast_transaction`` (msgspec structs and
post-checks) before the strict route; the fast route may only ever answer
what the strict route answers. Each input below is decoded both ways.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import wire
from tests.builders import txn
from tests.fuzz.checks import VALID
from tests.unit.test_wire_fuzz import FIELDS, json_value, mutated

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


def agree(raw: bytes) -> wire.Transaction | wire.DecodeError:
    strict = wire.decode_transaction_strictly(raw)
    fast = wire._fast_transaction(raw)
    assert fast is None or fast == strict, (raw, fast, strict)
    assert wire.decode_transaction(raw) == strict
    return strict


def test_plain_values_take_the_fast_route() -> None:
    for raw in (VALID, json.dumps(txn()).encode(), json.dumps(txn(), indent=2).encode()):
        assert wire._fast_transaction(raw) is not None
        assert agree(raw) == wire._fast_transaction(raw)


def test_reordered_members_take_the_fast_route_with_the_same_values() -> None:
    obj = txn()
    raw = json.dumps(dict(reversed(list(obj.items())))).encode()
    assert wire._fast_transaction(raw) == agree(raw)


NAMED = [
    VALID.replace(b'"qty":-10', b'"qty":-10,"qty":5'),  # duplicate member: msgspec keeps the last
    VALID.replace(b'"item":', b'"item":"X","item":'),  # duplicate in the nested object
    VALID.replace(b'"qty":-10', b'"qty":' + b"9" * 30),  # outside int64
    VALID.replace(b'"qty":-10', b'"qty":' + b"9" * 5000),  # past Python's digit limit
    VALID.replace(b'"qty":-10', b'"qty":-0'),
    VALID.replace(b'"qty":-10', b'"qty":1.0'),
    VALID.replace(b'"qty":-10', b'"qty":1e2'),
    VALID.replace(b'"qty":-10', b'"qty":true'),
    VALID.replace(b'"qty":-10', b'"qty":null'),
    VALID.replace(b'"T1"', b'"T\\u00001"'),  # NUL through an escape
    VALID.replace(b'"T1"', b'"\\ud800"'),  # lone surrogate
    VALID.replace(b'"T1"', b'"\xed\xa0\x80"'),  # a surrogate encoded in UTF-8
    VALID.replace(b'"T1"', b'"' + "é".encode() * 129 + b'"'),  # 258 bytes, 129 characters
    VALID.replace(b'"T1"', b'"' + "é".encode() * 128 + b'"'),  # exactly at the limit
    VALID.replace(b'"T1"', b'"qty"'),  # a value spelled like a member name
    VALID.replace(b'"T1"', b'"a:b"'),  # a colon inside a value
    VALID.replace(b'"T1"', b'"a" : "b"'),  # whitespace around a colon (malformed here)
    b"\xef\xbb\xbf" + VALID,
    VALID + b" ",
    VALID + b"x",
    b" \t\r\n" + VALID,
    VALID.replace(b"{", b"{\x0c", 1),
    VALID.replace(b'"qty"', b'"Qty"'),
    VALID.replace(b'"2026-', b'"0000-'),
    VALID.replace(b"Z", b"z"),
    VALID.replace(b"Z", b"+00:00"),
    VALID.replace(b"Z", b".1234567891Z"),
    b"{}",
    b"[]",
    b"",
]


def test_named_edge_cases_decode_alike_both_ways() -> None:
    for raw in NAMED:
        agree(raw)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_decode_alike(raw: bytes) -> None:
    agree(raw)


@FUZZ
@given(mutated())
def test_mutations_of_a_valid_value_decode_alike(raw: bytes) -> None:
    agree(raw)


@FUZZ
@given(st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=9), st.booleans(), st.booleans())
def test_plausible_objects_decode_alike(obj: dict[str, Any], merge: bool, spaced: bool) -> None:
    base = txn() if merge else {}
    base.update(obj)
    agree(json.dumps(base, indent=1 if spaced else None, ensure_ascii=False).encode("utf-8", "surrogatepass"))

"""The oracle's decoder agrees with ``wire`` on acceptance and on decoded values.

The two decoders share no parsing code: ``wire`` uses the standard library's
``json`` with hooks, the oracle a Polars layout match and msgspec structs. Both
are fed the same generated documents (valid ones in many layouts, then
structurally and byte-wise mutated) and must agree on every single value.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from amends_core import wire
from amends_core.ledger import INT64_MAX, INT64_MIN, StockKey, Transaction
from amends_core.oracle.decode import (
    Malformed,
    decode_key,
    decode_keys,
    decode_many,
    decode_transaction,
)
from tests.fuzz import checks
from tests.fuzz.checks import agree_key

NAMES = ("txn_id", "revision", "kind", "stock_key", "valid_time", "qty", "source_time")

# ---------------------------------------------------------------- agreement helpers


def agree(values: list[bytes]) -> None:
    """Every value: both reject, or both accept with equal transactions (``tests.fuzz.checks``)."""
    accepted = checks.agree(values)
    if currently_in_test_context():
        for ok in accepted:
            event("accepted" if ok else "rejected")


# ---------------------------------------------------------------- generators

ts_digits = st.integers(0, 99)


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    """RFC 3339-like text: mostly valid, sometimes with a component just out of range."""
    if draw(st.integers(0, 9)) == 0:
        return draw(
            st.sampled_from(
                [
                    "2026-01-01T00:00:60Z",  # leap second
                    "2026-01-01T24:00:00Z",
                    "2025-02-29T00:00:00Z",
                    "2024-02-29T00:00:00Z",
                    "2026-01-01T00:00:00+24:00",
                    "2026-01-01T00:00:00+23:59",
                    "2026-01-01T00:00:00-00:60",
                    "2026-01-01T00:00:00",
                    "2026-01-01 00:00:00Z",
                    "2026-01-01t00:00:00z",
                    "2026-1-01T00:00:00Z",
                    "2026-01-01T00:00:00.Z",
                    "2026-01-01T00:00:00,5Z",
                    "0000-01-01T00:00:00Z",
                    "0001-01-01T00:00:00+00:01",
                    "9999-12-31T23:59:59.999999999-23:59",
                    "2026-01-01T00:00:00Z\n",
                    " 2026-01-01T00:00:00Z",
                    "٢٠٢٦-01-01T00:00:00Z",  # Arabic-Indic digits
                    "2026-13-01T00:00:00Z",
                    "2026-00-10T00:00:00Z",
                    "2026-04-31T00:00:00Z",
                    "2100-02-29T00:00:00Z",
                    "2000-02-29T00:00:00Z",
                    "",
                ]
            )
        )
    y = draw(st.integers(0, 9999))
    mo = draw(st.integers(1, 12))
    d = draw(st.integers(1, 31 if draw(st.booleans()) else 28))
    h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    frac = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=14)))
    t = draw(st.sampled_from("Tt"))
    if draw(st.booleans()):
        off = draw(st.sampled_from("Zz"))
    else:
        off = f"{draw(st.sampled_from('+-'))}{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}"
    dot = f".{frac}" if frac else ""
    return f"{y:04d}-{mo:02d}-{d:02d}{t}{h:02d}:{mi:02d}:{s:02d}{dot}{off}"


names_text = st.one_of(
    st.sampled_from(["T-1", "ISSUE-001", "", "ä", "a/b", 'q"uote', "back\\slash", "tab\t", "\x7f"]),
    st.text(max_size=8),
)
int64s = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([INT64_MAX, INT64_MIN, INT64_MAX + 1, INT64_MIN - 1, 2**64]),
    st.integers(INT64_MIN, INT64_MAX),
)


def _encode_str(s: str, ascii_only: bool) -> str:
    return json.dumps(s, ensure_ascii=ascii_only)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    """A transaction document in a random layout, possibly with member-level defects."""
    ascii_only = draw(st.booleans())
    ws = draw(st.sampled_from(["", "", " ", "\n", "\t", "\r\n  "]))
    txn = {
        "txn_id": _encode_str(draw(names_text), ascii_only),
        "revision": str(draw(int64s)),
        "kind": _encode_str(
            draw(st.sampled_from(["NEW", "AMEND", "CANCEL", "new", "X"])), ascii_only
        ),
        "valid_time": _encode_str(draw(timestamps()), ascii_only),
        "qty": str(draw(int64s)),
        "source_time": _encode_str(draw(timestamps()), ascii_only),
    }
    key_members = [
        ("item", _encode_str(draw(names_text), ascii_only)),
        ("location", _encode_str(draw(names_text), ascii_only)),
    ]
    members = [(n, txn[n]) for n in NAMES if n != "stock_key"]
    members.insert(3, ("stock_key", ""))
    defect = draw(st.integers(0, 14))
    if defect == 1:  # duplicate a member (same or other value)
        i = draw(st.integers(0, len(members) - 1))
        members.insert(draw(st.integers(0, len(members))), members[i])
    elif defect == 2:  # drop a member
        members.pop(draw(st.integers(0, len(members) - 1)))
    elif defect == 3:  # null a member
        i = draw(st.integers(0, len(members) - 1))
        members[i] = (members[i][0], "null")
    elif defect == 4:  # case variant or unknown name
        i = draw(st.integers(0, len(members) - 1))
        members[i] = (
            draw(st.sampled_from([members[i][0].upper(), "extra", members[i][0] + " "])),
            members[i][1],
        )
    elif defect == 5:  # number variants
        i = draw(st.sampled_from([1, 5]))
        members[i] = (
            members[i][0],
            draw(
                st.sampled_from(
                    [
                        "1.0",
                        "1e3",
                        "1E3",
                        "-0",
                        "true",
                        "false",
                        '"1"',
                        "01",
                        "-",
                        "NaN",
                        "Infinity",
                        "[1]",
                        "{}",
                        "1" * 30,
                        "-0.0",
                    ]
                )
            ),
        )
    elif defect == 6:  # duplicate inside stock_key
        key_members.append(key_members[draw(st.integers(0, 1))])
    elif defect == 7:  # escaped duplicate name
        members.append(("q\\u0074y", txn["qty"]))
    elif defect == 8:  # escapes inside strings
        i = draw(st.sampled_from([0, 2]))
        esc = draw(
            st.sampled_from(
                ["\\u0000", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\u00e4", "\\/", "\\n", "\\x"]
            )
        )
        members[i] = (members[i][0], '"' + esc + members[i][1][1:])
    elif defect == 9:  # shuffle member order
        members = draw(st.permutations(members))
    elif defect == 10:  # nested stock_key shape defects
        key_members = draw(
            st.sampled_from(
                [
                    [],
                    key_members[:1],
                    [("item", "1"), key_members[1]],
                    key_members + [("extra", '"x"')],
                ]
            )
        )
    parts = []
    for name, value in members:
        if name == "stock_key" and value == "":
            if defect == 11:
                value = draw(st.sampled_from(['"A"', "[]", "null", '["a","b"]']))
            else:
                inner = ("," + ws).join(f'"{k}"{ws}:{ws}{v}' for k, v in key_members)
                value = "{" + ws + inner + ws + "}"
        parts.append(f'"{name}"{ws}:{ws}{value}')
    text = "{" + ws + ("," + ws).join(parts) + ws + "}"
    raw = text.encode("utf-8", "surrogatepass")
    if defect == 12:
        raw = draw(st.sampled_from([b"\xef\xbb\xbf", b" ", b"\n", b"[", b"\x00"])) + raw
    elif defect == 13:
        raw = raw + draw(st.sampled_from([b" ", b"\n", b"{}", b" x", b",", b"\x00", b"\xff", b"}"]))
    elif defect == 14:
        raw = b"[" * draw(st.integers(30, 40)) + raw + b"]" * 35
    return raw


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A document, then zero to three byte-level mutations."""
    raw = bytearray(draw(documents()))
    alphabet = b'"\\{}[],: \n\t0123456789.eE-+tTzZnul\x00\x1f\x7f\xc3\xa4\xff\xed\xa0\x80'
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.integers(0, 5))
        pos = draw(st.integers(0, len(raw)))
        if op == 0 and raw:
            del raw[min(pos, len(raw) - 1)]
        elif op == 1:
            raw[pos:pos] = bytes([draw(st.sampled_from(alphabet))])
        elif op == 2 and raw:
            raw[min(pos, len(raw) - 1)] = draw(st.sampled_from(alphabet))
        elif op == 3:
            raw = raw[:pos]
        elif op == 4 and raw:
            end = draw(st.integers(pos, len(raw)))
            raw[end:end] = raw[pos:end]
        elif op == 5:
            raw[pos:pos] = draw(
                st.sampled_from([b"\\u0000", b"\\ud800", b'"', b"\\", b"\xef\xbb\xbf"])
            )
    return bytes(raw)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(documents(), min_size=1, max_size=6))
def test_oracle_decoder_agrees_with_wire_on_generated_documents(values: list[bytes]) -> None:
    agree(values)


@FUZZ
@given(st.lists(mutated(), min_size=1, max_size=6))
def test_oracle_decoder_agrees_with_wire_on_byte_mutations(values: list[bytes]) -> None:
    agree(values)


@settings(
    max_examples=int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "1500")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@pytest.mark.slow
@given(st.lists(mutated(), min_size=1, max_size=10))
def test_oracle_decoder_agrees_with_wire_on_many_byte_mutations(values: list[bytes]) -> None:
    agree(values)


def test_oracle_decoder_agrees_with_wire_on_a_seeded_mutation_corpus() -> None:
    """Plain random mutation of canonical records, in one large batch (bulk route)."""
    rng = random.Random(20260101)
    values: list[bytes] = []
    for i in range(3000):
        t = Transaction(
            f"T{i}",
            rng.randint(1, 5),
            rng.choice(["NEW", "AMEND", "CANCEL"]),
            StockKey(f"I{i % 3}", "L"),
            rng.randint(0, 4 * 10**18),
            rng.randint(-5, 5),
            0,
        )
        raw = bytearray(wire.encode_transaction(t))
        for _ in range(rng.choice([0, 0, 1, 2])):
            pos = rng.randrange(len(raw))
            choice = rng.random()
            if choice < 0.4:
                del raw[pos]
            elif choice < 0.8:
                raw[pos] = rng.choice(b'"\\{}[],:0123456789eE.-+ tZ\x00\xff')
            else:
                raw[pos:pos] = raw[rng.randrange(len(raw)) :][:8]
        values.append(bytes(raw))
    agree(values)
    outcomes = decode_many(values)
    accepted = sum(isinstance(o, Transaction) for o in outcomes)
    assert 0 < accepted < len(values)  # both sides of the decision were exercised


# ---------------------------------------------------------------- directed cases

CANON = (
    '{"txn_id":"A","revision":1,"kind":"NEW","stock_key":{"item":"i","location":"l"},'
    '"valid_time":"2026-01-01T12:00:00Z","qty":5,"source_time":"2026-01-01T12:05:00Z"}'
)


def variant(old: str, new: str) -> bytes:
    assert old in CANON
    return CANON.replace(old, new, 1).encode("utf-8", "surrogatepass")


REJECTED = {
    "duplicate member": variant('"qty":5', '"qty":5,"qty":5'),
    "duplicate member with an escaped name": variant('"qty":5', '"q\\u0074y":4,"qty":5'),
    "duplicate nested member": variant('"location":"l"', '"location":"l","item":"i"'),
    "duplicate member in another layout": variant('"qty":5', '"qty" : 5 , "qty" : 5'),
    "unknown member": variant('"qty":5', '"qty":5,"note":"x"'),
    "case variant of a member name": variant('"qty"', '"Qty"'),
    "missing member": variant(',"qty":5', ""),
    "null member": variant('"qty":5', '"qty":null'),
    "fractional integer": variant('"qty":5', '"qty":5.0'),
    "exponent integer": variant('"qty":5', '"qty":5e0'),
    "boolean integer": variant('"revision":1', '"revision":true'),
    "integer above signed 64-bit": variant('"qty":5', f'"qty":{INT64_MAX + 1}'),
    "integer below signed 64-bit": variant('"qty":5', f'"qty":{INT64_MIN - 1}'),
    "trailing content": CANON.encode() + b" {}",
    "two objects": CANON.encode() + CANON.encode(),
    "byte order mark": b"\xef\xbb\xbf" + CANON.encode(),
    "invalid UTF-8": variant('"A"', '"A\udcff"'),
    "encoded surrogate": CANON.replace('"A"', '"\\ud800"').encode(),
    "escaped lone low surrogate": CANON.replace('"A"', '"\\udc00"').encode(),
    "escaped NUL": CANON.replace('"A"', '"A\\u0000"').encode(),
    "raw control character": variant('"A"', '"A\x01"'),
    "leap second": variant("12:00:00Z", "23:59:60Z"),
    "timestamp without offset": variant("12:00:00Z", "12:00:00"),
    "offset hour out of range": variant("12:00:00Z", "12:00:00+24:00"),
    "February 29 of a common year": variant("2026-01-01T12", "2026-02-29T12"),
    "source_time malformed": variant("12:05:00Z", "12:05Z"),
    "array instead of object": b"[" + CANON.encode() + b"]",
    "nested too deep": b"[" * 40 + b"]" * 40,
    "empty": b"",
    "above one MiB": variant('"A"', '"' + "A" * (1 << 20) + '"'),
}
ACCEPTED = {
    "canonical layout": CANON.encode(),
    "whitespace and reordering": (
        b' {\n "qty" : 5, "revision":1, "txn_id":"A","kind":"NEW",'
        b'"stock_key":{ "location":"l","item":"i"},"valid_time":"2026-01-01T12:00:00Z",'
        b'"source_time":"2026-01-01T12:05:00Z"}\r\n'
    ),
    "escaped characters": variant('"A"', '"\\u0041\\n\\"\\\\"'),
    "surrogate pair escape": variant('"A"', '"\\ud83d\\ude00"'),
    "non-ASCII text": variant('"i"', '"Läger ✓"'),
    "lowercase t and z": variant("2026-01-01T12:00:00Z", "2026-01-01t12:00:00z"),
    "offset and long fraction (truncated to ns)": variant(
        "12:00:00Z", "12:00:00.1234567891234-05:30"
    ),
    "year 1 with a positive offset": variant("2026-01-01T12:00:00Z", "0001-01-01T00:00:00+01:00"),
    "negative zero": variant('"qty":5', '"qty":-0'),
    "int64 extremes": variant('"qty":5', f'"qty":{INT64_MIN}').replace(
        b'"revision":1', f'"revision":{INT64_MAX}'.encode()
    ),
    # padded with whitespace: an identifier that long is itself over its own limit
    "exactly one MiB": variant('"A"', '"A"' + " " * ((1 << 20) - len(CANON))),
}


@pytest.mark.parametrize("raw", REJECTED.values(), ids=REJECTED.keys())
def test_malformed_values_are_refused_by_both_decoders(raw: bytes) -> None:
    assert isinstance(decode_transaction(raw), Malformed)
    agree([raw])


@pytest.mark.parametrize("raw", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_well_formed_values_decode_identically(raw: bytes) -> None:
    assert isinstance(decode_transaction(raw), Transaction)
    agree([raw])


def test_a_batch_mixing_every_directed_case_agrees_row_by_row() -> None:
    values = [*REJECTED.values(), *ACCEPTED.values()] * 3
    agree(values)


# ---------------------------------------------------------------- transport keys


@st.composite
def key_bytes(draw: st.DrawFn) -> bytes | None:
    if draw(st.integers(0, 20)) == 0:
        return None
    elems = draw(
        st.lists(
            st.one_of(
                names_text.map(json.dumps), st.sampled_from(["1", "null", "1.5", "[]", "{}"])
            ),
            max_size=3,
        )
    )
    ws = draw(st.sampled_from(["", " ", "\n"]))
    raw = bytearray(("[" + ws + ("," + ws).join(elems) + ws + "]").encode())
    for _ in range(draw(st.integers(0, 2))):
        pos = draw(st.integers(0, len(raw)))
        raw[pos:pos] = draw(
            st.sampled_from([b'"', b"\\u0000", b"\\ud800", b"\xff", b"\xef\xbb\xbf", b",", b"]"])
        )
    return bytes(raw)


@FUZZ
@given(st.lists(key_bytes(), min_size=1, max_size=6))
def test_oracle_key_decoder_agrees_with_wire(keys: list[bytes | None]) -> None:
    import polars as pl

    for k in keys:
        agree_key(k)
    frame = decode_keys(pl.Series(keys, dtype=pl.Binary))
    for k, (item, location, _err) in zip(keys, frame.iter_rows(), strict=True):
        single = decode_key(k)
        if isinstance(single, Malformed):
            assert item is None and location is None
        else:
            assert StockKey(item, location) == single


def test_transport_key_rules() -> None:
    assert decode_key(b'["A","X"]') == StockKey("A", "X")
    assert decode_key(b' [ "A" , "X" ] ') == StockKey("A", "X")
    for bad in (
        None,
        b'["A"]',
        b'["A","X","Y"]',
        b'{"item":"A"}',
        b'["A",1]',
        b'["A","X"]x',
        b'["A\\u0000","X"]',
        b'["\\ud800","X"]',
        b'\xef\xbb\xbf["A","X"]',
        b"\xff",
    ):
        assert isinstance(decode_key(bad), Malformed), bad
        agree_key(bad)

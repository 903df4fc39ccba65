"""The oracle's canonical (bulk) route and its strict per-record route give the same rows.

``decode_values`` decodes what the canonical layout proves well-formed in
whole columns and hands every other row to the per-record route. Here the
same values go through ``decode_values`` and, all of them, through the
per-record route (msgspec structs and the general RFC 3339 grammar): every
row must be equal, error messages included. The cases sit on the borders of
the canonical route: duplicates, escapes, non-ASCII text, int64 bounds,
timestamps it parses and timestamps it leaves alone, identifiers at and over
their limit, other layouts, and mixtures of all in one column.
"""

from __future__ import annotations

import json
import random

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amends_core import limits
from amends_core.ledger import INT64_MAX, INT64_MIN
from amends_core.oracle import decode as oracle_decode
from amends_core.oracle.decode import DECODED_SCHEMA, decode_values

MEMBERS = {
    "txn_id": '"T-1"',
    "revision": "1",
    "kind": '"NEW"',
    "stock_key": '{"item":"ITEM-1","location":"DC-1"}',
    "valid_time": '"2025-03-01T10:00:00Z"',
    "qty": "-5",
    "source_time": '"2025-03-01T11:00:00Z"',
}


def canonical(**members: str) -> bytes:
    """The canonical layout, with some members' JSON text replaced."""
    m = {**MEMBERS, **members}
    return ("{" + ",".join(f'"{k}":{v}' for k, v in m.items()) + "}").encode("utf-8", "surrogatepass")


def strict_route(values: list[bytes]) -> pl.DataFrame:
    """Every value through the per-record route only."""
    errors, cols = oracle_decode._per_record(values)
    raw = pl.DataFrame(cols, schema=oracle_decode._RAW_SCHEMA)
    return oracle_decode._finish(raw, pl.Series("error", errors, dtype=pl.String))


def both_routes_agree(values: list[bytes]) -> pl.DataFrame:
    bulk = decode_values(pl.Series(values, dtype=pl.Binary))
    one_by_one = strict_route(values)
    assert bulk.schema == pl.Schema(DECODED_SCHEMA)
    for i in range(len(values)):
        assert bulk.row(i, named=True) == one_by_one.row(i, named=True), values[i]
    return bulk


def q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def layout(members: list[tuple[str, str]], ws: str = "", key: str | None = None) -> bytes:
    """An object of ``members`` (name, JSON text) in that order, ``ws`` around every token;
    ``key`` replaces the ``stock_key`` object's text."""
    def obj(pairs: list[tuple[str, str]]) -> str:
        return ws + "{" + ws + (ws + "," + ws).join(f'"{k}"{ws}:{ws}{v}' for k, v in pairs) + ws + "}" + ws

    out = [(k, key if k == "stock_key" and key is not None else v) for k, v in members]
    return obj(out).encode("utf-8", "surrogatepass")


REORDERED = list(reversed(MEMBERS.items()))
ANY_ORDER_CASES = [
    layout(REORDERED),
    layout(REORDERED, " "),
    layout(REORDERED, "\t\r\n "),
    layout(list(MEMBERS.items()), "\n"),
    layout(REORDERED, key='{ "location" : "DC-1" , "item" : "ITEM-1" }'),
    layout(REORDERED, "\x0b"),  # not JSON whitespace
    layout(REORDERED, "\xa0"),
    layout(REORDERED, "\x0c"),
    layout(REORDERED[:-1] + [REORDERED[0]]),  # a duplicate in place of a missing member
    layout(REORDERED + [REORDERED[0]]),  # eight members, one twice
    layout(REORDERED[:-1]),  # six
    layout(REORDERED, key='{"item":"A","item":"B"}'),  # no location, item twice
    layout(REORDERED, key='{"item":"A","location":"B","item":"C"}'),
    layout(REORDERED, key='{"item":"A"}'),
    layout(REORDERED, key='{"item":"A","location":1}'),
    layout(REORDERED, key='"ITEM-1"'),
    layout(REORDERED, key='{"item":"A","location":"B","x":"C"}'),
    layout([("extra", "1")] + REORDERED[1:]),  # an unknown name in a known one's place
    layout([(k, '"x"') if k == "revision" else (k, v) for k, v in REORDERED]),  # a string where a number goes
    layout([(k, "7") if k == "kind" else (k, v) for k, v in REORDERED]),
    layout([(k, '"qty"') if k == "txn_id" else (k, v) for k, v in REORDERED]),  # a value that is a name
    layout([(k, '"2025-03-01T10:00:00+01:00"') if k == "valid_time" else (k, v) for k, v in REORDERED]),
    layout([(k, r'"T\u002d1"') if k == "txn_id" else (k, v) for k, v in REORDERED]),  # an escape
    layout([(k, "9223372036854775808") if k == "qty" else (k, v) for k, v in REORDERED]),
    layout([(k, "-0") if k == "qty" else (k, v) for k, v in REORDERED]),
    layout([(k, "null") if k == "qty" else (k, v) for k, v in REORDERED]),
    layout(REORDERED)[:-1] + b",}",
    layout(REORDERED) + b"x",
    b"[" + layout(REORDERED) + b"]",
]


ID = "x" * limits.MAX_ID_BYTES
TWO_BYTE = "é" * (limits.MAX_ID_BYTES // 2)

CASES = [
    canonical(),
    # duplicates and other layouts
    canonical()[:-1] + b',"qty":3}',
    canonical(stock_key='{"item":"A","item":"A","location":"L"}'),
    canonical(stock_key='{"location":"DC-1","item":"ITEM-1"}'),
    canonical().replace(b",", b", "),
    canonical().replace(b":", b": "),
    b" " + canonical(),
    canonical() + b" ",
    canonical() + b"\n",
    canonical() + b"{}",
    b'{"qty":-5,' + canonical()[1:].replace(b',"qty":-5', b""),
    canonical()[:-1] + b',"q\\u0074y":3}',
    canonical()[:-1] + b',"extra":1}',
    canonical().replace(b'"kind"', b'"KIND"'),
    # escapes and non-ASCII text
    canonical(txn_id=r'"T\u002d1"'),
    canonical(txn_id=r'"T\"1"'),
    canonical(txn_id=r'"T\\1"'),
    canonical(txn_id=r'"\u0000"'),
    canonical(txn_id=r'"\ud800"'),
    canonical(txn_id=r'"\ud83d\ude00"'),
    canonical(item=q("äöü"), location=q("東京")),
    canonical(item=q("😀")),
    canonical(txn_id='"tab\there"'),
    canonical(txn_id='"\x7f"'),
    canonical(txn_id='"\x1f"'),
    canonical(txn_id='""', item='""', location='""'),
    canonical().replace(b"ITEM-1", b"IT\xc3EM"),  # invalid UTF-8
    canonical().replace(b"ITEM-1", b"IT\xed\xa0\x80"),  # an encoded surrogate
    *ANY_ORDER_CASES,
    # integers
    *(canonical(revision=str(n)) for n in (0, -1, INT64_MAX, INT64_MIN, INT64_MAX + 1, INT64_MIN - 1)),
    *(canonical(qty=str(n)) for n in (0, INT64_MAX, INT64_MIN, INT64_MAX + 1, INT64_MIN - 1, 10**30)),
    *(canonical(qty=t) for t in ("-0", "01", "1.0", "1e3", '"1"', "true", "null", "+1", "- 1")),
    # instants the canonical route parses
    canonical(valid_time='"2024-02-29T00:00:00Z"'),
    canonical(valid_time='"2000-02-29T23:59:59Z"'),
    canonical(valid_time='"0001-01-01T00:00:00Z"'),
    canonical(valid_time='"0000-01-01T00:00:00Z"'),
    canonical(valid_time='"9999-12-31T23:59:59.999999999Z"'),
    canonical(valid_time='"2025-03-01t10:00:00z"'),
    canonical(valid_time='"2025-03-01T10:00:00.5Z"'),
    canonical(valid_time='"2025-03-01T10:00:00.000000001Z"'),
    canonical(valid_time='"2025-03-01T10:00:00.1234567891234Z"'),
    canonical(source_time='"1969-12-31T23:59:59.999Z"'),
    # instants it leaves to the general grammar, and broken ones
    canonical(valid_time='"2025-03-01T10:00:00+01:00"'),
    canonical(valid_time='"2025-03-01T10:00:00-23:59"'),
    canonical(valid_time='"2025-03-01T10:00:00+24:00"'),
    canonical(source_time='"2025-03-01T10:00:00-00:60"'),
    canonical(valid_time='"2025-02-29T00:00:00Z"'),
    canonical(valid_time='"2100-02-29T00:00:00Z"'),
    canonical(valid_time='"2025-04-31T00:00:00Z"'),
    canonical(valid_time='"2025-13-01T00:00:00Z"'),
    canonical(valid_time='"2025-00-01T00:00:00Z"'),
    canonical(valid_time='"2025-01-00T00:00:00Z"'),
    canonical(valid_time='"2025-01-01T24:00:00Z"'),
    canonical(valid_time='"2025-01-01T00:60:00Z"'),
    canonical(valid_time='"2025-01-01T00:00:60Z"'),
    canonical(valid_time='"2025-01-01T00:00:00.Z"'),
    canonical(valid_time='"2025-01-01T00:00:00"'),
    canonical(valid_time='"2025-01-01 00:00:00Z"'),
    canonical(valid_time='"2025-1-01T00:00:00Z"'),
    canonical(valid_time='"2025-01-01T00:00:00ZZ"'),
    canonical(valid_time=q("٢٠٢٥-01-01T00:00:00Z")),
    canonical(valid_time=r'"2025-01-01T00:00:00\u005a"'),
    canonical(valid_time='""'),
    canonical(valid_time="1"),
    canonical(valid_time='"2025-13-01T00:00:00Z"', source_time='"bad"'),
    canonical(source_time='"2025-01-01T00:00:00"'),
    # identifiers at and over their limit
    canonical(txn_id=q(ID)),
    canonical(txn_id=q(ID + "x")),
    canonical(item=q(TWO_BYTE)),
    canonical(item=q(TWO_BYTE + "é")),
    canonical(location=q("€" * 85 + "x")),  # 256 bytes
    canonical(location=q("€" * 86)),  # 258 bytes
    # whole values
    b"",
    b"{}",
    b"null",
    b"[]",
    b"\xff",
    canonical()[:40],
    canonical(kind=q("K" * (limits.MAX_VALUE_BYTES - 200))),
    canonical(kind=q("K" * (limits.MAX_VALUE_BYTES + 10))),
]


def test_every_border_case_decodes_the_same_on_both_routes() -> None:
    bulk = both_routes_agree(CASES)
    # The list holds both outcomes in quantity, and both routes decode some of
    # the accepted values (a check that the cases test something).
    accepted = bulk.get_column("error").is_null().sum()
    assert 15 < accepted < len(CASES) - 30
    column = pl.Series(CASES, dtype=pl.Binary)
    text, sizes = oracle_decode._utf8_text(column), column.bin.size()
    proven = oracle_decode._bulk_route(oracle_decode._CANONICAL_PLAN, text, sizes)
    assert 15 < proven.get_column("ok").sum() < accepted
    # the any-order route proves the canonical rows and the other layouts among the cases
    any_order = oracle_decode._bulk_route(oracle_decode._ANY_ORDER_PLAN, text, sizes).get_column("ok")
    assert (any_order | proven.get_column("ok")).sum() > proven.get_column("ok").sum() + 5


def test_cases_one_at_a_time_and_shuffled_among_canonical_rows() -> None:
    for v in CASES:
        both_routes_agree([v])
    rng = random.Random(7)
    mixed = [canonical(txn_id=q(f"T{i}"), qty=str(i - 50)) for i in range(300)] + CASES * 3
    rng.shuffle(mixed)
    both_routes_agree(mixed)


def test_rows_cross_the_bulk_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oracle_decode, "_BULK_CHUNK", 7)
    rng = random.Random(11)
    mixed = CASES + [canonical(txn_id=q(f"T{i}")) for i in range(50)]
    rng.shuffle(mixed)
    both_routes_agree(mixed)


zulu = st.builds(
    lambda y, mo, d, h, mi, s, frac, t, z: f"{y:04d}-{mo:02d}-{d:02d}{t}{h:02d}:{mi:02d}:{s:02d}{frac}{z}",
    st.integers(0, 9999),
    st.integers(0, 13),
    st.integers(0, 32),
    st.integers(0, 24),
    st.integers(0, 60),
    st.integers(0, 60),
    st.one_of(st.just(""), st.text("0123456789", min_size=0, max_size=12).map(lambda f: "." + f)),
    st.sampled_from("Tt "),
    st.sampled_from(["Z", "z", "+00:00", "-01:30", ""]),
)
text = st.one_of(st.sampled_from(["", "A", "ä", 'q"', "b\\", "\x00", "\ud800"]), st.text(max_size=6))
ints = st.one_of(st.integers(-3, 3), st.integers(INT64_MIN - 2, INT64_MAX + 2))


@st.composite
def values(draw: st.DrawFn) -> bytes:
    def s(x: str) -> str:
        return json.dumps(x, ensure_ascii=draw(st.booleans()))

    return canonical(
        txn_id=s(draw(text)),
        revision=str(draw(ints)),
        kind=s(draw(st.sampled_from(["NEW", "AMEND", "CANCEL", "X"]))),
        stock_key='{"item":' + s(draw(text)) + ',"location":' + s(draw(text)) + "}",
        valid_time=s(draw(zulu)),
        qty=str(draw(ints)),
        source_time=s(draw(zulu)),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(values(), min_size=1, max_size=20))
def test_generated_values_decode_the_same_on_both_routes(batch: list[bytes]) -> None:
    both_routes_agree(batch)


@st.composite
def any_order_values(draw: st.DrawFn) -> bytes:
    """A generated value's members in any order, some dropped or repeated, with any whitespace."""
    def pick(valid: str, *broken: str) -> str:
        return valid if draw(st.integers(0, 3)) else draw(st.sampled_from(broken))

    pick_for = {
        "txn_id": lambda: pick('"T-1"', '"qty"', '"x y"', r'"a\"b"', '""', "1"),
        "revision": lambda: pick("1", "0", "-0", "01", '"1"', "9223372036854775808"),
        "kind": lambda: pick('"NEW"', '"CANCEL"', '"kind"', "null"),
        "stock_key": lambda: pick(
            '{"item":"I","location":"L"}', '{"location":"L","item":"I"}', '{"item":"I"}',
            '{"item":"I","item":"J"}', '{"item":"I","location":"L","item":"J"}', "{}", '"I"',
        ),
        "valid_time": lambda: pick(
            '"2025-03-01T10:00:00Z"', '"2025-03-01T10:00:00.5z"', '"2025-02-30T10:00:00Z"',
            '"2025-03-01T10:00:00+01:00"',
        ),
        "qty": lambda: pick("-5", "0", "-9223372036854775808", "1e2", "true"),
        "source_time": lambda: pick('"2025-03-01T11:00:00Z"', '"2025-03-01T11:00:60Z"', '"x"'),
    }
    members = draw(st.permutations([(k, pick_for[k]()) for k in MEMBERS]))
    if draw(st.integers(0, 2)) == 0:  # drop one, repeat one, or add an unknown one
        how = draw(st.sampled_from(["drop", "repeat", "unknown"]))
        i = draw(st.integers(0, len(members) - 1))
        if how == "drop":
            members = members[:i] + members[i + 1:]
        elif how == "repeat":
            members = members + [members[i]]
        else:
            members = members[:i] + [("extra", "1")] + members[i + 1:]
    ws = draw(st.sampled_from(["", " ", "\n", "\t", "\r\n  ", "\x0b", "\u00a0"]))
    return layout(members, ws)


@settings(max_examples=300, deadline=None)
@given(st.lists(any_order_values(), min_size=1, max_size=20))
def test_other_member_orders_and_whitespace_decode_the_same_on_both_routes(batch: list[bytes]) -> None:
    both_routes_agree(batch)


def _utc_and_general(instants: pl.DataFrame) -> pl.DataFrame:
    """``ok`` and ``seconds`` of column ``t`` by the canonical route's UTC reading and the general grammar."""
    lf = instants.lazy()
    for stage in oracle_decode._utc_stages("t", "u") + oracle_decode._instant_stages("t", "g"):
        lf = lf.with_columns(stage)
    return lf.select("t", "_u_ok", "_u_seconds", "_u_nanos", "_g_ok", "_g_seconds", "_g_nanos").collect()


def _disagreements(instants: pl.DataFrame) -> pl.DataFrame:
    both = _utc_and_general(instants)
    return both.filter(
        (pl.col("_u_ok") & ~pl.col("_g_ok"))
        | (pl.col("_u_ok") & (pl.col("_u_seconds") != pl.col("_g_seconds")))
        | (pl.col("_u_ok") & (pl.col("_u_nanos") != pl.col("_g_nanos")))
    )


def _grid(template: str, **ranges: int) -> pl.DataFrame:
    """Every combination of zero-padded numbers put into ``template`` (column ``t``)."""
    frame: pl.DataFrame | None = None
    for name, stop in ranges.items():
        col = pl.DataFrame({name: pl.int_range(0, stop, eager=True)})
        frame = col if frame is None else frame.join(col, how="cross")
    assert frame is not None
    width = {"y": 4}
    padded = [pl.col(n).cast(pl.String).str.zfill(width.get(n, 2)) for n in ranges]
    return frame.select(pl.format(template, *padded).alias("t"))


def test_utc_reading_of_every_date_matches_the_general_grammar() -> None:
    # Every year the layout admits, months 00-13 and days 00-32: all valid dates and
    # every kind of impossible one (month 0 or 13, day 0, day 29-32 of short months).
    dates = _grid("{}-{}-{}T12:34:56Z", y=10_000, mo=14, d=33)
    assert _disagreements(dates).is_empty()
    both = _utc_and_general(dates)
    # The route reads every valid date itself (none is left to the general grammar).
    assert both.filter(pl.col("_g_ok") & ~pl.col("_u_ok")).is_empty()


def test_utc_reading_of_every_time_of_day_matches_the_general_grammar() -> None:
    # Every two-digit hour, minute and second, including 24:00, minute 60 and leap second 60.
    times = _grid("2024-02-29T{}:{}:{}Z", h=100, mi=100, s=100)
    assert _disagreements(times).is_empty()
    both = _utc_and_general(times)
    assert both.filter(pl.col("_g_ok") & ~pl.col("_u_ok")).is_empty()
    assert both.get_column("_u_ok").sum() == 24 * 60 * 60
    fractions = pl.DataFrame(
        {"t": [f"1969-12-31T23:59:59{f}Z" for f in ("", ".5", ".000000001", ".1234567891234")]}
    )
    assert _disagreements(fractions).is_empty()

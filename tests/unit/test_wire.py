"""Strict decoding of source values: every shape rule of the contract."""

from __future__ import annotations

import json

import pytest

from amends_core import timefmt, wire
from amends_core.ledger import StockKey, Transaction
from tests.builders import txn, value


def dec(raw: bytes) -> Transaction | wire.DecodeError:
    return wire.decode_transaction(raw)


def rejected(raw: bytes) -> bool:
    return isinstance(dec(raw), wire.DecodeError)


def test_a_well_formed_transaction_decodes_with_utc_normalised_instants() -> None:
    t = dec(value(txn(valid="2026-01-01T14:00:00+02:00", qty=-5)))
    assert isinstance(t, Transaction)
    assert t.valid_ns == timefmt.parse_rfc3339("2026-01-01T12:00:00Z")
    assert t.qty == -5 and t.stock_key == StockKey("PART-1", "DEPOT-A")


def test_offset_normalisation_can_move_the_utc_day() -> None:
    t = dec(value(txn(valid="2026-01-02T01:00:00+03:00")))
    assert isinstance(t, Transaction)
    assert timefmt.format_day(t.day) == "2026-01-01"


def test_trailing_content_after_the_object_is_rejected() -> None:
    assert rejected(value(txn()) + b"{}")
    assert rejected(value(txn()) + b" x")


def test_trailing_whitespace_is_allowed() -> None:
    assert not rejected(value(txn()) + b" \n")


def test_duplicate_member_names_are_rejected() -> None:
    raw = value(txn()).replace(b'"qty":-10', b'"qty":-10,"qty":-10')
    assert rejected(raw)


def test_duplicate_member_names_inside_stock_key_are_rejected() -> None:
    raw = value(txn()).replace(b'"item":"PART-1"', b'"item":"PART-1","item":"PART-1"')
    assert rejected(raw)


def test_unknown_members_are_rejected() -> None:
    assert rejected(value(txn(note="hello")))


def test_unknown_members_inside_stock_key_are_rejected() -> None:
    obj = txn()
    obj["stock_key"]["bin"] = "B1"
    assert rejected(value(obj))


def test_case_variant_member_names_are_rejected() -> None:
    raw = value(txn()).replace(b'"qty"', b'"QTY"')
    assert rejected(raw)
    raw = value(txn()).replace(b'"item"', b'"Item"')
    assert rejected(raw)


@pytest.mark.parametrize("member", ["txn_id", "revision", "kind", "stock_key", "valid_time", "qty", "source_time"])
def test_missing_required_members_are_rejected(member: str) -> None:
    obj = txn()
    del obj[member]
    assert rejected(value(obj))


@pytest.mark.parametrize("member", ["txn_id", "revision", "kind", "stock_key", "valid_time", "qty", "source_time"])
def test_null_required_members_are_rejected(member: str) -> None:
    obj = txn()
    obj[member] = None
    assert rejected(value(obj))


def test_null_stock_key_members_are_rejected() -> None:
    obj = txn()
    obj["stock_key"]["location"] = None
    assert rejected(value(obj))


@pytest.mark.parametrize("text", ["1.5", "-10.0", "1e3", "1E2", "true", '"10"', "[1]"])
def test_non_integer_quantities_are_rejected(text: str) -> None:
    raw = value(txn()).replace(b'"qty":-10', b'"qty":' + text.encode())
    assert rejected(raw)


def test_integers_at_the_signed_64_bit_edges_are_accepted() -> None:
    for q in (2**63 - 1, -(2**63)):
        t = dec(value(txn(qty=q)))
        assert isinstance(t, Transaction) and t.qty == q


def test_integers_outside_signed_64_bit_are_rejected() -> None:
    assert rejected(value(txn(qty=2**63)))
    assert rejected(value(txn(qty=-(2**63) - 1)))
    assert rejected(value(txn(revision=2**64)))


def test_huge_integers_are_rejected_without_escaping_errors() -> None:
    raw = value(txn()).replace(b'"qty":-10', b'"qty":' + b"9" * 5000)
    assert rejected(raw)


@pytest.mark.parametrize(
    "ts",
    [
        "2026-01-01T12:00:00",  # no offset
        "2026-01-01 12:00:00Z",  # space separator
        "2026-01-01",  # date only
        "2026-13-01T12:00:00Z",  # month 13
        "2026-02-29T12:00:00Z",  # not a leap year
        "2026-01-01T24:00:00Z",
        "2026-01-01T12:00:60Z",  # leap second refused
        "2026-01-01T12:00:00+24:00",
        "2026-01-01T12:00:00+0100",
        "26-01-01T12:00:00Z",
        "2026-01-01T12:00:00.Z",
        "\u0662026-01-01T12:00:00Z",  # non-ASCII digit
    ],
)
def test_timestamps_that_are_not_rfc3339_with_offset_are_rejected(ts: str) -> None:
    assert rejected(value(txn(valid=ts)))
    assert rejected(value(txn(source_time=ts)))


def test_fractional_seconds_keep_nanoseconds_exactly() -> None:
    a = dec(value(txn(valid="2026-01-01T12:00:00.000000001Z")))
    b = dec(value(txn(valid="2026-01-01T12:00:00.000000002Z")))
    assert isinstance(a, Transaction) and isinstance(b, Transaction)
    assert b.valid_ns - a.valid_ns == 1


def test_lowercase_t_and_z_are_rfc3339() -> None:
    assert not rejected(value(txn(valid="2026-01-01t12:00:00z")))


def test_input_that_is_not_valid_utf8_is_rejected() -> None:
    assert rejected(value(txn(txn_id="X")).replace(b'"X"', b'"\xff"'))
    # an encoded surrogate (CESU-style) is not UTF-8 either
    assert rejected(value(txn(txn_id="X")).replace(b'"X"', b'"\xed\xa0\x80"'))


def test_escaped_lone_surrogates_are_rejected() -> None:
    assert rejected(value(txn(txn_id="X")).replace(b'"X"', b'"\\ud800"'))


def test_escaped_surrogate_pairs_are_valid_text() -> None:
    t = dec(value(txn(txn_id="X")).replace(b'"X"', b'"\\ud83d\\ude00"'))
    assert isinstance(t, Transaction) and t.txn_id == "\U0001f600"


def test_nul_characters_are_rejected() -> None:
    assert rejected(value(txn(txn_id="A\u0000B")))


def test_nan_and_infinity_are_rejected() -> None:
    for c in (b"NaN", b"Infinity", b"-Infinity"):
        assert rejected(value(txn()).replace(b'"qty":-10', b'"qty":' + c))


def test_a_byte_order_mark_is_rejected() -> None:
    assert rejected(b"\xef\xbb\xbf" + value(txn()))


def test_deep_nesting_is_rejected_without_recursion_errors() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert rejected(value(txn()).replace(b'"qty":-10', b'"qty":' + deep))
    assert rejected(b"{" * 100_000)


def test_very_large_values_are_rejected_before_parsing() -> None:
    assert rejected(value(txn(txn_id="x" * (2 << 20))))


def test_non_object_documents_are_rejected() -> None:
    for raw in (b"[]", b"1", b'"s"', b"null", b"", b"   "):
        assert rejected(raw)


def test_stock_key_must_be_an_object() -> None:
    obj = txn()
    obj["stock_key"] = ["PART-1", "DEPOT-A"]
    assert rejected(value(obj))


def test_transport_key_is_the_compact_json_array_of_item_and_location() -> None:
    k = StockKey('a"b', "ö/c")
    assert k.transport_key() == json.dumps(['a"b', "ö/c"], separators=(",", ":"), ensure_ascii=False).encode()
    assert wire.decode_transport_key(k.transport_key()) == k


@pytest.mark.parametrize("raw", [None, b"", b"\xff", b'["a"]', b'["a","b","c"]', b'{"item":"a"}', b'["a",1]', b"[\"a\",\"b\"]x"])
def test_undecodable_transport_keys_are_decode_errors(raw: bytes | None) -> None:
    assert isinstance(wire.decode_transport_key(raw), wire.DecodeError)


_GOOD_CONFIG = {
    "schema_version": 1, "namespace": "n", "source_incarnation": "s", "partitions": 2,
    "origin": "2026-01-01T00:00:00+01:00",
    "keys": [{"item": "i", "location": "l", "opening_balance": 1, "reorder_threshold": 0, "partition": 1}],
}
"""A usable configuration document: one key, on the second of two partitions."""


def test_config_decoding_is_strict_and_validated() -> None:
    from amends_core.ledger import ConfigError

    good = _GOOD_CONFIG
    cfg = wire.decode_config(json.dumps(good).encode())
    assert timefmt.format_instant(cfg.origin_ns) == "2025-12-31T23:00:00Z"
    bad_cases = [
        {**good, "extra": 1},
        {**good, "schema_version": 2},
        {**good, "namespace": ""},
        {**good, "partitions": 0},
        {**good, "keys": []},
        {**good, "keys": good["keys"] * 2},
        {**good, "keys": [{**good["keys"][0], "partition": 2}]},
        {**good, "origin": "2026-01-01"},
    ]
    for b in bad_cases:
        with pytest.raises(ConfigError):
            wire.decode_config(json.dumps(b).encode())


def test_a_configuration_that_passed_its_check_is_not_checked_again_but_a_changed_copy_is() -> None:
    import dataclasses

    from amends_core.ledger import ConfigError, KeyConfig

    cfg = wire.decode_config(json.dumps(_GOOD_CONFIG).encode())
    assert cfg.validate() is cfg
    # A copy is checked on its own: the memo is never copied into it.
    moved = dataclasses.replace(cfg, partitions=1)
    with pytest.raises(ConfigError, match=r'stock key \{"item":"i","location":"l"\} maps to partition 1'):
        moved.validate()
    with pytest.raises(ConfigError, match="maps to partition 1"):
        moved.validate()  # a failed check is made again, and fails again
    twice = dataclasses.replace(cfg, keys=cfg.keys + (KeyConfig(cfg.keys[0].key, 2, 0, 0),))
    with pytest.raises(ConfigError, match=r'duplicate stock key \{"item":"i","location":"l"\}'):
        twice.validate()


def test_config_digest_ignores_key_order_and_origin_offset_spelling() -> None:
    base = {
        "schema_version": 1, "namespace": "n", "source_incarnation": "s", "partitions": 1,
        "origin": "2026-01-01T00:00:00Z",
        "keys": [
            {"item": "a", "location": "l", "opening_balance": 1, "reorder_threshold": 0, "partition": 0},
            {"item": "b", "location": "l", "opening_balance": 1, "reorder_threshold": 0, "partition": 0},
        ],
    }
    other = {**base, "origin": "2026-01-01T01:00:00+01:00", "keys": list(reversed(base["keys"]))}
    changed = {**base, "namespace": "m"}
    d = wire.decode_config(json.dumps(base).encode()).digest()
    assert d == wire.decode_config(json.dumps(other).encode()).digest()
    assert d != wire.decode_config(json.dumps(changed).encode()).digest()


def test_envelope_bytes_round_trip_through_strict_decoding() -> None:
    from tests.unit.test_diff import run_keys

    envs = run_keys()
    assert envs
    for e in envs:
        assert wire.decode_envelope(e.to_bytes()) == e

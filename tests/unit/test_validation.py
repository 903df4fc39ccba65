"""Business validation: each rejection code, and the order in which they are tried."""

from __future__ import annotations

import pytest

from amends_core import fold
from amends_core.ledger import Rejection, RejectReason, StockKey, Transaction
from tests.builders import K1, K2, config, record, txn, value

CFG = config([(K1, 100, 60, 0), (K2, 0, 0, 1)], partitions=2)


def code(rec) -> RejectReason | None:  # type: ignore[no-untyped-def]
    out = fold.validate(CFG, rec)
    return out.reason if isinstance(out, Rejection) else None


def test_a_valid_record_is_accepted() -> None:
    assert isinstance(fold.validate(CFG, record(txn(), 0)), Transaction)


def test_malformed_when_decoding_fails() -> None:
    assert code(record(b"{not json", 0, key=K1.transport_key())) is RejectReason.MALFORMED


@pytest.mark.parametrize("field", ["txn_id", "item", "location"])
def test_identity_when_txn_id_item_or_location_is_empty(field: str) -> None:
    obj = txn()
    if field == "txn_id":
        obj["txn_id"] = ""
    else:
        obj["stock_key"][field] = ""
    assert code(record(obj, 0, key=K1.transport_key())) is RejectReason.IDENTITY


@pytest.mark.parametrize("rev", [0, -1, -(2**63)])
def test_revision_when_revision_is_below_one(rev: int) -> None:
    assert code(record(txn(revision=rev), 0)) is RejectReason.REVISION


@pytest.mark.parametrize("kind", ["new", "DELETE", "", "AMEND "])
def test_kind_when_kind_is_not_new_amend_or_cancel(kind: str) -> None:
    assert code(record(txn(kind=kind), 0)) is RejectReason.KIND


def test_cancel_quantity_when_a_cancellation_carries_a_quantity() -> None:
    assert code(record(txn(kind="CANCEL", qty=5), 0)) is RejectReason.CANCEL_QUANTITY
    assert code(record(txn(kind="CANCEL", qty=0), 0)) is None


def test_valid_time_when_before_the_origin() -> None:
    assert code(record(txn(valid="2025-12-31T23:59:59.999999999Z"), 0)) is RejectReason.VALID_TIME
    assert code(record(txn(valid="2026-01-01T00:00:00Z"), 0)) is None


def test_valid_time_when_the_utc_instant_leaves_the_calendar_range() -> None:
    # 9999-12-31T23:00:00-05:00 is 10000-01-01 in UTC
    assert code(record(txn(valid="9999-12-31T23:00:00-05:00"), 0)) is RejectReason.VALID_TIME


def test_unknown_key_when_the_stock_key_is_not_configured() -> None:
    other = StockKey("NOPE", "DEPOT-A")
    assert code(record(txn(key=other), 0)) is RejectReason.UNKNOWN_KEY


def test_key_mismatch_when_the_transport_key_names_another_key() -> None:
    assert code(record(txn(), 0, key=K2.transport_key())) is RejectReason.KEY_MISMATCH


def test_key_mismatch_when_the_transport_key_is_missing() -> None:
    assert code(record(txn(), 0, key=None)) is RejectReason.KEY_MISMATCH


def test_key_mismatch_when_the_transport_key_cannot_be_decoded() -> None:
    assert code(record(txn(), 0, key=b"\xff\xfe")) is RejectReason.KEY_MISMATCH
    assert code(record(txn(), 0, key=b"PART-1/DEPOT-A")) is RejectReason.KEY_MISMATCH


def test_routing_when_the_record_partition_differs_from_the_key_partition() -> None:
    assert code(record(txn(), 0, partition=1)) is RejectReason.ROUTING


def test_precedence_malformed_before_everything() -> None:
    raw = value(txn(txn_id="", revision=0)) + b"trailing"
    assert code(record(raw, 0, key=None, partition=1)) is RejectReason.MALFORMED


def test_precedence_identity_before_revision_and_kind() -> None:
    assert code(record(txn(txn_id="", revision=0, kind="X"), 0)) is RejectReason.IDENTITY


def test_precedence_revision_before_kind() -> None:
    assert code(record(txn(revision=0, kind="X"), 0)) is RejectReason.REVISION


def test_precedence_kind_before_cancel_quantity_and_valid_time() -> None:
    assert code(record(txn(kind="X", valid="2020-01-01T00:00:00Z"), 0)) is RejectReason.KIND


def test_precedence_cancel_quantity_before_valid_time() -> None:
    r = record(txn(kind="CANCEL", qty=1, valid="2020-01-01T00:00:00Z"), 0)
    assert code(r) is RejectReason.CANCEL_QUANTITY


def test_precedence_valid_time_before_unknown_key() -> None:
    r = record(txn(key=StockKey("NOPE", "X"), valid="2020-01-01T00:00:00Z"), 0)
    assert code(r) is RejectReason.VALID_TIME


def test_precedence_unknown_key_before_key_mismatch() -> None:
    r = record(txn(key=StockKey("NOPE", "X")), 0, key=None)
    assert code(r) is RejectReason.UNKNOWN_KEY


def test_precedence_key_mismatch_before_routing() -> None:
    assert code(record(txn(), 0, partition=1, key=None)) is RejectReason.KEY_MISMATCH

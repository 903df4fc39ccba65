"""The oracle's rules, each stated by a test: authority, conflicts, days, arithmetic, input.

Wherever both engines can answer, the oracle's result is also compared with
``compute_incremental`` on the same input.
"""

from __future__ import annotations

from typing import Any

import pytest

from amends_core import timefmt
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    CloseOutOfRange,
    Config,
    Conflict,
    ConflictRef,
    Coordinates,
    Record,
    RejectReason,
    Status,
    StockKey,
)
from amends_core.oracle import OracleInputError, OracleResult, compute
from amends_core.pipeline import compute_incremental
from amends_core.result import RejectionRef
from tests.builders import K1, K2, K3, SOURCE, config, day, record, records, txn, value

CFG = config([(K1, 100, 60, 0)])


def both(cfg: Config, by_partition: dict[int, list[Record]]) -> OracleResult:
    """Oracle result, after checking that the incremental engine reports the same value."""
    out = compute(cfg, by_partition)
    assert out.result == compute_incremental(cfg, by_partition)
    return out


def run(objs: list[dict[str, Any]], opening: int = 100, threshold: int = 60) -> OracleResult:
    cfg = config([(K1, opening, threshold, 0)])
    return both(cfg, {0: records(objs)})


def closes(out: OracleResult, key: StockKey = K1) -> dict[str, int]:
    p = next(p for p in out.result.keys if p.key == key)
    return {timefmt.format_day(b.day): b.close for b in p.balances}


def alerts(out: OracleResult, key: StockKey = K1) -> dict[str, int]:
    p = next(p for p in out.result.keys if p.key == key)
    return {timefmt.format_day(a.day): a.close for a in p.alerts}


def status(out: OracleResult, key: StockKey = K1) -> tuple[Status, tuple[ConflictRef, ...]]:
    p = next(p for p in out.result.keys if p.key == key)
    return p.status, p.reasons


# ---------------------------------------------------------------- authority


def test_the_highest_revision_is_authority_whatever_the_arrival_order() -> None:
    out = run([txn(revision=3, qty=-7), txn(revision=1, qty=-50), txn(revision=2, qty=-20)])
    assert closes(out) == {"2026-01-01": 93}


def test_an_amendment_replaces_the_whole_value_and_can_move_the_day() -> None:
    out = run([txn(qty=-50, valid=day(5)), txn(revision=2, kind="AMEND", qty=-30, valid=day(2))])
    assert closes(out) == {"2026-01-02": 70}


def test_a_cancellation_removes_the_contribution_and_creates_no_activity_day() -> None:
    out = run([txn(qty=-50), txn(revision=2, kind="CANCEL", qty=0, valid=day(9))])
    assert closes(out) == {}
    assert status(out) == (Status.READY, ())


def test_a_late_lower_revision_cannot_resurrect_a_cancelled_identity() -> None:
    out = run([txn(revision=2, kind="CANCEL", qty=0), txn(revision=1, qty=-50)])
    assert closes(out) == {}


def test_a_higher_active_revision_reactivates_a_cancelled_identity() -> None:
    out = run([txn(qty=-50), txn(revision=2, kind="CANCEL", qty=0), txn(revision=3, qty=-5)])
    assert closes(out) == {"2026-01-01": 95}


def test_a_zero_quantity_active_transaction_is_an_activity_day() -> None:
    out = run([txn(qty=0, valid=day(3))])
    assert closes(out) == {"2026-01-03": 100}


def test_canonical_duplicates_differing_only_in_source_time_are_one_candidate() -> None:
    out = run([txn(qty=-5), txn(qty=-5, source_time="2027-01-01T00:00:00Z"), txn(qty=-5)])
    assert closes(out) == {"2026-01-01": 95}
    assert out.conflicts == ()


def test_the_same_txn_id_under_another_key_is_another_identity() -> None:
    cfg = config([(K1, 100, 60, 0), (K2, 10, 0, 0)])
    out = both(cfg, {0: records([txn(qty=-5), txn(qty=-7, key=K2)])})
    assert closes(out, K1) == {"2026-01-01": 95}
    assert closes(out, K2) == {"2026-01-01": 3}


def test_valid_times_with_offsets_fall_on_their_utc_day() -> None:
    out = run([txn(qty=-1, valid="2026-01-02T01:00:00+02:00"), txn("T2", qty=-2, valid=day(2))])
    assert closes(out) == {"2026-01-01": 99, "2026-01-02": 97}


# ---------------------------------------------------------------- conflicts


def test_distinct_candidates_at_the_highest_revision_block_the_key_with_empty_lists() -> None:
    out = run([txn(qty=-5), txn(qty=-6), txn("T2", qty=-1)])
    assert status(out) == (Status.BLOCKED, (ConflictRef("T1", 1),))
    p = out.result.keys[0]
    assert p.balances == () and p.alerts == ()
    assert out.conflicts == (Conflict(K1, "T1", 1),)


@pytest.mark.parametrize(
    "other",
    [{"kind": "AMEND"}, {"valid": "2026-01-01T12:00:00.000000001Z"}, {"qty": -11}],
    ids=["kind", "valid instant (one nanosecond)", "quantity"],
)
def test_candidates_differing_in_kind_instant_or_quantity_conflict(other: dict[str, Any]) -> None:
    out = run([txn(qty=-10), txn(**{"qty": -10, **other})])
    assert status(out)[0] is Status.BLOCKED


def test_a_higher_revision_resolves_a_conflict_which_stays_historical() -> None:
    out = run([txn(qty=-5), txn(qty=-6), txn(revision=2, qty=-7)])
    assert status(out) == (Status.READY, ())
    assert closes(out) == {"2026-01-01": 93}
    assert out.conflicts == (Conflict(K1, "T1", 1),)


def test_reasons_list_every_current_conflict_sorted() -> None:
    out = run(
        [txn("T9", qty=-1), txn("T9", qty=-2), txn("T3", revision=4, qty=-1)]
        + [txn("T3", revision=4, qty=-3), txn("T5", qty=-1), txn("T5", qty=-2)]
        + [txn("T5", revision=2, qty=-3)]
    )
    assert status(out) == (Status.BLOCKED, (ConflictRef("T3", 4), ConflictRef("T9", 1)))
    assert [c.txn_id for c in out.conflicts] == ["T3", "T5", "T9"]


def test_a_blocked_key_does_not_block_other_keys() -> None:
    cfg = config([(K1, 100, 60, 0), (K2, 10, 0, 1)], partitions=2)
    src = {0: records([txn(qty=-5), txn(qty=-6)]), 1: records([txn(qty=-3, key=K2)], partition=1)}
    out = both(cfg, src)
    assert status(out, K1)[0] is Status.BLOCKED
    assert status(out, K2) == (Status.READY, ()) and closes(out, K2) == {"2026-01-01": 7}
    assert [p.key for p in out.blocked] == [K1]


# ---------------------------------------------------------------- days and crossings


def test_a_crossing_needs_the_previous_close_at_or_above_and_the_close_below() -> None:
    out = run(
        [txn("A", qty=-40, valid=day(1)), txn("B", qty=-1, valid=day(2))]
        + [txn("C", qty=+50, valid=day(3)), txn("D", qty=-50, valid=day(4))]
    )
    assert closes(out) == {"2026-01-01": 60, "2026-01-02": 59, "2026-01-03": 109, "2026-01-04": 59}
    assert alerts(out) == {"2026-01-02": 59, "2026-01-04": 59}


def test_an_intraday_dip_that_recovers_the_same_day_is_no_crossing() -> None:
    out = run([txn("A", qty=-90, valid=day(1, 8)), txn("B", qty=+90, valid=day(1, 20))])
    assert closes(out) == {"2026-01-01": 100} and alerts(out) == {}


def test_an_opening_below_the_threshold_manufactures_no_crossing() -> None:
    out = run([txn(qty=-1)], opening=10, threshold=60)
    assert alerts(out) == {}


def test_the_worked_example_correction_moves_the_alert_from_day_one_to_day_two() -> None:
    history = [
        txn("ISSUE-001", qty=-50, valid=day(1)),
        txn("ISSUE-002", qty=-20, valid=day(2)),
        txn("RECEIPT-003", qty=50, valid=day(3)),
    ]
    assert alerts(run(history)) == {"2026-01-01": 50}
    corrected = run([*history, txn("ISSUE-001", revision=2, kind="AMEND", qty=-30, valid=day(1))])
    assert closes(corrected) == {"2026-01-01": 70, "2026-01-02": 50, "2026-01-03": 100}
    assert alerts(corrected) == {"2026-01-02": 50}


# ---------------------------------------------------------------- exact arithmetic


def test_opening_int64_max_with_same_day_plus_one_and_minus_one_is_representable() -> None:
    cfg = config([(K1, INT64_MAX, 0, 0)])
    plus_first = compute(cfg, {0: records([txn("A", qty=1), txn("B", qty=-1)])})
    assert closes(plus_first) == {"2026-01-01": INT64_MAX}
    # The incremental engine checks every processed prefix, so only this order passes it.
    assert closes(run([txn("B", qty=-1), txn("A", qty=1)], INT64_MAX, 0)) == {
        "2026-01-01": INT64_MAX
    }


def test_same_day_sums_beyond_int64_are_exact_when_the_close_fits() -> None:
    objs = [txn("A", qty=INT64_MAX), txn("B", qty=INT64_MAX), txn("C", qty=INT64_MIN)]
    objs += [txn("D", qty=INT64_MIN)]
    out = compute(config([(K1, 5, 0, 0)]), {0: records(objs)})
    assert closes(out) == {"2026-01-01": 3}  # 5 + 2*MAX + 2*MIN = 5 - 2


def test_a_close_above_int64_max_raises_close_out_of_range_naming_key_and_day() -> None:
    cfg = config([(K1, INT64_MAX, 0, 0)])
    with pytest.raises(CloseOutOfRange) as info:
        compute(cfg, {0: records([txn(qty=-1, valid=day(1)), txn("T2", qty=2, valid=day(2))])})
    assert (info.value.key, info.value.day, info.value.value) == (
        K1,
        timefmt.parse_day("2026-01-02"),
        INT64_MAX + 1,
    )
    assert "2026-01-02" in str(info.value)
    with pytest.raises(CloseOutOfRange):
        compute_incremental(cfg, {0: records([txn(qty=-1), txn("T2", qty=2, valid=day(2))])})


def test_a_close_below_int64_min_raises_close_out_of_range() -> None:
    cfg = config([(K1, INT64_MIN, 0, 0)])
    with pytest.raises(CloseOutOfRange) as info:
        compute(cfg, {0: records([txn(qty=-1)])})
    assert info.value.value == INT64_MIN - 1


def test_a_blocked_key_computes_no_closes_and_so_cannot_overflow() -> None:
    cfg = config([(K1, INT64_MAX, 0, 0)])
    out = compute(cfg, {0: records([txn(qty=1), txn(qty=2)])})
    assert status(out)[0] is Status.BLOCKED


def test_an_overflowing_key_raises_even_when_another_key_is_fine() -> None:
    cfg = config([(K1, 0, 0, 0), (K2, INT64_MAX, 0, 0)])
    with pytest.raises(CloseOutOfRange) as info:
        compute(cfg, {0: records([txn(qty=1), txn(qty=1, key=K2)])})
    assert info.value.key == K2


def test_valid_times_at_the_calendar_ends_are_accepted_beyond_int64_nanoseconds() -> None:
    cfg = Config(1, "ns", SOURCE, 1, timefmt.parse_rfc3339("0001-01-01T00:00:00Z"), CFG.keys)
    first, last = "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z"
    out = both(
        cfg.validate(), {0: records([txn(qty=-1, valid=first), txn("T2", qty=-2, valid=last)])}
    )
    assert closes(out) == {"0001-01-01": 99, "9999-12-31": 97}


def test_a_valid_time_whose_utc_instant_leaves_year_one_is_valid_time() -> None:
    cfg = Config(1, "ns", SOURCE, 1, timefmt.parse_rfc3339("0001-01-01T00:00:00Z"), CFG.keys)
    out = both(cfg.validate(), {0: records([txn(valid="0001-01-01T00:30:00+01:00")])})
    assert [r.reason for r in out.rejections] == [RejectReason.VALID_TIME]


# ---------------------------------------------------------------- rejections

GOOD = txn()
BAD_KEY = StockKey("NOPE", "X")


def classify(rec: Record, cfg: Config = CFG) -> RejectReason | None:
    out = both(cfg, {rec.coords.partition: [rec]})
    return out.rejections[0].reason if out.rejections else None


REJECTION_CASES: list[tuple[str, Record, RejectReason]] = [
    ("malformed beats everything", record(b'{"txn_id":""}', 0), RejectReason.MALFORMED),
    (
        "identity before revision and kind",
        record(txn(txn_id="", revision=0, kind="X"), 0),
        RejectReason.IDENTITY,
    ),
    ("empty item", record(txn(key=StockKey("", "L")), 0), RejectReason.IDENTITY),
    ("revision before kind", record(txn(revision=0, kind="X"), 0), RejectReason.REVISION),
    (
        "kind before cancel quantity and valid time",
        record(txn(kind="cancel", qty=3, valid="1999-01-01T00:00:00Z"), 0),
        RejectReason.KIND,
    ),
    (
        "cancel quantity before valid time",
        record(txn(kind="CANCEL", qty=3, valid="1999-01-01T00:00:00Z"), 0),
        RejectReason.CANCEL_QUANTITY,
    ),
    (
        "valid time before unknown key",
        record(txn(valid="2025-12-31T23:59:59.999999999Z", key=BAD_KEY), 0),
        RejectReason.VALID_TIME,
    ),
    (
        "unknown key before key mismatch",
        record(txn(key=BAD_KEY), 0, key=K2.transport_key()),
        RejectReason.UNKNOWN_KEY,
    ),
    (
        "key mismatch before routing",
        record(txn(), 0, partition=1, key=K2.transport_key()),
        RejectReason.KEY_MISMATCH,
    ),
    ("missing transport key", record(txn(), 0, key=None), RejectReason.KEY_MISMATCH),
    (
        "undecodable transport key",
        record(txn(), 0, key=b"PART-1/DEPOT-A"),
        RejectReason.KEY_MISMATCH,
    ),
    (
        "transport key of three strings",
        record(txn(), 0, key=b'["PART-1","DEPOT-A","X"]'),
        RejectReason.KEY_MISMATCH,
    ),
    ("routing", record(txn(), 0, partition=1), RejectReason.ROUTING),
]


@pytest.mark.parametrize(
    ("rec", "reason"),
    [(r, why) for _, r, why in REJECTION_CASES],
    ids=[name for name, _, _ in REJECTION_CASES],
)
def test_rejection_codes_follow_the_documented_precedence(
    rec: Record, reason: RejectReason
) -> None:
    cfg = config([(K1, 100, 60, 0)], partitions=2)
    assert classify(rec, cfg) is reason


def test_an_equal_but_differently_spelled_transport_key_is_accepted() -> None:
    assert classify(record(txn(), 0, key=b' [ "PART-1" , "DEPOT-A" ] ')) is None


def test_rejections_keep_the_raw_record_and_are_sorted_by_coordinates() -> None:
    cfg = config([(K1, 100, 60, 0)], partitions=2)
    bad0 = record(b"not json", 5, partition=0)
    bad1 = record(txn(revision=0), 2, partition=1)
    good = record(txn(), 7, partition=0)
    out = both(cfg, {1: [bad1], 0: [bad0, good]})
    assert [r.record for r in out.rejections] == [bad0, bad1]
    assert out.result.rejections == (
        RejectionRef(0, 5, RejectReason.MALFORMED),
        RejectionRef(1, 2, RejectReason.REVISION),
    )
    assert all(r.detail for r in out.rejections)


def test_a_rejected_record_changes_nothing_else() -> None:
    out = run([txn(qty=-5), txn(revision=2, kind="CANCEL", qty=1)])
    assert closes(out) == {"2026-01-01": 95}


# ---------------------------------------------------------------- input checks


def test_records_from_another_source_incarnation_are_refused() -> None:
    with pytest.raises(OracleInputError, match="source"):
        compute(CFG, {0: [record(txn(), 0, source="other-source")]})


def test_a_partition_outside_the_configuration_is_refused() -> None:
    with pytest.raises(OracleInputError, match="partition"):
        compute(CFG, {1: [record(txn(), 0, partition=1)]})


def test_records_filed_under_another_partition_are_refused() -> None:
    with pytest.raises(OracleInputError, match="partition"):
        compute(config([(K1, 0, 0, 0)], partitions=2), {0: [record(txn(), 0, partition=1)]})


@pytest.mark.parametrize(
    "offsets", [[0, 0], [3, 2], [-1, 0]], ids=["repeated", "falling", "negative"]
)
def test_offsets_must_be_non_negative_and_strictly_increasing(offsets: list[int]) -> None:
    recs = [record(txn(f"T{o}"), o) for o in offsets]
    with pytest.raises(OracleInputError, match="offset"):
        compute(CFG, {0: recs})


def test_an_unusable_configuration_is_refused() -> None:
    broken = Config(1, "", SOURCE, 1, 0, CFG.keys)
    with pytest.raises(OracleInputError, match="namespace"):
        compute(broken, {0: []})


def test_offset_gaps_are_allowed() -> None:
    out = both(CFG, {0: [record(txn("A", qty=-1), 3), record(txn("B", qty=-2), 90)]})
    assert closes(out) == {"2026-01-01": 97}


def test_an_empty_history_leaves_every_key_untouched_and_ready() -> None:
    cfg = config([(K1, 1, 0, 0), (K3, 2, 0, 0)])
    out = both(cfg, {0: []})
    assert [(p.key, p.status, p.balances) for p in out.result.keys] == [
        (K1, Status.READY, ()),
        (K3, Status.READY, ()),
    ]


def test_records_whose_values_are_not_utf8_are_malformed_not_an_oracle_failure() -> None:
    raw = value(txn()).replace(b"T1", b"T\xff")
    assert classify(Record(raw, K1.transport_key(), Coordinates(SOURCE, 0, 0))) is (
        RejectReason.MALFORMED
    )

"""Authority, conflicts, suffix repair, crossings and exact arithmetic of the fold."""

from __future__ import annotations

from typing import Any

import pytest

from amends_core import fold, timefmt, wire
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    CloseOutOfRange,
    ConflictRef,
    Coordinates,
    KeyConfig,
    Status,
    Transaction,
)
from amends_core.pipeline import MemoryPipeline
from amends_core.store.memory import MemoryStore
from tests.builders import K1, SOURCE, config, day, records, txn


def run(objs: list[dict[str, Any]], opening: int = 100, threshold: int = 60) -> MemoryStore:
    cfg = config([(K1, opening, threshold, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records(objs))
    pipe.drain()
    return pipe.store


def closes(store: MemoryStore) -> dict[str, int]:
    p = store.projection(K1)
    return {timefmt.format_day(b.day): b.close for b in p.balances}


def alert_days(store: MemoryStore) -> list[str]:
    return [timefmt.format_day(a.day) for a in store.projection(K1).alerts]


# ---------------------------------------------------------------- authority


def test_the_highest_revision_is_authority_whatever_the_arrival_order() -> None:
    s = run([txn(revision=3, qty=-7), txn(revision=1, qty=-50), txn(revision=2, qty=-20)])
    assert closes(s) == {"2026-01-01": 93}


def test_an_amendment_is_a_complete_replacement_not_a_delta() -> None:
    s = run([txn(qty=-50), txn(revision=2, kind="AMEND", qty=-30)])
    assert closes(s) == {"2026-01-01": 70}


def test_new_and_amend_have_the_same_upsert_meaning() -> None:
    a = run([txn(qty=-5), txn(revision=2, kind="NEW", qty=-8)])
    b = run([txn(qty=-5), txn(revision=2, kind="AMEND", qty=-8)])
    assert closes(a) == closes(b) == {"2026-01-01": 92}


def test_intermediate_revisions_need_never_arrive() -> None:
    s = run([txn(revision=4, kind="AMEND", qty=-1)])
    assert closes(s) == {"2026-01-01": 99}


def test_source_time_does_not_choose_authority() -> None:
    s = run([
        txn(revision=2, qty=-2, source_time="2020-01-01T00:00:00Z"),
        txn(revision=1, qty=-1, source_time="2030-01-01T00:00:00Z"),
    ])
    assert closes(s) == {"2026-01-01": 98}


def test_the_same_txn_id_under_another_key_is_another_identity() -> None:
    from tests.builders import K2

    cfg = config([(K1, 100, 60, 0), (K2, 10, 0, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn(qty=-1), txn(key=K2, qty=-2)]))
    pipe.drain()
    assert pipe.store.projection(K1).balances[0].close == 99
    assert pipe.store.projection(K2).balances[0].close == 8


# ---------------------------------------------------------------- cancellation


def test_a_cancellation_removes_the_contribution_and_its_activity_day() -> None:
    s = run([txn(qty=-5, valid=day(2)), txn(revision=2, kind="CANCEL", qty=0, valid=day(9))])
    assert closes(s) == {}


def test_a_cancellation_ignores_its_own_valid_time() -> None:
    s = run([
        txn("A", qty=-5, valid=day(2)),
        txn("B", qty=-1, valid=day(5)),
        txn("A", revision=2, kind="CANCEL", qty=0, valid=day(5)),
    ])
    assert closes(s) == {"2026-01-05": 99}


def test_a_late_lower_new_cannot_resurrect_a_cancelled_identity() -> None:
    s = run([txn(revision=2, kind="CANCEL", qty=0), txn(revision=1, qty=-40)])
    assert closes(s) == {}


def test_a_higher_active_revision_reactivates_a_cancelled_identity() -> None:
    s = run([txn(qty=-5), txn(revision=2, kind="CANCEL", qty=0), txn(revision=3, kind="AMEND", qty=-6)])
    assert closes(s) == {"2026-01-01": 94}


def test_an_active_zero_quantity_transaction_is_an_activity_day() -> None:
    s = run([txn(qty=0, valid=day(3))])
    assert closes(s) == {"2026-01-03": 100}


# ---------------------------------------------------------------- evidence


def test_canonical_duplicates_add_a_source_without_a_new_candidate() -> None:
    s = run([txn(source_time="2026-03-01T00:00:00Z"), txn(source_time="2026-04-01T00:00:00Z")])
    ident = s.keys[K1].identities["T1"]
    assert len(ident.revisions[1]) == 1
    assert [c.offset for c in ident.revisions[1][0].sources] == [0, 1]
    assert s.conflicts() == []


def test_canonical_equality_ignores_source_time_and_coordinates_only() -> None:
    base = wire.decode_transaction(wire.encode_transaction(Transaction("T", 1, "NEW", K1, 5, -1, 0)))
    assert isinstance(base, Transaction)
    from amends_core.ledger import canonical_equal

    assert canonical_equal(base, Transaction("T", 1, "NEW", K1, 5, -1, 999))
    for other in (
        Transaction("U", 1, "NEW", K1, 5, -1, 0),
        Transaction("T", 2, "NEW", K1, 5, -1, 0),
        Transaction("T", 1, "AMEND", K1, 5, -1, 0),
        Transaction("T", 1, "NEW", K1, 6, -1, 0),
        Transaction("T", 1, "NEW", K1, 5, -2, 0),
    ):
        assert not canonical_equal(base, other)


# ---------------------------------------------------------------- conflicts


def test_distinct_candidates_at_the_highest_revision_block_the_key() -> None:
    s = run([txn(qty=-5), txn(qty=-6)])
    p = s.projection(K1)
    assert p.status is Status.BLOCKED
    assert p.reasons == (ConflictRef("T1", 1),)


def test_kind_or_valid_instant_alone_makes_a_conflict() -> None:
    s = run([txn(kind="NEW"), txn(kind="AMEND")])
    assert s.projection(K1).status is Status.BLOCKED
    s = run([txn(valid=day(1, hour=1)), txn(valid=day(1, hour=2))])
    assert s.projection(K1).status is Status.BLOCKED


def test_a_blocked_key_freezes_its_values_but_keeps_collecting_evidence() -> None:
    s = run([txn(qty=-5), txn("X", qty=-1, valid=day(2)), txn("X", qty=-2, valid=day(2)), txn("Y", qty=-3, valid=day(3))])
    p = s.projection(K1)
    assert p.status is Status.BLOCKED
    assert closes(s) == {"2026-01-01": 95, "2026-01-02": 94}
    assert "Y" in s.keys[K1].identities


def test_resolving_a_conflict_refolds_the_whole_key_including_evidence_held_during_the_block() -> None:
    s = run([
        txn(qty=-5),
        txn("X", qty=-1, valid=day(2)),
        txn("X", qty=-2, valid=day(2)),
        txn("Y", qty=-3, valid=day(3)),
        txn("X", revision=2, kind="AMEND", qty=-10, valid=day(2)),
    ])
    assert s.projection(K1).status is Status.READY
    assert closes(s) == {"2026-01-01": 95, "2026-01-02": 85, "2026-01-03": 82}


def test_every_unresolved_conflict_must_be_resolved_before_computation_resumes() -> None:
    s = run([
        txn("X", qty=-1), txn("X", qty=-2),
        txn("Y", qty=-1), txn("Y", qty=-2),
        txn("X", revision=2, qty=-3),
    ])
    p = s.projection(K1)
    assert p.status is Status.BLOCKED and p.reasons == (ConflictRef("Y", 1),)


def test_historical_conflicts_are_kept_after_the_key_returns_to_ready() -> None:
    s = run([txn(qty=-1), txn(qty=-2), txn(revision=2, qty=-3)])
    assert s.projection(K1).status is Status.READY
    assert [(c.txn_id, c.revision) for c in s.conflicts()] == [("T1", 1)]


def test_a_conflict_below_the_highest_revision_does_not_block() -> None:
    s = run([txn(revision=2, qty=-3), txn(qty=-1), txn(qty=-2)])
    assert s.projection(K1).status is Status.READY
    assert closes(s) == {"2026-01-01": 97}
    assert [(c.txn_id, c.revision) for c in s.conflicts()] == [("T1", 1)]


# ---------------------------------------------------------------- repair boundary


def _delta(state: fold.KeyState, t: dict[str, Any]) -> fold.FoldDelta:
    raw = wire.encode_transaction(_t(t))
    decoded = wire.decode_transaction(raw)
    assert isinstance(decoded, Transaction)
    return fold.apply(state, decoded, Coordinates(SOURCE, 0, 99))


def _t(obj: dict[str, Any]) -> Transaction:
    from tests.builders import value

    t = wire.decode_transaction(value(obj))
    assert isinstance(t, Transaction)
    return t


def _state(objs: list[dict[str, Any]]) -> fold.KeyState:
    return run(objs).keys[K1]


def test_repair_starts_at_the_changed_day_and_keeps_earlier_rows() -> None:
    st = _state([txn(f"T{i}", qty=-1, valid=day(i)) for i in range(1, 6)])
    d = _delta(st, txn("T4", revision=2, qty=-2, valid=day(4)))
    assert d.repair is not None
    assert timefmt.format_day(d.repair.from_day) == "2026-01-04"
    assert [timefmt.format_day(x) for x in d.repair.days] == ["2026-01-04", "2026-01-05"]


def test_moving_a_transaction_earlier_repairs_from_the_new_day() -> None:
    st = _state([txn(f"T{i}", qty=-1, valid=day(i)) for i in range(1, 6)])
    d = _delta(st, txn("T5", revision=2, qty=-1, valid=day(2)))
    assert d.repair is not None and timefmt.format_day(d.repair.from_day) == "2026-01-02"


def test_moving_a_transaction_later_repairs_from_the_old_day() -> None:
    st = _state([txn(f"T{i}", qty=-1, valid=day(i)) for i in range(1, 6)])
    d = _delta(st, txn("T2", revision=2, qty=-1, valid=day(5)))
    assert d.repair is not None and timefmt.format_day(d.repair.from_day) == "2026-01-02"
    assert [timefmt.format_day(x) for x in d.repair.days] == ["2026-01-03", "2026-01-04", "2026-01-05"]
    assert [timefmt.format_day(x) for x in d.repair.old_days] == ["2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"]


def test_a_tail_append_repairs_only_the_new_day() -> None:
    st = _state([txn(f"T{i}", qty=-1, valid=day(i)) for i in range(1, 50)])
    d = _delta(st, txn("NEW", qty=-1, valid=day(60)))
    assert d.repair is not None and d.repair.old_days == () and len(d.repair.days) == 1


def test_a_stale_revision_or_canonical_duplicate_leaves_the_projection_unchanged() -> None:
    st = _state([txn(revision=2, qty=-3)])
    assert _delta(st, txn(revision=1, qty=-9)).repair is None
    assert _delta(st, txn(revision=2, qty=-3)).repair is None


def test_a_higher_revision_with_the_same_day_and_quantity_changes_no_business_fact() -> None:
    st = _state([txn(qty=-3, valid=day(1, hour=1))])
    assert _delta(st, txn(revision=2, kind="AMEND", qty=-3, valid=day(1, hour=5))).repair is None


def test_apply_does_not_modify_the_state_it_reads() -> None:
    st = _state([txn(f"T{i}", qty=-1, valid=day(i)) for i in range(1, 6)])
    before = (list(st.days), list(st.closes), dict(st.alerts), dict(st.active))
    _delta(st, txn("T1", revision=2, qty=-30, valid=day(1)))
    assert (st.days, st.closes, st.alerts, st.active) == (before[0], before[1], before[2], before[3])


# ---------------------------------------------------------------- crossings


def test_an_alert_is_a_downward_crossing_of_daily_closes() -> None:
    s = run([txn(qty=-50)])
    assert alert_days(s) == ["2026-01-01"]


def test_staying_below_the_threshold_raises_no_further_alert() -> None:
    s = run([txn("A", qty=-50, valid=day(1)), txn("B", qty=-1, valid=day(2))])
    assert alert_days(s) == ["2026-01-01"]


def test_closing_exactly_at_the_threshold_is_not_below_it() -> None:
    s = run([txn(qty=-40)])
    assert alert_days(s) == []


def test_an_intraday_dip_that_recovers_by_close_is_not_a_crossing() -> None:
    s = run([txn("A", qty=-90, valid=day(1, 8)), txn("B", qty=85, valid=day(1, 9))])
    assert alert_days(s) == []


def test_opening_below_the_threshold_manufactures_no_crossing() -> None:
    s = run([txn(qty=-1)], opening=10, threshold=60)
    assert alert_days(s) == []


def test_a_later_receipt_does_not_erase_a_historical_crossing() -> None:
    s = run([txn("A", qty=-50, valid=day(1)), txn("B", qty=500, valid=day(2))])
    assert alert_days(s) == ["2026-01-01"]


def test_a_correction_can_move_an_alert_to_another_day() -> None:
    s = run([txn("A", qty=-50, valid=day(1)), txn("B", qty=-20, valid=day(2)), txn("A", revision=2, qty=-30, valid=day(1))])
    assert alert_days(s) == ["2026-01-02"]


# ---------------------------------------------------------------- exact arithmetic


def test_intraday_intermediate_overflow_is_tolerated_when_the_close_fits() -> None:
    # Opening MAX with same-day +1 and -1 that arrive while the key is BLOCKED: the refold
    # after the block resolves sums the whole day at once, so the close MAX is representable
    # although MAX+1 is not.
    s = run(
        [
            txn("X", qty=0, valid=day(2)),
            txn("X", qty=5, valid=day(2)),
            txn("A", qty=1, valid=day(1, 1)),
            txn("B", qty=-1, valid=day(1, 2)),
            txn("X", revision=2, kind="CANCEL", qty=0),
        ],
        opening=INT64_MAX,
        threshold=0,
    )
    assert closes(s) == {"2026-01-01": INT64_MAX}
    s = run(
        [txn("B", qty=-1, valid=day(1, 2)), txn("A", qty=1, valid=day(1, 1))],
        opening=INT64_MAX,
        threshold=0,
    )
    assert closes(s) == {"2026-01-01": INT64_MAX}


def test_a_daily_total_outside_int64_is_fine_when_every_close_fits() -> None:
    s = run(
        [txn("A", qty=INT64_MAX, valid=day(1, 1)), txn("B", qty=INT64_MAX, valid=day(1, 2))],
        opening=INT64_MIN,
        threshold=0,
    )
    assert closes(s) == {"2026-01-01": INT64_MIN + 2 * INT64_MAX}


def test_a_close_outside_int64_is_an_operation_error_and_commits_nothing() -> None:
    cfg = config([(K1, INT64_MAX, 0, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn(qty=1)]))
    with pytest.raises(CloseOutOfRange) as e:
        pipe.drain()
    assert "2026-01-01" in str(e.value) and "PART-1" in str(e.value)
    assert pipe.store.frontier(0) == 0
    assert pipe.store.pending(0) is None


def test_a_close_below_int64_is_an_operation_error() -> None:
    with pytest.raises(CloseOutOfRange):
        run([txn(qty=-1)], opening=INT64_MIN, threshold=0)


def test_key_state_install_matches_a_from_scratch_fold() -> None:
    objs = [txn(f"T{i % 7}", revision=1 + i // 7, qty=(i * 37) % 23 - 11, valid=day(1 + (i * 13) % 17)) for i in range(60)]
    st = run(objs).keys[K1]
    fresh = fold.new_key_state(KeyConfig(K1, 100, 60, 0))
    from amends_core.fold import _full_refold

    rep = _full_refold(fresh, dict(st.active))
    assert list(rep.days) == st.days and list(rep.closes) == st.closes
    assert {a.day: a for a in rep.alerts} == st.alerts

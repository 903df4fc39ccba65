"""Behavioural rules every processing store and view must keep, run on both stores.

Each test runs twice (``[memory]`` and ``[postgres]``) through the adapter
interface of ``tests.parity.harness``; nothing here knows which store it has.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amends_core import timefmt, wire
from amends_core.errors import (
    FenceError,
    FrontierMismatch,
    OutboxOrderError,
    ReplayMismatch,
    SourceMismatch,
)
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    CloseOutOfRange,
    Config,
    Coordinates,
    KeyConfig,
    Record,
    RejectReason,
    StockKey,
)
from amends_core.result import ComputeResult, RejectionRef
from tests import builders as b
from tests.parity.harness import Adapter, World, run_schedule

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"


def envs(raw: list[bytes]) -> list[tuple[str, str | None, int, int]]:
    """(type, day, version, cause offset) of envelope bytes."""
    out = []
    for r in raw:
        e = wire.decode_envelope(r)
        assert not isinstance(e, wire.DecodeError), e
        day = None if e.output_id.day is None else timefmt.format_day(e.output_id.day)
        out.append((e.type.value, day, e.version, e.cause.offset))
    return out


def publish_and_view(a: Adapter, log: list[bytes], partition: int = 0) -> None:
    for seq, raw in a.pending(partition):
        log.append(raw)
        a.acknowledge(partition, seq)
    f = a.view_frontier(partition)
    if f < len(log):
        a.view_apply(partition, [(o, log[o]) for o in range(f, len(log))])


def result_json(a: Adapter) -> dict[str, object]:
    st = a.state()
    refs = [
        RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)
        for r, _ in st.rejections
    ]
    return ComputeResult.build(a.cfg, st.view.projections(), refs, st.conflicts).to_json()


# ---------------------------------------------------------------- worked example


def test_worked_example_stages_reach_the_hand_stated_frontiers_envelopes_and_view(make_adapter):
    cfg = wire.decode_config((FIXTURE / "config.json").read_bytes())
    a = make_adapter(cfg)
    tok = a.claim(0)
    log: list[bytes] = []
    offset = 0
    for stage in json.loads((FIXTURE / "stages.json").read_text())["stages"]:
        recs = []
        for line in (FIXTURE / stage["source"]).read_bytes().splitlines():
            t = wire.decode_transaction(line)
            assert not isinstance(t, wire.DecodeError)
            recs.append(
                Record(
                    line,
                    t.stock_key.transport_key(),
                    Coordinates(cfg.source_incarnation, 0, offset),
                )
            )
            offset += 1
        expected = json.loads((FIXTURE / stage["expected"]).read_text())
        got = envs(a.process(tok, recs))
        assert got == [
            (e["type"], e["day"], e["version"], e["cause_offset"]) for e in expected["envelopes"]
        ]
        publish_and_view(a, log)
        assert a.frontier(0) == expected["source_frontier"]
        assert a.view_frontier(0) == expected["output_frontier"]
        assert result_json(a) == expected["view"]


# ---------------------------------------------------------------- authority


def test_amendment_replaces_the_whole_value_and_repairs_from_the_earliest_affected_day(
    make_adapter,
):
    a = make_adapter(b.config())
    tok = a.claim(0)
    first = a.process(tok, b.records([
        b.txn("A", qty=-10, valid=b.day(2)),
        b.txn("B", qty=-10, valid=b.day(5)),
    ]))
    assert envs(first) == [
        ("BalanceStated", "2026-01-02", 1, 0),
        ("KeyStatusStated", None, 1, 0),
        ("BalanceStated", "2026-01-05", 1, 1),
    ]
    # Moving B from day 5 to day 3 repairs from day 3: day 3 appears, day 5 is withdrawn.
    moved = a.process(tok, b.records([b.txn("B", 2, "AMEND", qty=-10, valid=b.day(3))], start=2))
    assert envs(moved) == [
        ("BalanceStated", "2026-01-03", 1, 2),
        ("BalanceRetracted", "2026-01-05", 2, 2),
    ]


def test_cancellation_removes_the_contribution_and_a_late_lower_revision_cannot_resurrect_it(
    make_adapter,
):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A", qty=-10, valid=b.day(2))]))
    cancelled = a.process(tok, b.records([b.txn("A", 3, "CANCEL", qty=0, valid=b.day(9))], start=1))
    assert envs(cancelled) == [("BalanceRetracted", "2026-01-02", 2, 1)]
    late = a.process(tok, b.records([b.txn("A", 2, "AMEND", qty=-99, valid=b.day(2))], start=2))
    assert late == []
    assert a.state().view == a.state().view  # state readable
    assert a.state().keys[b.K1].active == {}


def test_distinct_candidates_at_the_highest_revision_block_the_key_until_resolved(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([
        b.txn("A", 1, qty=-10, valid=b.day(2)),
        b.txn("A", 2, "AMEND", qty=-20, valid=b.day(2)),
        b.txn("A", 2, "AMEND", qty=-30, valid=b.day(2)),  # conflict at revision 2
        b.txn("C", 1, qty=-5, valid=b.day(4)),  # evidence kept, values frozen
    ]))
    st = a.state()
    assert [(c.txn_id, c.revision) for c in st.conflicts] == [("A", 2)]
    status = [e for e in st.outputs.values() if e.output_id.family.value == "key-status"]
    assert status[0].payload.status.value == "BLOCKED"
    resolved = a.process(tok, b.records([b.txn("A", 3, "AMEND", qty=-40, valid=b.day(2))], start=4))
    # The whole key refolds (C's day 4 appears and now crosses 60), READY last.
    assert envs(resolved) == [
        ("AlertRaised", "2026-01-04", 1, 4),
        ("BalanceStated", "2026-01-02", 3, 4),
        ("BalanceStated", "2026-01-04", 1, 4),
        ("KeyStatusStated", None, 3, 4),
    ]
    assert [(c.txn_id, c.revision) for c in a.state().conflicts] == [("A", 2)]  # historical


def test_canonical_duplicate_at_another_offset_adds_evidence_but_no_envelope(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A", qty=-10)]))
    dup = a.process(tok, b.records([b.txn("A", qty=-10, source_time="2027-01-01T00:00:00Z")], 0, 1))
    assert dup == []
    cand = a.state().keys[b.K1].identities["A"].revisions[1]
    assert len(cand) == 1
    assert [c.offset for c in cand[0].sources] == [0, 1]


def test_stale_lower_revision_emits_nothing_and_changes_no_projection(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A", 5, "AMEND", qty=-10)]))
    before = a.state().keys[b.K1].projection()
    assert a.process(tok, b.records([b.txn("A", 4, "AMEND", qty=-70)], start=1)) == []
    assert a.state().keys[b.K1].projection() == before


# ---------------------------------------------------------------- quarantine


def test_every_rejection_reason_quarantines_the_raw_record_and_advances_the_frontier(make_adapter):
    cfg = b.config(
        [(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2
    )
    a = make_adapter(cfg)
    tok = a.claim(0)
    good = b.txn("A")
    bad = [
        (b.record(b"\xff{not json", 0, key=b.K1.transport_key()), RejectReason.MALFORMED),
        (b.record(b.txn(""), 1), RejectReason.IDENTITY),
        (b.record(b.txn(revision=0), 2), RejectReason.REVISION),
        (b.record(b.txn(kind="UPSERT"), 3), RejectReason.KIND),
        (b.record(b.txn(kind="CANCEL", qty=3), 4), RejectReason.CANCEL_QUANTITY),
        (b.record(b.txn(valid="2025-12-31T23:59:59Z"), 5), RejectReason.VALID_TIME),
        (b.record(b.txn(key=StockKey("NOPE", "X")), 6), RejectReason.UNKNOWN_KEY),
        (b.record(good, 7, key=b"\xfe\x00raw"), RejectReason.KEY_MISMATCH),
        (b.record(good, 8, key=None), RejectReason.KEY_MISMATCH),
        (b.record(b.txn(key=b.K2), 10), RejectReason.ROUTING),  # gap at 9
    ]
    assert a.process(tok, [r for r, _ in bad]) == []
    assert a.frontier(0) == 11
    st = a.state()
    assert [(r.record, r.reason) for r, _ in st.rejections] == [(r, why) for r, why in bad]
    assert all(detail for _, detail in st.rejections)
    assert st.outbox[0] == []


# ---------------------------------------------------------------- fencing and progress


def test_a_replaced_owner_cannot_commit_after_the_claim(make_adapter):
    a = make_adapter(b.config())
    old = a.claim(0)
    new = a.claim(0)
    with pytest.raises(FenceError):
        a.process(old, b.records([b.txn("A")]))
    assert a.frontier(0) == 0
    assert new.epoch == old.epoch + 1
    a.process(new, b.records([b.txn("A")]))
    assert a.frontier(0) == 1


def test_a_token_of_another_configuration_is_fenced(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    forged = type(tok)(tok.namespace, "0" * 64, tok.partition, tok.epoch)
    with pytest.raises(FenceError):
        a.process(forged, b.records([b.txn("A")]))


def test_processing_from_any_frontier_but_the_installed_one_is_refused(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A"), b.txn("B")]))
    for wrong in (1, 3):
        with pytest.raises(FrontierMismatch):
            a.process(tok, b.records([b.txn("C")], start=3), expected=wrong)
    assert a.frontier(0) == 2


def test_records_of_another_source_or_below_the_frontier_are_refused(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A"), b.txn("B")]))
    with pytest.raises(SourceMismatch):
        a.process(tok, [b.record(b.txn("C"), 1)])
    with pytest.raises(SourceMismatch):
        a.process(tok, [b.record(b.txn("C"), 5, source="other-source")])
    assert a.frontier(0) == 2


def test_offset_gaps_leave_the_frontier_just_after_the_last_record(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, [b.record(b.txn("A"), 3), b.record(b.txn("B"), 10)])
    assert a.frontier(0) == 11


def test_acknowledge_accepts_only_the_earliest_pending_row(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A", valid=b.day(1)), b.txn("B", valid=b.day(2))]))
    seqs = [s for s, _ in a.pending(0)]
    assert seqs == [1, 2, 3]
    with pytest.raises(OutboxOrderError):
        a.acknowledge(0, 2)
    a.acknowledge(0, 1)
    with pytest.raises(OutboxOrderError):
        a.acknowledge(0, 1)
    assert [s for s, _ in a.pending(0)] == [2, 3]
    a.acknowledge(0, 2)
    a.acknowledge(0, 3)
    with pytest.raises(OutboxOrderError):
        a.acknowledge(0, 4)
    assert a.pending(0) == []


# ---------------------------------------------------------------- arithmetic


def test_a_daily_close_outside_int64_stops_at_that_record_without_advancing(make_adapter):
    cfg = b.config([(b.K1, INT64_MAX - 5, 0, 0)])
    a = make_adapter(cfg)
    tok = a.claim(0)
    with pytest.raises(CloseOutOfRange):
        a.process(tok, b.records([
            b.txn("A", qty=3, valid=b.day(1)),
            b.txn("B", qty=3, valid=b.day(2)),  # close MAX+1
            b.txn("C", qty=1, valid=b.day(3)),
        ]))
    assert a.frontier(0) == 1  # the record before the failing one is committed
    with pytest.raises(CloseOutOfRange):
        a.process(tok, b.records([b.txn("B", qty=3, valid=b.day(2))], start=1))
    assert a.frontier(0) == 1


def test_day_totals_beyond_int64_with_a_representable_close_are_exact(make_adapter):
    cfg = b.config([(b.K1, INT64_MIN, 0, 0)])
    a = make_adapter(cfg)
    tok = a.claim(0)
    a.process(tok, b.records([b.txn("A", qty=INT64_MAX), b.txn("B", qty=6)]))
    st = a.state().keys[b.K1]
    assert st.totals == [INT64_MAX + 6]
    assert st.closes == [5]


def test_valid_times_in_years_1_and_9999_round_trip(make_adapter):
    cfg = Config(
        1, "ns", b.SOURCE, 1, timefmt.parse_rfc3339("0001-01-01T00:00:00Z"),
        (KeyConfig(b.K1, 0, 1, 0),),
    ).validate()
    a = make_adapter(cfg)
    tok = a.claim(0)
    out = a.process(tok, b.records([
        b.txn("A", qty=1, valid="0001-01-01T00:00:00Z", source_time="0000-12-31T23:00:00-02:00"),
        b.txn("B", qty=-2, valid="9999-12-31T23:59:59.999999999Z"),
    ]))
    assert envs(out)[0][1] == "0001-01-01" and envs(out)[-1][1] == "9999-12-31"
    ident = a.state().keys[b.K1].identities
    assert ident["B"].revisions[1][0].txn.valid_ns == timefmt.parse_rfc3339(
        "9999-12-31T23:59:59.999999999Z"
    )


# ---------------------------------------------------------------- names and bytes


def test_names_with_quotes_separators_backslashes_and_non_ascii_round_trip(make_adapter):
    odd = StockKey("it'em \"1\"/x,y;z", "l\\o\tc\nation ü ☃ 𝄞 [\"a\",\"b\"]")
    cfg = Config(
        1, "ns'\"\\/;, ü-𝄞", "src 'x' \\ ü", 1, timefmt.parse_rfc3339(b.ORIGIN),
        (KeyConfig(odd, 10, 5, 0),),
    ).validate()
    a = make_adapter(cfg)
    tok = a.claim(0)
    recs = [
        b.record(b.txn("t'x\\\"ü", qty=-6, key=odd), 0, source=cfg.source_incarnation),
        b.record(b"\x00\xff'; DROP TABLE outbox; --", 1, key=b"\\x'\x00",
                 source=cfg.source_incarnation),
    ]
    out = a.process(tok, recs)
    st = a.state()
    assert st.rejections[0][0].record == recs[1]
    assert st.keys[odd].identities["t'x\\\"ü"].revisions[1][0].txn.stock_key == odd
    log: list[bytes] = []
    publish_and_view(a, log)
    assert log == out
    view = a.state().view
    assert {e.output_id.key for e in view.rows.values()} == {odd}
    assert view.projections()[odd].alerts[0].close == 4


# ---------------------------------------------------------------- replay and restart


def test_replay_of_a_consumed_interval_checks_evidence_and_claims_a_new_epoch(make_adapter):
    a = make_adapter(b.config())
    tok = a.claim(0)
    recs = b.records([b.txn("A"), b.txn(""), b.txn("B", qty=-3)])
    a.process(tok, recs)
    before = a.state()
    new = a.replay(0, recs)
    assert new.epoch == tok.epoch + 1
    after = a.state()
    assert after.outbox == before.outbox and after.keys == before.keys
    assert after.partitions[0][1:] == before.partitions[0][1:]
    with pytest.raises(ReplayMismatch):
        a.replay(0, b.records([b.txn("Z")], start=1))  # not what offset 1 held
    with pytest.raises(ReplayMismatch):
        a.replay(0, b.records([b.txn("A")], start=3))  # not consumed yet
    assert a.claim(0).epoch == new.epoch + 1  # failed replays claimed nothing


def test_reopening_the_store_continues_from_identical_state(make_adapter):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 50, 60, 0)])
    a = make_adapter(cfg)
    world = World(cfg, {0: b.records([
        b.txn("A", qty=-50, valid=b.day(1)),
        b.txn("B", qty=10, valid=b.day(2), key=b.K2),
        b.txn("A", 2, "AMEND", qty=-30, valid=b.day(1)),
        b.txn("C", qty=5, valid=b.day(1)),
        b.txn("C", qty=6, valid=b.day(1)),  # conflict: BLOCKED
        b.txn("C", 2, "CANCEL", qty=0, valid=b.day(1)),  # resolved
    ])})
    trace = run_schedule(a, world, [
        ("work", 0, 2), ("restart",), ("work", 0, 1), ("relay", 0, 2, True), ("restart",),
        ("work", 0, 2), ("view", 0, 3), ("restart",), ("work", 0, 1),
    ])
    assert trace[0][0] == "ok"
    assert a.state().view.projections()[b.K1].balances[0].close == 70

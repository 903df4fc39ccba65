"""The scenario catalogue SC01..SC37: one named rule per test, run in the simulation model.

Every scenario drives ``amends_core.sim.Model`` with explicit steps and ends,
where it can, at a complete boundary checked against the independent oracle.
Each test takes the model class as a defaulted argument (pytest passes none),
so the sensitivity tests can rerun a scenario against a broken variant and
show that it fails. docs/simulation.md publishes this catalogue as a table.
"""

from __future__ import annotations

from typing import Any

import pytest

from amends_core import timefmt
from amends_core.errors import ReplayMismatch
from amends_core.ledger import Conflict, Family, MessageType, Record, RejectReason, Status
from amends_core.result import RejectionRef
from amends_core.sim.model import (
    Actor,
    Event,
    Model,
    Observation,
    Outcome,
    ReplayRefused,
    Step,
    rebuild,
)
from amends_core.verify import Report, VerifyStatus
from amends_core.view import Effect
from tests.builders import K1, K2, K3, config, day, record, txn, value

CFG = config([(K1, 100, 60, 0), (K2, 40, 25, 0), (K3, 30, 10, 1)], partitions=2, namespace="sc")
COMMIT, ABORT = Outcome.COMMIT, Outcome.ABORT
UC, UA = Outcome.UNKNOWN_COMMITTED, Outcome.UNKNOWN_ABORTED


def W(p: int = 0, o: Outcome = COMMIT) -> Step:
    return Step(Actor.WORKER, p, o)


def P(p: int = 0) -> Step:
    return Step(Actor.PREPARE, p)


def R(p: int = 0, o: Outcome = COMMIT) -> Step:
    return Step(Actor.RELAY, p, o)


def V(p: int = 0, o: Outcome = COMMIT) -> Step:
    return Step(Actor.VIEW, p, o)


def C(p: int = 0, o: Outcome = COMMIT) -> Step:
    return Step(Actor.CLAIM, p, o)


TICK = Step(Actor.TICK)


def src(*objs: dict[str, Any] | Record, partition: int = 0, start: int = 0) -> list[Record]:
    return [
        o if isinstance(o, Record) else record(o, start + i, partition)
        for i, o in enumerate(objs)
    ]


def closes(m: Model, key: Any = K1) -> dict[str, int]:
    return {timefmt.format_day(b.day): b.close for b in m.view.projections()[key].balances}


def alerts(m: Model, key: Any = K1) -> list[str]:
    return [timefmt.format_day(a.day) for a in m.view.projections()[key].alerts]


def caused_by(m: Model, offset: int, p: int = 0) -> list[tuple[str, str | None, int]]:
    """(type, day, version) of the committed envelopes caused by one source offset."""
    out = []
    for row in m.store.outbox[p]:
        e = row.envelope
        if e.cause.offset == offset:
            d = None if e.output_id.day is None else timefmt.format_day(e.output_id.day)
            out.append((e.type.value, d, e.version))
    return out


def finish(m: Model, status: VerifyStatus) -> Report:
    m.drain()
    rep = m.check()
    assert rep.status is status, rep.render()
    return rep


def steps(m: Model, *ss: Step) -> list[Event]:
    return [m.step(s) for s in ss]


D1, D2, D3, D5 = "2026-01-01", "2026-01-02", "2026-01-03", "2026-01-05"

# ---------------------------------------------------------------- authority


def test_sc01_the_highest_revision_is_authority_even_when_it_is_delivered_first(
    impl: type[Model] = Model,
) -> None:
    """A late lower revision changes nothing: revision 2 stays authority."""
    m = impl(CFG, src(txn("T1", 2, "AMEND", -30), txn("T1", 1, "NEW", -50)))
    assert finish(m, VerifyStatus.PASS).accepts([], [])
    assert closes(m) == {D1: 70} and alerts(m) == []
    assert caused_by(m, 1) == []


def test_sc02_an_amendment_is_a_complete_replacement_not_a_delta(
    impl: type[Model] = Model,
) -> None:
    """Revision 2 with qty -30 replaces -50: the close is 70, not 20."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 2, "AMEND", -30), txn("T2", 1, "NEW", 5, valid=day(2))))
    rep = finish(m, VerifyStatus.PASS)
    assert rep.accepts([], [])
    assert closes(m) == {D1: 70, D2: 75} and alerts(m) == []
    assert ("AlertRetracted", D1, 2) in caused_by(m, 1)


def test_sc03_a_canonical_duplicate_adds_evidence_and_changes_nothing_else(
    impl: type[Model] = Model,
) -> None:
    """Same assertion, other source time and offset: a second delivery reference, no envelope."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -50, source_time="2026-03-03T00:00:00Z")))
    finish(m, VerifyStatus.PASS)
    assert caused_by(m, 1) == []
    cand = m.store.keys[K1].identities["T1"].revisions[1]
    assert len(cand) == 1 and [c.offset for c in cand[0].sources] == [0, 1]


# ---------------------------------------------------------------- conflicts


def test_sc04_distinct_candidates_at_the_highest_revision_block_only_their_key(
    impl: type[Model] = Model,
) -> None:
    """K1 becomes BLOCKED with the conflict as reason; K2 and K3 keep processing."""
    recs = src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -40), txn("T9", 1, "NEW", -5, key=K2))
    recs += src(txn("T1", 1, "NEW", -5, key=K3), partition=1)
    m = impl(CFG, recs)
    finish(m, VerifyStatus.BLOCKED)
    k1 = m.view.projections()[K1]
    assert k1.status is Status.BLOCKED and [(r.txn_id, r.revision) for r in k1.reasons] == [("T1", 1)]
    assert closes(m, K2) == {D1: 35} and closes(m, K3) == {D1: 25}
    assert m.view.projections()[K2].status is Status.READY


def test_sc05_resolving_a_conflict_refolds_the_whole_key_from_its_opening_balance(
    impl: type[Model] = Model,
) -> None:
    """Values stay frozen while BLOCKED; the resolving revision refolds everything held meanwhile."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -40), txn("T2", 1, "NEW", -10, valid=day(2))))
    finish(m, VerifyStatus.BLOCKED)
    assert closes(m) == {D1: 50} and alerts(m) == [D1]  # frozen, never certified
    m.append(src(txn("T1", 2, "AMEND", -20), start=3))
    rep = finish(m, VerifyStatus.PASS_WITH_EXCLUSIONS)
    assert closes(m) == {D1: 80, D2: 70} and alerts(m) == []
    assert m.view.projections()[K1].status is Status.READY
    assert rep.accepts([], [Conflict(K1, "T1", 1)]) and not rep.accepts([], [])


# ---------------------------------------------------------------- cancellation


def test_sc06_a_cancellation_removes_the_contribution_and_a_late_lower_revision_cannot_resurrect_it(
    impl: type[Model] = Model,
) -> None:
    """The CANCEL (valid on day 4) withdraws day 3 explicitly and creates no day-4 row."""
    m = impl(
        CFG,
        src(
            txn("T1", 1, "NEW", -50),
            txn("T2", 1, "NEW", 10, valid=day(3)),
            txn("T2", 2, "CANCEL", 0, valid=day(4)),
            txn("T2", 1, "NEW", 10, valid=day(3)),
        ),
    )
    finish(m, VerifyStatus.PASS)
    assert closes(m) == {D1: 50} and alerts(m) == [D1]
    assert caused_by(m, 2) == [("BalanceRetracted", D3, 2)]
    assert caused_by(m, 3) == []


def test_sc07_a_higher_active_revision_reactivates_a_cancelled_transaction(
    impl: type[Model] = Model,
) -> None:
    """CANCEL at revision 2, AMEND at revision 3 on another day: active again there."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 2, "CANCEL", 0), txn("T1", 3, "AMEND", -20, valid=day(2))))
    finish(m, VerifyStatus.PASS)
    assert closes(m) == {D2: 80} and alerts(m) == []


# ---------------------------------------------------------------- refold boundaries and withdrawals


def test_sc08_moving_a_transaction_earlier_repairs_from_the_new_earlier_day(
    impl: type[Model] = Model,
) -> None:
    """Day 5 -> day 2: day 2 is stated, day 5 withdrawn, day 1 untouched."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -10), txn("T2", 1, "NEW", -10, valid=day(5)), txn("T2", 2, "AMEND", -10, valid=day(2))))
    finish(m, VerifyStatus.PASS)
    assert caused_by(m, 2) == [("BalanceStated", D2, 1), ("BalanceRetracted", D5, 2)]
    assert closes(m) == {D1: 90, D2: 80}


def test_sc09_moving_a_transaction_later_repairs_from_its_old_earlier_day(
    impl: type[Model] = Model,
) -> None:
    """Day 2 -> day 5: the old contribution must disappear, so repair starts at day 2."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -10), txn("T2", 1, "NEW", -10, valid=day(2)), txn("T2", 2, "AMEND", -10, valid=day(5))))
    finish(m, VerifyStatus.PASS)
    assert caused_by(m, 2) == [("BalanceRetracted", D2, 2), ("BalanceStated", D5, 1)]
    assert closes(m) == {D1: 90, D5: 80}


def test_sc10_a_day_one_correction_withdraws_one_alert_and_raises_another(
    impl: type[Model] = Model,
) -> None:
    """The worked example: -50 -> -30 on day 1 restates three closes and moves the alert to day 2."""
    m = impl(
        CFG,
        src(
            txn("ISSUE-001", 1, "NEW", -50),
            txn("ISSUE-002", 1, "NEW", -20, valid=day(2)),
            txn("RECEIPT-003", 1, "NEW", 50, valid=day(3)),
            txn("ISSUE-001", 2, "AMEND", -30),
        ),
    )
    finish(m, VerifyStatus.PASS)
    assert caused_by(m, 3) == [
        ("AlertRetracted", D1, 2),
        ("AlertRaised", D2, 1),
        ("BalanceStated", D1, 2),
        ("BalanceStated", D2, 2),
        ("BalanceStated", D3, 2),
    ]
    assert closes(m) == {D1: 70, D2: 50, D3: 100} and alerts(m) == [D2]


# ---------------------------------------------------------------- tombstones vs stale delivery


def _withdrawn_history(impl: type[Model]) -> Model:
    m = impl(CFG, src(txn("T1", 1, "NEW", -10), txn("T1", 2, "CANCEL", 0)))
    m.drain()
    assert [e.type for e in m.output[0]] == [
        MessageType.BALANCE_STATED, MessageType.KEY_STATUS_STATED, MessageType.BALANCE_RETRACTED,
    ]
    return m


def test_sc11_a_tombstone_defeats_a_stale_redelivered_statement(
    impl: type[Model] = Model,
) -> None:
    """The version-2 withdrawal is retained, so version 1 delivered again is ignored."""
    m = _withdrawn_history(impl)
    steps(m, Step(Actor.REDELIVER, 0, COMMIT, offset=0))
    ev = m.step(V())
    assert ev.detail == f"offset 3 {Effect.STALE.value}"
    assert closes(m) == {}
    finish(m, VerifyStatus.PASS)


def test_sc12_an_exact_redelivery_is_a_duplicate_that_still_advances_the_view(
    impl: type[Model] = Model,
) -> None:
    """Delivering the latest envelope again changes no row and moves the frontier."""
    m = _withdrawn_history(impl)
    steps(m, Step(Actor.REDELIVER, 0, COMMIT, offset=2))
    ev = m.step(V())
    assert ev.detail == f"offset 3 {Effect.DUPLICATE.value}" and m.view.frontier(0) == 4
    finish(m, VerifyStatus.PASS)


# ---------------------------------------------------------------- lost replies, one actor at a time

TWO = [txn("T1", 1, "NEW", -10), txn("T2", 1, "NEW", -10, valid=day(2))]


def test_sc13_after_a_lost_commit_reply_the_worker_rereads_the_frontier_and_moves_on(
    impl: type[Model] = Model,
) -> None:
    """unknown-committed: installed, seen as unknown; the next attempt processes offset 1 directly."""
    m = impl(CFG, src(*TWO))
    lost, _, nxt = steps(m, W(0, UC), TICK, W())
    assert lost.installed and lost.observed is Observation.UNKNOWN and m.store.frontier(0) == 2
    assert nxt.observed is Observation.DONE and nxt.detail.startswith("offset 1 ")
    assert not [e for e in m.events if e.observed is Observation.REFUSED]
    finish(m, VerifyStatus.PASS)


def test_sc14_after_a_lost_abort_reply_the_worker_rereads_and_processes_the_same_record(
    impl: type[Model] = Model,
) -> None:
    """unknown-aborted: nothing installed; the reread frontier still points at offset 0."""
    m = impl(CFG, src(*TWO))
    lost, _, nxt = steps(m, W(0, UA), TICK, W())
    assert not lost.installed and lost.observed is Observation.UNKNOWN
    assert nxt.observed is Observation.DONE and nxt.detail.startswith("offset 0 ")
    assert not [e for e in m.events if e.observed is Observation.REFUSED]
    finish(m, VerifyStatus.PASS)


def test_sc15_a_publication_whose_reply_is_lost_is_published_again_with_the_identical_envelope(
    impl: type[Model] = Model,
) -> None:
    """The row stays pending; the retry appends the exact same envelope; the view sees a duplicate."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W())
    lost, _, again = steps(m, R(0, UC), TICK, R())
    assert lost.installed and lost.observed is Observation.UNKNOWN
    assert again.observed is Observation.DONE and again.detail == "sequence 1"
    assert len(m.output[0]) == 2 and m.output[0][0] == m.output[0][1]
    first, second = steps(m, V(), V())
    assert second.detail == f"offset 1 {Effect.DUPLICATE.value}"
    finish(m, VerifyStatus.PASS)


def test_sc16_a_refused_publication_with_a_lost_reply_leaves_the_row_pending(
    impl: type[Model] = Model,
) -> None:
    """unknown-aborted: nothing published, nothing acknowledged; the retry publishes once."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W())
    lost, _, again = steps(m, R(0, UA), TICK, R())
    assert not lost.installed and again.detail == "sequence 1" and len(m.output[0]) == 1
    finish(m, VerifyStatus.PASS)


def test_sc17_after_a_lost_view_reply_the_installed_frontier_decides_what_remains(
    impl: type[Model] = Model,
) -> None:
    """unknown-committed view step: offset 0 is applied, the next attempt applies offset 1."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W(), R(), R())
    lost, _, nxt = steps(m, V(0, UC), TICK, V())
    assert lost.installed and m.view.frontier(0) == 2
    assert nxt.detail == f"offset 1 {Effect.STORED.value}"
    finish(m, VerifyStatus.PASS)


def test_sc18_after_a_lost_view_reply_without_installation_the_same_offset_is_applied(
    impl: type[Model] = Model,
) -> None:
    """unknown-aborted view step: the installed frontier is still 0."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W(), R(), R())
    lost, _, nxt = steps(m, V(0, UA), TICK, V())
    assert not lost.installed and nxt.detail == f"offset 0 {Effect.STORED.value}"
    finish(m, VerifyStatus.PASS)


def test_sc19_after_a_lost_claim_reply_the_worker_forgets_its_token_and_observes_the_new_epoch(
    impl: type[Model] = Model,
) -> None:
    """unknown-committed claim installed epoch 2; the worker must not keep using epoch 1."""
    m = impl(CFG, src(*TWO))
    lost, nxt = steps(m, C(0, UC), W())
    assert lost.installed and m.store.observe(0).epoch == 2
    assert nxt.observed is Observation.DONE and nxt.detail == "offset 0 epoch 2"
    finish(m, VerifyStatus.PASS)


def test_sc20_after_a_lost_claim_reply_without_installation_the_worker_claims_again(
    impl: type[Model] = Model,
) -> None:
    """unknown-aborted claim: epoch 1 is still installed, but settling by nonce finds that the
    claim did not install it, so the worker never adopts it (it may be another claimant's):
    it claims again (epoch 2) and work continues."""
    m = impl(CFG, src(*TWO))
    lost = m.step(C(0, UA))
    assert not lost.installed and lost.observed is Observation.UNKNOWN
    assert m.store.observe(0).epoch == 1 and m.token(0) is None
    nxt = m.step(W())
    assert nxt.observed is Observation.DONE and nxt.detail == "offset 0 epoch 2"
    finish(m, VerifyStatus.PASS)


# ---------------------------------------------------------------- stale owner, both commit orders


def test_sc21_an_old_owner_that_commits_before_the_replacement_claim_stays_committed(
    impl: type[Model] = Model,
) -> None:
    """prepare(e1) -> commit -> claim(e2): the commit stands and e2 continues from the frontier."""
    m = impl(CFG, src(*TWO))
    held, done, claim, nxt = steps(m, P(), W(), C(), W())
    assert held.observed is Observation.HELD and done.observed is Observation.DONE
    assert claim.detail == "epoch 2" and nxt.detail == "offset 1 epoch 2"
    finish(m, VerifyStatus.PASS)


def test_sc22_a_replaced_owner_cannot_commit_its_prepared_decision(
    impl: type[Model] = Model,
) -> None:
    """prepare(e1) -> claim(e2) -> commit: fenced, nothing installed; e2 processes offset 0 once."""
    m = impl(CFG, src(*TWO))
    steps(m, P(), C())
    fenced = m.step(W())
    assert fenced.observed is Observation.FENCED and not fenced.installed
    assert m.store.frontier(0) == 0 and m.store.outbox[0] == []
    steps(m, TICK)
    assert m.step(W()).detail == "offset 0 epoch 2"
    finish(m, VerifyStatus.PASS)
    assert len(caused_by(m, 0)) == 2  # balance and status, once


# ---------------------------------------------------------------- backoff and parking


def test_sc23_an_attempt_during_backoff_only_observes_backoff(
    impl: type[Model] = Model,
) -> None:
    """After an abort the relay waits one tick; an earlier attempt publishes nothing."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W())
    aborted, early = steps(m, R(0, ABORT), R())
    assert aborted.observed is Observation.ABORTED and early.observed is Observation.BACKOFF
    assert m.output[0] == [] and m.store.pending(0) is not None
    _, ok = steps(m, TICK, R())
    assert ok.observed is Observation.DONE and len(m.output[0]) == 1
    finish(m, VerifyStatus.PASS)


def test_sc24_the_third_unsuccessful_reply_parks_an_actor_until_it_is_resumed(
    impl: type[Model] = Model,
) -> None:
    """Abort, lost-but-published, lost: parked; ticks do not help; resume and success reset it."""
    m = impl(CFG, src(TWO[0]))
    steps(m, W(), R(0, ABORT), TICK, R(0, UC), TICK, TICK, R(0, UA))
    assert m.retry.state("relay", 0).parked and m.retry.state("relay", 0).next_at == m.time + 4
    steps(m, *[TICK] * 10)
    parked = m.step(R())
    assert parked.observed is Observation.PARKED and len(m.output[0]) == 1
    resumed, ok = steps(m, Step(Actor.RESUME_RELAY, 0), R())
    assert resumed.observed is Observation.RESUMED and ok.observed is Observation.DONE
    assert m.retry.state("relay", 0).failures == 0
    finish(m, VerifyStatus.PASS)


def test_sc25_drain_finishes_all_enabled_work_once_faults_stop(
    impl: type[Model] = Model,
) -> None:
    """Parked and backing-off actors on both partitions: the recovery suffix resumes and completes."""
    recs = src(*TWO, b"oops") + src(txn("T1", 1, "NEW", -25, key=K3), partition=1)
    m = impl(CFG, recs)
    steps(
        m,
        W(0, ABORT), TICK, W(0, UA), TICK, TICK, W(0, ABORT),
        W(1), R(1, UC), TICK, R(1, ABORT), TICK, TICK, R(1, UA),
        V(1, ABORT),
    )
    assert m.retry.parked() == [("relay", 1), ("worker", 0)]
    rep = finish(m, VerifyStatus.PASS_WITH_EXCLUSIONS)
    assert m.enabled() == [] and m.retry.parked() == []
    assert rep.accepts([RejectionRef(0, 2, RejectReason.MALFORMED)], [])


# ---------------------------------------------------------------- replay and rebuild


def test_sc26_replaying_a_consumed_interval_into_intact_state_changes_nothing_but_the_epoch(
    impl: type[Model] = Model,
) -> None:
    """No new envelope, same frontier and versions; the replay's epoch fences the worker, and
    the worker that takes over claims an epoch of its own and continues from the frontier."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), b"bad", txn("T1", 2, "AMEND", -30)))
    m.drain()
    before = (m.store.frontier(0), dict(m.store.outputs), len(m.store.outbox[0]), len(m.output[0]))
    tok = m.replay(0, 0, 3)
    assert tok.epoch == 2
    assert (m.store.frontier(0), dict(m.store.outputs), len(m.store.outbox[0]), len(m.output[0])) == before
    m.append(src(txn("T2", 1, "NEW", -5, valid=day(2)), start=3))
    ev = m.step(W())
    assert ev.detail == "offset 3 epoch 3"
    finish(m, VerifyStatus.PASS_WITH_EXCLUSIONS)


def test_sc27_replay_is_refused_before_claiming_an_epoch_when_it_cannot_be_checked(
    impl: type[Model] = Model,
) -> None:
    """Unconsumed range, lost retention and differing evidence all leave the epoch untouched."""
    m = impl(CFG, src(*TWO))
    m.drain()
    with pytest.raises(ReplayRefused, match="consumed prefix"):
        m.replay(0, 0, 3)
    m.retained[0] = 1
    with pytest.raises(ReplayRefused, match="retained"):
        m.replay(0, 0, 2)
    m.retained[0] = 0
    rec = m.source[0][1]
    m.source[0][1] = Record(value(txn("T2", 1, "NEW", -11, valid=day(2))), rec.key, rec.coords)
    with pytest.raises(ReplayMismatch):
        m.replay(0, 0, 2)
    assert m.store.observe(0).epoch == 1


def test_sc28_a_rebuild_into_a_fresh_namespace_has_the_same_business_state_and_its_own_identities(
    impl: type[Model] = Model,
) -> None:
    """Same projections and verdict; no output ID is shared; the original stays intact."""
    recs = src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -40), txn("T1", 2, "AMEND", -30), b"junk")
    recs += src(txn("T1", 1, "NEW", -25, key=K3), partition=1)
    m = impl(CFG, recs)
    steps(m, W(), R(0, UC), TICK, R(), V(), C(), W())
    m.drain()
    before = dict(m.store.outputs)
    fresh = rebuild(m, "sc-rebuilt")
    assert fresh.view.projections() == m.view.projections()
    assert {o.namespace for o in fresh.view.rows} == {"sc-rebuilt"}
    assert not set(fresh.view.rows) & set(m.view.rows)
    assert m.store.outputs == before
    assert fresh.check().status is m.check().status is VerifyStatus.PASS_WITH_EXCLUSIONS


# ---------------------------------------------------------------- verification results


def test_sc29_a_missing_retained_prefix_makes_the_report_incomplete_even_when_a_key_is_blocked(
    impl: type[Model] = Model,
) -> None:
    """INCOMPLETE takes precedence over BLOCKED; the blocked diagnostics are kept."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -40)))
    m.drain()
    m.retained[0] = 1
    rep = m.check()
    assert rep.status is VerifyStatus.INCOMPLETE
    assert any("retained" in r for r in rep.boundary_reasons)
    assert [p.key for p in rep.blocked] == [K1]
    assert not rep.accepts([], [Conflict(K1, "T1", 1)])


def test_sc30_the_report_is_incomplete_while_any_stage_has_work_left(
    impl: type[Model] = Model,
) -> None:
    """Worker behind the source end, outbox pending, or view behind the output end: INCOMPLETE."""
    m = impl(CFG, src(TWO[0]))
    assert "worker frontier 0, source end 1" in " ".join(m.check().boundary_reasons)
    steps(m, W())
    assert "not yet acknowledged" in " ".join(m.check().boundary_reasons)
    steps(m, R(), R())
    rep = m.check()
    assert rep.status is VerifyStatus.INCOMPLETE and "view frontier 0" in " ".join(rep.boundary_reasons)
    finish(m, VerifyStatus.PASS)


def test_sc31_a_blocked_report_at_a_complete_boundary_is_never_a_success(
    impl: type[Model] = Model,
) -> None:
    """BLOCKED names the key and reasons, carries no differences, and accepts no manifest."""
    m = impl(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 1, "CANCEL", 0)))
    rep = finish(m, VerifyStatus.BLOCKED)
    assert rep.differences == () and [p.key for p in rep.blocked] == [K1]
    assert not rep.accepts([], [Conflict(K1, "T1", 1)]) and not rep.accepts([], [])


def test_sc32_exclusions_are_accepted_only_against_exact_manifests(
    impl: type[Model] = Model,
) -> None:
    """PASS_WITH_EXCLUSIONS accepts the exact rejection manifest and nothing less or more."""
    m = impl(CFG, src(TWO[0], b"{not json"))
    rep = finish(m, VerifyStatus.PASS_WITH_EXCLUSIONS)
    exact = RejectionRef(0, 1, RejectReason.MALFORMED)
    assert rep.accepts([exact], [])
    assert not rep.accepts([], [])
    assert not rep.accepts([exact, RejectionRef(0, 0, RejectReason.MALFORMED)], [])
    assert not rep.accepts([RejectionRef(0, 1, RejectReason.KIND)], [])


def test_sc33_poison_input_is_quarantined_with_its_reason_and_never_stalls_the_partition(
    impl: type[Model] = Model,
) -> None:
    """Each bad record ends quarantined with the first rule it broke; later input is applied."""
    ghost = txn("G", 1, "NEW", -1)
    ghost["stock_key"] = {"item": "GHOST", "location": "X"}
    recs = [
        record(txn("T1", 1, "NEW", -10), 0),
        record(b"\xff garbage", 1, key=None),
        record(txn("T5", 1, "NEW", -1, key=K3), 2),  # K3 lives on partition 1
        record(txn("T6", 1, "NEW", -1), 3, key=K2.transport_key()),
        record(ghost, 4),
        record(txn("T7", 1, "CANCEL", 5), 5),
        record(txn("T8", 1, "NEW", -10, valid=day(2)), 6),
    ]
    m = impl(CFG, recs)
    rep = finish(m, VerifyStatus.PASS_WITH_EXCLUSIONS)
    reasons = [r.reason for r in m.store.rejections]
    assert reasons == [
        RejectReason.MALFORMED, RejectReason.ROUTING, RejectReason.KEY_MISMATCH,
        RejectReason.UNKNOWN_KEY, RejectReason.CANCEL_QUANTITY,
    ]
    assert m.store.frontier(0) == 7 and closes(m) == {D1: 90, D2: 80}
    assert rep.accepts([RejectionRef(0, i, r) for i, r in zip(range(1, 6), reasons, strict=True)], [])


def test_sc34_a_view_that_lost_a_row_is_drift_at_a_complete_boundary(
    impl: type[Model] = Model,
) -> None:
    """Verification compares business rows: a missing balance row is reported as a difference."""
    m = impl(CFG, src(*TWO))
    m.drain()
    lost = next(o for o in m.view.rows if o.family is Family.BALANCE and o.day is not None)
    del m.view.rows[lost]
    rep = m.check()
    assert rep.status is VerifyStatus.DRIFT
    assert [d.subject for d in rep.differences] == [lost.encoded]


def test_sc35_a_view_protocol_violation_is_an_error_not_a_comparison(
    impl: type[Model] = Model,
) -> None:
    """Same output ID and version with different content stops the view partition: ERROR."""
    m = impl(CFG, src(TWO[0]), safety=False)
    m.drain()
    first = m.output[0][0]
    forged = type(first)(
        first.schema_version, first.output_id, first.version, first.type, first.payload,
        type(first.cause)(first.cause.source, 0, 99, "T1", 1),
    )
    m.output[0].append(forged)
    ev = m.step(V())
    assert ev.observed is Observation.STOPPED and 0 in m.view.stopped
    rep = m.check()
    assert rep.status is VerifyStatus.ERROR and "protocol" in (rep.error or "")


# ---------------------------------------------------------------- worker steps of more than one batch

THREE = [*TWO, txn("T3", 1, "NEW", -10, valid=day(3))]


def test_sc36_a_step_that_ran_ahead_settles_a_lost_reply_of_its_later_batch_and_moves_on(
    impl: type[Model] = Model,
) -> None:
    """ahead=2, the armed fate on the step's second commit (odd event index): the first
    batch commits, the second's reply is lost before it landed; the worker rereads the frontier
    and the next step starts at that batch's record."""
    m = impl(CFG, src(*THREE), ahead=2)
    _, lost = steps(m, TICK, W(0, UA))
    assert lost.observed is Observation.UNKNOWN and lost.installed
    assert lost.detail.startswith("offset 0 ") and ", 2 batches" in lost.detail
    assert m.store.frontier(0) == 1
    _, nxt = steps(m, TICK, W())
    assert nxt.observed is Observation.DONE and nxt.detail.startswith("offset 1 ")
    assert ", 2 batches" in nxt.detail and m.store.frontier(0) == 3
    assert not [e for e in m.events if e.observed is Observation.REFUSED]
    finish(m, VerifyStatus.PASS)


def test_sc37_a_batch_folded_ahead_of_a_lost_commit_is_dropped_and_read_again(
    impl: type[Model] = Model,
) -> None:
    """ahead=2, the armed fate on the step's first commit (even event index): its reply is
    lost and it did not land, so the batch folded after it must not commit on top of it; the
    step ends settled at the installed frontier and the next one reads both records again."""
    m = impl(CFG, src(*THREE), ahead=2)
    lost = m.step(W(0, UA))
    assert lost.observed is Observation.UNKNOWN and not lost.installed
    assert lost.detail.startswith("offset 0 ") and "batches" not in lost.detail
    assert m.store.frontier(0) == 0 and m.cursor[0] in (None, 0)
    _, nxt = steps(m, TICK, W())
    assert nxt.observed is Observation.DONE and nxt.detail.startswith("offset 0 ")
    assert ", 2 batches" in nxt.detail and m.store.frontier(0) == 2
    assert not [e for e in m.events if e.observed is Observation.REFUSED]
    finish(m, VerifyStatus.PASS)


SCENARIOS = sorted(
    (name, fn) for name, fn in globals().items() if name.startswith("test_sc") and callable(fn)
)

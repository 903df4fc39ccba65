"""The model's step semantics, recovery suffix and safety checks (each check shown to fire)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amends_core.ledger import INT64_MAX, Payload
from amends_core.sim.generate import generate
from amends_core.sim.model import Actor, DrainStalled, Model, Observation, Outcome, Step
from amends_core.sim.run import run_trace
from amends_core.sim.safety import CHECKS, SafetyViolation
from amends_core.store.memory import OutboxRow
from tests.builders import day, record, txn
from tests.unit.test_scenarios import CFG, TICK, R, V, W, src

TWO = src(txn("T1", 1, "NEW", -50), txn("T2", 1, "NEW", -10, valid=day(2)), b"junk")


def test_an_event_keeps_what_happened_apart_from_what_the_actor_observed() -> None:
    m = Model(CFG, TWO)
    table = []
    for o in Outcome:
        m2 = Model(CFG, TWO)
        ev = m2.step(W(0, o))
        table.append((o, ev.installed, ev.observed))
    assert table == [
        (Outcome.COMMIT, True, Observation.DONE),
        (Outcome.ABORT, False, Observation.ABORTED),
        (Outcome.UNKNOWN_COMMITTED, True, Observation.UNKNOWN),
        (Outcome.UNKNOWN_ABORTED, False, Observation.UNKNOWN),
    ]
    assert m.events == []


def test_a_relay_acknowledges_only_on_a_known_success() -> None:
    rows = []
    for o in Outcome:
        m = Model(CFG, TWO)
        m.step(W())
        m.step(R(0, o))
        rows.append((o, len(m.output[0]), m.store.pending(0).sequence if m.store.pending(0) else None))  # type: ignore[union-attr]
    assert rows == [
        (Outcome.COMMIT, 1, 2),
        (Outcome.ABORT, 0, 1),
        (Outcome.UNKNOWN_COMMITTED, 1, 1),
        (Outcome.UNKNOWN_ABORTED, 0, 1),
    ]


def test_idle_steps_are_successful_and_change_nothing() -> None:
    m = Model(CFG, [])
    evs = [m.step(s) for s in (W(), R(), V(), W(1))]
    assert {e.observed for e in evs} == {Observation.IDLE}
    assert m.check().status.value == "PASS"


def test_a_prepared_decision_is_held_until_the_next_worker_step() -> None:
    m = Model(CFG, TWO)
    held = m.step(Step(Actor.PREPARE))
    assert held.observed is Observation.HELD and m.store.frontier(0) == 0
    again = m.step(Step(Actor.PREPARE))
    assert again.observed is Observation.IDLE
    assert m.step(W()).detail == "offset 0 epoch 1" and m.store.frontier(0) == 1


def test_drain_needs_only_the_work_that_is_enabled_and_leaves_nothing_enabled() -> None:
    m = Model(CFG, TWO + src(txn("T1", 1, "NEW", -5, key=CFG.keys[2].key), partition=1))
    m.drain()
    assert m.enabled() == [] and m.check().status.value == "PASS_WITH_EXCLUSIONS"
    assert m.drain() == 0


def test_a_history_the_fold_cannot_compute_is_a_liveness_failure_not_a_quarantine() -> None:
    m = Model(CFG, src(txn("T1", 1, "NEW", INT64_MAX)))
    ev = m.step(W())
    assert ev.observed is Observation.ARITHMETIC and m.store.frontier(0) == 0
    assert m.store.rejections == []
    with pytest.raises(DrainStalled):
        m.drain()


def test_the_oracle_runs_once_per_distinct_processed_prefix() -> None:
    m = Model(CFG, TWO)
    m.run([W(), R(), R(), V(), TICK, W(0, Outcome.ABORT), TICK, W(), W()])
    # checked at worker frontiers 1, 2 and 3 only; aborts, relay and view steps reuse the result
    assert m.safety is not None and m.safety.oracle_calls == 3


def test_a_clean_generated_run_passes_with_the_verdict_the_oracle_predicts() -> None:
    r = run_trace(generate(3))
    assert r.ok and r.report is not None and r.report.status is r.expected


def test_every_named_safety_check_is_shown_to_fire_in_this_module() -> None:
    text = open(__file__).read()
    assert [c for c in CHECKS if f'"{c}"' not in text] == []


# ---------------------------------------------------------------- each check fires


def _drained() -> Model:
    m = Model(CFG, TWO)
    m.drain()
    return m


def _violation(m: Model) -> str:
    assert m.safety is not None
    with pytest.raises(SafetyViolation) as e:
        m.safety.check()
    return e.value.check


def test_safety_flags_an_output_record_that_was_never_committed() -> None:
    m = _drained()
    e = m.output[0][0]
    m.output[0].append(replace(e, payload=Payload(True, close=1)))
    assert _violation(m) == "published-committed"


def test_safety_flags_a_committed_envelope_published_on_another_partition() -> None:
    m = _drained()
    m.output[1].append(m.output[0][0])
    assert _violation(m) == "published-committed"


def test_safety_flags_a_stopped_view() -> None:
    m = _drained()
    m.view.stopped[0] = "forged"
    assert _violation(m) == "view-protocol"


def test_safety_flags_a_view_frontier_beyond_the_output_log() -> None:
    m = _drained()
    m.view.frontiers[0] = len(m.output[0]) + 1
    assert _violation(m) == "view-frontier"


def test_safety_flags_a_view_row_that_was_never_committed() -> None:
    m = _drained()
    oid, env = next(iter(m.view.rows.items()))
    m.view.rows[oid] = replace(env, version=env.version + 7)
    m.view.frontiers[0] -= 1  # the check runs when the view moved
    assert _violation(m) == "viewed-committed"


def test_safety_flags_an_outbox_gap_and_a_version_jump() -> None:
    m = Model(CFG, TWO)
    m.step(W())
    row = m.store.outbox[0][-1]
    m.store.outbox[0].append(OutboxRow(0, row.sequence + 2, row.envelope))
    assert _violation(m) == "outbox-sequence"
    m = Model(CFG, TWO)
    m.step(W())
    row = m.store.outbox[0][-1]
    m.store.outbox[0].append(OutboxRow(0, row.sequence + 1, replace(row.envelope, version=9)))
    m.store.partitions[0].sequence += 1
    assert _violation(m) == "version-consecutive"


def test_safety_flags_an_acknowledgement_out_of_order() -> None:
    m = Model(CFG, TWO)
    m.step(W())
    m.acks[0].append(2)
    assert _violation(m) == "ack-order"


def test_safety_flags_output_state_that_is_not_the_committed_intent() -> None:
    m = _drained()
    oid = next(iter(m.store.outputs))
    del m.store.outputs[oid]
    m.store.partitions[0].next += 0
    m.safety._intent_key = None  # type: ignore[union-attr]
    assert _violation(m) == "intent"


def test_safety_flags_quarantine_that_differs_from_the_oracle() -> None:
    m = _drained()
    m.store.rejections.clear()
    m.safety._oracle_key = None  # type: ignore[union-attr]
    assert _violation(m) == "quarantine-oracle"


def test_safety_flags_worker_business_state_that_differs_from_the_oracle() -> None:
    m = _drained()
    ks = m.store.keys[CFG.keys[0].key]
    ks.closes[0] += 1  # the worker's state drifts; intent was checked before and is not rechecked
    m.safety._oracle_key = None  # type: ignore[union-attr]
    assert _violation(m) == "worker-oracle"


def test_safety_flags_a_refused_worker_attempt() -> None:
    m = Model(CFG, TWO)
    m.step(W())
    m.cursor[0] = 0  # a wrong local frontier, as a worker that skipped recovery would hold
    with pytest.raises(SafetyViolation) as e:
        m.step(W())
    assert e.value.check == "worker-recovery"


def test_safety_flags_a_decision_installed_under_another_epoch() -> None:
    m = Model(CFG, TWO)
    m.installs.append((0, 1, 2))
    assert _violation(m) == "fence"


def test_safety_flags_conflict_evidence_that_differs_from_the_oracle() -> None:
    m = Model(CFG, src(txn("T1", 1, "NEW", -50), txn("T1", 1, "NEW", -40)))
    m.drain()
    m.store.keys[CFG.keys[0].key].conflicts.clear()
    m.safety._oracle_key = None  # type: ignore[union-attr]
    assert _violation(m) == "conflicts-oracle"


def test_a_record_offered_twice_is_refused_when_the_model_is_built() -> None:
    with pytest.raises(ValueError, match="twice"):
        Model(CFG, [record(txn(), 0), record(txn(), 0)])

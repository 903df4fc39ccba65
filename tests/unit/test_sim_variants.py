"""Sensitivity: every deliberately broken variant is caught by a scenario and by a generated seed.

A variant is a ``Model`` subclass that breaks one rule (see
``amends_core.sim.variants``). For each one this module names the scenario of
the catalogue that fails against it, and the kind of failure the first
catching seed among the generated schedules shows; that failure also shrinks
to a small trace that replays to the same failure (and passes on the correct
model). docs/simulation.md carries the same table.
"""

from __future__ import annotations

import pytest

from amends_core.sim.model import DrainStalled, Model
from amends_core.sim.run import run_trace, shrink_trace, soak
from amends_core.sim.safety import SafetyViolation
from amends_core.sim.trace import dumps, loads
from amends_core.sim.variants import VARIANT_AHEAD, VARIANTS
from tests.unit.test_scenarios import SCENARIOS

# variant -> (scenario that catches it, failure signature of the first catching seed)
CATCHERS: dict[str, tuple[str, tuple[str, str]]] = {
    "no-epoch-check": ("test_sc22_a_replaced_owner_cannot_commit_its_prepared_decision", ("safety", "fence")),
    "diff-against-view": ("test_sc02_an_amendment_is_a_complete_replacement_not_a_delta", ("safety", "version-consecutive")),
    "forgets-withdrawals": ("test_sc06_a_cancellation_removes_the_contribution_and_a_late_lower_revision_cannot_resurrect_it", ("safety", "intent")),
    "forgets-tombstones": ("test_sc11_a_tombstone_defeats_a_stale_redelivered_statement", ("status", "DRIFT")),
    "relay-skips": ("test_sc23_an_attempt_during_backoff_only_observes_backoff", ("safety", "ack-order")),
    "relay-out-of-order": ("test_sc15_a_publication_whose_reply_is_lost_is_published_again_with_the_identical_envelope", ("safety", "ack-order")),
    "worker-assumes-aborted": ("test_sc13_after_a_lost_commit_reply_the_worker_rereads_the_frontier_and_moves_on", ("safety", "worker-recovery")),
    "claim-keeps-token": ("test_sc19_after_a_lost_claim_reply_the_worker_forgets_its_token_and_observes_the_new_epoch", ("safety", "worker-recovery")),
    "latest-delivery-oracle": ("test_sc01_the_highest_revision_is_authority_even_when_it_is_delivered_first", ("safety", "worker-oracle")),
    "ahead-ignores-failed-predecessor": ("test_sc37_a_batch_folded_ahead_of_a_lost_commit_is_dropped_and_read_again", ("safety", "worker-recovery")),
}
SEED_SEARCH = 300
SCENARIO_FNS = dict(SCENARIOS)


def test_every_variant_has_a_catching_scenario_and_seed_expectation() -> None:
    assert set(CATCHERS) == set(VARIANTS)
    assert all(scenario in SCENARIO_FNS for scenario, _ in CATCHERS.values())


@pytest.mark.parametrize("name", sorted(CATCHERS))
def test_each_broken_variant_fails_the_scenario_that_states_its_rule(name: str) -> None:
    scenario = SCENARIO_FNS[CATCHERS[name][0]]
    scenario()  # the correct model passes
    with pytest.raises((AssertionError, SafetyViolation, DrainStalled)):
        scenario(impl=VARIANTS[name])


@pytest.mark.parametrize("name", sorted(CATCHERS))
def test_each_broken_variant_is_caught_by_a_generated_seed_whose_shrunk_trace_replays_the_failure(
    name: str,
) -> None:
    variant = VARIANTS[name]
    ahead = VARIANT_AHEAD.get(name, 1)
    caught = next((r for r in soak(0, SEED_SEARCH, model_class=variant, ahead=ahead) if r.failure), None)
    assert caught is not None, f"no seed below {SEED_SEARCH} catches {name}"
    assert caught.failure is not None
    assert caught.failure.signature == CATCHERS[name][1], str(caught.failure)
    small, failure = shrink_trace(caught.trace, variant)
    assert len(small.steps) <= len(caught.trace.steps) and len(small.records) <= len(caught.trace.records)
    replayed = run_trace(loads(dumps(small)), variant)
    assert replayed.failure is not None and replayed.failure.signature == failure.signature
    assert loads(dumps(small)).failure == failure.signature
    assert small.ahead == ahead  # the trace records how many batches a worker step runs
    assert run_trace(small, Model).ok  # the defect is the variant's, not the model's

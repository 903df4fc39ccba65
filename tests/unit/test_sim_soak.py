"""The CI soak: at least 5,000 generated schedules with faults, zero safety violations.

Seeds 0..N-1 are split over worker processes (two on the CI machine). Every
schedule has failed or lost replies (and often claims, held decisions,
redeliveries and parking); every step is safety-checked against the oracle
over the processed prefix, and every run ends at a complete boundary whose
verdict must be the one the oracle predicts. The first 1,000 seeds run again
with worker steps of two batches, each folded while the one before commits
(the worker role runs four). ``AMENDS_SIM_RUNS``, ``AMENDS_SIM_AHEAD_RUNS`` and
``AMENDS_SIM_JOBS`` change the sizes; the nightly soak is
``amends sim --seed 1 --runs 200000 --jobs 2`` (see docs/simulation.md).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from amends_core.sim.run import SoakSummary, soak_chunk

RUNS = int(os.environ.get("AMENDS_SIM_RUNS", "5000"))
JOBS = int(os.environ.get("AMENDS_SIM_JOBS", str(min(2, os.cpu_count() or 1))))
AHEAD_RUNS = int(os.environ.get("AMENDS_SIM_AHEAD_RUNS", "1000"))
"""Seeds also run with worker steps of two batches (``Worker(ahead=2)``)."""
MAX_RECORDS, MAX_STEPS = 6, 80


def _soak(runs: int, ahead: int = 1) -> SoakSummary:
    chunks = max(1, JOBS * 4)
    size = -(-runs // chunks)
    starts = list(range(0, runs, size))
    t0 = time.perf_counter()
    total = SoakSummary()
    with ProcessPoolExecutor(max_workers=JOBS, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(soak_chunk, s, min(size, runs - s), MAX_RECORDS, MAX_STEPS, ahead=ahead)
            for s in starts
        ]
        for f in futures:
            total.merge(f.result())
    elapsed = time.perf_counter() - t0
    print(f"\nsoak (ahead {ahead}): {total.runs} schedules, {total.steps} steps in {elapsed:.1f}s"
          f" ({total.runs / elapsed * 60:.0f}/min, {JOBS} processes); {dict(total.statuses)}")
    assert total.runs == runs
    assert total.failures == [], total.failures[:5]
    assert total.faulted == total.runs
    assert {"PASS", "PASS_WITH_EXCLUSIONS", "BLOCKED"} <= set(total.statuses)
    return total


@pytest.mark.slow
def test_five_thousand_generated_fault_schedules_show_no_safety_violation_and_the_expected_verdicts() -> None:
    if "AMENDS_SIM_RUNS" not in os.environ:
        assert RUNS >= 5000
    _soak(RUNS)


@pytest.mark.slow
def test_schedules_whose_worker_steps_run_two_batches_show_no_safety_violation() -> None:
    """The same seeds with ``Worker(ahead=2)``: a step folds its second batch while the first
    commits, and the armed fate falls on either commit (see ``amends_core.sim.model``)."""
    if "AMENDS_SIM_AHEAD_RUNS" not in os.environ:
        assert AHEAD_RUNS >= 1000
    total = _soak(AHEAD_RUNS, ahead=2)
    assert total.steps > 0

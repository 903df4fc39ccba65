"""The CI soak: at least 5,000 generated schedules with faults, zero safety violations.

Seeds 0..N-1 are split over worker processes (two on the CI machine). Every
schedule has failed or lost replies (and often claims, held decisions,
redeliveries and parking); every step is safety-checked against the oracle
over the processed prefix, and every run ends at a complete boundary whose
verdict must be the one the oracle predicts. ``AMENDS_SIM_RUNS`` and
``AMENDS_SIM_JOBS`` change the size; the nightly soak is
``amends sim --seed 1 --runs 200000 --jobs 2`` (see docs/simulation.md).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from amends_core.sim.run import SoakSummary, soak_chunk

RUNS = int(os.environ.get("AMENDS_SIM_RUNS", "5000"))
JOBS = int(os.environ.get("AMENDS_SIM_JOBS", str(min(2, os.cpu_count() or 1))))
MAX_RECORDS, MAX_STEPS = 6, 80


def test_five_thousand_generated_fault_schedules_show_no_safety_violation_and_the_expected_verdicts() -> None:
    chunks = max(1, JOBS * 4)
    size = -(-RUNS // chunks)
    starts = list(range(0, RUNS, size))
    t0 = time.perf_counter()
    total = SoakSummary()
    with ProcessPoolExecutor(max_workers=JOBS, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(soak_chunk, s, min(size, RUNS - s), MAX_RECORDS, MAX_STEPS) for s in starts
        ]
        for f in futures:
            total.merge(f.result())
    elapsed = time.perf_counter() - t0
    print(f"\nsoak: {total.runs} schedules, {total.steps} steps in {elapsed:.1f}s"
          f" ({total.runs / elapsed * 60:.0f}/min, {JOBS} processes); {dict(total.statuses)}")
    assert total.runs == RUNS
    if "AMENDS_SIM_RUNS" not in os.environ:
        assert RUNS >= 5000
    assert total.failures == [], total.failures[:5]
    assert total.faulted == total.runs
    assert {"PASS", "PASS_WITH_EXCLUSIONS", "BLOCKED"} <= set(total.statuses)

"""Simulator throughput: fault schedules checked per minute.

Measures, on the same seeds in the same run:

* checked:   ``run_trace`` as the soak runs it: safety after every step (the
             oracle over the processed prefix whenever a worker frontier
             moved), the recovery suffix and the complete-boundary verdict;
* baseline:  the same schedules with per-step safety switched off (only the
             recovery suffix and the final verification), to show what the
             per-step checks cost;
* parallel:  the checked soak split over ``--jobs`` worker processes.

Sizes: the CI soak's (at most 6 records, 80 explicit steps) and the command
default (at most 8 records, 80 steps).

    python -m benchmarks.sim_bench                 # 300 seeds per figure, 3 runs
    python -m benchmarks.sim_bench --seeds 50 --runs 1
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

from amends_core.sim.generate import generate
from amends_core.sim.model import Model
from amends_core.sim.run import run_trace, soak_chunk
from benchmarks.harness import Figure, figure

SIZES = {"ci": (6, 80), "default": (8, 80)}
COMMAND = "python -m benchmarks.sim_bench"


def _checked(seeds: int, max_records: int, max_steps: int) -> float:
    t0 = time.perf_counter()
    summary = soak_chunk(0, seeds, max_records, max_steps)
    elapsed = time.perf_counter() - t0
    assert summary.failures == [], summary.failures[:3]
    return seeds / elapsed * 60


def _baseline(seeds: int, max_records: int, max_steps: int) -> float:
    t0 = time.perf_counter()
    for s in range(seeds):
        t = generate(s, max_records=max_records, max_steps=max_steps)
        m = Model(t.cfg, t.records, safety=False)
        m.run(t.steps)
        m.drain()
        m.check()
    return seeds / (time.perf_counter() - t0) * 60


def _parallel(seeds: int, max_records: int, max_steps: int, jobs: int) -> float:
    chunk = max(1, seeds // (jobs * 4))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = [
            pool.submit(soak_chunk, s, min(chunk, seeds - s), max_records, max_steps)
            for s in range(0, seeds, chunk)
        ]
        failures = [f for fut in futures for f in fut.result().failures]
    elapsed = time.perf_counter() - t0
    assert failures == [], failures[:3]
    return seeds / elapsed * 60


def run(seeds: int = 300, runs: int = 3, jobs: int = 2) -> list[Figure]:
    figures: list[Figure] = []
    run_trace(generate(0))  # warm imports and caches outside the measurement
    for label, (mr, ms) in SIZES.items():
        cond = f"{seeds} seeds, <= {mr} records, <= {ms} explicit steps, 1 process"
        checked = [_checked(seeds, mr, ms) for _ in range(runs)]
        base = [_baseline(seeds, mr, ms) for _ in range(runs)]
        figures.append(figure("sim", f"checked schedules ({label} size)", checked, "schedules/min", cond))
        figures.append(figure("sim", f"baseline without per-step safety ({label} size)", base, "schedules/min", cond))
        ratios = [b / c for b, c in zip(base, checked, strict=True)]
        figures.append(figure("sim", f"per-step safety cost ({label} size)", ratios, "x slower", cond))
    mr, ms = SIZES["ci"]
    par = [_parallel(seeds * jobs, mr, ms, jobs) for _ in range(runs)]
    figures.append(
        figure(
            "sim", "checked schedules, parallel (ci size)", par, "schedules/min",
            f"{seeds * jobs} seeds, <= {mr} records, <= {ms} steps, {jobs} processes",
        )
    )
    return [replace(f, command=COMMAND) for f in figures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args(argv)
    for f in run(a.seeds, a.runs, a.jobs):
        print(f.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())

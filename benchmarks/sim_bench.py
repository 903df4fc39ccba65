"""Simulator throughput: fault schedules checked per minute.

Measures, on the same seeds in the same run:

* checked:   ``run_trace`` as the soak runs it: safety after every step (the
             oracle over the processed prefix whenever a worker frontier
             moved), the recovery suffix and the complete-boundary verdict;
* baseline:  the same schedules with per-step safety switched off (only the
             recovery suffix and the final verification), to show what the
             per-step checks cost;
* parallel:  the checked soak split over ``--jobs`` worker processes;
* before:    with ``--baseline-checkout PATH``, checked and baseline again for
             the code of another checkout (e.g. e4906cd, before the simulator
             ran the production role logic), each measurement of both trees in
             a fresh process of its own, alternating, and the ratios now/before.

Sizes: the CI soak's (at most 6 records, 80 explicit steps) and the command
default (at most 8 records, 80 steps).

    python -m benchmarks.sim_bench                 # 300 seeds per figure, 3 runs
    python -m benchmarks.sim_bench --seeds 50 --runs 1
    python -m benchmarks.sim_bench --baseline-checkout /tmp/before   # before/after
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

from amends_core.sim.generate import generate
from amends_core.sim.model import Model
from amends_core.sim.run import run_trace, soak_chunk
from benchmarks.harness import Figure, figure, run_in_tree

SIZES = {"ci": (6, 80), "default": (8, 80)}
COMMAND = "python -m benchmarks.sim_bench"
ROOT = Path(__file__).resolve().parents[1]
_IN_TREE = (
    "from amends_core.sim.generate import generate\n"
    "from amends_core.sim.run import run_trace\n"
    "from benchmarks.sim_bench import {fn}\n"
    "run_trace(generate(0))\n"
    "print({fn}({seeds}, {mr}, {ms}))\n"
)


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


def _in_tree(tree: Path, fn: str, seeds: int, mr: int, ms: int) -> float:
    """``fn(seeds, mr, ms)`` of ``tree``'s own code, in a fresh, warmed-up interpreter."""
    out = run_in_tree(tree, _IN_TREE.format(fn=fn, seeds=seeds, mr=mr, ms=ms), fn)
    return float(out.strip().splitlines()[-1])


def _before_after(seeds: int, runs: int, baseline: Path) -> list[Figure]:
    """Checked and unchecked schedules/min of this tree and of ``baseline``, alternating."""
    figures: list[Figure] = []
    for label, (mr, ms) in SIZES.items():
        cond = (
            f"{seeds} seeds, <= {mr} records, <= {ms} explicit steps, 1 process; before = checkout"
            f" {baseline.name}; each figure in a fresh process, the two trees alternating"
        )
        for fn, what in (("_checked", "checked schedules"), ("_baseline", "without per-step safety")):
            now: list[float] = []
            before: list[float] = []
            for i in range(runs):
                order = [(ROOT, now), (baseline, before)]
                for tree, into in order if i % 2 == 0 else order[::-1]:
                    into.append(_in_tree(tree, fn, seeds, mr, ms))
            figures.append(figure("sim", f"{what}, before ({label} size)", before, "schedules/min", cond))
            ratios = [a / b for a, b in zip(now, before, strict=True)]
            figures.append(figure("sim", f"{what}, now / before ({label} size)", ratios, "x", cond))
    return figures


def run(seeds: int = 300, runs: int = 3, jobs: int = 2, baseline: Path | None = None) -> list[Figure]:
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
    command = COMMAND
    if baseline is not None:
        figures += _before_after(seeds, runs, baseline.resolve())
        command += " --baseline-checkout PATH"
    return [replace(f, command=command) for f in figures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--baseline-checkout", type=Path, default=None, metavar="PATH",
                   help="also measure this checkout's simulator, alternating with this tree's")
    a = p.parse_args(argv)
    for f in run(a.seeds, a.runs, a.jobs, a.baseline_checkout):
        print(f.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())

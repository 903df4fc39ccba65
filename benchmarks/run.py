"""Run every benchmark and write docs/benchmarks.md and docs/benchmarks.json.

    python -m benchmarks.run            # defaults: about 30 minutes on 2 cores
    python -m benchmarks.run --tiny     # seconds; what CI runs to keep the code honest
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from amends_pipeline.commands import bench as bench_command
from benchmarks.harness import Figure, baseline_tree, carried_over, merge_report, write_report

ROOT = Path(__file__).resolve().parents[1]
Suite = Callable[[argparse.Namespace], list[Figure]]


def _core(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import core_bench

    sizes = (200, 1_000) if a.tiny else tuple(a.core_days)
    return core_bench.run(sizes=sizes, runs=2 if a.tiny else a.runs, ops=100 if a.tiny else 2_000)


def _durable(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import pg_batch_bench as b

    if a.tiny:
        figs = b.run(dict(b.TINY_PLAN), runs=1, keys=20, preload=200, cold=False)
        figs += b.scaling_figures(2_000, 1, preload=200, keys=20)
        return figs + b.profile_figures(2_000, None, preload=200, keys=20)
    figs = b.run(dict(b.DEFAULT_PLAN), runs=a.runs_slow)
    figs += b.scaling_figures(50_000, a.runs_slow)
    figs += b.profile_figures(50_000, a.baseline_checkout)
    if a.baseline_checkout is not None:
        figs += b.before_after(a.baseline_checkout, a.runs_slow)
    return figs


def _worker_memory(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import worker_memory_bench as b

    if a.tiny:
        return b.run(keys=2_000, history=(5_000, 10_000), history_keys=50, revisions=(2_000, 4_000))
    return b.run()


def _oracle(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import oracle_bench as b

    if a.tiny:
        return b.run(sizes=(2_000,), runs=1, naive_max=2_000, rss_records=2_000)
    return b.run(
        sizes=tuple(a.oracle_records),
        runs=a.runs_slow,
        naive_max=1_000_000,
        rss_records=max(a.oracle_records),
        baseline=a.baseline_checkout,
    )


def _snapshot(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import snapshot_bench as b

    if a.tiny:
        return b.run(records=2_000, runs=1, rss_records=2_000)
    # At the largest size: issue 43's goals are a boundary at 10 million records plus 100,000
    # new ones, and the oracle's peak RSS at 10 million.
    return b.run(records=max(a.oracle_records), runs=a.runs_slow, rss_records=max(a.oracle_records))


def _snapshot_scale(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import snapshot_bench as b

    if a.tiny:
        return b.scale_run(2_000, 2, tempfile.gettempdir())
    return b.scale_run(max(a.oracle_records), b.SCALE_COPIES, tempfile.gettempdir())


def _compute(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import compute_bench as b

    return b.run(sizes=(1_000, 5_000) if a.tiny else (20_000, 100_000), runs=1)


def _sim(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import sim_bench as b

    return b.run(
        seeds=10 if a.tiny else 300, runs=1 if a.tiny else a.runs_slow, baseline=a.baseline_checkout
    )


def _e2e(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import e2e_bench as b

    if a.tiny:
        return b.run(samples=5, bulk=200, runs=1, warmup=2)
    return b.run(samples=200, bulk=20_000, runs=a.runs_slow, baseline=a.baseline_checkout)


def _dagster(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import dagster_bench as b

    if a.tiny:
        return b.run(samples=2, role_samples=3)
    return b.run(samples=12, role_samples=30)


def _verify_memory(a: argparse.Namespace) -> list[Figure]:
    from benchmarks import verify_memory_bench as b

    records = b.TINY_RECORDS if a.tiny else a.verify_records
    return b.run(records=records, baseline=a.baseline_checkout, runs=1 if a.tiny else a.runs_slow)


SUITES: dict[str, Suite] = {
    "core": _core,
    "durable": _durable,
    "worker-memory": _worker_memory,
    "oracle": _oracle,
    "snapshot": _snapshot,
    "compute": _compute,
    "simulator": _sim,
    "end-to-end": _e2e,
    "dagster": _dagster,
}
OPT_IN: dict[str, Suite] = {"verify-memory": _verify_memory, "snapshot-scale": _snapshot_scale}
"""Long suites that run only when named with --only (never in the default run)."""
OPT_IN_GROUPS = ("verify memory", "snapshot scale")
"""The report groups of the opt-in suites: a default run keeps them from the report it replaces."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `amends bench` (declared with the command), writing under this checkout."""
    bench_command.add_arguments(p, ROOT / "docs" / "benchmarks.md")


def execute(a: argparse.Namespace) -> int:
    if a.baseline_ref is not None:
        if a.baseline_checkout is not None:
            print("amends bench: give --baseline-checkout or --baseline-ref, not both", file=sys.stderr)
            return 2
        try:
            a.baseline_checkout = baseline_tree(ROOT, a.baseline_ref)
        except RuntimeError as e:
            print(f"amends bench: no baseline checkout of {a.baseline_ref!r}: {e}", file=sys.stderr)
            return 2
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    names = a.only or list(SUITES)
    figures: list[Figure] = []
    t0 = time.perf_counter()
    for name in tqdm(names, desc="benchmarks", unit="suite", file=sys.stderr):
        figures += (SUITES | OPT_IN)[name](a)
    out = Path(a.out)
    js = out.with_suffix(".json")
    if a.only and js.exists():
        command = "amends bench" + " --tiny" * a.tiny + "".join(f" --only {n}" for n in names)
        if a.baseline_ref is not None:
            command += f" --baseline-ref {a.baseline_ref}"
        elif a.baseline_checkout is not None:
            command += " --baseline-checkout PATH"
        merged, base, updates, measured_on = merge_report(js, figures, started, command)
        write_report(merged, out, js, base, updates, measured_on)
    else:
        kept, updates = carried_over(js, OPT_IN_GROUPS) if js.exists() else ([], [])
        write_report(figures + kept, out, js, started, updates)
    print(f"{len(figures)} figures in {time.perf_counter() - t0:.0f}s -> {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return execute(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

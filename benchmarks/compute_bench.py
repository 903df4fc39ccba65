"""``amends compute --engine incremental``: records/s at growing history sizes, and linearity.

The memory pipeline (worker -> outbox -> relay -> output bytes -> view) runs a
generated history (``oracle_bench.generate``: amendments, cancellations,
re-deliveries, malformed values) on one partition, with as many keys per
record at every size (5 records per key), so the work per record stays the
same and records/s should not fall as the history grows. The last figure is
the records/s at the largest size over that at the smallest: about 1 when the
pipeline is linear in its input (before the fix of issue 14 it fell with the
size: rebuilding a partition's offset list on every appended record).

    python -m benchmarks.compute_bench --sizes 20000 100000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from amends_core.pipeline import compute_incremental
from benchmarks.harness import Figure, figure
from benchmarks.oracle_bench import generate

RECORDS_PER_KEY = 5


def measure(n: int, runs: int) -> tuple[list[float], int]:
    """records/s of ``runs`` runs over a history of ``n`` records, and its envelope count."""
    cfg, by_partition = generate(n, keys=max(1, n // RECORDS_PER_KEY), partitions=1)
    total = sum(len(v) for v in by_partition.values())
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        compute_incremental(cfg, by_partition)
        samples.append(total / (time.perf_counter() - t0))
    return samples, total


def run(sizes: Sequence[int] = (20_000, 100_000), runs: int = 1) -> list[Figure]:
    figures: list[Figure] = []
    rates: dict[int, float] = {}
    cond = f"one partition, {RECORDS_PER_KEY} records per key, generated history"
    for n in sizes:
        samples, total = measure(n, runs)
        f = figure("compute", f"incremental compute, {total:,} records", samples, "records/s", cond)
        rates[n] = f.median
        figures.append(f)
    if len(rates) > 1:
        small, large = min(rates), max(rates)
        figures.append(
            figure(
                "compute", f"records/s at {large:,} vs {small:,} records", [rates[large] / rates[small]],
                "x", "about 1 when linear in the input; below 1 when a step grows with the history",
            )
        )
    return figures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args(argv)
    for f in run(a.sizes, a.runs):
        print(f"{f.name}: {f.median:,.2f} {f.unit}")


if __name__ == "__main__":
    main()

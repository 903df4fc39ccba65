"""The simulator benchmark's before/after mode measures both trees in fresh processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import sim_bench


def test_before_after_measures_each_size_and_check_in_both_trees() -> None:
    figures = sim_bench._before_after(seeds=2, runs=1, baseline=sim_bench.ROOT)
    names = [f.name for f in figures]
    assert names == [
        f"{what}{kind} ({size} size)"
        for size in ("ci", "default")
        for what in ("checked schedules", "without per-step safety")
        for kind in (", before", ", now / before")
    ]
    assert all(f.median > 0 for f in figures)


def test_a_tree_without_the_simulator_is_refused_not_measured_with_installed_code(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"_checked in .* failed \(exit 1\): amends_core is imported from .*, not from "):
        sim_bench._in_tree(tmp_path, "_checked", 1, 6, 80)

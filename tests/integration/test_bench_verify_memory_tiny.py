"""The opt-in verify-memory benchmark runs at its tiny size against the real broker and PostgreSQL.

Only that it runs, reaches a complete boundary and writes its figures is
checked; memory and time are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.run import OPT_IN, SUITES, main

ROOT = Path(__file__).resolve().parents[2]


def test_verify_memory_is_opt_in_and_not_part_of_the_default_run() -> None:
    assert "verify-memory" in OPT_IN and "verify-memory" not in SUITES


@pytest.mark.slow
def test_the_tiny_verify_memory_benchmark_measures_verify_now_and_from_a_baseline_checkout(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMENDS_PG_DSN", pg_dsn)
    out = tmp_path / "benchmarks.md"
    # the baseline is this very checkout: the path through PYTHONPATH runs, numbers mean nothing
    argv = ["--tiny", "--only", "verify-memory", "--baseline-checkout", str(ROOT), "--out", str(out)]
    assert main(argv) == 0
    figs = json.loads(out.with_suffix(".json").read_text())["figures"]
    assert {f["group"] for f in figs} == {"verify memory"}
    names = [f["name"] for f in figs]
    assert any(n.startswith("amends verify peak RSS, ") for n in names)
    assert any(n.startswith("amends verify peak RSS, baseline ") for n in names)
    assert any(n.startswith("peak RSS now / baseline") for n in names)
    assert any(n.startswith("wall time now / baseline") for n in names)
    assert not any("boundary not reached" in n for n in names), names
    assert all(f["unit"] in ("MiB", "s", "x") for f in figs)

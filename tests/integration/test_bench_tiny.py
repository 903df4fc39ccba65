"""Every benchmark suite runs at tiny sizes against the real broker and PostgreSQL.

One test per suite, so that the suites run side by side on the test workers; one more
runs two suites into the same report, as ``amends bench --only`` adds to a report.
Only that each runs and writes its reports is checked; numbers are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.run import SUITES, main

GROUPS = {
    "core": {"core", "naive"},
    "durable": {"durable", "durable profile"},
    "worker-memory": {"worker memory"},
    "oracle": {"oracle", "oracle (naive baseline)", "oracle memory"},
    "snapshot": {"snapshot"},
    "compute": {"compute"},
    "simulator": {"sim"},
    "end-to-end": {"end to end"},
    "dagster": {"dagster"},
}
"""The report groups each suite writes."""
SLOW = {"end-to-end", "dagster"}


def _figures(out: Path) -> list[dict[str, object]]:
    doc = json.loads(out.with_suffix(".json").read_text())
    figures: list[dict[str, object]] = doc["figures"]
    return figures


def test_every_suite_has_a_test_here() -> None:
    assert set(GROUPS) == set(SUITES)


@pytest.mark.parametrize(
    "suite", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s for s in GROUPS]
)
def test_the_suite_runs_at_tiny_sizes_and_writes_both_report_files(suite: str, tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert main(["--tiny", "--only", suite, "--out", str(out)]) == 0
    figures = _figures(out)
    assert figures and {f["group"] for f in figures} == GROUPS[suite]
    assert all(isinstance(f["median"], float | int) and f["median"] > 0 for f in figures)
    assert "| group | figure | median |" in out.read_text()


def test_a_second_suite_is_added_to_the_report_and_the_targets_table_appears(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert main(["--tiny", "--only", "core", "--out", str(out)]) == 0
    assert main(["--tiny", "--only", "durable", "--out", str(out)]) == 0
    assert {f["group"] for f in _figures(out)} == GROUPS["core"] | GROUPS["durable"]
    assert "## Throughput targets (issue 16)" in out.read_text()

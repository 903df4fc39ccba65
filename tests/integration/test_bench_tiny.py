"""The whole benchmark suite runs at tiny sizes against the real broker and PostgreSQL.

Only that it runs and writes its reports is checked; numbers are never asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.run import SUITES, main


@pytest.mark.slow
def test_the_tiny_benchmark_run_writes_both_report_files(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert main(["--tiny", "--out", str(out)]) == 0  # every suite, tiny sizes
    doc = json.loads(out.with_suffix(".json").read_text())
    groups = {f["group"] for f in doc["figures"]}
    assert {"core", "durable", "worker memory", "oracle", "snapshot", "compute", "end to end", "dagster"} <= groups
    assert len(SUITES) == 9
    assert all(f["median"] > 0 for f in doc["figures"])
    text = out.read_text()
    assert "| group | figure | median |" in text
    assert "## Throughput targets (issue 16)" in text

"""The opt-in snapshot scale benchmark (100 million records on demand) runs at a tiny size.

The history is delivered several times at new offsets, written to a real Delta
table on disk, decoded and kept once, then folded from the kept rows; the
figures report the records, the times and both peak RSS values.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import run
from benchmarks.snapshot_bench import SCALE_GROUP, scale_run


def test_the_scale_run_reports_append_decode_and_kept_figures_for_every_delivered_record(tmp_path: Path) -> None:
    assert "snapshot-scale" in run.OPT_IN and "snapshot-scale" not in run.SUITES
    figures = scale_run(2_000, 3, str(tmp_path))
    assert [f.group for f in figures] == [SCALE_GROUP] * 3
    append, decode, kept = figures
    assert append.name.startswith("append 6,00") and append.unit == "records/s" and append.median > 0
    assert decode.unit == kept.unit == "s" and decode.median > 0 and kept.median > 0
    assert "peak RSS" in decode.extra["note"] and "peak RSS" in kept.extra["note"]
    assert list(tmp_path.iterdir()) == []  # the run's table is removed

"""The oracle's result does not depend on how it splits the work.

Records are decoded and classified in blocks (``compute._BLOCK``), and
authority and closes run over parts of the keys (``compute._PART_ROWS``).
With tiny blocks and parts, a generated history (rejections, amendments,
cancellations, re-deliveries, same-revision rivals, other layouts) must give
exactly the result of one block and one part, and of the plain per-record
recomputation.
"""

from __future__ import annotations

import importlib

import pytest

from amends_core.oracle.compute import compute
from benchmarks.oracle_bench import generate, naive_recompute

oracle_compute = importlib.import_module("amends_core.oracle.compute")  # the package exports a function of that name


@pytest.mark.parametrize(
    ("block", "part_rows"), [(1 << 20, 1 << 20), (97, 1 << 20), (1 << 20, 50), (64, 7)]
)
def test_blocks_and_key_parts_do_not_change_the_result(
    monkeypatch: pytest.MonkeyPatch, block: int, part_rows: int
) -> None:
    cfg, by_partition = generate(6_000, keys=40, partitions=3, days=20, seed=3)
    expected = naive_recompute(cfg, by_partition)
    monkeypatch.setattr(oracle_compute, "_BLOCK", block)
    monkeypatch.setattr(oracle_compute, "_PART_ROWS", part_rows)
    got = compute(cfg, by_partition)
    assert got.result == expected
    assert [r.record.coords for r in got.rejections] == sorted(
        (r.record.coords for r in got.rejections), key=lambda c: (c.partition, c.offset)
    )
    assert got.conflicts and got.blocked and got.rejections  # the history exercises every part


def test_an_empty_history_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _ = generate(10, keys=4, partitions=2)
    monkeypatch.setattr(oracle_compute, "_BLOCK", 3)
    out = compute(cfg, {0: [], 1: []})
    assert out.rejections == () and out.conflicts == ()
    assert out.result == naive_recompute(cfg, {0: [], 1: []})

"""The targets table of docs/benchmarks.md and the baseline checkout ``make bench`` makes.

Figures here are made up: the table must read them, never compute them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.harness import Figure, baseline_tree
from benchmarks.targets import TARGETS, section


def fig(group: str, name: str, median: float, unit: str = "records/s", **extra: float) -> Figure:
    return Figure(group, name, median, median, median, unit, "made up", 1, extra=dict(extra))


def row(lines: list[str], item: str) -> list[str]:
    [hit] = [ln for ln in lines if ln.startswith(f"| {item} |")]
    return [cell.strip() for cell in hit.strip("|").split("|")]


def test_each_target_reads_now_before_and_its_verdict_from_the_figures() -> None:
    lines = section([
        fig("durable", "worker, batch 10,000", 21_000),
        fig("durable", "worker, batch 10,000, before", 9_000),
        fig("durable", "worker, batch 10,000, now / before", 2.33, "x"),
        fig("end to end", "produce -> view visible, p50 (roles, real broker)", 30.0, "ms"),
        fig("end to end", "produce -> view visible, p99 (roles, real broker)", 90.0, "ms"),
        fig("end to end", "produce -> view visible, p50 (roles, real broker), before", 70.0, "ms", p99=130.0),
        fig("oracle memory", "peak RSS, oracle over 10,000,000 records", 6_000, "MiB"),
        fig("oracle memory", "peak RSS, oracle over 10,000,000 records (/somewhere/abc123)", 12_000, "MiB"),
    ])
    durable = row(lines, "2. durable worker, batch 10,000, one partition")
    assert durable[1:3] == ["21,000 records/s", "9,000 records/s"]
    assert durable[5] == "met; now / before 2.33x"
    p50 = row(lines, "5. correction visible in the view, p50 (real broker)")
    assert p50[1:3] == ["30.0 ms", "70.0 ms"] and p50[5] == "not met"
    p99 = row(lines, "5. correction visible in the view, p99 (real broker)")
    assert p99[1:3] == ["90.0 ms", "130.0 ms"] and p99[5] == "met"  # before from the p50 row's p99
    memory = row(lines, "4. oracle peak RSS, 10,000,000 records")
    assert memory[2] == "12,000 MiB" and memory[5] == "reduced: now / before 0.50x"
    sim = row(lines, "7. simulator, checked schedules per minute (CI size)")
    assert sim[1] == "not measured in this run"


def test_the_live_state_bound_compares_ten_times_the_revision_history_and_a_run_without_targets_has_no_table(
) -> None:
    live = "RSS growth, 100,000 live identities then"

    def verdict(ratio: float) -> str:
        lines = section([
            fig("worker memory", f"{live} 10,000,000 records of revisions", 120, "MiB"),
            fig("worker memory", "revision history 10x longer: RSS growth ratio", ratio, "x"),
        ])
        return row(lines, "6. worker RSS growth, 100,000 live identities then 10,000,000 records of revisions")[5]

    assert verdict(8.1) == "not met: 10x the revision history grows RSS 8.10x"
    assert verdict(1.1) == "met: 10x the revision history grows RSS 1.10x"
    lines = section([
        fig("worker memory", f"{live} 1,000,000 records of revisions", 100, "MiB"),
        fig("worker memory", f"{live} 1,000,000 records of revisions, every revision kept in memory", 400, "MiB"),
    ])
    assert row(lines, "6. worker RSS growth, 100,000 live identities then 1,000,000 records of revisions")[1:] == [
        "100 MiB", "400 MiB", "not measured", "bounded by the keys' live state, not the history",
        "now / every revision kept 0.25x",
    ]
    assert section([fig("core", "tail append, 1,000 days", 1.0)]) == []
    assert len({t.item for t in TARGETS}) == len(TARGETS)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_the_baseline_checkout_is_made_once_at_the_named_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet")
    for text in ("old", "new"):
        (repo / "f.txt").write_text(text)
        git(repo, "add", "f.txt")
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", text)
    old = git(repo, "rev-parse", "HEAD~1")
    tree = baseline_tree(repo, "HEAD~1")
    assert tree == repo / "var" / "bench-baseline" / old[:12]
    assert (tree / "f.txt").read_text() == "old"
    assert baseline_tree(repo, old) == tree  # reused
    with pytest.raises(RuntimeError, match="names no commit"):
        baseline_tree(repo, "no-such-ref")
    git(tree, "checkout", "--quiet", "--detach", git(repo, "rev-parse", "HEAD"))
    with pytest.raises(RuntimeError, match="is not a checkout of"):
        baseline_tree(repo, old)


def test_the_scaling_target_says_where_the_cpus_went_with_two_workers() -> None:
    lines = section([
        fig("durable", "2 partitions / 1 partition", 1.2, "x"),
        fig("durable", "CPUs used by the worker processes, 2 partitions", 1.5, "CPUs"),
        fig("durable", "CPUs used by PostgreSQL, 2 partitions", 0.4, "CPUs"),
        fig("durable", "CPUs busy on the machine, 2 partitions", 1.98, "CPUs"),
    ])
    scaling = row(lines, "3. all workers, 2 partitions / 1 partition")
    assert scaling[1] == "1.20x"
    assert scaling[5] == "with 2 workers: workers 1.50, PostgreSQL 0.40, whole machine 1.98 CPUs busy"
    without = row(section([fig("durable", "2 partitions / 1 partition", 1.2, "x")]), "3. all workers, 2 partitions / 1 partition")
    assert without[5] == ""


def test_the_bulk_target_says_what_cpu_the_pipeline_needs_and_the_ceiling_it_sets() -> None:
    bulk = "5. end to end in bulk (real broker)"
    lines = section([
        fig("end to end", "bulk records through worker, relay and view (real broker)", 15_000.0, "records/s"),
        fig("end to end", "now / before, bulk records/s (real broker)", 3.5, "x"),
        fig("end to end", "bulk ceiling with every CPU busy (real broker)", 19_500.0, "records/s"),
        fig("end to end", "bulk CPU per 1,000 records: the whole pipeline (real broker)", 102.6, "ms"),
        fig("end to end", "bulk: CPUs busy, whole machine (real broker)", 1.52, "CPUs"),
    ])
    got = row(lines, bulk)
    assert got[1] == "15,000 records/s"
    assert got[5] == (
        "not met; now / before 3.50x; 103 ms of CPU per 1,000 records over all processes: at most"
        " 19,500 records/s with every CPU busy; 1.52 CPUs were busy"
    )
    alone = row(section([fig("end to end", "bulk records through worker, relay and view (real broker)", 21_000.0,
                             "records/s")]), bulk)
    assert alone[5] == "met"

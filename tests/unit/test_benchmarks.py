"""Benchmark code computes correct results at tiny sizes (numbers are never asserted)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import core_bench


def test_the_naive_baseline_computes_the_same_closes_and_alerts_as_the_fold() -> None:
    k = core_bench.build_key(300)
    kc = k.state.cfg
    balances, alerts = core_bench.naive_recompute(kc.opening_balance, kc.reorder_threshold, list(k.state.active.values()))
    assert balances == list(zip(k.state.days, k.state.closes, strict=True))
    assert alerts == [(a.day, a.threshold, a.close) for a in sorted(k.state.alerts.values(), key=lambda a: a.day)]
    assert alerts, "the benchmark key should cross its threshold at least once"


def test_benchmark_corrections_leave_the_key_consistent_with_a_recompute() -> None:
    k = core_bench.build_key(120)
    key = k.state.key
    for rev in range(2, 6):
        k.feed(core_bench.txn(key, 0, 0, 5 + 2 * (rev % 2), rev))
        k.feed(core_bench.txn(key, 118, 118, -1 - rev % 2, rev))
    kc = k.state.cfg
    balances, _ = core_bench.naive_recompute(kc.opening_balance, kc.reorder_threshold, list(k.state.active.values()))
    assert balances == list(zip(k.state.days, k.state.closes, strict=True))
    # committed intent equals the projection (what the view would show)
    present = {e.output_id.day: e.payload.close for e in k.outputs.values() if e.output_id.family.value == "balance" and e.payload.present}
    assert present == dict(balances)


def test_a_partial_run_replaces_only_its_own_groups_and_keeps_every_other_figure(tmp_path: Path) -> None:
    from benchmarks.harness import figure, merge_report, rewrite_markdown, write_report

    md, js = tmp_path / "b.md", tmp_path / "b.json"
    old = [
        figure("core", "a", [1.0], "x", "c"),
        figure("end to end", "old latency", [9.0], "ms", "c"),
        figure("sim", "b", [2.0, 3.0], "x", "c"),
    ]
    write_report(old, md, js, "2026-01-01 00:00 UTC")
    new = [figure("end to end", "latency, mock", [1.0], "ms", "c"), figure("end to end", "latency, real", [2.0], "ms", "c")]
    recorded = json.loads(js.read_text())["machine"]
    merged, started, updates, machine = merge_report(js, new, "2026-02-02 00:00 UTC", "amends bench --only end-to-end")
    assert [f.name for f in merged] == ["a", "latency, mock", "latency, real", "b"]
    assert merged[0] == old[0] and merged[3] == old[2]
    assert started == "2026-01-01 00:00 UTC"
    assert machine == recorded  # the report's run keeps its own machine and speed
    speed = updates[0].pop("reference_loop_ns")
    assert speed > 0 and updates[0].pop("platform") == recorded["platform"]
    assert updates == [{"started": "2026-02-02 00:00 UTC", "groups": ["end to end"], "command": "amends bench --only end-to-end"}]
    updates[0] |= {"reference_loop_ns": 12.34, "platform": recorded["platform"]}
    write_report(merged, md, js, started, updates, machine)
    text = md.read_text()
    assert "Run started 2026-01-01 00:00 UTC" in text
    assert f"{recorded['reference_loop_ns']:.1f} ns per iteration" in text.splitlines()[3]
    assert (
        "from a later run started 2026-02-02 00:00 UTC on the same machine"
        " (`amends bench --only end-to-end`; machine speed then 12.3 ns per loop iteration)."
    ) in text
    # A run on another host says which; a record from before platforms were kept claims nothing.
    elsewhere = [{**updates[0], "platform": "Linux-other"}, {"started": "2025", "groups": ["sim"], "command": "c"}]
    write_report(merged, tmp_path / "e.md", tmp_path / "e.json", started, elsewhere, machine)
    other = (tmp_path / "e.md").read_text()
    assert "2026-02-02 00:00 UTC on Linux-other (`amends bench" in other
    assert "from a later run started 2025 (`c`)." in other
    rewrite_markdown(js, tmp_path / "again.md")  # the JSON twin keeps the updates
    assert (tmp_path / "again.md").read_text() == text
    # a second partial run of the same groups replaces the first one's note
    _, _, again, _ = merge_report(js, new, "2026-03-03 00:00 UTC", "amends bench --only end-to-end")
    assert [u["started"] for u in again] == ["2026-03-03 00:00 UTC"]
    # a later run of some of an earlier partial run's groups takes just those from its note
    two = [*new, figure("sim", "b", [4.0], "x", "c")]
    both, _, ups, _ = merge_report(js, two, "2026-04-04 00:00 UTC", "amends bench --only end-to-end --only sim")
    write_report(both, md, js, started, ups, machine)
    _, _, last, _ = merge_report(js, new, "2026-05-05 00:00 UTC", "amends bench --only end-to-end")
    assert [(u["started"], u["groups"]) for u in last] == [
        ("2026-04-04 00:00 UTC", ["sim"]),
        ("2026-05-05 00:00 UTC", ["end to end"]),
    ]


def test_end_to_end_rows_put_the_real_broker_beside_the_mock_with_per_run_ratios() -> None:
    from benchmarks.e2e_bench import Measured, figures

    mock = [Measured([10.0, 20.0, 30.0], 100, 1.0, 2.0, 4.0), Measured([20.0, 20.0, 20.0], 100, 1.0, 2.0, 2.0)]
    real = [Measured([20.0, 40.0, 60.0], 100, 1.0, 2.0, 8.0), Measured([30.0, 30.0, 30.0], 100, 1.0, 2.0, 2.0)]
    rows = {f.name: f for f in figures({"mock": mock, "real": real}, samples=3, bulk=100, warmup=0)}
    assert rows["produce -> view visible, p50 (roles, mock broker)"].median == 20.0
    assert rows["produce -> view visible, p50 (roles, real broker)"].median == 35.0
    ratio = rows["real / mock, p50 latency"]  # per run: 40/20 = 2.0 and 30/20 = 1.5
    assert (ratio.median, ratio.low, ratio.high) == (1.75, 1.5, 2.0)
    bulk = rows["real / mock, bulk records/s"]  # per run: (100/8)/(100/4) = 0.5 and 1.0
    assert (bulk.low, bulk.high) == (0.5, 1.0)
    names = [f.name for f in figures({"mock": mock, "real": real}, samples=3, bulk=100, warmup=0)]
    assert names.index("produce -> view visible, p95 (roles, real broker)") == names.index(
        "produce -> view visible, p95 (roles, mock broker)") + 1


def test_end_to_end_before_after_rows_are_per_run_ratios_against_the_baseline_checkout() -> None:
    from pathlib import Path

    from benchmarks.e2e_bench import Measured, before_after, figures

    now = {k: [Measured([10.0, 20.0, 30.0], 100, 1.0, 2.0, 2.0, hops_ms=[(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)])] for k in ("mock", "real")}
    old = {k: [Measured([40.0, 80.0, 120.0], 100, 1.0, 2.0, 4.0)] for k in ("mock", "real")}
    rows = {f.name: f for f in before_after(now, old, Path("/tmp/f6860fe"), samples=3, bulk=100, warmup=0)}
    assert rows["produce -> view visible, p50 (roles, mock broker), before"].median == 80.0
    assert rows["now / before, p50 latency (real broker)"].median == 0.25
    assert rows["now / before, p99 latency (mock broker)"].median == 0.25
    assert rows["now / before, bulk records/s (mock broker)"].median == 2.0  # 100/2 vs 100/4
    hops = {f.name: f for f in figures(now, samples=3, bulk=100, warmup=0)}
    assert hops["produce -> worker's commit seen, p50 (roles, mock broker)"].median == 3.0
    assert hops["produce -> relay's acknowledgement seen, p50 (roles, real broker)"].median == 4.0


def test_the_generated_history_never_redelivers_before_a_live_record_exists() -> None:
    """With many keys, partition 0 can hold only malformed records when a re-delivery is
    drawn into an empty partition; the fallback then needs a live identity (seed 1 raised
    IndexError here)."""
    from benchmarks.oracle_bench import generate

    cfg, by_partition = generate(20_000, keys=5_000, partitions=4, days=1, seed=1)
    assert sum(len(v) for v in by_partition.values()) >= 20_000 and len(cfg.keys) == 5_000


def test_a_default_run_keeps_the_opt_in_suites_figures_with_when_they_were_measured(tmp_path: Path) -> None:
    from benchmarks import snapshot_bench, verify_memory_bench
    from benchmarks.harness import Figure, carried_over, write_report
    from benchmarks.run import OPT_IN_GROUPS

    assert OPT_IN_GROUPS == (verify_memory_bench.GROUP, snapshot_bench.SCALE_GROUP)
    js, md = tmp_path / "b.json", tmp_path / "b.md"
    old = [Figure("core", "a", 1, 1, 1, "x", "c", 1), Figure("verify memory", "peak", 5, 5, 5, "MiB", "c", 1)]
    updates = [{"started": "2026-02-02 00:00 UTC", "groups": ["verify memory"], "command": "amends bench --only verify-memory"}]
    write_report(old, md, js, "2026-01-01 00:00 UTC", updates)
    kept, measured = carried_over(js, OPT_IN_GROUPS)
    assert [f.name for f in kept] == ["peak"]
    assert measured == [{**updates[0], "earlier": True}]
    write_report([Figure("core", "a", 2, 2, 2, "x", "c", 1), *kept], md, js, "2026-03-03 00:00 UTC", measured)
    text = md.read_text()
    assert "from an earlier run started 2026-02-02 00:00 UTC" in text and "| verify memory | peak | 5.00 |" in text
    assert carried_over(js, ("no such group",)) == ([], [])


def test_bulk_cpu_is_the_difference_per_process_and_a_process_started_meanwhile_counts_whole() -> None:
    from benchmarks.e2e_bench import _cpu_used

    before = ({10: ("worker", 5.0), 11: ("Kafka broker", 100.0), 12: ("relay", 1.0)}, 40.0)
    after = ({10: ("worker", 5.5), 11: ("Kafka broker", 100.25), 13: ("relay", 0.25)}, 41.5)
    per, busy = _cpu_used(before, after, bulk=1000, wall_s=1.0)
    assert per["worker"] == 500.0  # 0.5 s over 1,000 records: 500 ms per 1,000
    assert per["Kafka broker"] == 250.0
    assert per["relay"] == 250.0  # pid 12 gone (not counted), pid 13 new (all of it)
    assert per["view"] == 0.0 and busy == 1.5
    assert _cpu_used(None, after, bulk=1000, wall_s=1.0) == ({}, 0.0)


def test_bulk_cpu_rows_list_each_part_the_whole_and_the_ceiling_it_sets() -> None:
    import os

    from benchmarks.e2e_bench import CPU_PARTS, Measured, cpu_figures

    def run(scale: float) -> Measured:
        cpu = {part: scale * (i + 1) for i, part in enumerate(CPU_PARTS)}
        cpu["relay's PostgreSQL backends"] = 0.0 if scale == 1.0 else 1.0  # below the tick in one run
        return Measured([1.0], 1000, 1.0, 1.0, 1.0, cpu_ms=cpu, busy_cpus=1.5 * scale)

    runs = [run(1.0), run(2.0)]
    rows = {f.name: f for f in cpu_figures(runs, bulk=1000)}
    assert rows["bulk CPU per 1,000 records: worker (real broker)"].median == 1.5  # 1 and 2
    assert "bulk CPU per 1,000 records: relay's PostgreSQL backends (real broker)" not in rows
    whole = [sum(m.cpu_ms.values()) for m in runs]
    assert rows["bulk CPU per 1,000 records: the whole pipeline (real broker)"].median == sum(whole) / 2
    ceiling = rows["bulk ceiling with every CPU busy (real broker)"]
    assert (ceiling.low, ceiling.high) == ((os.cpu_count() or 1) * 1e6 / whole[1], (os.cpu_count() or 1) * 1e6 / whole[0])
    assert rows["bulk: CPUs busy, whole machine (real broker)"].median == 2.25
    assert cpu_figures([Measured([1.0], 1000, 1.0, 1.0, 1.0)], bulk=1000) == []  # mock or not Linux


def test_backlog_rows_are_the_drain_rate_its_cpu_and_ceiling_and_absent_when_a_run_has_none() -> None:
    import os

    from benchmarks.e2e_bench import CPU_PARTS, Drain, Measured, backlog_figures

    def run(view_s: float, worker_ms: float) -> Measured:
        cpu = dict.fromkeys(CPU_PARTS, 10.0)
        cpu["worker"] = worker_ms
        return Measured([1.0], 1000, 9.0, 9.0, 9.0, backlog=Drain(0.5, 0.75, view_s, cpu_ms=cpu, busy_cpus=1.25))

    runs = [run(1.0, 40.0), run(0.5, 60.0)]
    rows = {f.name: f for f in backlog_figures(runs, bulk=1000)}
    rate = rows["backlog drained through worker, relay and view (real broker)"]
    assert (rate.low, rate.high) == (1000.0, 2000.0)  # from the drain's own clock, not the bulk's 9 s
    assert rate.extra["worker_rps"] == 2000.0 and rate.extra["relay_rps"] == 1000 / 0.75
    whole = rows["backlog CPU per 1,000 records: the whole pipeline (real broker)"]
    parts_but_worker = 10.0 * (len(CPU_PARTS) - 1)
    assert (whole.low, whole.high) == (parts_but_worker + 40.0, parts_but_worker + 60.0)
    assert whole.extra["worker_ms"] == 50.0
    ceiling = rows["backlog ceiling with every CPU busy (real broker)"]
    assert ceiling.high == (os.cpu_count() or 1) * 1e6 / (parts_but_worker + 40.0)
    assert rows["backlog: CPUs busy, whole machine (real broker)"].median == 1.25
    assert backlog_figures([runs[0], Measured([1.0], 1000, 1.0, 1.0, 1.0)], bulk=1000) == []


def test_the_bulk_verdict_names_the_backlog_rate_when_it_was_measured() -> None:
    from benchmarks.harness import figure
    from benchmarks.targets import _bulk_cpu, finder

    rows = [figure("end to end", "now / before, bulk records/s (real broker)", [3.5], "x", "c")]
    assert "backlog" not in _bulk_cpu(finder(rows))
    rows.append(figure("end to end", "backlog drained through worker, relay and view (real broker)", [17_250.0],
                       "records/s", "c"))
    said = _bulk_cpu(finder(rows))
    assert said.startswith("now / before 3.50x") and said.endswith("drained at 17,250 records/s")


def test_partitioned_bulk_rows_compare_each_run_with_the_single_partition_of_the_same_run() -> None:
    from benchmarks.e2e_bench import CPU_PARTS, Drain, Measured, partition_figures

    def run(view_s: float, partitions: int, cpu: float = 10.0) -> Measured:
        parts = dict.fromkeys(CPU_PARTS, cpu)
        return Measured([1.0], 1000, view_s / 2, view_s / 1.5, view_s, cpu_ms=parts, busy_cpus=1.5,
                        backlog=Drain(0.25, 0.3, 0.4, cpu_ms=parts, busy_cpus=1.75), partitions=partitions)

    one = [run(1.0, 1), run(2.0, 1)]
    two = [run(0.5, 2), run(1.0, 2, cpu=20.0)]
    rows = {f.name: f for f in partition_figures(one, two, bulk=1000)}
    bulk = rows["bulk records through worker, relay and view, 2 partitions (real broker)"]
    assert (bulk.low, bulk.high) == (1000.0, 2000.0) and "2 source partitions" in bulk.conditions
    ratio = rows["2 partitions / 1 partition, bulk records/s (real broker)"]
    assert (ratio.low, ratio.high) == (2.0, 2.0)  # per run: 1.0/0.5 and 2.0/1.0
    assert rows["backlog drained through worker, relay and view, 2 partitions (real broker)"].median == 2500.0
    whole = rows["bulk over 2 partitions CPU per 1,000 records: the whole pipeline (real broker)"]
    assert (whole.low, whole.high) == (10.0 * len(CPU_PARTS), 20.0 * len(CPU_PARTS))
    assert rows["bulk over 2 partitions: CPUs busy, whole machine (real broker)"].median == 1.5
    assert partition_figures(one, [], bulk=1000) == []
    assert "2 partitions / 1 partition, bulk records/s (real broker)" not in {
        f.name for f in partition_figures(one[:1], two, bulk=1000)}  # runs that do not pair: no ratio


def test_the_partitioned_bulk_verdict_says_how_it_compares_and_what_limits_it() -> None:
    from benchmarks.harness import figure
    from benchmarks.targets import TARGETS, _spread, finder

    rows = [
        figure("end to end", "bulk records through worker, relay and view, 2 partitions (real broker)", [21_000.0],
               "records/s", "c"),
        figure("end to end", "2 partitions / 1 partition, bulk records/s (real broker)", [1.25], "x", "c"),
        figure("end to end", "bulk over 2 partitions CPU per 1,000 records: the whole pipeline (real broker)", [90.0],
               "ms", "c"),
        figure("end to end", "bulk over 2 partitions: CPUs busy, whole machine (real broker)", [1.9], "CPUs", "c"),
    ]
    said = _spread(finder(rows))
    assert said == "1.25x the single partition in the same runs; 90 ms of CPU per 1,000 records; 1.90 CPUs were busy"
    target = next(t for t in TARGETS if t.item.startswith("5. end to end in bulk, 2 source partitions"))
    assert target.row(finder(rows)).endswith(f"| met; {said} |")
    assert "not measured in this run" in target.row(finder([]))


def test_role_processes_name_a_per_partition_process_by_its_role() -> None:
    from benchmarks.harness import RoleProcesses

    assert RoleProcesses.role("worker") == "worker"
    assert RoleProcesses.role("view/1") == "view"


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_process_cpu_reading_agrees_with_the_kernels_times_call_and_a_gone_process_reads_none() -> None:
    from benchmarks.harness import CLOCK_TICKS, process_cpu_s

    def times_s() -> float:
        t = os.times()
        return t.user + t.system

    before, ref_before = process_cpu_s(os.getpid()), times_s()
    _spin(0.3)
    after, ref_after = process_cpu_s(os.getpid()), times_s()
    assert before is not None and after is not None
    tick = 1 / CLOCK_TICKS
    assert abs(after - ref_after) <= 2 * tick and abs(before - ref_before) <= 2 * tick
    assert after - before >= 0.3 - 2 * tick
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert process_cpu_s(gone.pid) is None


def test_machine_busy_counts_at_least_this_process_work_and_names_find_processes() -> None:
    from benchmarks.harness import CLOCK_TICKS, machine_busy_s, pids_named, process_name

    def stolen_s() -> float:  # read here on its own: "busy" leaves it out on purpose
        return int(Path("/proc/stat").read_text().split()[8]) / CLOCK_TICKS

    busy0, stolen0, own0 = machine_busy_s(), stolen_s(), time.process_time()
    _spin(0.3)
    busy1, stolen1, own1 = machine_busy_s(), stolen_s(), time.process_time()
    assert busy0 is not None and busy1 is not None
    # The machine did at least what we did. A process's own clock also runs while a
    # hypervisor has taken its CPU away, which the machine accounts as stolen, not busy.
    assert (busy1 - busy0) + (stolen1 - stolen0) >= (own1 - own0) - 2 / CLOCK_TICKS
    name = process_name(os.getpid())
    assert name and os.getpid() in pids_named(name)
    assert pids_named("no-such-process-name-amends") == []


def test_the_report_names_the_machine_speed_so_two_runs_absolute_figures_compare(tmp_path: Path) -> None:
    from benchmarks.harness import figure, machine, machine_line, write_report

    m = machine()
    assert m["reference_loop_ns"] > 0
    assert m["cpu_model"] is None or m["cpu_model"].strip() == m["cpu_model"] != ""
    md, js = tmp_path / "b.md", tmp_path / "b.json"
    write_report([figure("core", "a", [1.0], "x", "c")], md, js, "2026-01-01 00:00 UTC")
    header = md.read_text().splitlines()[3]
    assert header.startswith("Run started 2026-01-01 00:00 UTC on ") and " ns per iteration of a plain Python loop" in header
    recorded = json.loads(js.read_text())["machine"]
    assert recorded["reference_loop_ns"] > 0
    # A re-render shows the recorded machine, not this one; a run recorded before the
    # reference loop existed renders without a speed rather than with a made-up one.
    old = {"platform": "Linux-x", "python": "3.11.7", "cpus": 2}
    assert machine_line(old) == "on Linux-x, Python 3.11.7, 2 CPUs."
    line = machine_line(old | {"cpu_model": "AMD EPYC", "reference_loop_ns": 21.04})
    assert line.startswith("on Linux-x, Python 3.11.7, 2 CPUs (AMD EPYC). Machine speed: 21.0 ns per iteration")


def test_the_oracle_bench_times_another_layout_at_its_largest_size_even_when_rivals_add_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import oracle_bench

    real = oracle_bench.generate

    def one_more(n: int) -> tuple[object, dict[int, list[object]]]:  # as same-revision rivals do
        cfg, parts = real(n)
        last = parts[0][-1]
        parts[0].append(dataclasses.replace(last, coords=dataclasses.replace(last.coords, offset=len(parts[0]))))
        return cfg, parts  # type: ignore[return-value]

    monkeypatch.setattr(oracle_bench, "generate", one_more)
    monkeypatch.setattr(oracle_bench, "REORDERED_MAX", 300)
    row = oracle_bench.measure(300, runs=1, naive=False)
    assert row["records"] == 301 and len(row["reordered_rps"]) == 1
    assert not oracle_bench.measure(301, runs=1, naive=False)["reordered_rps"]
    figures = {f.name for f in oracle_bench.run(sizes=(300,), runs=1, naive_max=0)}
    assert "end to end, another producer's layout, 300 records" in figures
    assert "end to end from Record values, 300 records" in figures

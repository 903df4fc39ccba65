"""Benchmark code computes correct results at tiny sizes (numbers are never asserted)."""

from __future__ import annotations

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

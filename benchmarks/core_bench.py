"""Core figures: fold+diff throughput and the cost of corrections against history length.

A key with N active days is built through the real fold; then tail appends,
amendments one day back and corrections of the first day are measured. The
naive baseline recomputes every balance and alert of the key from scratch,
which is what a plain batch job does after each correction.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from amends_core import diff, fold, timefmt
from amends_core.ledger import (
    SCHEMA_VERSION,
    Cause,
    Config,
    Coordinates,
    Envelope,
    KeyConfig,
    OutputID,
    StockKey,
    Transaction,
)
from benchmarks.harness import Figure, figure, repeat, timed

SOURCE = "bench-source"
ORIGIN = timefmt.parse_rfc3339("2000-01-01T00:00:00Z")
_ = SCHEMA_VERSION


def bench_config(keys: int = 1) -> Config:
    return Config(
        1, "bench", SOURCE, 1, ORIGIN,
        tuple(KeyConfig(StockKey(f"ITEM-{i}", "DC-1"), 10**15, 10**15 - 10, 0) for i in range(keys)),
    ).validate()


@dataclass
class Key:
    """One key's fold state plus its committed output intent."""

    cfg: Config
    state: fold.KeyState
    outputs: dict[OutputID, Envelope]
    offset: int = 0

    def feed(self, t: Transaction) -> int:
        """Fold, diff and install one assertion; returns the envelopes emitted."""
        self.offset += 1
        c = Coordinates(SOURCE, 0, self.offset)
        d = fold.apply(self.state, t, c)
        envs = diff.reconcile(self.cfg.namespace, d, self.outputs.get, Cause(SOURCE, 0, self.offset, t.txn_id, t.revision))
        self.state.install(d)
        for e in envs:
            self.outputs[e.output_id] = e
        return len(envs)


def txn(key: StockKey, tid: int, day: int, qty: int, revision: int = 1) -> Transaction:
    return Transaction(f"T{tid}", revision, "NEW" if revision == 1 else "AMEND", key, ORIGIN + day * timefmt.NS_PER_DAY + 3600 * 10**9, qty, 0)


def build_key(days: int, cfg: Config | None = None, index: int = 0) -> Key:
    cfg = cfg or bench_config()
    kc = cfg.keys[index]
    k = Key(cfg, fold.new_key_state(kc), {})
    for d in range(days):
        # drifts 15 down, then 15 back up: closes cross the threshold (opening - 10) regularly
        k.feed(txn(kc.key, d, d, -1 if d % 20 < 15 else 5))
    return k


def naive_recompute(opening: int, threshold: int, active: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """From scratch: sort all active (day, qty), group by day, cumulate, find crossings."""
    totals: dict[int, int] = {}
    for d, q in sorted(active):
        totals[d] = totals.get(d, 0) + q
    balances, alerts = [], []
    before = opening
    for d in sorted(totals):
        close = before + totals[d]
        balances.append((d, close))
        if before >= threshold > close:
            alerts.append((d, threshold, close))
        before = close
    return balances, alerts


def _rate(n: int, fn: Callable[[], None]) -> float:
    return n / timed(fn)


def _measure_size(n: int, runs: int, ops: int) -> tuple[list[Figure], dict[str, float]]:
    k = build_key(n)
    key = k.state.key
    next_day = [n]
    revision = [1]

    def tail() -> float:
        def go() -> None:
            for _ in range(ops):
                d = next_day[0]
                next_day[0] += 1
                k.feed(txn(key, d, d, -1))
        return _rate(ops, go)

    def one_back() -> float:
        def go() -> None:
            for _ in range(ops):
                revision[0] += 1
                d = next_day[0] - 2
                k.feed(txn(key, d, d, -1 - revision[0] % 2, revision[0]))
        return _rate(ops, go)

    def first_day() -> float:
        # alternate 5 and 7 (the original is 5 or -1): every correction changes all closes
        revision[0] += 1
        return timed(lambda: k.feed(txn(key, 0, 0, 6 + (revision[0] % 2) * 2, revision[0]))) * 1000

    def naive() -> float:
        active = list(k.state.active.values())
        kc = k.state.cfg
        return timed(lambda: naive_recompute(kc.opening_balance, kc.reorder_threshold, active)) * 1000

    f = repeat(first_day, runs)
    nv = repeat(naive, runs)
    days_now = len(k.state.days)
    t = repeat(tail, runs)
    b = repeat(one_back, runs)
    cond = f"one key with {n:,} active days; {ops:,} operations per run"
    figs = [
        figure("core", f"tail append, {n:,} days", t, "records/s", cond),
        figure("core", f"amendment one day back, {n:,} days", b, "records/s", cond),
        figure(
            "core", f"correction of the first day, {n:,} days", f, "ms per correction",
            f"repairs all {days_now:,} days (cost follows the repaired suffix)",
        ),
        figure("naive", f"full recompute of one key, {n:,} days", nv, "ms per recompute", "sort, group, cumulate from scratch (pure Python)"),
    ]
    medians = {
        "days": days_now,
        "tail": statistics.median(t),
        "back": statistics.median(b),
        "first": statistics.median(f),
        "naive": statistics.median(nv),
    }
    return figs, medians


def run(sizes: tuple[int, ...] = (1_000, 10_000, 100_000), runs: int = 5, ops: int = 2_000) -> list[Figure]:
    figs: list[Figure] = []
    per_size: dict[int, dict[str, float]] = {}
    for n in sizes:
        more, per_size[n] = _measure_size(n, runs, ops)
        figs += more
    lo, hi = min(sizes), max(sizes)
    if lo != hi:
        ratio = per_size[lo]["tail"] / per_size[hi]["tail"]
        figs.append(figure("core", f"tail append cost ratio {hi:,} vs {lo:,} days", [ratio], "x (1 = history length does not matter)", "medians of the rows above; goal <= 2"))
        figs.append(
            figure(
                "core", f"first-day correction cost per repaired day, {hi:,} vs {lo:,}",
                [(per_size[hi]["first"] / per_size[hi]["days"]) / (per_size[lo]["first"] / per_size[lo]["days"])], "x",
                "close to 1 means proportional to the repaired suffix",
            )
        )
    # incremental correction one day back vs naive recompute, at the largest size
    inc_ms = 1000.0 / per_size[hi]["back"]
    figs.append(
        figure(
            "core", f"incremental vs naive recompute per correction, {hi:,} days",
            [per_size[hi]["naive"] / inc_ms], "x faster",
            "amendment one day back vs full recompute of the key (goal >= 100x)",
            note="The naive baseline is generous: it starts from already-resolved authority"
            " (one active (day, qty) per identity) instead of raw history.",
        )
    )

    # many keys: new records spread over 1,000 keys
    cfg = bench_config(1_000)
    keys = [Key(cfg, fold.new_key_state(kc), {}) for kc in cfg.keys]

    def many() -> float:
        day = [0]

        def go() -> None:
            for i in range(ops * 5):
                kk = keys[i % len(keys)]
                if i % len(keys) == 0:
                    day[0] += 1
                kk.feed(txn(kk.state.key, 10**6 + i, day[0], -1))
        return _rate(ops * 5, go)

    figs.append(figure("core", "new records over 1,000 keys", repeat(many, runs), "records/s", f"{ops * 5:,} records per run, round robin"))
    return figs

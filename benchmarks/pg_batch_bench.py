"""Durable worker throughput: source records/s through PgStore.process at several batch sizes.

    python -m benchmarks.pg_batch_bench               # 1, 100, 1,000 and 10,000 per batch
    python -m benchmarks.pg_batch_bench --tiny        # seconds; numbers are meaningless

The workload is a realistic mix on one partition: 95 % new records (tail
appends on each key's current day, which advances now and then), 4 % recent
amendments (a replacement of one of the key's last few transactions) and 1 %
deep corrections (an amendment or a cancellation of any earlier transaction
of the key). Each run gets a fresh namespace that is first preloaded (not
timed) so keys carry real history, then processes the timed records with
the given batch size; a figure is the median over runs. The timed records go
through the worker's own step (``amends_core.roles.worker.Worker`` over the
``PgStore``, as the worker role runs it, with ``AHEAD`` batches per step, each
folded while the one before commits) from a memory source holding the same
records: Kafka is not in these figures. The same records run through the pure
core (decide + install, no database) in the same process as the ceiling the
database path is compared against. Rows written per record come from
PostgreSQL's own table statistics.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from amends_core import process, timefmt, wire
from amends_core.adapters import MemorySource
from amends_core.ledger import Config, Coordinates, KeyConfig, Record, StockKey, Transaction
from amends_core.ports import Token
from amends_core.roles.worker import Worker
from amends_pipeline.postgres import batch as pg_batch
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.roles import collector
from amends_pipeline.roles.worker import AHEAD
from benchmarks.harness import Figure, figure, machine_busy_s, pids_named, process_cpu_s, run_in_tree

SOURCE = "bench-source"
ORIGIN = timefmt.parse_rfc3339("2020-01-01T00:00:00Z")
DAY = timefmt.NS_PER_DAY


def bench_config(keys: int, namespace: str) -> Config:
    kcs = tuple(
        KeyConfig(StockKey(f"ITEM-{i:05d}", "DEPOT-A"), 1_000_000, 999_000, 0) for i in range(keys)
    )
    return Config(1, namespace, SOURCE, 1, ORIGIN, kcs).validate()


@dataclass
class _Key:
    key: StockKey
    day: int = 0
    txns: list[list[int]] | None = None  # [txn number, revision, day]


def workload(n: int, keys: int, seed: int) -> list[Record]:
    """``n`` source records of the 95/4/1 mix over ``keys`` keys (offsets 0..n-1)."""
    return list(itertools.islice(records_of_mix(keys, seed), n))


def records_of_mix(keys: int, seed: int) -> Iterator[Record]:
    """The records of ``workload``, one at a time, without end."""
    rng = random.Random(seed)
    ks = [_Key(StockKey(f"ITEM-{i:05d}", "DEPOT-A"), 0, []) for i in range(keys)]
    tkeys = [k.key.transport_key() for k in ks]
    counter = 0
    for off in itertools.count():
        ki = rng.randrange(keys)
        k = ks[ki]
        assert k.txns is not None
        roll = rng.random()
        if roll < 0.95 or len(k.txns) < 10:
            if rng.random() < 0.05:
                k.day += 1
            counter += 1
            entry = [counter, 1, k.day]
            k.txns.append(entry)
            kind, qty = "NEW", rng.randint(-40, 40)
        else:
            if roll < 0.99:
                entry = k.txns[-1 - rng.randrange(min(10, len(k.txns)))]
            else:
                entry = k.txns[rng.randrange(len(k.txns))]
            entry[1] += 1
            if roll >= 0.99 and rng.random() < 0.5:
                kind, qty = "CANCEL", 0
            else:
                kind, qty = "AMEND", rng.randint(-40, 40)
        t = Transaction(
            f"T{entry[0]}", entry[1], kind, k.key,
            ORIGIN + entry[2] * DAY + rng.randrange(DAY), qty, ORIGIN + off,
        )
        yield Record(wire.encode_transaction(t), tkeys[ki], Coordinates(SOURCE, 0, off))


def preloaded(store: PgStore, records: Sequence[Record], preload: int) -> tuple[Token, int]:
    """Claim partition 0 and process its first ``preload`` records untimed: (token, frontier)."""
    tok = store.claim(0)
    frontier = 0
    for i in range(0, preload, 10_000):
        frontier = store.process(tok, frontier, records[i:min(preload, i + 10_000)]).frontier
    return tok, frontier


def _rows_written(conn: psycopg.Connection, schema: str) -> int:
    row = conn.execute(
        "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
        " WHERE schemaname = %s",
        (schema,),
    ).fetchone()
    return int(row[0]) if row else 0


class _FoldClock:
    """Seconds spent in ``ProcessingTx.apply`` (the fold) while installed: ``with _FoldClock() as c``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._real = pg_batch.ProcessingTx.apply

    def __enter__(self) -> _FoldClock:
        real = self._real

        def apply(tx: pg_batch.ProcessingTx, records: Sequence[Record]) -> None:
            t = time.perf_counter()
            try:
                real(tx, records)
            finally:
                self.seconds += time.perf_counter() - t

        pg_batch.ProcessingTx.apply = apply  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        pg_batch.ProcessingTx.apply = self._real  # type: ignore[method-assign]


def timed_worker(
    store: PgStore, tok: Token, frontier: int, records: Sequence[Record], batch: int, ahead: int
) -> int:
    """Run the worker's step over ``records`` (from ``frontier``) until they are all committed,
    as the claimed owner ``tok`` (its key cache stays warm); returns the frontier."""
    source = MemorySource(list(records), [r.coords.offset for r in records])
    w = Worker(store, source, 0, batch_size=batch, ahead=ahead)
    w.token, w.cursor = tok, frontier
    while w.step().records:
        pass
    return w.frontier()


def one_run(
    dsn: str, schema: str, records: Sequence[Record], preload: int, batch: int, keys: int,
    run_id: str, cache: bool = True, ahead: int = AHEAD,
) -> tuple[float, float, float]:
    """(records/s, rows written per record, share of time outside fold/diff) for one run.

    The share outside ``ProcessingTx.apply`` is the database's (lock, writes, commit) as far
    as the worker waits for it: with ``ahead`` above 1 most of a commit overlaps the next fold.
    """
    cfg = bench_config(keys, f"bench-{run_id}")
    store = PgStore.open(dsn, cfg, schema=schema, cache=cache)
    admin = psycopg.connect(dsn, autocommit=True)
    try:
        tok, frontier = preloaded(store, records, preload)
        timed = records[preload:]
        store.db.connection().execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.05)
        rows0 = _rows_written(admin, schema)
        with _FoldClock() as fold:
            t0 = time.perf_counter()
            frontier = timed_worker(store, tok, frontier, timed, batch, ahead)
            dt = time.perf_counter() - t0
        compute = fold.seconds
        assert frontier == len(records), (frontier, len(records))
        store.db.connection().execute("SELECT pg_stat_force_next_flush()")
        time.sleep(0.05)
        rows = _rows_written(admin, schema) - rows0
        return len(timed) / dt, rows / len(timed), 1 - compute / dt
    finally:
        store.close()
        admin.close()


def core_rate(cfg_keys: int, records: Sequence[Record], preload: int) -> float:
    """records/s of the pure core (decide + install + envelope bytes), no database."""
    from amends_core.store.memory import MemoryStore

    cfg = bench_config(cfg_keys, "core")
    mem = MemoryStore(cfg)
    states, outputs = mem.keys, mem.outputs
    for r in records[:preload]:
        out = process.decide(cfg, r, states.__getitem__, outputs.get)
        if isinstance(out, process.Accepted):
            states[out.delta.key].install(out.delta)
            for e in out.envelopes:
                outputs[e.output_id] = e
    t0 = time.perf_counter()
    for r in records[preload:]:
        out = process.decide(cfg, r, states.__getitem__, outputs.get)
        if isinstance(out, process.Accepted):
            states[out.delta.key].install(out.delta)
            for e in out.envelopes:
                outputs[e.output_id] = e
                e.to_bytes()
    return (len(records) - preload) / (time.perf_counter() - t0)


ROOT = Path(__file__).resolve().parents[1]
PROFILED_BATCH = 10_000


def _worker_rate_in(tree: Path, batch: int) -> float:
    """records/s of ``worker, batch N`` measured by ``tree``'s own durable benchmark, one run."""
    code = collector.SNIPPET + (  # the role's collector settings, whatever that tree does
        "from benchmarks.pg_batch_bench import main\n"
        f"main(['--batch', '{batch}', '--no-cold', '--runs', '1'])\n"
    )
    out = run_in_tree(tree, code, "durable benchmark")
    m = re.search(rf"^worker, batch {batch:,}\s+([0-9,]+)", out, re.MULTILINE)
    if m is None:
        msg = f"durable benchmark in {tree} printed no 'worker, batch {batch:,}' row"
        raise RuntimeError(msg)
    return float(m.group(1).replace(",", ""))


def profile_figures(
    timed: int, baseline: Path | None, preload: int = 20_000, keys: int = 500
) -> list[Figure]:
    """Each stage's share of the worker's profiled time at batch 10,000 (and of ``baseline``'s)."""
    from benchmarks import profile_durable as prof

    cond = (
        f"cProfile own time over {timed:,} timed records at batch {PROFILED_BATCH:,}, {keys} keys,"
        f" preload {preload:,}, mix 95/4/1 (stages: benchmarks/profile_durable.py)"
    )
    trees: list[tuple[str, dict[str, float]]] = [("", prof.shares(PROFILED_BATCH, timed, preload, keys))]
    if baseline is not None:
        got = prof.shares_in(baseline, PROFILED_BATCH, timed, preload, keys)
        trees.append((f", before ({baseline.name})", got))
    return [
        figure("durable profile", f"{stage}{suffix}", [100 * got[stage]], "% of own time", cond)
        for suffix, got in trees
        for stage in prof.STAGES
    ]


def before_after(baseline: Path, runs: int) -> list[Figure]:
    """``worker, batch 10,000`` of this tree and of ``baseline``, alternating, each in its own process."""
    now: list[float] = []
    before: list[float] = []
    for i in range(runs):
        order = [(ROOT, now), (baseline, before)]
        for tree, into in order if i % 2 == 0 else order[::-1]:
            into.append(_worker_rate_in(tree, PROFILED_BATCH))
    cond = (
        f"500 keys, 1 partition, preload 20,000, mix 95/4/1, 50,000 timed records; before = checkout"
        f" {baseline.name}; each run in a fresh process, the two trees alternating"
    )
    return [
        figure("durable", f"worker, batch {PROFILED_BATCH:,}, before", before, "records/s", cond),
        figure("durable", f"worker, batch {PROFILED_BATCH:,}, now / before",
               [a / b for a, b in zip(now, before, strict=True)], "x", cond),
    ]


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds since boot: the machine busy, and each PostgreSQL process (``benchmarks.harness``'s
    readings, the same as every benchmark's)."""

    busy: float
    postgres: dict[int, float]

    @staticmethod
    def take() -> CpuSample | None:
        """A sample from Linux's /proc (None elsewhere)."""
        busy = machine_busy_s()
        if busy is None:
            return None
        postgres = {pid: t for pid in pids_named("postgres") if (t := process_cpu_s(pid)) is not None}
        return CpuSample(busy, postgres)

    def postgres_since(self, earlier: CpuSample) -> float:
        """PostgreSQL's CPU seconds between the samples (a process that exited in between is missed)."""
        return sum(t - earlier.postgres.get(pid, 0.0) for pid, t in self.postgres.items())


@dataclass(frozen=True)
class _Span:
    start: float
    end: float
    records: int
    cpu: float
    """The worker process's own CPU seconds over its timed batches."""
    first: CpuSample | None
    last: CpuSample | None


def _one_worker(args: tuple[str, str, int, int, int, str]) -> _Span:
    """One worker process of ``scaling``: its timed batches' span, records and CPU use."""
    dsn, schema, timed, preload, keys, run_id = args
    collector.settle()  # a process of its own, like a worker role
    records = workload(preload + timed, keys, seed=7)
    cfg = bench_config(keys, f"bench-scale-{run_id}")
    store = PgStore.open(dsn, cfg, schema=schema)
    try:
        tok, frontier = preloaded(store, records, preload)
        first = CpuSample.take()
        cpu, start = time.process_time(), time.time()
        frontier = timed_worker(store, tok, frontier, records[preload:], PROFILED_BATCH, AHEAD)
        end, cpu = time.time(), time.process_time() - cpu
        return _Span(start, end, timed, cpu, first, CpuSample.take())
    finally:
        store.close()


@dataclass(frozen=True)
class Scaled:
    """One scaling run: total records/s, and CPUs in use over its span (None without /proc)."""

    rate: float
    workers_cpus: float
    postgres_cpus: float | None
    machine_cpus: float | None


def scaling(processes: int, timed: int, runs: int, preload: int = 20_000, keys: int = 500) -> list[Scaled]:
    """Total records/s of ``processes`` workers at once, one partition (namespace) each.

    Each worker process preloads its own partition, then all time their batches
    concurrently; the rate is all timed records over the span from the first
    start to the last end. Over that span: the workers' own CPU seconds, and
    from /proc those of every PostgreSQL process and of the whole machine
    (other work on a shared machine included), each per second of the span:
    how many CPUs were in use, which says why two workers scale as they do.
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    dsn = dsn_from_env()
    out = []
    with scratch_schema(dsn, "bench") as schema:
        for r in range(runs):
            jobs = [(dsn, schema, timed, preload, keys, f"{processes}-{r}-{i}") for i in range(processes)]
            with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
                spans = list(pool.map(_one_worker, jobs))
            opened = min(spans, key=lambda s: s.start)
            closed = max(spans, key=lambda s: s.end)
            wall = closed.end - opened.start
            pg = machine = None
            if opened.first is not None and closed.last is not None:
                pg = closed.last.postgres_since(opened.first) / wall
                machine = (closed.last.busy - opened.first.busy) / wall
            out.append(Scaled(sum(s.records for s in spans) / wall, sum(s.cpu for s in spans) / wall, pg, machine))
    return out


def scaling_figures(timed: int, runs: int, preload: int = 20_000, keys: int = 500) -> list[Figure]:
    """Durable throughput with one and two worker processes on this machine, the ratio, and CPU use."""
    one = scaling(1, timed, runs, preload, keys)
    two = scaling(2, timed, runs, preload, keys)
    cond = (
        f"batch {PROFILED_BATCH:,}, {timed:,} timed records per worker, {keys} keys each, preload"
        f" {preload:,}, mix 95/4/1; one process and partition per worker, timed concurrently"
    )
    figs = [
        figure("durable", "all workers, 1 partition", [s.rate for s in one], "records/s", cond),
        figure("durable", "all workers, 2 partitions (2 processes)", [s.rate for s in two], "records/s", cond),
        figure("durable", "2 partitions / 1 partition", [b.rate / a.rate for a, b in zip(one, two, strict=True)],
               "x", f"{cond}; {os.cpu_count()} CPUs, PostgreSQL on the same machine"),
    ]
    cpus = f"CPU seconds per second of the timed span, of {os.cpu_count()} CPUs"
    for label, got in (("1 partition", one), ("2 partitions", two)):
        figs.append(figure("durable", f"CPUs used by the worker processes, {label}", [s.workers_cpus for s in got],
                           "CPUs", f"{cpus}; the workers' own process time"))
        pg = [s.postgres_cpus for s in got if s.postgres_cpus is not None]
        machine = [s.machine_cpus for s in got if s.machine_cpus is not None]
        if pg and machine:
            figs.append(figure("durable", f"CPUs used by PostgreSQL, {label}", pg, "CPUs",
                               f"{cpus}; every postgres process, from /proc"))
            figs.append(figure("durable", f"CPUs busy on the machine, {label}", machine, "CPUs",
                               f"{cpus}; /proc/stat, everything on the machine (it is shared)"))
    return figs


PAIRS = 6
"""Back-to-back pairs (folding ahead, one batch per step) per batch size of 1,000 or more."""
DEFAULT_PLAN = {1: 400, 100: 5_000, 1_000: 20_000, 10_000: 50_000}
TINY_PLAN = {1: 20, 100: 200, 1_000: 1_000, 10_000: 2_000}


def run(
    plan: dict[int, int] | None = None,
    runs: int = 3,
    keys: int = 500,
    preload: int = 20_000,
    dsn: str | None = None,
    cold: bool = True,
) -> list[Figure]:
    """Figures for every batch size in ``plan`` (batch size -> timed records)."""
    plan = plan or DEFAULT_PLAN
    dsn = dsn or dsn_from_env()
    figures: list[Figure] = []
    biggest = max(plan.values())
    records = workload(preload + biggest, keys, seed=7)
    cond = f"{keys} keys, 1 partition, preload {preload:,}, mix 95/4/1"
    with collector.settled():  # the worker role's collector settings
        core = [core_rate(keys, records, preload) for _ in range(runs)]
    figures.append(figure("durable", "core ceiling (no database)", core, "records/s", cond))
    variants = [(b, True) for b in sorted(plan)]
    if cold:
        variants += [(b, False) for b in sorted(plan) if b >= 1_000]
    how = f"up to {AHEAD} batches per step, each folded while the one before commits"
    with scratch_schema(dsn, "bench") as schema, collector.settled():
        for batch, cache in variants:
            n = plan[batch]
            rates, rows, db_share = [], [], []
            for r in range(runs):
                rate, per, share = one_run(
                    dsn, schema, records[: preload + n], preload, batch, keys,
                    f"{batch}-{int(cache)}-{r}", cache,
                )
                rates.append(rate)
                rows.append(per)
                db_share.append(share)
            name = f"worker, batch {batch:,}" + ("" if cache else ", no key cache")
            figures.append(
                figure("durable", name, rates, "records/s", f"{cond}, {n:,} timed records; {how}",
                       rows_per_record=statistics.median(rows),
                       db_share=statistics.median(db_share),
                       vs_core=statistics.median(rates) / statistics.median(core))
            )
        # Folding ahead against one batch per step: pairs run back to back, in alternating
        # order, so each ratio compares one machine moment (the machine is shared and noisy).
        pairs = max(runs, PAIRS)
        for batch in [b for b in sorted(plan) if b >= 1_000]:
            n = plan[batch]
            serial: list[float] = []
            ratios: list[float] = []
            for r in range(pairs):
                got: dict[int, float] = {}
                for ahead in (AHEAD, 1) if r % 2 == 0 else (1, AHEAD):
                    got[ahead] = one_run(
                        dsn, schema, records[: preload + n], preload, batch, keys,
                        f"{batch}-pair-{ahead}-{r}", True, ahead,
                    )[0]
                serial.append(got[1])
                ratios.append(got[AHEAD] / got[1])
            pair_cond = f"{cond}, {n:,} timed records; {pairs} pairs, each run back to back with the other"
            figures.append(
                figure("durable", f"worker, batch {batch:,}, one batch per step", serial, "records/s",
                       f"{pair_cond}; each commit waited for before the next fold")
            )
            figures.append(
                figure("durable", f"worker, batch {batch:,}, {AHEAD} ahead / one batch per step",
                       ratios, "x", f"{pair_cond}; ratio within each pair")
            )
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pg_batch_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny sizes; numbers are meaningless")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keys", type=int, default=500)
    p.add_argument("--preload", type=int, default=20_000)
    p.add_argument("--batch", type=int, nargs="+", help="only these batch sizes")
    p.add_argument("--no-cold", action="store_true", help="skip the no-key-cache variants")
    a = p.parse_args(argv)
    plan = dict(TINY_PLAN if a.tiny else DEFAULT_PLAN)
    if a.batch:
        plan = {b: plan.get(b, 10 * b) for b in a.batch}
    figs = run(plan, runs=1 if a.tiny else a.runs, keys=20 if a.tiny else a.keys,
               preload=200 if a.tiny else a.preload, cold=not a.no_cold)
    print(f"{'figure (records/s)':38} {'median':>9} {'min':>9} {'max':>9}"
          "  rows/rec  vs core  db share")
    for f in figs:
        x = f.extra
        rows = f"{x['rows_per_record']:.2f}" if "rows_per_record" in x else ""
        ratio = f"{x['vs_core']:.2f}" if "vs_core" in x else ""
        share = f"{x['db_share']:.0%}" if "db_share" in x else ""
        spec = "9,.2f" if f.unit == "x" else "9,.0f"
        print(f"{f.name:38} {f.median:{spec}} {f.low:{spec}} {f.high:{spec}}"
              f"  {rows:>8}  {ratio:>7}  {share:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

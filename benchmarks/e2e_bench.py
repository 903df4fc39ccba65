"""End to end with the long-running roles, on the mock cluster and on a real Kafka broker, in one run.

For each broker the same measurement runs on a fresh broker, a scratch schema
and the three roles (``amends role worker|relay|view``) as separate processes:

* latency at low load: one new record at a time (each on a new day, so it
  creates exactly one new balance row); latency is from the producer's
  delivery report to that row being visible in the PostgreSQL view;
* bulk: new records produced at once while the roles run; records/s from the
  first produce to the last row visible in the view, with the moments the
  worker and the relay had caught up (their cumulative rates);
* backlog (real broker): the same number of new records already waiting in the
  source topic when the worker starts on them (it is paused with SIGSTOP while
  the driver produces them, resumed with SIGCONT when the clock starts): the
  rate of a replay, with no producer competing for this machine's CPUs;
* bulk and backlog spread over ``SPREAD`` source partitions (real broker), one
  key and one worker, relay and view process per partition: how the pipeline
  scales with its unit of parallelism, measured right after the single
  partition's run.

Brokers: librdkafka's mock cluster (``DevBroker``, what the benchmark used so
far) and the real Apache Kafka broker (``RealBroker``: single KRaft node on
loopback, started the way the tests start it). Runs alternate between the two
(mock first, then real first, ...) so that drift in a shared machine's load
falls on both alike; ratios real/mock are taken per run, from measurements a
few seconds apart, and reported as their median.

Before/after: with a baseline checkout (``--baseline-checkout``) every run
also measures that checkout's roles (``amends role`` and ``amends provision``
run on its code, this benchmark's driver and timing on both), on a fresh
broker and schema of their own, alternating which tree goes first; the
now/before ratios are taken per run.

Where the time goes: each latency sample also records when the worker's
commit (the partition's frontier past the record) and the relay's
acknowledgement (its acknowledged sequence reaching the worker's) were first
seen, so the hops are reported as well (p50 from produce).

Where the CPU goes (real broker, Linux): around each bulk load the driver reads
the CPU time the kernel accounted to every process of the pipeline (each role,
each role's PostgreSQL backends by application name, the broker's JVM, the
driver itself with its backend, PostgreSQL's other processes) and the whole
machine's busy time, and reports them per 1,000 records. Their sum over the
machine's CPUs is the rate the pipeline could reach if every CPU were busy with
it all the time: a ceiling no tuning of waits or batch sizes can pass.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import psycopg
from psycopg import sql

from amends_core import timefmt
from amends_core.ledger import Family, OutputID, StockKey
from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.realbroker import KAFKA_VERSION, RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.roles.steps import BATCH_SIZE
from benchmarks import targets
from benchmarks.harness import (
    Figure,
    RoleProcesses,
    figure,
    in_tree_env,
    machine_busy_s,
    pids_named,
    process_cpu_s,
)

AMENDS = str(Path(sys.executable).with_name("amends"))
KEY = StockKey("LAT-ITEM", "DC-1")


def _key_config(key: StockKey, partition: int) -> dict[str, object]:
    return {"item": key.item, "location": key.location, "opening_balance": 10**12, "reorder_threshold": 0,
            "partition": partition}


CONFIG = {
    "schema_version": 1, "namespace": "bench-e2e", "source_incarnation": "bench-e2e-src", "partitions": 1,
    "origin": "2000-01-01T00:00:00Z",
    "keys": [_key_config(KEY, 0)],
}


def keys_for(partitions: int) -> list[StockKey]:
    """One key per source partition: ``KEY`` on partition 0, then one more key each."""
    return [KEY, *(StockKey(f"{KEY.item}-{p}", KEY.location) for p in range(1, partitions))]


def config_for(partitions: int) -> dict[str, object]:
    """``CONFIG`` with ``partitions`` source partitions and ``keys_for(partitions)``, key p on partition p."""
    if partitions == 1:
        return CONFIG
    return dict(CONFIG, partitions=partitions, keys=[_key_config(k, p) for p, k in enumerate(keys_for(partitions))])


ORIGIN = timefmt.parse_rfc3339("2000-01-01T00:00:00Z")
ORIGIN_DAY = ORIGIN // timefmt.NS_PER_DAY
SOURCE, OUTPUT = "amends-source", "amends-output"
BROKERS = ("mock", "real")
BROKER_TEXT = {
    "mock": "librdkafka mock cluster (amends broker)",
    "real": (
        f"Apache Kafka {KAFKA_VERSION}, one KRaft node on loopback as the tests run it"
        " (C1 JIT only, SerialGC, 512 MiB heap)"
    ),
}
BATCH: int | None = None
"""``--batch-size`` of the roles; None: each tree's roles run with their own default."""
MOCK_PARTITION_BYTES = 5 * 1024 * 1024
"""The mock cluster keeps at most about this much per partition and drops older records."""
GROUP = "end to end"


def value(i: int, key: StockKey = KEY) -> bytes:
    """The ``i``-th new record of ``key``: day ``i`` after the origin, one new balance row."""
    return json.dumps({
        "txn_id": f"T{i}", "revision": 1, "kind": "NEW",
        "stock_key": {"item": key.item, "location": key.location},
        "valid_time": timefmt.format_instant(ORIGIN + i * timefmt.NS_PER_DAY), "qty": -1,
        "source_time": "2000-01-01T00:00:00Z",
    }, separators=(",", ":")).encode()


def _batch_text(*, before: bool = False) -> str:
    if BATCH is not None:
        return f"batch size {BATCH:,}"
    if before:
        return "the baseline roles' own default batch size (1,000 in every commit before 5,000 became the default)"
    return f"the roles' default largest batch ({BATCH_SIZE:,}; a step takes what is there up to it)"


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


@dataclass(frozen=True)
class Drain:
    """A backlog already in the source topic, drained from the worker's resume."""

    worker_s: float
    relay_s: float
    view_s: float
    cpu_ms: dict[str, float] = field(default_factory=dict)
    busy_cpus: float = 0.0


@dataclass(frozen=True)
class Measured:
    """One run on one broker."""

    latency_ms: list[float]
    bulk: int
    worker_s: float
    """From the first bulk produce until the worker's frontier reached the end."""
    relay_s: float
    """... until the relay had acknowledged every outbox row."""
    view_s: float
    """... until the last record's balance row was visible in the view."""
    load: tuple[float, float] = (0.0, 0.0)
    """The machine's 1-minute load average when the run started and when it ended."""
    hops_ms: list[tuple[float, float]] = field(default_factory=list)
    """Per latency sample: ms until the worker's commit and the relay's acknowledgement were seen."""
    cpu_ms: dict[str, float] = field(default_factory=dict)
    """CPU ms per 1,000 bulk records by process (``CPU_PARTS``); empty where not measured."""
    busy_cpus: float = 0.0
    """The machine's CPUs busy on average during the bulk load (0 where not measured)."""
    backlog: Drain | None = None
    """The backlog drain (real broker only; None where not measured)."""
    partitions: int = 1
    """Source partitions, each with a worker, a relay and a view process of its own when above 1."""

    def p(self, q: float) -> float:
        return statistics.median(self.latency_ms) if q == 0.5 else percentile(self.latency_ms, q)


@contextmanager
def _broker(kind: str, tmp: Path, partitions: int = 1) -> Iterator[tuple[str, dict[str, str], int | None]]:
    """(bootstrap, environment, process ID of the real broker's JVM or None) of a fresh broker
    of ``kind``; topics exist or provision creates them."""
    if kind == "mock":
        with DevBroker(topics={SOURCE: partitions, OUTPUT: partitions}, workdir=tmp) as dev:
            yield dev.bootstrap, dict(dev.env()), None
        return
    real = RealBroker(tmp / "kafka").start()
    try:
        yield real.bootstrap, real.env(), real.pid
    finally:
        real.stop()


CPU_PARTS = (
    "worker", "worker's PostgreSQL backends", "relay", "relay's PostgreSQL backends",
    "view", "view's PostgreSQL backends", "Kafka broker", "driver and its backend",
    "PostgreSQL, other processes",
)
"""Where a bulk load's CPU time is accounted, one row each."""
_ROLES = ("worker", "relay", "view")
@dataclass(frozen=True)
class _CpuAccount:
    """Which process is which part of the pipeline, for ``CPU_PARTS``."""

    conn: psycopg.Connection
    roles: RoleProcesses
    broker_pid: int

    def snapshot(self) -> tuple[dict[int, tuple[str, float]], float] | None:
        busy = machine_busy_s()
        if busy is None:
            return None
        parts = {pid: r for r in _ROLES for pid in self.roles.pids(r)}
        parts[self.broker_pid] = "Kafka broker"
        parts[os.getpid()] = parts[self.conn.info.backend_pid] = "driver and its backend"
        for pid, app in self.conn.execute("SELECT pid, application_name FROM pg_stat_activity"):
            role = next((r for r in _ROLES if (app or "").startswith(f"amends-{r}")), None)
            if role is not None and pid not in parts:
                parts[pid] = f"{role}'s PostgreSQL backends"
        local = set(pids_named("postgres"))
        for pid in local:
            parts.setdefault(pid, "PostgreSQL, other processes")
        out: dict[int, tuple[str, float]] = {}
        for pid, part in parts.items():
            if part.endswith("PostgreSQL backends") and pid not in local:
                continue  # a backend of a server on another machine: its pid means nothing here
            t = process_cpu_s(pid)
            if t is not None:
                out[pid] = (part, t)
        return out, busy


def _cpu_used(
    a: tuple[dict[int, tuple[str, float]], float] | None,
    b: tuple[dict[int, tuple[str, float]], float] | None,
    bulk: int,
    wall_s: float,
) -> tuple[dict[str, float], float]:
    """CPU ms per 1,000 records by part between two snapshots, and the machine's busy CPUs."""
    if a is None or b is None:
        return {}, 0.0
    per = dict.fromkeys(CPU_PARTS, 0.0)
    for pid, (part, t) in b[0].items():
        per[part] += t - a[0].get(pid, (part, 0.0))[1]  # a process started meanwhile: all of it
    return {k: v * 1e6 / bulk for k, v in per.items()}, (b[1] - a[1]) / wall_s


def measure(
    kind: str, samples: int, bulk: int, warmup: int = 5, tree: Path | None = None, partitions: int = 1
) -> Measured:
    """One run on a fresh broker of ``kind`` ("mock" or "real") and a fresh schema.

    ``tree``: run the roles (and provision) of that checkout instead of this one's.
    ``partitions`` above 1: that many source partitions, one key and one process of each
    role per partition; the bulk is spread evenly over them (latency stays on partition 0).
    """
    load0 = os.getloadavg()[0]
    m = _measure(kind, samples, bulk, warmup, tree, partitions)
    return replace(m, load=(load0, os.getloadavg()[0]))


def _measure(kind: str, samples: int, bulk: int, warmup: int, tree: Path | None, partitions: int) -> Measured:
    dsn = dsn_from_env()
    # another checkout's provision migrates the schema itself: its code refuses newer migrations
    with tempfile.TemporaryDirectory() as tmp_s, scratch_schema(dsn, "bench_e2e", migrated=tree is None) as schema:
        tmp = Path(tmp_s)
        with _broker(kind, tmp, partitions) as (bootstrap, benv, broker_pid):
            cfg_path = tmp / "config.json"
            cfg_path.write_text(json.dumps(config_for(partitions)))
            env = dict(benv, AMENDS_PG_DSN=dsn, AMENDS_PG_SCHEMA=schema)
            if tree is not None:
                env = in_tree_env(tree, env)
            subprocess.run(
                [AMENDS, "provision", "--config", str(cfg_path), "--source-topic", SOURCE, "--output-topic", OUTPUT],
                env=env, check=True, capture_output=True,
            )
            roles = RoleProcesses(env, cfg_path, tmp, BATCH, None if partitions == 1 else partitions)
            try:
                return _drive(bootstrap, dsn, schema, roles, samples, bulk, warmup, broker_pid, partitions)
            finally:
                roles.stop()


def _drive(
    bootstrap: str, dsn: str, schema: str, roles: RoleProcesses, samples: int, bulk: int, warmup: int,
    broker_pid: int | None = None, partitions: int = 1,
) -> Measured:
    """Both measurements; the producer is gone when this returns (before the broker stops).

    With the real broker's ``broker_pid`` the bulk load's CPU is accounted by process too.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        w = Writer(bootstrap, **{"linger.ms": 0})
        lat, hops = _latency(w, conn, roles, samples, warmup)
        cpu = None if broker_pid is None else _CpuAccount(conn, roles, broker_pid)
        keys = keys_for(partitions)
        start = samples + warmup
        if partitions > 1:  # the latency samples warmed partition 0's roles only: warm every partition's
            _bulk(w, conn, roles, start, warmup * partitions, None, keys)
            start += warmup * partitions
        worker_s, relay_s, view_s, cpu_ms, busy = _bulk(w, conn, roles, start, bulk, cpu, keys)
        backlog = None
        if cpu is not None:  # the mock cluster would not retain a second bulk (MOCK_PARTITION_BYTES)
            backlog = Drain(*_bulk(w, conn, roles, start + bulk, bulk, cpu, keys, paused=True))
    return Measured(
        lat, bulk, worker_s, relay_s, view_s, hops_ms=hops, cpu_ms=cpu_ms, busy_cpus=busy, backlog=backlog,
        partitions=partitions,
    )


def _ns_id(conn: psycopg.Connection) -> int:
    """The benchmark's one namespace (its scratch schema holds no other)."""
    row = conn.execute("SELECT ns_id FROM partitions LIMIT 1").fetchone()
    assert row is not None
    return int(row[0])


_PROGRESS = (
    "SELECT p.partition, p.next_offset, p.last_sequence, r.acked_sequence,"
    " (SELECT count(*) FROM view_rows v WHERE v.ns_id = %s AND v.output_id = ANY(%s))"
    " FROM partitions p LEFT JOIN relay_progress r USING (ns_id, partition)"
)
"""Per source partition: the worker's frontier and last outbox sequence, the relay's
acknowledged sequence; and how many of the given rows the view holds (looked up by the
whole primary key, ``ns_id`` a constant: correlated with ``p.ns_id`` the planner scanned
the whole table on every poll)."""


def _latency(
    w: Writer, conn: psycopg.Connection, roles: RoleProcesses, samples: int, warmup: int
) -> tuple[list[float], list[tuple[float, float]]]:
    """Latencies (ms) and, per sample, when the worker's commit and the relay's acknowledgement
    were first seen (ms after the same start): where the time goes, hop by hop."""
    lat: list[float] = []
    hops: list[tuple[float, float]] = []
    ns_id = _ns_id(conn)
    for i in range(samples + warmup):
        w.delivered.clear()
        w.produce(SOURCE, 0, value(i), KEY.transport_key())
        w.flush()
        t0 = time.perf_counter()
        offset = w.delivered[-1][1]
        oid = OutputID(str(CONFIG["namespace"]), Family.BALANCE, KEY, ORIGIN_DAY + i).encoded
        worker_ms = relay_ms = None
        sequence = 0
        while True:
            rows = conn.execute(_PROGRESS, (ns_id, [oid])).fetchall()
            _, nxt, last_seq, acked, seen = next(r for r in rows if r[0] == 0)  # the samples' partition
            now = (time.perf_counter() - t0) * 1000
            if worker_ms is None and nxt > offset:
                worker_ms, sequence = now, last_seq
            if worker_ms is not None and relay_ms is None and (acked or 0) >= sequence:
                relay_ms = now
            if seen:
                break
            if now > 30_000:
                roles.check()
                msg = f"record {i} not visible after 30 s"
                raise TimeoutError(msg)
            time.sleep(0.001)
        if i >= warmup:
            lat.append(now)
            hops.append((now if worker_ms is None else worker_ms, now if relay_ms is None else relay_ms))
    return lat, hops


def _bulk(
    w: Writer, conn: psycopg.Connection, roles: RoleProcesses, start: int, bulk: int,
    cpu: _CpuAccount | None = None, keys: Sequence[StockKey] = (KEY,), *, paused: bool = False,
) -> tuple[float, float, float, dict[str, float], float]:
    """Seconds until the workers, the relays and the views had everything; CPU by part, busy CPUs.

    Record ``start + j`` goes to partition ``j % len(keys)`` with that partition's key.
    ``paused``: the workers are stopped (SIGSTOP) while the records are produced and
    the clock starts when they resume (SIGCONT): a backlog drained.
    """
    w.delivered.clear()
    n = len(keys)
    # Encoded before the clock starts: the run times the pipeline, not the driver's JSON.
    values = [(j % n, value(start + j, keys[j % n])) for j in range(bulk)]
    tkeys = [k.transport_key() for k in keys]
    workers = roles.pids("worker")
    ns_id = _ns_id(conn)
    if bulk < n:
        msg = f"a bulk of {bulk} cannot reach all {n} partitions"
        raise ValueError(msg)
    last = [  # the row of each partition's last record: j = p + n * ((bulk - 1 - p) // n)
        OutputID(str(CONFIG["namespace"]), Family.BALANCE, keys[p], ORIGIN_DAY + start + p + n * ((bulk - 1 - p) // n)).encoded
        for p in range(n)
    ]
    if paused:
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
    try:
        if not paused:
            before = None if cpu is None else cpu.snapshot()
            t0 = time.perf_counter()
        for p, v in values:
            w.produce(SOURCE, p, v, tkeys[p])
        w.flush()
    finally:
        if paused:
            before = None if cpu is None else cpu.snapshot()
            t0 = time.perf_counter()
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
    end: dict[int, int] = {}
    for p, off in w.delivered:
        end[p] = max(end.get(p, 0), off + 1)
    worker_s = relay_s = None
    while True:
        # One statement per poll: the driver's own CPU competes with the pipeline for the machine.
        rows = conn.execute(_PROGRESS, (ns_id, last)).fetchall()
        now = time.perf_counter() - t0
        if worker_s is None and all(nxt >= end.get(p, 0) for p, nxt, _, _, _ in rows):
            worker_s = now
        if worker_s is not None and relay_s is None and all((acked or 0) >= seq for _, _, seq, acked, _ in rows):
            relay_s = now
        if worker_s is not None and relay_s is not None and rows and rows[0][4] == n:
            after = None if cpu is None else cpu.snapshot()
            return worker_s, relay_s, now, *_cpu_used(before, after, bulk, now)
        if now > 600:
            roles.check()
            msg = "the bulk load was not visible after 600 s"
            raise TimeoutError(msg)
        # Coarse while the workers still read (their moment to 20 ms, about 1% of a bulk), fine
        # for the end: polling every 5 ms throughout took ~5% of a CPU from the pipeline.
        time.sleep(0.02 if worker_s is None else 0.005)


SPREAD = targets.SPREAD
"""Source partitions of the partitioned bulk (real broker): one per CPU of the machines we measure on."""


def run(
    samples: int = 200, bulk: int = 20_000, runs: int = 3, warmup: int = 5, baseline: Path | None = None
) -> list[Figure]:
    """``runs`` alternating runs on each broker; figures are medians over runs (range min – max).

    With ``baseline`` each run measures that checkout's roles too (see the module text).
    Each run also measures the bulk spread over ``SPREAD`` source partitions on the real
    broker, right after the single partition's real-broker run.
    """
    # value, key and record overhead; the mock keeps ~4.5 MiB of small records (docs/devbroker.md)
    size = sum(len(value(i)) + 30 for i in range(samples + warmup + bulk))
    if size > 0.9 * MOCK_PARTITION_BYTES:
        msg = (
            f"{samples + warmup + bulk:,} records (~{size / 2**20:.1f} MiB) would not stay retained on the"
            f" mock cluster (about {MOCK_PARTITION_BYTES / 2**20:.0f} MiB per partition): the worker would"
            " stop with SourceLost; use a smaller bulk"
        )
        raise ValueError(msg)
    got: dict[str, list[Measured]] = {k: [] for k in BROKERS}
    before: dict[str, list[Measured]] = {k: [] for k in BROKERS}
    spread: list[Measured] = []
    for n in range(runs):
        trees: list[tuple[Path | None, dict[str, list[Measured]]]] = [(None, got)]
        if baseline is not None:
            trees = trees + [(baseline, before)] if n % 2 == 0 else [(baseline, before), *trees]
        for kind in BROKERS if n % 2 == 0 else BROKERS[::-1]:
            for tree, into in trees:
                into[kind].append(measure(kind, samples, bulk, warmup, tree))
            if kind == "real":
                spread.append(measure("real", 0, bulk, warmup, partitions=SPREAD))
    out = figures(got, samples, bulk, warmup)
    out += partition_figures(got["real"], spread, bulk)
    if baseline is not None:
        out += before_after(got, before, baseline, samples, bulk, warmup)
    return out


def figures(got: dict[str, list[Measured]], samples: int, bulk: int, warmup: int) -> list[Figure]:
    """Rows for each metric: mock, real, and the real/mock ratio of the same runs."""
    runs = len(got["mock"])
    same = f"per run, real and mock measured back to back ({runs} run{'s' * (runs != 1)})"
    loads = [x for ms in got.values() for m in ms for x in m.load]
    note = (
        f"{len(BROKERS)} brokers x {runs} run{'s' * (runs != 1)}, alternating which broker goes first."
        f" The machine ({os.cpu_count()} CPUs) was shared: its 1-minute load average was"
        f" {min(loads):.1f} – {max(loads):.1f} during these runs, so absolute figures are noisy"
        " and inflated; read the real/mock ratios, taken from runs a few seconds apart."
    )
    per_run = f"{samples} single records per run after {warmup} warm-up records"
    out: list[Figure] = []
    for q, label in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        for kind in BROKERS:
            out.append(figure(
                GROUP, f"produce -> view visible, {label} (roles, {kind} broker)",
                [m.p(q) for m in got[kind]], "ms",
                f"{per_run}, roles as processes, {BROKER_TEXT[kind]}, local PostgreSQL",
            ))
        out.append(figure(
            GROUP, f"real / mock, {label} latency", [r.p(q) / m.p(q) for r, m in zip(got["real"], got["mock"], strict=True)],
            "x", same, **({"note": note} if q == 0.5 else {}),
        ))
    for kind in BROKERS:
        ms = got[kind]
        out.append(figure(
            GROUP, f"bulk records through worker, relay and view ({kind} broker)",
            [bulk / m.view_s for m in ms], "records/s",
            f"{bulk:,} new records produced at once (one new balance each), {_batch_text()},"
            f" first produce to last row visible, {BROKER_TEXT[kind]}",
            worker_rps=statistics.median(bulk / m.worker_s for m in ms),
            relay_rps=statistics.median(bulk / m.relay_s for m in ms),
        ))
    out.append(figure(
        GROUP, "real / mock, bulk records/s",
        [m.view_s / r.view_s for r, m in zip(got["real"], got["mock"], strict=True)],
        "x", same,
    ))
    out += cpu_figures(got["real"], bulk)
    out += backlog_figures(got["real"], bulk)
    for kind in BROKERS:
        if all(m.hops_ms for m in got[kind]):
            for i, hop in enumerate(("worker's commit", "relay's acknowledgement")):
                out.append(figure(
                    GROUP, f"produce -> {hop} seen, p50 (roles, {kind} broker)",
                    [statistics.median(h[i] for h in m.hops_ms) for m in got[kind]], "ms",
                    f"{per_run}: where the latency goes (the view's row above is the whole way)",
                ))
    return out


def cpu_figures(real: list[Measured], bulk: int) -> list[Figure]:
    """Where the bulk load's CPU went on the real broker, and the ceiling it sets (see the module text)."""
    if not real or not all(m.cpu_ms for m in real):
        return []
    cond = (
        f"{bulk:,} new records, first produce to last row visible, {BROKER_TEXT['real']};"
        " CPU time the kernel accounted to the processes, per 1,000 records"
    )
    out: list[Figure] = []
    for part in CPU_PARTS:
        xs = [m.cpu_ms[part] for m in real]
        if min(xs) > 0:  # below the kernel's accounting tick in some run: counted in the sum only
            out.append(figure(GROUP, f"bulk CPU per 1,000 records: {part} (real broker)", xs, "ms", cond))
    whole = f"{cond}; every row above plus any too small to list"
    return out + _whole("bulk", [m.cpu_ms for m in real], [m.busy_cpus for m in real], whole)


def _whole(what: str, cpu: list[dict[str, float]], busy: list[float], cond: str) -> list[Figure]:
    """For ``what`` ("bulk", "backlog"): the whole pipeline's CPU per 1,000 records, the ceiling
    that sets on this machine, and the CPUs the machine kept busy."""
    ncpu = os.cpu_count() or 1
    out: list[Figure] = []
    totals = [sum(c.values()) for c in cpu]
    if min(totals) > 0:
        out.append(figure(
            GROUP, f"{what} CPU per 1,000 records: the whole pipeline (real broker)", totals, "ms", cond,
            worker_ms=statistics.median(c["worker"] for c in cpu),
        ))
        out.append(figure(
            GROUP, f"{what} ceiling with every CPU busy (real broker)", [ncpu * 1e6 / t for t in totals], "records/s",
            f"{ncpu} CPUs over the whole pipeline's CPU time per record: what these processes could reach"
            " if every CPU worked for them all the time, whatever their waits and batch sizes",
        ))
    if min(busy) > 0:
        out.append(figure(
            GROUP, f"{what}: CPUs busy, whole machine (real broker)", busy, "CPUs",
            f"of {ncpu}: the kernel's busy time (user, system, interrupts) over the wall time of the {what}",
        ))
    return out


def backlog_figures(real: list[Measured], bulk: int) -> list[Figure]:
    """The backlog drain on the real broker: its rate, its CPU per record, the CPUs it kept busy."""
    drains = [m.backlog for m in real]
    if not drains or any(d is None for d in drains):
        return []
    ds = [d for d in drains if d is not None]
    cond = (
        f"{bulk:,} new records (one new balance each) already in the source topic, produced while the"
        f" worker was paused (SIGSTOP), from its resume (SIGCONT) to the last row visible, {_batch_text()},"
        f" {BROKER_TEXT['real']}: a replay, with no producer on this machine"
    )
    out = [figure(
        GROUP, "backlog drained through worker, relay and view (real broker)",
        [bulk / d.view_s for d in ds], "records/s", cond,
        worker_rps=statistics.median(bulk / d.worker_s for d in ds),
        relay_rps=statistics.median(bulk / d.relay_s for d in ds),
    )]
    return out + _whole(
        "backlog", [d.cpu_ms for d in ds], [d.busy_cpus for d in ds],
        f"{bulk:,} records drained; CPU time the kernel accounted to every process of the pipeline, as for the bulk",
    )


def partition_figures(one: list[Measured], spread: list[Measured], bulk: int) -> list[Figure]:
    """The bulk and the backlog spread over several source partitions (real broker), beside the
    single partition of the same runs."""
    if not spread:
        return []
    n = spread[0].partitions
    cond = (
        f"{bulk:,} new records spread evenly over {n} source partitions (one key each), one worker,"
        f" relay and view process per partition, {_batch_text()}, first produce to last row visible,"
        f" {BROKER_TEXT['real']}"
    )
    out = [figure(
        GROUP, f"bulk records through worker, relay and view, {n} partitions (real broker)",
        [bulk / m.view_s for m in spread], "records/s", cond,
        worker_rps=statistics.median(bulk / m.worker_s for m in spread),
        relay_rps=statistics.median(bulk / m.relay_s for m in spread),
    )]
    if len(one) == len(spread):
        out.append(figure(
            GROUP, f"{n} partitions / 1 partition, bulk records/s (real broker)",
            [a.view_s / b.view_s for a, b in zip(one, spread, strict=True)], "x",
            "per run, the single partition and the spread measured back to back",
        ))
    drains = [m.backlog for m in spread]
    if all(d is not None for d in drains):
        ds = [d for d in drains if d is not None]
        out.append(figure(
            GROUP, f"backlog drained through worker, relay and view, {n} partitions (real broker)",
            [bulk / d.view_s for d in ds], "records/s",
            f"{bulk:,} records waiting in {n} source partitions, every worker paused (SIGSTOP) while they"
            " were produced, from their resume to the last row visible",
            worker_rps=statistics.median(bulk / d.worker_s for d in ds),
        ))
    if all(m.cpu_ms for m in spread):
        out += _whole(
            f"bulk over {n} partitions", [m.cpu_ms for m in spread], [m.busy_cpus for m in spread],
            f"{cond}; CPU time the kernel accounted to every process of the pipeline, per 1,000 records",
        )
    return out


def before_after(
    got: dict[str, list[Measured]], before: dict[str, list[Measured]], baseline: Path,
    samples: int, bulk: int, warmup: int,
) -> list[Figure]:
    """The baseline checkout's rows and the now/before ratios of the same runs."""
    cond = (
        f"{samples} single records per run after {warmup} warm-up records; before = the roles of checkout"
        f" {baseline.name}, measured in the same runs by the same driver, the two trees alternating"
    )
    out: list[Figure] = []
    for kind in BROKERS:
        now, old = got[kind], before[kind]
        out.append(figure(
            GROUP, f"produce -> view visible, p50 (roles, {kind} broker), before", [m.p(0.5) for m in old],
            "ms", f"{cond}, {BROKER_TEXT[kind]}",
            p95=statistics.median(m.p(0.95) for m in old), p99=statistics.median(m.p(0.99) for m in old),
        ))
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            out.append(figure(
                GROUP, f"now / before, {label} latency ({kind} broker)",
                [a.p(q) / b.p(q) for a, b in zip(now, old, strict=True)], "x", cond,
            ))
        out.append(figure(
            GROUP, f"bulk records through worker, relay and view ({kind} broker), before",
            [bulk / m.view_s for m in old], "records/s", f"{bulk:,} new records, {_batch_text(before=True)}; {cond}",
            worker_rps=statistics.median(bulk / m.worker_s for m in old),
            relay_rps=statistics.median(bulk / m.relay_s for m in old),
        ))
        out.append(figure(
            GROUP, f"now / before, bulk records/s ({kind} broker)",
            [b.view_s / a.view_s for a, b in zip(now, old, strict=True)], "x", cond,
        ))
    return out


if __name__ == "__main__":
    for f in run():
        print(f.row())

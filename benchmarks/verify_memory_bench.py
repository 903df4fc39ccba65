"""``amends verify`` over millions of source records: peak memory (RSS), now and before.

Issue 14 asks that verification over 5 million source records stays under a
stated memory bound. Since commit e115d53 verification reads and recomputes one
source partition at a time (``compute_by_partition``); before it (9aee8a1) it
read the whole source topic into memory first. This benchmark measures both on
the same topic and database:

1. a generated history (``oracle_bench.generate``: 4 partitions, 5,000 keys;
   new movements, amendments, cancellations, re-deliveries, a few same-revision
   rivals, malformed values, 5% non-canonical JSON layouts) is produced to the
   source topic of a real Kafka broker (``RealBroker``, as the other benchmarks
   and the tests start it) with the project's idempotent ``Writer``;
2. the real roles (``amends role worker|relay|view`` as processes) bring the
   scratch PostgreSQL schema to a complete boundary: worker frontier at the
   source end, outbox acknowledged, view frontier at the output end. Every
   movement lies on the origin's day, so each record changes one close (one
   envelope through relay and view, plus an alert when it crosses the reorder
   threshold) and the pipeline's output volume follows the record count; a
   history spread over many days would repair every later close per record;
3. ``amends verify`` runs as a subprocess under a small launcher process that
   reports its own ``RUSAGE_CHILDREN`` peak RSS (``ru_maxrss``, so no other
   child of the benchmark counts), its wall time and the report's status line;
4. with ``--baseline-checkout PATH`` (a checkout of 9aee8a1, or any other
   commit with the same migrations), the same ``verify`` runs from that checkout
   (``PYTHONPATH``), against the same topic and schema, and the ratio is given.

When processing does not reach the end within ``process_timeout`` seconds, the
roles are stopped and ``verify`` is still measured: it reads and recomputes the
whole source topic either way, but reports ``INCOMPLETE`` and compares nothing;
the figures' names then say so.

    python -m benchmarks.verify_memory_bench --records 5000000 --baseline-checkout /tmp/vm_old
    python -m benchmarks.run --only verify-memory --verify-records 5000000 --baseline-checkout /tmp/vm_old
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from amends_core import timefmt, wire
from amends_core.ledger import Config
from amends_pipeline.kafka.realbroker import KAFKA_VERSION, RealBroker
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.migrate import scratch_schema
from benchmarks.harness import Figure, RoleProcesses, figure
from benchmarks.oracle_bench import bench_config, generate

AMENDS = str(Path(sys.executable).with_name("amends"))
GROUP = "verify memory"
DEFAULT_RECORDS = 5_000_000
TINY_RECORDS = 20_000
KEYS = 5_000
"""Keys of the generated history (10,000 would make a configuration above the 1 MiB limit)."""
PARTITIONS = 4
BATCH = 10_000
"""Batch size of the three roles (the worker's batches are also capped at 16 MiB)."""
SEED = 2
"""``generate``'s seed 1 fails with 5,000 keys (a re-delivery drawn before any live record: IndexError)."""
NAMESPACE = "vmbench_ns"
SOURCE, OUTPUT = "vmbench_source", "vmbench_output"
PROCESS_TIMEOUT = 2700.0
"""Seconds the roles get to reach a complete boundary before verify is measured anyway."""

LAUNCHER = """\
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
out = p.stdout.decode(errors="replace")
print(json.dumps({
    "maxrss_kib": ru.ru_maxrss, "wall_s": wall, "rc": p.returncode,
    "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
    "stdout": out[:4000], "stderr": p.stderr.decode(errors="replace")[-2000:],
}))
"""
"""Runs the command given as arguments and prints its peak RSS (KiB on Linux), wall time and output.

A fresh process, so ``RUSAGE_CHILDREN`` covers the measured command (and its
own children) only, never the roles or the broker the benchmark started."""

OLD_CLI = "import sys; from amends_pipeline.cli import main; sys.argv[0] = 'amends'; sys.exit(main())"
"""``amends`` from whatever ``amends_pipeline`` is first on the path (the baseline checkout)."""


def log(msg: str) -> None:
    print(f"[verify-memory {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def config_document(cfg: Config) -> dict[str, Any]:
    return {
        "schema_version": cfg.schema_version, "namespace": cfg.namespace,
        "source_incarnation": cfg.source_incarnation, "partitions": cfg.partitions,
        "origin": timefmt.format_instant(cfg.origin_ns),
        "keys": [
            {
                "item": kc.key.item, "location": kc.key.location, "opening_balance": kc.opening_balance,
                "reorder_threshold": kc.reorder_threshold, "partition": kc.partition,
            }
            for kc in cfg.keys
        ],
    }


@dataclass(frozen=True)
class Loaded:
    records: int
    """Messages produced to the source topic (generated records, re-deliveries and malformed ones)."""
    generate_s: float
    produce_s: float


def produce(bootstrap: str, records: int, keys: int, partitions: int, cfg_path: Path) -> Loaded:
    """Generate the history and produce every record (the history is dropped as it goes)."""
    t0 = time.perf_counter()
    cfg, by_partition = generate(records, keys=keys, partitions=partitions, days=1, seed=SEED)
    cfg = dataclasses.replace(cfg, namespace=NAMESPACE).validate()
    if wire.decode_config(cfg_path.read_bytes()).digest() != cfg.digest():
        msg = "the generated history's configuration differs from the provisioned one"
        raise RuntimeError(msg)
    generate_s = time.perf_counter() - t0
    total = sum(len(v) for v in by_partition.values())
    log(f"generated {total:,} records in {generate_s:.0f}s; producing")
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    w = Writer(bootstrap, **{"linger.ms": 20, "batch.size": 1_000_000})
    t1 = time.perf_counter()
    for p, recs in by_partition.items():
        for r in recs:
            w.produce_raw(SOURCE, p, r.value, r.key, delivered)
        recs.clear()
    w.flush(600)
    produce_s = time.perf_counter() - t1
    if failures:
        msg = f"{len(failures)} records were not delivered, the first: {failures[0]}"
        raise RuntimeError(msg)
    log(f"produced {total:,} records in {produce_s:.0f}s ({total / produce_s:,.0f} records/s)")
    return Loaded(total, generate_s, produce_s)




def _outbox_rows(conn: psycopg.Connection[Any]) -> int:
    """Outbox rows written so far, over every partition."""
    row = conn.execute("SELECT coalesce(sum(last_sequence), 0) FROM partitions").fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class Processed:
    complete: bool
    seconds: float
    worker_s: float | None
    """Until every source partition's worker frontier reached the source end (None: not reached)."""
    outbox_rows: int
    consumed: int = 0
    """Source offsets the worker had passed when processing ended."""
    source_end: int = 0
    """Source offsets in all (the sum of the partitions' high watermarks)."""
    loads: tuple[float, ...] = ()
    """The machine's 1-minute load average, sampled while the roles ran."""


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    with Reader(bootstrap, topic) as r:
        return {p: r.watermarks(p).high for p in range(partitions)}


def process(
    bootstrap: str, env: dict[str, str], dsn: str, schema: str, cfg: Path, tmp: Path,
    partitions: int, timeout: float,
) -> Processed:
    """Run the roles until the boundary is complete (or ``timeout``), then stop them."""
    source_end = _ends(bootstrap, SOURCE, partitions)
    roles = RoleProcesses(env, cfg, tmp, BATCH)
    t0 = time.perf_counter()
    worker_s: float | None = None
    last_log = 0.0
    loads: list[float] = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            while True:
                now = time.perf_counter() - t0
                rows = conn.execute(
                    "SELECT p.partition, p.next_offset, p.last_sequence, coalesce(r.acked_sequence, 0)"
                    " FROM partitions p LEFT JOIN relay_progress r USING (ns_id, partition)"
                ).fetchall()
                frontier = {int(r[0]): int(r[1]) for r in rows}
                done_worker = len(frontier) == partitions and all(
                    frontier[p] >= source_end[p] for p in range(partitions)
                )
                done_relay = done_worker and all(int(r[3]) >= int(r[2]) for r in rows)
                if done_worker and worker_s is None:
                    worker_s = now
                    log(f"worker reached the source end after {now:.0f}s")
                view_front: dict[int, int] = {
                    int(r[0]): int(r[1])
                    for r in conn.execute("SELECT partition, next_offset FROM view_progress").fetchall()
                }
                if done_relay:
                    out_end = _ends(bootstrap, OUTPUT, partitions)
                    if all(view_front.get(p, 0) >= out_end[p] for p in range(partitions)):
                        sent = _outbox_rows(conn)
                        log(f"complete boundary after {now:.0f}s ({sent:,} outbox rows)")
                        ends = sum(source_end.values())
                        return Processed(True, now, worker_s, sent, ends, ends, tuple(loads))
                if now - last_log >= 30:
                    last_log = now
                    loads.append(os.getloadavg()[0])
                    consumed = sum(frontier.values())
                    log(
                        f"{now:.0f}s: worker at {consumed:,} of {sum(source_end.values()):,} source offsets"
                        f" ({consumed / max(now, 1e-9):,.0f}/s); relay acked"
                        f" {sum(int(r[3]) for r in rows):,} of {sum(int(r[2]) for r in rows):,};"
                        f" view at {sum(int(v) for v in view_front.values()):,}; load {os.getloadavg()[0]:.1f}"
                    )
                if now > timeout:
                    sent = _outbox_rows(conn)
                    log(f"processing did not complete within {timeout:.0f}s; measuring verify anyway")
                    return Processed(
                        False, now, worker_s, sent, sum(frontier.values()), sum(source_end.values()), tuple(loads)
                    )
                roles.check()
                time.sleep(1.0 if now > 10 else 0.2)
    finally:
        roles.stop()


@dataclass(frozen=True)
class VerifyRun:
    which: str
    maxrss_mib: float
    wall_s: float
    status: str
    summary: str
    """The report's ``compared ...`` line."""
    load: tuple[float, float]


STATUS_LINE = re.compile(r"^verification (\w+):", re.M)


def measure_verify(which: str, env: dict[str, str], cfg: Path, checkout: Path | None) -> VerifyRun:
    """One ``amends verify`` under the launcher: current code, or the code of ``checkout``."""
    args = ["verify", "--config", str(cfg), "--max-rows", "3"]
    if checkout is None:
        cmd, cwd, run_env = [AMENDS, *args], None, env
    else:
        cmd = [sys.executable, "-c", OLD_CLI, *args]
        cwd, run_env = str(checkout), dict(env, PYTHONPATH=str(checkout))
        where = subprocess.run(
            [sys.executable, "-c", "import amends_pipeline, amends_core; print(amends_pipeline.__file__);"
             " print(amends_core.__file__)"],
            env=run_env, cwd=cwd, capture_output=True, text=True, check=True,
        ).stdout.split()
        if not all(Path(w).resolve().is_relative_to(checkout.resolve()) for w in where):
            msg = f"the baseline would not run from {checkout}: amends resolves to {where}"
            raise RuntimeError(msg)
    load0 = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *cmd], env=run_env, cwd=cwd, capture_output=True, text=True, check=True,
    )
    got = json.loads(done.stdout)
    m = STATUS_LINE.search(got["stdout"])
    if m is None:
        msg = f"{which} verify printed no report (exit {got['rc']}): {got['stdout'][-500:]} {got['stderr'][-800:]}"
        raise RuntimeError(msg)
    summary = next((ln.strip() for ln in got["stdout"].splitlines() if ln.strip().startswith("compared ")), "")
    run = VerifyRun(which, got["maxrss_kib"] / 1024, got["wall_s"], m.group(1), summary, (load0, os.getloadavg()[0]))
    log(f"{which} verify: {run.status}, peak RSS {run.maxrss_mib:,.0f} MiB, {run.wall_s:.1f}s; {summary}")
    return run


@contextmanager
def _broker(tmp: Path) -> Iterator[RealBroker]:
    real = RealBroker(tmp / "kafka").start()
    try:
        yield real
    finally:
        real.stop()


def run(
    records: int = DEFAULT_RECORDS,
    baseline: Path | None = None,
    runs: int = 1,
    keys: int = KEYS,
    partitions: int = PARTITIONS,
    process_timeout: float = PROCESS_TIMEOUT,
) -> list[Figure]:
    """Generate, produce and process ``records`` records, then measure ``verify`` (``runs`` times each)."""
    keys = min(keys, max(1, records // 5))
    dsn = dsn_from_env()
    load_start = os.getloadavg()[0]
    now_runs: list[VerifyRun] = []
    old_runs: list[VerifyRun] = []
    with tempfile.TemporaryDirectory(prefix="vmbench_") as tmp_s, scratch_schema(dsn, "vmbench") as schema:
        tmp = Path(tmp_s)
        with _broker(tmp) as broker:
            cfg = tmp / "config.json"
            env = broker.env(dict(os.environ, AMENDS_PG_DSN=dsn, AMENDS_PG_SCHEMA=schema))
            loaded = produce_after_provision(broker.bootstrap, env, cfg, records, keys, partitions)
            done = process(broker.bootstrap, env, dsn, schema, cfg, tmp, partitions, process_timeout)
            for i in range(runs):  # alternate which code goes first
                order: list[Path | None] = [None] if baseline is None else [None, baseline]
                for co in order if i % 2 == 0 else order[::-1]:
                    if co is None:
                        now_runs.append(measure_verify("current", env, cfg, None))
                    else:
                        old_runs.append(measure_verify("baseline", env, cfg, co))
    figs = figures(loaded, done, now_runs, old_runs, keys, partitions, baseline, (load_start, os.getloadavg()[0]))
    command = (
        "amends bench --only verify-memory"
        + (f" --verify-records {records}" if records != DEFAULT_RECORDS else "")
        + (" --baseline-checkout PATH" if baseline is not None else "")
    )
    return [dataclasses.replace(f, command=command) for f in figs]


def produce_after_provision(
    bootstrap: str, env: dict[str, str], cfg: Path, records: int, keys: int, partitions: int
) -> Loaded:
    """Write the configuration (``generate``'s, renamed), provision the namespace, then produce."""
    pre = dataclasses.replace(bench_config(keys, partitions), namespace=NAMESPACE).validate()
    cfg.write_text(json.dumps(config_document(pre)))
    done = subprocess.run(
        [AMENDS, "provision", "--config", str(cfg), "--source-topic", SOURCE, "--output-topic", OUTPUT],
        env=env, capture_output=True, text=True,
    )
    if done.returncode != 0:
        msg = f"amends provision exited with {done.returncode}: {done.stderr[-1500:]}"
        raise RuntimeError(msg)
    return produce(bootstrap, records, keys, partitions, cfg)


def _git_head(path: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def figures(
    loaded: Loaded, done: Processed, now_runs: list[VerifyRun], old_runs: list[VerifyRun],
    keys: int, partitions: int, baseline: Path | None, load: tuple[float, float],
) -> list[Figure]:
    n = loaded.records
    statuses = {r.status for r in now_runs + old_runs}
    status = "/".join(sorted(statuses))
    complete = done.complete and "INCOMPLETE" not in statuses
    label = status if complete else f"{status}, boundary not reached"
    loads = [x for r in now_runs + old_runs for x in r.load] + list(load) + list(done.loads)
    cond = (
        f"{n:,} source records (generated history), {keys:,} keys, {partitions} partitions, real Kafka"
        f" {KAFKA_VERSION} broker, local PostgreSQL; report {label}"
    )
    proc = (
        f"Processed by the roles (batch {BATCH:,}) in {done.seconds:,.0f} s"
        + (f" (worker at the source end after {done.worker_s:,.0f} s)" if done.worker_s is not None else "")
        + f", {done.outbox_rows:,} outbox rows"
        if done.complete
        else f"The roles did not reach a complete boundary within {done.seconds:,.0f} s (worker at"
        f" {done.consumed:,} of {done.source_end:,} source offsets), so verify read and recomputed the whole"
        " source but compared nothing"
    )
    summary = now_runs[0].summary if now_runs else ""
    note = (
        f"Peak RSS is ru_maxrss of the verify process (a launcher process reports its RUSAGE_CHILDREN)."
        f" {proc}. Report: {summary or 'no comparison line'}. Generated in {loaded.generate_s:,.0f} s,"
        f" produced at {n / loaded.produce_s:,.0f} records/s. The machine ({os.cpu_count()} CPUs) was shared:"
        f" 1-minute load average {min(loads):.1f} – {max(loads):.1f} during the run."
    )
    tag = "" if complete else f" ({status}: boundary not reached)"
    out = [
        figure(GROUP, f"amends verify peak RSS, {n:,} records{tag}", [r.maxrss_mib for r in now_runs], "MiB",
               f"{cond}; verification reads and recomputes one source partition at a time", note=note),
        figure(GROUP, f"amends verify wall time, {n:,} records{tag}", [r.wall_s for r in now_runs], "s", cond),
    ]
    if old_runs and baseline is not None:
        head = _git_head(baseline)
        before = f"{cond}; code of {head} (the baseline checkout), on the same topic and database"

        def ratio(attr: str) -> list[float]:
            if len(now_runs) != len(old_runs):
                return [min(getattr(r, attr) for r in now_runs) / min(getattr(r, attr) for r in old_runs)]
            return [getattr(a, attr) / getattr(b, attr) for a, b in zip(now_runs, old_runs, strict=True)]

        out += [
            figure(GROUP, f"amends verify peak RSS, baseline {head}, {n:,} records{tag}",
                   [r.maxrss_mib for r in old_runs], "MiB", before),
            figure(GROUP, f"amends verify wall time, baseline {head}, {n:,} records{tag}",
                   [r.wall_s for r in old_runs], "s", before),
            figure(GROUP, f"peak RSS now / baseline, {n:,} records{tag}", ratio("maxrss_mib"),
                   "x", "same topic and database, measured back to back; below 1: less memory now"),
            figure(GROUP, f"wall time now / baseline, {n:,} records{tag}", ratio("wall_s"),
                   "x", "same topic and database, runs alternating which code goes first; below 1: faster now"),
        ]
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    p.add_argument("--keys", type=int, default=KEYS)
    p.add_argument("--partitions", type=int, default=PARTITIONS)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--baseline-checkout", type=Path, default=None, metavar="PATH")
    p.add_argument("--process-timeout", type=float, default=PROCESS_TIMEOUT, metavar="SECONDS")
    a = p.parse_args(argv)
    for f in run(a.records, a.baseline_checkout, a.runs, a.keys, a.partitions, a.process_timeout):
        print(f.row())


if __name__ == "__main__":
    main()

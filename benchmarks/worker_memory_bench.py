"""The durable worker's resident memory: by number of keys, and by length of history.

    python -m benchmarks.worker_memory_bench                 # the sizes of `amends bench`
    python -m benchmarks.worker_memory_bench --keys 1000 --history 20000 --revisions 20000

Each measurement runs in a fresh process under the worker role's collector
settings: a ``PgStore`` on a scratch schema (key cache on, as the role runs it)
processes records in batches of 10,000, generated a batch at a time. Reported:
the growth of the resident set (RSS, from ``/proc/self/statm``) from the open
store to the end, after a full collection; and the peak (``ru_maxrss``). The
record generator keeps its own bookkeeping, so the same generator runs alone in
another fresh process and its growth is subtracted.

Two histories:

* the durable benchmark's 95/4/1 mix: 95% of the records are new transactions,
  so the live state (every identity's highest revision, which later records
  may amend, cancel or re-deliver) grows with the history;
* revisions of a fixed live set: 100 identities per key, each on one of 10
  days, are created; then every further record amends one of them with a new
  quantity on its day (85%), cancels it (3%), re-delivers its current revision
  (11%) or delivers one of its superseded revisions again (1%). The live state
  stays the same size however long the history.

The worker keeps compact key states (``KeyState.compact``): per identity only
the highest revision's candidates, without the places they were delivered;
superseded revisions and every delivery place stay in the ``observations``
table, and a stale record at a superseded revision reads them back. The second
history is also measured with compaction switched off in the benchmark process
(every revision and place kept in memory, as before issue 16), in the same run.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.harness import Figure, figure

if TYPE_CHECKING:
    from amends_core.ledger import Record, StockKey

BATCH = 10_000
PER_KEY = 100
"""Identities per key in the revisions history."""
DAYS = 10
"""Days an identity of the revisions history may fall on (a quantity correction repairs the
days from its own on: at most this many balances per record)."""
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE


def records_of_revisions(keys: int, per_key: int, seed: int) -> Iterator[Record]:
    """``keys * per_key`` new transactions, then revisions and re-deliveries of them, without end."""
    from amends_core import wire
    from amends_core.ledger import Coordinates, Record, StockKey, Transaction
    from benchmarks.pg_batch_bench import DAY, ORIGIN, SOURCE

    rng = random.Random(seed)
    names = [StockKey(f"ITEM-{i:05d}", "DEPOT-A") for i in range(keys)]
    tkeys = [k.transport_key() for k in names]
    n = keys * per_key
    revision = [1] * n
    day = [rng.randrange(DAYS) for _ in range(n)]
    current: list[bytes] = []
    previous: list[bytes | None] = [None] * n
    off = 0

    def encoded(i: int, kind: str) -> bytes:
        qty = 0 if kind == "CANCEL" else rng.randint(-40, 40)
        t = Transaction(f"T{i}", revision[i], kind, names[i % keys],
                        ORIGIN + day[i] * DAY + rng.randrange(DAY), qty, ORIGIN + off)
        return wire.encode_transaction(t)

    for i in range(n):
        current.append(encoded(i, "NEW"))
        yield Record(current[i], tkeys[i % keys], Coordinates(SOURCE, 0, off))
        off += 1
    while True:
        i = rng.randrange(n)
        roll = rng.random()
        stale = previous[i]
        if roll < 0.88:
            revision[i] += 1
            previous[i] = current[i]
            current[i] = encoded(i, "CANCEL" if roll >= 0.85 else "AMEND")
            value = current[i]
        elif roll < 0.99 or stale is None:
            value = current[i]
        else:
            value = stale
        yield Record(value, tkeys[i % keys], Coordinates(SOURCE, 0, off))
        off += 1


def _source(mix: str, keys: int) -> Iterator[Record]:
    from benchmarks import pg_batch_bench as durable

    if mix == "durable":
        return durable.records_of_mix(keys, seed=7)
    return records_of_revisions(keys, PER_KEY, seed=7)


def _keep_everything() -> None:
    """Switch compaction off in this process: the worker's cache keeps every revision and
    delivery place in memory (the behaviour before compact key states)."""
    from amends_pipeline.postgres import batch

    def load(self: batch.ProcessingTx, keys: Collection[StockKey]) -> None:
        conn = self._session()
        if self._obs_stream is not None:
            self._obs_stream.pause()
        self.ctx.load_keys(conn, self._cache, keys, compact=False)

    batch.ProcessingTx._load = load  # type: ignore[method-assign]


def measure(keys: int, records: int, with_worker: bool, mix: str = "durable",
            compact: bool = True) -> dict[str, float]:
    """In this process: RSS growth (bytes) while ``records`` records of ``mix`` are generated,
    and processed by a worker when ``with_worker``; and the peak RSS."""
    from amends_pipeline.postgres.connection import dsn_from_env
    from amends_pipeline.postgres.migrate import scratch_schema
    from amends_pipeline.postgres.store import PgStore
    from amends_pipeline.roles import collector
    from benchmarks import pg_batch_bench as durable

    collector.settle()
    if not compact:
        _keep_everything()
    source = _source(mix, keys)
    if not with_worker:
        gc.collect()
        start = _rss()
        for _ in itertools.islice(source, records):
            pass
        gc.collect()
        return {"growth": _rss() - start, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    dsn = dsn_from_env()
    with scratch_schema(dsn, "benchmem") as schema:
        store = PgStore.open(dsn, durable.bench_config(keys, f"mem-{uuid.uuid4().hex[:8]}"), schema=schema)
        try:
            tok = store.claim(0)
            frontier = 0
            gc.collect()
            start = _rss()
            done = 0
            while done < records:
                chunk = list(itertools.islice(source, min(BATCH, records - done)))
                frontier = store.process(tok, frontier, chunk).frontier
                done += len(chunk)
            del chunk
            gc.collect()
            growth = _rss() - start
        finally:
            store.close()
    return {"growth": growth, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _in_child(keys: int, records: int, with_worker: bool, mix: str = "durable",
              compact: bool = True) -> dict[str, float]:
    code = (
        "import json, sys\nfrom benchmarks.worker_memory_bench import measure\n"
        f"print(json.dumps(measure({keys}, {records}, {with_worker}, {mix!r}, {compact})))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"worker memory measurement failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def worker_growth(keys: int, records: int, mix: str = "durable", compact: bool = True) -> tuple[float, float]:
    """(bytes the worker adds for ``records`` records over ``keys`` keys, peak RSS of that process)."""
    worker = _in_child(keys, records, True, mix, compact)
    generator = _in_child(keys, records, False, mix)
    return worker["growth"] - generator["growth"], worker["peak"]


def run(keys: int = 100_000, history: tuple[int, ...] = (100_000, 1_000_000), history_keys: int = 1_000,
        revisions: tuple[int, ...] = (1_000_000, 10_000_000)) -> list[Figure]:
    figures: list[Figure] = []
    cond = f"durable mix 95/4/1, batch {BATCH:,}, key cache on, role collector settings; generator's own growth subtracted"
    grown, peak = worker_growth(keys, keys)
    figures.append(figure("worker memory", f"RSS growth, {keys:,} keys ({keys:,} records)", [grown / 2**20], "MiB",
                          f"{cond}; peak RSS of the process {peak / 2**20:,.0f} MiB"))
    figures.append(figure("worker memory", f"per key, {keys:,} keys", [grown / keys], "bytes", cond))
    per_record = []
    for n in history:
        grown, peak = worker_growth(history_keys, n)
        per_record.append(grown / n)
        figures.append(figure("worker memory", f"RSS growth, {n:,} records of history over {history_keys:,} keys",
                              [grown / 2**20], "MiB", f"{cond}; peak RSS of the process {peak / 2**20:,.0f} MiB"))
    figures.append(figure("worker memory", f"per record of history, {history[-1]:,} records", [per_record[-1]],
                          "bytes", f"{cond}; 95% of the records are new transactions, so the live state grows "
                          "with the history"))
    live = history_keys * PER_KEY
    rcond = (f"{live:,} identities ({PER_KEY} per key over {history_keys:,} keys) created first, then only "
             f"revisions of them: 85% amend (new quantity, same day; {DAYS} days per key), 3% cancel, 11% re-deliver the current revision, 1% re-deliver "
             f"a superseded one; batch {BATCH:,}, key cache on, role collector settings; generator's own "
             "growth subtracted")
    growths = []
    for n in revisions:
        grown, peak = worker_growth(history_keys, live + n, "revisions")
        growths.append(grown)
        figures.append(figure("worker memory", f"RSS growth, {live:,} live identities then {n:,} records of revisions",
                              [grown / 2**20], "MiB", f"{rcond}; peak RSS of the process {peak / 2**20:,.0f} MiB"))
    grown, peak = worker_growth(history_keys, live + revisions[0], "revisions", compact=False)
    figures.append(figure("worker memory",
                          f"RSS growth, {live:,} live identities then {revisions[0]:,} records of revisions, "
                          "every revision kept in memory", [grown / 2**20], "MiB",
                          f"{rcond}; compaction switched off in the benchmark process (the key states keep every "
                          f"revision and delivery place, as before); peak RSS of the process {peak / 2**20:,.0f} MiB"))
    figures.append(figure("worker memory", f"revision history {revisions[-1] // revisions[0]}x longer: RSS growth ratio",
                          [growths[-1] / growths[0]], "x", f"{rcond}; 1 = bounded by the live state"))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.worker_memory_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--history", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--history-keys", type=int, default=1_000)
    p.add_argument("--revisions", type=int, nargs="+", default=[1_000_000, 10_000_000])
    a = p.parse_args(argv)
    for f in run(a.keys, tuple(a.history), a.history_keys, tuple(a.revisions)):
        print(f"{f.name:60} {f.median:14,.1f} {f.unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

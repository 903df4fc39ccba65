"""The durable worker's resident memory: by number of keys, and by length of history.

    python -m benchmarks.worker_memory_bench                 # 100,000 keys; 100,000 and 1,000,000 records
    python -m benchmarks.worker_memory_bench --keys 1000 --history 20000

Each measurement runs in a fresh process under the worker role's collector
settings: a ``PgStore`` on a scratch schema (key cache on, as the role runs it)
processes the durable benchmark's 95/4/1 mix in batches of 10,000, generated a
batch at a time. Reported: the growth of the resident set (RSS, from
``/proc/self/statm``) from the open store to the end, after a full
collection; and the peak (``ru_maxrss``). The record generator keeps its own
bookkeeping (every transaction it may amend later), so the same generator
runs alone in another fresh process and its growth is subtracted.

The worker keeps every key state of its partitions in memory, and a key state
holds the key's revision evidence (every accepted assertion and where it was
delivered): memory grows with the history, not only with the keys. The
figures show by how much per record.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import resource
import subprocess
import sys
import uuid
from pathlib import Path

from benchmarks.harness import Figure, figure

BATCH = 10_000
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE


def measure(keys: int, records: int, with_worker: bool) -> dict[str, float]:
    """In this process: RSS growth (bytes) while ``records`` records are generated, and
    processed by a worker when ``with_worker``; and the peak RSS."""
    from amends_pipeline.postgres.connection import dsn_from_env
    from amends_pipeline.postgres.migrate import scratch_schema
    from amends_pipeline.postgres.store import PgStore
    from amends_pipeline.roles import collector
    from benchmarks import pg_batch_bench as durable

    collector.settle()
    source = durable.records_of_mix(keys, seed=7)
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


def _in_child(keys: int, records: int, with_worker: bool) -> dict[str, float]:
    code = (
        "import json, sys\nfrom benchmarks.worker_memory_bench import measure\n"
        f"print(json.dumps(measure({keys}, {records}, {with_worker})))\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"worker memory measurement failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def worker_growth(keys: int, records: int) -> tuple[float, float]:
    """(bytes the worker adds for ``records`` records over ``keys`` keys, peak RSS of that process)."""
    worker = _in_child(keys, records, True)
    generator = _in_child(keys, records, False)
    return worker["growth"] - generator["growth"], worker["peak"]


def run(keys: int = 100_000, history: tuple[int, ...] = (100_000, 1_000_000), history_keys: int = 1_000) -> list[Figure]:
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
                          "bytes", f"{cond}; the key states keep every accepted assertion (grows with history)"))
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.worker_memory_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--history", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--history-keys", type=int, default=1_000)
    a = p.parse_args(argv)
    for f in run(a.keys, tuple(a.history), a.history_keys):
        print(f"{f.name:60} {f.median:14,.1f} {f.unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

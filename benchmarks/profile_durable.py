"""Where the durable worker's time goes: a cProfile of the durable benchmark, by stage.

    python -m benchmarks.profile_durable                  # batch 10,000, 50,000 timed records
    python -m benchmarks.profile_durable --batch 1000 --records 20000 --top 25

The workload, preload and store are the durable benchmark's
(``benchmarks.pg_batch_bench``); only the timed batches run under cProfile, one
batch at a time through ``PgStore.process`` (cProfile sees one thread: the
worker's folding ahead of a background commit is the durable benchmark's
figure, not this breakdown's).
Every function's own time (``tottime``) is assigned to one stage by where it
is defined:

  strict decode  amends_core.wire decoders, amends_core.records, json decoding, msgspec
  validate/fold  amends_core.fold, ledger value types, timefmt
  diff           amends_core.diff, amends_core.process
  encode         envelope encoding (``to_bytes``, ``encode*``/``compact_json``, json encoding,
                 the direct envelope text and the day and output ID texts it writes)
  database       psycopg, the batch writer (postgres.batch ``_seal``/``_send``/``commit``,
                 ``_write`` in older checkouts, codec rows, the sinks' COPY encoding), the socket
  other          everything else (the batch loop, dict and list work, profiling)

The collector runs with the worker role's settings (``amends_pipeline.roles.collector``),
also for another checkout's code.

``consume`` (reading the source from Kafka) is not part of this benchmark; see
the end-to-end benchmark. cProfile slows Python code, not the database, so the
shares lean toward Python; read them as where to look, not as exact times.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import uuid
from collections import defaultdict
from pathlib import Path

from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.postgres.store import PgStore
from benchmarks import pg_batch_bench as durable

STAGES = ("strict decode", "validate/fold", "diff", "encode", "database", "other")


_ENVELOPE_TEXT = ("_envelope_text", "_head_text", "_key_text", "output_id_text", "format_day")
"""Functions of ``ledger`` and ``timefmt`` that write output text (the direct envelope route)."""


def stage_of(filename: str, function: str) -> str:
    """The stage a function's own time counts for (C functions by their name)."""
    f = filename.replace("\\", "/")
    if "psycopg" in f or f.endswith(("/socket.py", "/selectors.py")) or "_socket.socket" in function:
        return "database"
    if f.endswith(("amends_pipeline/postgres/codec.py", "amends_pipeline/postgres/sql.py")) or (
        "amends_pipeline/postgres/batch.py" in f
        and function in ("_write", "_seal", "_send", "commit", "_columns")
    ):
        return "database"
    if (
        function == "to_bytes"
        or "/json/encoder.py" in f
        or "encode_basestring" in function
        or (function.startswith(("encode", "compact_json")) and f.endswith(("amends_core/wire.py", "amends_core/ledger.py")))
        or (function in _ENVELOPE_TEXT and f.endswith(("amends_core/ledger.py", "amends_core/timefmt.py")))
    ):
        return "encode"
    if (
        f.endswith(("amends_core/wire.py", "amends_core/records.py"))
        or "/json/" in f
        or "_json" in function
        or "msgspec" in function
    ):
        return "strict decode"
    if f.endswith(("amends_core/fold.py", "amends_core/ledger.py", "amends_core/timefmt.py")):
        return "validate/fold"
    if f.endswith(("amends_core/diff.py", "amends_core/process.py")):
        return "diff"
    return "other"


def profile(batch: int, timed: int, preload: int = 20_000, keys: int = 500) -> tuple[pstats.Stats, float, int]:
    """(stats of the timed batches, wall seconds, records) on a fresh scratch schema."""
    import time

    records = durable.workload(preload + timed, keys, seed=7)
    dsn = dsn_from_env()
    with scratch_schema(dsn, prefix="amends_prof") as schema:
        cfg = durable.bench_config(keys, f"prof-{uuid.uuid4().hex[:8]}")
        store = PgStore.open(dsn, cfg, schema=schema)
        try:
            # Its own preload loop, not pg_batch_bench.preloaded: with --baseline-checkout this
            # file runs against an older checkout's benchmarks, which may lack that helper.
            tok = store.claim(0)
            frontier = 0
            for i in range(0, preload, 10_000):
                frontier = store.process(tok, frontier, records[i:min(preload, i + 10_000)]).frontier
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for i in range(preload, preload + timed, batch):
                frontier = store.process(tok, frontier, records[i:i + batch]).frontier
            prof.disable()
            wall = time.perf_counter() - t0
        finally:
            store.close()
    return pstats.Stats(prof), wall, timed


def breakdown(stats: pstats.Stats) -> dict[str, float]:
    """Own time per stage, in seconds."""
    out: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        out[stage_of(filename, function)] += tottime
    return {s: out.get(s, 0.0) for s in STAGES}


def shares(batch: int, timed: int, preload: int = 20_000, keys: int = 500) -> dict[str, float]:
    """Each stage's share of the profiled own time, and ``records/s`` under the profiler, with
    the worker role's collector settings."""
    from amends_pipeline.roles import collector

    with collector.settled():
        return _shares(batch, timed, preload, keys)


def _shares(batch: int, timed: int, preload: int, keys: int) -> dict[str, float]:
    """``shares`` under whatever collector settings the process has."""
    stats, wall, n = profile(batch, timed, preload, keys)
    parts = breakdown(stats)
    total = sum(parts.values()) or 1.0
    return {**{s: parts[s] / total for s in STAGES}, "records/s": n / wall}


_IN_TREE = """
import json, runpy
tool = runpy.run_path({tool!r})
print(json.dumps(tool["_shares"]({batch}, {timed}, {preload}, {keys})))
"""


def shares_in(tree: Path, batch: int, timed: int, preload: int = 20_000, keys: int = 500) -> dict[str, float]:
    """``shares`` for the code of another checkout (this file's stages, that tree's code)."""
    from amends_pipeline.roles import collector
    from benchmarks.harness import run_in_tree  # not at the top: that tree runs this file too

    code = collector.SNIPPET + _IN_TREE.format(
        tool=str(Path(__file__).resolve()), batch=batch, timed=timed, preload=preload, keys=keys
    )
    out = run_in_tree(tree, code, "profiling")
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_durable", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--records", type=int, default=50_000, help="timed records")
    p.add_argument("--top", type=int, default=0, help="also print the N functions with the most own time")
    a = p.parse_args(argv)
    from amends_pipeline.roles import collector

    with collector.settled():
        stats, wall, n = profile(a.batch, a.records)
    parts = breakdown(stats)
    total = sum(parts.values())
    print(f"batch {a.batch}, {n:,} timed records, {wall:.2f} s under the profiler ({n / wall:,.0f} records/s)")
    print("| stage | own time (s) | share |")
    print("| --- | --- | --- |")
    for s in STAGES:
        print(f"| {s} | {parts[s]:.2f} | {parts[s] / total:.0%} |")
    if a.top:
        stats.sort_stats("tottime").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())

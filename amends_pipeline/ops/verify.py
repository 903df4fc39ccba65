"""Durable verification: oracle over the source topic vs the PostgreSQL view.

The boundary is established from durable facts only:
  * every source partition still carries this namespace's marker and retains
    its history from offset 0 (otherwise INCOMPLETE: the prefix was lost);
  * source end H = high watermark; the worker frontier equals H (the marker
    offset is stepped over, it is never applied);
  * no outbox row is pending and no relay holds its partition lock with
    pending work;
  * output end O = high watermark of the output topic; the view frontier
    equals O and no view partition is stopped.
Processing state and the view are each read in one REPEATABLE READ, READ
ONLY transaction, and the frontiers are re-checked inside those snapshots,
so a writer that moved in between makes the boundary incomplete instead of
producing a false DRIFT. The oracle reads the source directly from Kafka and
never sees a worker decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from amends_core.ledger import Record
from amends_core.oracle import compute as oracle_compute
from amends_core.verify import Boundary, Report, verify
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.manifest import IncarnationMismatch, Manifest, SourceLost, check_source
from amends_pipeline.roles.relay import relay_running
from amends_pipeline.runtime import Runtime


@dataclass(frozen=True, slots=True)
class Ends:
    source: dict[int, int]
    output: dict[int, int]


def read_source(reader: Reader, m: Manifest, ends: dict[int, int]) -> dict[int, list[Record]]:
    """Every non-marker source record of [0, H) per partition, in offset order."""
    out: dict[int, list[Record]] = {}
    for p, end in ends.items():
        out[p] = [r for r, _ in reader.records(m.source_incarnation, p, 0, end) if r is not None]
    return out


def verify_namespace(rt: Runtime) -> Report:
    cfg = rt.cfg
    reasons: list[str] = []
    with rt.store("amends-verify") as store, rt.view_store() as vstore:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as src, rt.reader(m.output_topic) as out:
            try:
                wms = check_source(src, m, {p: 0 for p in range(cfg.partitions)})
            except (SourceLost, IncarnationMismatch) as e:
                # Nothing comparable exists: report INCOMPLETE with the reason, compare nothing.
                empty = oracle_compute(cfg, {p: [] for p in range(cfg.partitions)})
                return verify(cfg, empty, {}, [], [], Boundary(False, (str(e),)))
            ends = Ends(
                {p: wm.high for p, wm in wms.items()},
                {p: out.watermarks(p).high for p in range(cfg.partitions)},
            )
            snap = store.snapshot(evidence=False, outbox="pending")
            view = vstore.snapshot()
            for p in range(cfg.partitions):
                f = snap.frontier(p)
                eff = f + 1 if f == m.markers[p] else f
                if eff != ends.source[p]:
                    reasons.append(
                        f"source partition {p}: worker frontier {eff}, source end {ends.source[p]}"
                    )
                pend = len(snap.pending(p))
                if pend:
                    reasons.append(f"partition {p}: {pend} outbox rows not yet published")
                if pend and relay_running(rt, p):
                    reasons.append(f"partition {p}: a relay is running; stop or drain it first")
                if view.frontier(p) != ends.output[p]:
                    reasons.append(
                        f"output partition {p}: view frontier {view.frontier(p)}, output end {ends.output[p]}"
                    )
            oracle: object
            try:
                oracle = oracle_compute(cfg, read_source(src, m, ends.source))
            except Exception as e:  # every oracle failure is an ERROR report, never a crash
                oracle = e
    boundary = Boundary(
        complete=not reasons,
        reasons=tuple(reasons),
        digests=(("store", store.digest), ("view", view.cfg.digest()), ("manifest", m.config_digest)),
    )
    return verify(
        cfg, oracle, view.rows, list(snap.rejections), snap.conflicts(), boundary,  # type: ignore[arg-type]
        stopped=view.stopped,
    )

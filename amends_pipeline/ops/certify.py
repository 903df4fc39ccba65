"""Oracle, verification and certification at a complete boundary, for orchestration.

A boundary is identified by the source and output ends of every partition
(``Snapshot.boundary_key``). Verification is accepted only when the boundary
was complete and did not move while it ran; certified balances and alerts are
written only for the boundary that was verified, and only while the view still
stands exactly there.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from amends_core.ledger import Conflict
from amends_core.oracle import Columns
from amends_core.oracle.compute import compute_by_partition
from amends_core.result import RejectionRef
from amends_core.verify import Report, SkipRef
from amends_pipeline.manifest import check_source
from amends_pipeline.ops.orchestration import snapshot
from amends_pipeline.ops.snapshot import pin
from amends_pipeline.ops.verify import read_history, verify_namespace, without_skips
from amends_pipeline.postgres.reports import CertifiedCounts, write_certified
from amends_pipeline.runtime import Runtime


class BoundaryMoved(Exception):
    """The pipeline moved past the verified boundary before certification; nothing was certified."""


@dataclass(frozen=True, slots=True)
class OracleSummary:
    boundary: str
    records: int
    keys: int
    statuses: dict[str, int]
    rejections: int
    conflicts: int
    seconds: float


def run_oracle(rt: Runtime) -> OracleSummary:
    """Recompute everything from the source's full history with the independent oracle: the
    snapshot table's records first (when the namespace has one), then the topic beyond them.

    Records operators skipped (``amends skip``) are left out, as verification leaves them out.
    """
    t0 = time.perf_counter()
    snap = snapshot(rt)
    with rt.store("amends-oracle") as store:
        m = rt.manifest(store)
        skips = store.skips()
    counted = 0
    with rt.reader(m.source_topic) as reader:
        pinned = pin(rt, m)
        needed = {p: pinned.ends[p] if pinned else 0 for p in range(rt.cfg.partitions)}
        wms = check_source(reader, m, needed)

        def read(p: int) -> Columns:  # one partition's history in memory at a time
            nonlocal counted
            history = read_history(reader, m, p, wms[p].low, wms[p].high, pinned)
            cols = without_skips({p: history}, skips)[p]
            counted += len(cols)
            return cols

        result = compute_by_partition(rt.cfg, read)
    statuses = Counter(p.status.value for p in result.result.keys)
    return OracleSummary(
        snap.boundary_key,
        counted,
        len(result.result.keys),
        dict(sorted(statuses.items())),
        len(result.rejections),
        len(result.conflicts),
        time.perf_counter() - t0,
    )


@dataclass(frozen=True, slots=True)
class Verification:
    report: Report
    boundary: str
    """The boundary verified, or "" when it moved while verification ran."""
    accepted: bool


def verify_boundary(
    rt: Runtime,
    expected: tuple[list[RejectionRef], list[Conflict]]
    | tuple[list[RejectionRef], list[Conflict], list[SkipRef]]
    | None = None,
    config: str = "CONFIG.json",
) -> Verification:
    """Verify the view against the oracle; accepted only at a boundary that held still.

    ``expected``: (rejections, conflicts[, operator skips]) that PASS_WITH_EXCLUSIONS
    must list exactly; ``config`` is the file named in the ``amends skip`` advice.
    """
    before = snapshot(rt)
    report = verify_namespace(rt, config)
    after = snapshot(rt)
    held = before.boundary_key == after.boundary_key
    rej, con, *more = expected or ([], [])
    skips: list[SkipRef] = more[0] if more else []
    accepted = held and report.accepts(rej, con, skips)
    return Verification(report, after.boundary_key if held else "", accepted)


def certify(rt: Runtime, boundary: str, status: str, accepted: bool) -> CertifiedCounts:
    """Write the view's balances and alerts as certified for a verified boundary.

    ``boundary``, ``status`` and ``accepted`` come from the verification that
    vouched for it (in Dagster: the latest ``verification`` check result).
    Raises BoundaryMoved when that verification was not accepted or the
    pipeline no longer stands exactly at the verified boundary.
    """
    if not accepted or not boundary:
        msg = f"the latest verification was not accepted ({status}); nothing certified"
        raise BoundaryMoved(msg)
    with rt.store("amends-certify") as store, rt.view_store() as vstore:
        now = snapshot(rt)
        if now.boundary_key != boundary or not now.drained:
            msg = (
                f"the pipeline moved from the verified boundary {boundary} to {now.boundary_key};"
                " verify again"
            )
            raise BoundaryMoved(msg)
        projections = vstore.projections()
        if snapshot(rt).boundary_key != boundary:
            msg = "the view moved while certified rows were read; verify again"
            raise BoundaryMoved(msg)
        return write_certified(store, boundary, status, projections)

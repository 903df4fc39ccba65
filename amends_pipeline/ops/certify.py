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
from amends_core.oracle import OracleResult
from amends_core.result import RejectionRef
from amends_core.verify import Report, SkipRef
from amends_pipeline.ops.orchestration import snapshot
from amends_pipeline.ops.verify import check_namespace
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
    parts_used: tuple[int, ...] = ()
    """Source partitions whose stored oracle part was combined instead of computed here."""


@dataclass(frozen=True, slots=True)
class Verification:
    report: Report
    boundary: str
    """The boundary verified, or "" when it moved while verification ran."""
    accepted: bool


Expected = (
    tuple[list[RejectionRef], list[Conflict]]
    | tuple[list[RejectionRef], list[Conflict], list[SkipRef]]
    | None
)
"""(rejections, conflicts[, operator skips]) that PASS_WITH_EXCLUSIONS must list exactly."""


def oracle_and_verification(
    rt: Runtime, expected: Expected = None, config: str = "CONFIG.json", *, use_parts: bool = False
) -> tuple[OracleSummary, Verification]:
    """One oracle computation at the current boundary: its summary and the verification of the
    view against it (the Dagster ``oracle`` asset with its ``verification`` check).

    ``use_parts``: partitions whose stored oracle part matches the boundary are not
    computed again (``check_namespace``); the summary names them.
    """
    t0 = time.perf_counter()
    before = snapshot(rt)
    checked = check_namespace(rt, config, use_parts=use_parts, keep_decoded=True)
    after = snapshot(rt)
    report = checked.report
    held = before.boundary_key == after.boundary_key
    rej, con, *more = expected or ([], [])
    skips: list[SkipRef] = more[0] if more else []
    accepted = held and report.accepts(rej, con, skips)
    oracle = checked.oracle
    keys = oracle.result.keys if isinstance(oracle, OracleResult) else ()
    statuses = Counter(p.status.value for p in keys)
    summary = OracleSummary(
        after.boundary_key,
        checked.records,
        len(keys),
        dict(sorted(statuses.items())),
        len(oracle.rejections) if isinstance(oracle, OracleResult) else 0,
        len(oracle.conflicts) if isinstance(oracle, OracleResult) else 0,
        time.perf_counter() - t0,
        checked.reused,
    )
    return summary, Verification(report, after.boundary_key if held else "", accepted)


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

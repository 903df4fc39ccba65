"""Decisions of the orchestration sensors, as pure functions of a snapshot (tested without Dagster)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from amends_pipeline.ops.orchestration import Snapshot


@dataclass(frozen=True, slots=True)
class RefoldWanted:
    partition: int
    target: int
    run_key: str


def refold_requests(
    snap: Snapshot, in_flight: Iterable[int], failed: Iterable[tuple[int, int]]
) -> list[RefoldWanted]:
    """A refold for every partition behind its source end and with no run in flight.

    The run key names the partition and target offset; each earlier failed or
    canceled run for the same target adds to a retry count in the key, because
    Dagster never launches a run key again once a run used it, even a failed one.
    """
    busy = set(in_flight)
    failures = Counter(failed)
    out = []
    for s in snap.partitions:
        if s.lag == 0 or s.partition in busy:
            continue
        n = failures[(s.partition, s.source_high)]
        key = f"refold:{snap.namespace}:{s.partition}:{s.source_high}" + (f":retry-{n}" if n else "")
        out.append(RefoldWanted(s.partition, s.source_high, key))
    return out


STALE_RUN_SECONDS = 150.0
"""A refold run started longer ago than this no longer holds its partition back (runs take seconds)."""


def live_partitions(
    runs: Iterable[tuple[int, bool, float]], now: float, stale_after: float = STALE_RUN_SECONDS
) -> set[int]:
    """Partitions with a refold run that still counts as in flight: (partition, queued, started_at).

    A queued run always counts (it will start). A started run counts only while
    it is younger than ``stale_after``: a run whose process died with a killed
    daemon stays STARTED in Dagster's storage forever, and must not hold its
    partition back. Requesting another run is safe even if the old one still
    lives: the new run claims a new epoch and fences the old one out.
    """
    return {p for p, queued, started in runs if queued or now - started < stale_after}


def boundary_request(snap: Snapshot, last_verified: str | None) -> str | None:
    """The run key of a verification to launch, or None (not drained, or already verified)."""
    if not snap.drained or snap.boundary_key == (last_verified or None):
        return None
    return f"boundary:{snap.namespace}:{snap.boundary_key}"


def oracle_part_plan(stale: list[int], runs: dict[int, bool]) -> tuple[list[int], bool]:
    """Which partitions' oracle runs to request at a boundary, and whether verification may start.

    ``stale``: partitions whose stored part does not match the boundary; ``runs``:
    partitions that already have an oracle run for this boundary, to whether it is still
    in flight. A partition whose run ended without a matching part (it failed, or the
    boundary moved under it) is left to the verification run, which computes what no
    stored part covers: a failed part run delays the verdict by one run, never blocks it.
    """
    request = [p for p in stale if p not in runs]
    waiting = [p for p in stale if runs.get(p)]
    return request, not request and not waiting

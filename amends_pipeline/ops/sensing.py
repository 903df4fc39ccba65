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


def boundary_request(snap: Snapshot, last_verified: str | None) -> str | None:
    """The run key of a verification to launch, or None (not drained, or already verified)."""
    if not snap.drained or snap.boundary_key == (last_verified or None):
        return None
    return f"boundary:{snap.namespace}:{snap.boundary_key}"

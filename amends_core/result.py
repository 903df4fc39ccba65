"""The business result both engines report: per-key projections and diagnostics.

This is the shape of ``amends compute`` and the unit that verification
compares. BLOCKED keys carry status and reasons only: values computed before a
conflict became visible depend on arrival order and are never certified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amends_core.ledger import Config, Conflict, Projection, RejectReason, Status


@dataclass(frozen=True, order=True, slots=True)
class RejectionRef:
    """Where a rejected record sat and why it was rejected."""

    partition: int
    offset: int
    reason: RejectReason

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "offset": self.offset, "reason": self.reason.value}


@dataclass(frozen=True, slots=True)
class ComputeResult:
    keys: tuple[Projection, ...]
    """One projection per configured key, sorted by item then location."""
    rejections: tuple[RejectionRef, ...]
    """Sorted by partition then offset."""
    conflicts: tuple[Conflict, ...]
    """Every conflict ever observed, sorted."""

    @staticmethod
    def build(
        cfg: Config,
        projections: dict[Any, Projection],
        rejections: list[RejectionRef],
        conflicts: list[Conflict],
    ) -> ComputeResult:
        keys = []
        for kc in sorted(cfg.keys, key=lambda kc: kc.key):
            p = projections.get(kc.key) or Projection.untouched(kc.key)
            if p.status is Status.BLOCKED:
                p = Projection(p.key, p.status, p.reasons, (), ())
            keys.append(p)
        return ComputeResult(tuple(keys), tuple(sorted(rejections)), tuple(sorted(set(conflicts))))

    def to_json(self) -> dict[str, Any]:
        return {
            "keys": [p.to_json() for p in self.keys],
            "rejections": [r.to_json() for r in self.rejections],
            "conflicts": [
                {
                    "item": c.key.item,
                    "location": c.key.location,
                    "txn_id": c.txn_id,
                    "revision": c.revision,
                }
                for c in self.conflicts
            ],
        }

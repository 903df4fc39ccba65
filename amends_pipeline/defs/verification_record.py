"""The latest evaluation of the ``verification`` check, read back from a Dagster instance.

Used by ``certified_balances`` (which certifies only what the latest accepted
verification vouched for), by ``amends up`` and by tests. Importing this does
not load the code location's definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg

VERIFICATION_KEY = dg.AssetCheckKey(dg.AssetKey("oracle"), "verification")


@dataclass(frozen=True, slots=True)
class CheckedBoundary:
    status: str
    passed: bool
    """The check passed: the verification was accepted at a boundary that held still."""
    boundary: str
    run_id: str
    """The run that evaluated the check (``boundary_job``, which certifies after a pass)."""


def latest_verification(instance: Any) -> CheckedBoundary | None:
    """The latest finished evaluation of the check (None: none yet, or one still running)."""
    rec = instance.event_log_storage.get_latest_asset_check_execution_by_key([VERIFICATION_KEY]).get(
        VERIFICATION_KEY
    )
    ev = getattr(getattr(getattr(rec, "event", None), "dagster_event", None), "event_specific_data", None)
    if ev is None or not hasattr(ev, "metadata"):  # planned and still running
        return None
    md = {k: getattr(v, "value", v) for k, v in ev.metadata.items()}
    return CheckedBoundary(str(md.get("status")), bool(ev.passed), str(md.get("boundary")), str(rec.run_id))

"""`compute --engine incremental` never prints the answer of a view that stopped (issue 14).

Before the fix, a key-status envelope the view refused stopped its partition
and the incremental engine printed the stale view (close 91 without an
alert, where the oracle said 35 with one) with exit 0. The limits now keep
the code from producing such an envelope, so the defect is simulated here:
key-status payloads carry every conflict reference instead of the first
``limits.MAX_STATUS_REASONS``, which the view refuses as a protocol error.
The engine must then fail, never return a result.
"""

from __future__ import annotations

import pytest

from amends_core import diff, limits
from amends_core.fold import FoldDelta
from amends_core.ledger import Payload, Record
from amends_core.pipeline import MemoryPipeline, compute_incremental
from tests.builders import K1, config, day, record, txn

CFG = config([(K1, 100, 60, 0)])


def conflicting_records(n: int) -> list[Record]:
    """n identities, each with two distinct candidates at revision 1: n conflict references."""
    out = []
    for i in range(n):
        out += [txn(f"T{i:03d}", qty=-1, valid=day(1)), txn(f"T{i:03d}", qty=-2, valid=day(1))]
    return [record(o, i) for i, o in enumerate(out)]


def every_reference(delta: FoldDelta) -> Payload:
    return Payload(True, status=delta.status, reasons=delta.reasons, reason_count=len(delta.reasons))


def test_the_incremental_engine_fails_instead_of_answering_from_a_stopped_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recs = conflicting_records(limits.MAX_STATUS_REASONS + 1)
    monkeypatch.setattr(diff, "status_payload", every_reference)
    pipe = MemoryPipeline(CFG)  # the simulated defect does stop the view
    pipe.append(recs)
    pipe.drain()
    assert list(pipe.view.stopped) == [0]
    with pytest.raises(RuntimeError, match="the incremental view stopped, so its result would be incomplete"):
        compute_incremental(CFG, {0: recs})

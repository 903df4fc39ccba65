"""The view's core decisions that no ViewStore call can reach, and its payload shapes.

The version rule, tombstones, frontiers and stops are the ViewStore contract
(tests/contract/test_view_store.py), run on every view store.
"""

from __future__ import annotations

from dataclasses import replace

from amends_core.ledger import Envelope, Family, MessageType, Payload, Status
from amends_core.view import Effect, ViewState, check_envelope
from tests.builders import K1, config, txn
from tests.unit.test_diff import committed

CFG = config([(K1, 100, 60, 0)])


def envs() -> list[Envelope]:
    # balance v1, status v1, balance v2 (withdrawn), balance v3 (restated)
    return committed([txn(qty=-1), txn(revision=2, kind="CANCEL", qty=0), txn(revision=3, qty=-2)])


def test_records_below_the_frontier_are_already_applied() -> None:
    e = envs()
    v = ViewState(CFG)
    v.apply(0, 0, e[0])
    assert v.apply(0, 0, e[1]).effect is Effect.ALREADY_APPLIED and len(v.rows) == 1


def test_each_message_type_accepts_only_its_own_payload_shape() -> None:
    """Every type against every payload shape: one shape fits each type, the rest stop the partition."""
    stated, status = envs()[0], envs()[1]
    assert (stated.output_id.family, status.output_id.family) == (Family.BALANCE, Family.STATUS)
    alert_id = replace(stated.output_id, family=Family.ALERT)
    shapes = {
        "balance": Payload(True, close=5),
        "alert": Payload(True, close=5, threshold=60),
        "withdrawn": Payload(False),
        "status": Payload(True, status=Status.READY),
    }
    fits = {
        MessageType.BALANCE_STATED: (stated.output_id, "balance"),
        MessageType.BALANCE_RETRACTED: (stated.output_id, "withdrawn"),
        MessageType.ALERT_RAISED: (alert_id, "alert"),
        MessageType.ALERT_RETRACTED: (alert_id, "withdrawn"),
        MessageType.KEY_STATUS_STATED: (status.output_id, "status"),
    }
    for t, (oid, fitting) in fits.items():
        for name, payload in shapes.items():
            env = replace(stated, output_id=oid, type=t, payload=payload)
            problem = check_envelope(CFG, 0, env)
            if name == fitting:
                assert problem is None, (t, name)
            else:
                assert problem == f"payload shape does not fit {t.value}", (t, name)


def test_an_untouched_key_projects_as_ready_with_no_rows() -> None:
    p = ViewState(CFG).projections()[K1]
    assert p.status.value == "READY" and p.balances == () and p.alerts == () and p.reasons == ()

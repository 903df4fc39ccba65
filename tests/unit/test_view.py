"""The materialized view: version rule, tombstones, frontiers, protocol errors."""

from __future__ import annotations

from dataclasses import replace

from amends_core.ledger import Envelope, Family, MessageType, Payload, Status
from amends_core.view import Effect, ViewState, check_envelope
from tests.builders import K1, config, records, txn
from tests.unit.test_diff import committed

CFG = config([(K1, 100, 60, 0)])


def envs() -> list[Envelope]:
    # balance v1, status v1, balance v2 (withdrawn), balance v3 (restated)
    return committed([txn(qty=-1), txn(revision=2, kind="CANCEL", qty=0), txn(revision=3, qty=-2)])


def balances(v: ViewState) -> list[Envelope]:
    return [e for e in v.rows.values() if e.output_id.family is Family.BALANCE]


def test_a_new_output_id_is_stored_and_the_frontier_advances_past_it() -> None:
    v = ViewState(CFG)
    d = v.apply(0, 0, envs()[0].to_bytes())
    assert d.effect is Effect.STORED and v.frontier(0) == 1


def test_a_higher_version_replaces_the_stored_one() -> None:
    e = envs()
    v = ViewState(CFG)
    v.apply(0, 0, e[0])
    v.apply(0, 1, e[2])
    assert balances(v)[0].version == 2


def test_an_identical_redelivery_is_a_duplicate_and_still_advances() -> None:
    e = envs()[0]
    v = ViewState(CFG)
    v.apply(0, 0, e)
    d = v.apply(0, 1, e.to_bytes())
    assert d.effect is Effect.DUPLICATE and v.frontier(0) == 2


def test_a_lower_version_is_ignored_and_still_advances() -> None:
    e = envs()
    v = ViewState(CFG)
    v.apply(0, 0, e[2])
    d = v.apply(0, 1, e[0])
    assert d.effect is Effect.STALE and balances(v)[0].version == 2 and v.frontier(0) == 2


def test_equal_version_with_different_content_stops_the_partition_before_the_record() -> None:
    e = envs()[0]
    v = ViewState(CFG)
    v.apply(0, 0, e)
    forged = replace(e, cause=replace(e.cause, offset=7))
    d = v.apply(0, 1, forged)
    assert d.effect is Effect.PROTOCOL_ERROR
    assert v.frontier(0) == 1 and 0 in v.stopped
    assert v.apply(0, 1, e).effect is Effect.STOPPED and v.frontier(0) == 1


def test_a_withdrawal_is_kept_as_a_tombstone_and_hidden_from_the_projection() -> None:
    e = envs()
    v = ViewState(CFG)
    for i, x in enumerate(e[:3]):
        v.apply(0, i, x)
    assert balances(v)[0].payload == Payload(False)
    assert v.projections()[K1].balances == ()


def test_a_stale_statement_cannot_resurrect_a_withdrawn_row() -> None:
    e = envs()
    v = ViewState(CFG)
    v.apply(0, 0, e[2])  # withdrawal v2
    v.apply(0, 1, e[0])  # stale statement v1
    assert v.projections()[K1].balances == ()


def test_a_legitimate_reappearance_uses_a_higher_version() -> None:
    e = envs()
    v = ViewState(CFG)
    for i, x in enumerate(e):
        v.apply(0, i, x)
    assert [b.close for b in v.projections()[K1].balances] == [98]


def test_records_below_the_frontier_are_already_applied() -> None:
    e = envs()
    v = ViewState(CFG)
    v.apply(0, 0, e[0])
    assert v.apply(0, 0, e[1]).effect is Effect.ALREADY_APPLIED and len(v.rows) == 1


def test_undecodable_or_misrouted_envelopes_are_protocol_errors() -> None:
    v = ViewState(CFG)
    assert v.apply(0, 0, b"not json").effect is Effect.PROTOCOL_ERROR
    w = ViewState(config([(K1, 100, 60, 1)], partitions=2))
    assert w.apply(0, 0, envs()[0]).effect is Effect.PROTOCOL_ERROR
    other_ns = ViewState(config([(K1, 100, 60, 0)], namespace="other"))
    assert other_ns.apply(0, 0, envs()[0]).effect is Effect.PROTOCOL_ERROR


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


def test_frontiers_are_per_output_partition() -> None:
    from tests.builders import K2

    cfg = config([(K1, 100, 60, 0), (K2, 5, 0, 1)], partitions=2)
    from amends_core.pipeline import MemoryPipeline

    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn(qty=-1)]))
    pipe.append(records([txn(key=K2, qty=-1)], partition=1))
    pipe.drain()
    assert pipe.view.frontier(0) == 2 and pipe.view.frontier(1) == 2

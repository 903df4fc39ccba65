"""Versioned output: message types, versions, withdrawals, ordering, equality rules."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from amends_core import timefmt
from amends_core.ledger import Envelope, Family, MessageType, Payload, Status
from amends_core.pipeline import MemoryPipeline
from tests.builders import K1, K2, config, day, records, txn


def committed(objs: list[dict[str, Any]], keys: Any = None) -> list[Envelope]:
    cfg = config(keys or [(K1, 100, 60, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records(objs))
    pipe.drain()
    return [r.envelope for r in pipe.committed]


def run_keys() -> list[Envelope]:
    """A history with every message type, on keys whose names need escaping."""
    from amends_core.ledger import StockKey

    odd = StockKey('we"ird/\\item', "dépôt,1")
    objs = [
        txn("A", qty=-50, valid=day(1)),
        txn("B", qty=-20, valid=day(2)),
        txn("A", revision=2, qty=-30, valid=day(1)),
        txn("B", revision=2, kind="CANCEL", qty=0),
        txn("C", qty=-1, key=odd),
        txn("C", qty=-2, key=odd),
    ]
    return committed(objs, [(K1, 100, 60, 0), (odd, 5, 1, 0)])


def summary(envs: list[Envelope]) -> list[tuple[str, str | None, int]]:
    return [
        (e.type.value, None if e.output_id.day is None else timefmt.format_day(e.output_id.day), e.version)
        for e in envs
    ]


def test_the_first_accepted_input_states_the_key_status_explicitly() -> None:
    envs = committed([txn(kind="CANCEL", qty=0)])
    assert summary(envs) == [("KeyStatusStated", None, 1)]
    assert envs[0].payload == Payload(True, status=Status.READY)


def test_versions_start_at_one_per_output_id_and_increase_by_one() -> None:
    envs = committed([txn(qty=-1), txn(revision=2, qty=-2), txn(revision=3, qty=-3)])
    bal = [e.version for e in envs if e.output_id.family is Family.BALANCE]
    assert bal == [1, 2, 3]


def test_balance_appears_or_changes_as_balance_stated() -> None:
    envs = committed([txn(qty=-1), txn(revision=2, qty=-2)])
    assert [e.type for e in envs if e.output_id.family is Family.BALANCE] == [MessageType.BALANCE_STATED] * 2


def test_a_disappearing_day_is_withdrawn_explicitly() -> None:
    envs = committed([txn(qty=-1), txn(revision=2, kind="CANCEL", qty=0)])
    last = envs[-1]
    assert last.type is MessageType.BALANCE_RETRACTED and last.payload == Payload(False) and last.version == 2


def test_a_disappearing_crossing_is_withdrawn_explicitly() -> None:
    envs = committed([txn(qty=-50), txn(revision=2, qty=-10)])
    alerts = [(e.type, e.version) for e in envs if e.output_id.family is Family.ALERT]
    assert alerts == [(MessageType.ALERT_RAISED, 1), (MessageType.ALERT_RETRACTED, 2)]


def test_a_changed_alert_payload_is_raised_again_with_a_new_version() -> None:
    envs = committed([txn(qty=-50), txn(revision=2, qty=-55)])
    alerts = [(e.type, e.version, e.payload.close) for e in envs if e.output_id.family is Family.ALERT]
    assert alerts == [(MessageType.ALERT_RAISED, 1, 50), (MessageType.ALERT_RAISED, 2, 45)]


def test_a_legitimate_reappearance_continues_the_version_sequence() -> None:
    envs = committed([txn(qty=-1), txn(revision=2, kind="CANCEL", qty=0), txn(revision=3, qty=-1)])
    assert summary(envs)[-1] == ("BalanceStated", "2026-01-01", 3)


def test_status_changes_are_key_status_stated_and_come_last() -> None:
    envs = committed([txn("A", qty=-1), txn("B", qty=-5, valid=day(2)), txn("B", qty=-6, valid=day(2)), txn("B", revision=2, qty=-7, valid=day(3))])
    tail = summary(envs)[-3:]
    # resolution moves B from Jan 2 (frozen 94) to Jan 3: repairs first, then READY
    assert tail[-1] == ("KeyStatusStated", None, 3)
    assert tail[:-1] == [("BalanceRetracted", "2026-01-02", 2), ("BalanceStated", "2026-01-03", 1)]


def test_a_higher_revision_with_unchanged_facts_allocates_no_version() -> None:
    envs = committed([txn(qty=-1, valid=day(1, 1)), txn(revision=2, qty=-1, valid=day(1, 2))])
    assert len(envs) == 2  # balance v1 + status v1 only


def test_business_ids_are_ordered_by_encoded_output_id() -> None:
    envs = committed([txn(f"T{i}", qty=-10, valid=day(i)) for i in range(1, 12)] + [txn("T1", revision=2, qty=-1, valid=day(1))])
    last_batch = [e for e in envs if e.cause.txn_id == "T1" and e.cause.revision == 2]
    business = [e for e in last_batch if e.output_id.family is not Family.STATUS]
    assert [e.output_id.encoded for e in business] == sorted(e.output_id.encoded for e in business)
    assert len(business) > 11


def test_encoded_output_ids_cannot_collide_through_separators() -> None:
    from amends_core.ledger import OutputID, StockKey

    a = OutputID("n", Family.BALANCE, StockKey("a/b", "c"), 1)
    b = OutputID("n", Family.BALANCE, StockKey("a", "b/c"), 1)
    assert a.encoded != b.encoded


def test_the_cause_names_the_triggering_record() -> None:
    envs = committed([txn(qty=-1), txn(revision=2, qty=-2)])
    c = envs[-1].cause
    assert (c.offset, c.txn_id, c.revision, c.partition) == (2 - 1, "T1", 2, 0)


def test_payload_equality_ignores_cause_while_envelope_equality_does_not() -> None:
    from dataclasses import replace

    e = committed([txn(qty=-1)])[0]
    other_cause = replace(e, cause=replace(e.cause, offset=e.cause.offset + 1))
    assert other_cause.payload == e.payload
    assert other_cause != e


def test_diff_compares_against_committed_intent_not_the_view() -> None:
    cfg = config([(K1, 100, 60, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn(qty=-1)]))
    pipe.run_worker(0)  # committed, nothing published or viewed yet
    pipe.append(records([txn(revision=2, qty=-2)], start=1))
    pipe.run_worker(0)
    bal = [r.envelope.version for r in pipe.committed if r.envelope.output_id.family is Family.BALANCE]
    assert bal == [1, 2]


def test_other_keys_are_untouched_by_a_key_s_repair() -> None:
    envs = committed([txn(qty=-1), txn(key=K2, qty=-1), txn(revision=2, qty=-2)], [(K1, 100, 60, 0), (K2, 10, 0, 0)])
    last = [e for e in envs if e.cause.revision == 2]
    assert {e.output_id.key for e in last} == {K1}


_ID_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)


@settings(max_examples=400, deadline=None)
@given(_ID_TEXT, _ID_TEXT, _ID_TEXT, st.one_of(st.none(), _ID_TEXT))
def test_output_id_text_is_compact_json_of_the_same_array(
    item: str, location: str, namespace: str, day: str | None
) -> None:
    """The direct writer of an output ID's array against ``compact_json`` itself, on any
    strings: quotes, backslashes, control characters, non-ASCII and lone surrogates."""
    from amends_core.ledger import compact_json, output_id_text

    for family in Family:
        want = compact_json([namespace, family.value, item, location, day])
        assert output_id_text(namespace, family.value, item, location, day) == want


def test_encoded_output_id_is_compact_json_on_named_edge_cases() -> None:
    from amends_core.ledger import OutputID, StockKey, compact_json

    for item, loc in [('we"ird/\\item', "dépôt,1"), ("\x00\x1f\x7f", "\u2028\ud800"), ("", "😀")]:
        for day_value in (None, 0, -1, 20_000):
            oid = OutputID("ns\n", Family.STATUS if day_value is None else Family.ALERT, StockKey(item, loc), day_value)
            day_text = None if day_value is None else timefmt.format_day(day_value)
            assert oid.encoded == compact_json(["ns\n", oid.family.value, item, loc, day_text])


def test_a_restatement_carries_the_committed_output_id_and_status_ids_are_made_once() -> None:
    """Envelopes of an output already committed reuse its output ID (equal by value; the same
    object, which dictionaries keyed by it find by identity), and a key's status output ID is
    made once and remembered."""
    from amends_core.ledger import OutputID

    envs = committed([txn("A", qty=-1), txn("A", revision=2, qty=-2), txn("B", qty=-3, valid=day(2))])
    first_day = next(e.output_id.day for e in envs if e.output_id.family is Family.BALANCE)
    balances = [e for e in envs if e.output_id.family is Family.BALANCE and e.output_id.day == first_day]
    assert [e.version for e in balances] == [1, 2]
    assert balances[1].output_id is balances[0].output_id
    status = [e for e in envs if e.output_id.family is Family.STATUS]
    assert status and status[0].output_id == OutputID(status[0].output_id.namespace, Family.STATUS, K1, None)
    again = committed([txn("A", qty=-1)])
    assert [e.output_id for e in again if e.output_id.family is Family.STATUS][0] is status[0].output_id


def test_remembered_status_ids_stay_bounded(monkeypatch: Any) -> None:
    from amends_core import diff

    monkeypatch.setattr(diff, "_STATUS_IDS_REMEMBERED", 1)
    monkeypatch.setattr(diff, "_status_ids", {})
    envs = run_keys()
    assert len(diff._status_ids) <= 1
    assert summary(envs) == summary(committed_without_memory())


def committed_without_memory() -> list[Envelope]:
    """``run_keys`` with every remembered status output ID forgotten first."""
    from amends_core import diff

    diff._status_ids.clear()
    return run_keys()

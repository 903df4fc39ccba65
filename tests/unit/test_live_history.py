"""The live generator of `amends up --live`: valid history, late corrections, alerts that come and go."""

from __future__ import annotations

import random

from amends_core import wire
from amends_core.ledger import Coordinates, Kind, Record
from amends_core.oracle import compute
from amends_core.timefmt import NS_PER_DAY, parse_day
from amends_pipeline.commands._common import FIXTURES
from amends_pipeline.inputs import load_config
from amends_pipeline.live import LiveHistory

CFG = load_config(FIXTURES / "worked-example" / "config.json")
FIRST = parse_day("2026-01-03")


def _days(seed: int, n: int) -> list[list]:
    h = LiveHistory(CFG, random.Random(seed), FIRST)
    return [h.next_day() for _ in range(n)]


def _oracle(days: list[list]):
    flat = [r for day in days for r in day]
    records = [Record(r.value, r.key, Coordinates(CFG.source_incarnation, r.partition, i)) for i, r in enumerate(flat)]
    return compute(CFG, {0: records}).result


def test_live_history_is_accepted_whole_no_rejection_and_no_conflict() -> None:
    days = _days(11, 60)
    result = _oracle(days)
    assert result.rejections == () and result.conflicts == ()
    for day in days:
        for r in day:
            assert wire.decode_transaction(r.value) == r.txn
            assert wire.decode_transport_key(r.key) == r.txn.stock_key and r.partition == 0


def test_each_day_brings_new_movements_on_that_day_and_late_corrections_only_of_earlier_days() -> None:
    days = _days(5, 60)
    first_seen: dict[str, tuple[int, int]] = {}
    kinds = set()
    for i, day in enumerate(days):
        new = [r for r in day if not r.correction]
        assert len(new) == 3 and {r.txn.valid_ns // NS_PER_DAY for r in new} == {FIRST + i}
        for r in new:
            assert r.txn.kind == Kind.NEW and r.txn.revision == 1
            first_seen[r.txn.txn_id] = (i, 1)
        for r in day:
            if r.correction:
                was_day, revision = first_seen[r.txn.txn_id]
                assert was_day < i and r.txn.revision == revision + 1
                first_seen[r.txn.txn_id] = (was_day, r.txn.revision)
                kinds.add(r.txn.kind)
    assert kinds == {Kind.AMEND, Kind.CANCEL}


def test_the_same_seed_gives_the_same_live_history() -> None:
    assert [[r.value for r in d] for d in _days(9, 30)] == [[r.value for r in d] for d in _days(9, 30)]
    assert [[r.value for r in d] for d in _days(9, 30)] != [[r.value for r in d] for d in _days(10, 30)]


def test_live_stock_swings_around_the_reorder_threshold_so_alerts_come_and_go() -> None:
    (key,) = _oracle(_days(2, 60)).keys
    threshold = CFG.keys[0].reorder_threshold
    closes = [b.close for b in key.balances]
    assert any(c < threshold for c in closes) and any(c >= threshold for c in closes)
    assert 0 < len(key.alerts) < len(closes)

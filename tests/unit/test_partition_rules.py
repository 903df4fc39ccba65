"""The partition rules every store shares (amends_core.fence, .preflight, verify.partition_reasons).

Each store calls these one copy; the contract suites over the ports (tests/contract,
run on the memory, PostgreSQL and simulator stores) show the stores apply them,
these show the rules themselves.
"""

from __future__ import annotations

import hashlib

import pytest

from amends_core import fold, preflight
from amends_core.errors import FenceError, FrontierMismatch, ReplayMismatch, SourceMismatch
from amends_core.fence import check_coordinates, guard
from amends_core.ports import Token
from amends_core.verify import partition_reasons
from tests.builders import K1, config, record, txn, value

CFG = config([(K1, 100, 60, 0)])
TOK = Token(CFG.namespace, CFG.digest(), 0, 3)


def _guard(token: Token = TOK, **kw: object) -> None:
    args: dict[str, object] = {
        "namespace": CFG.namespace, "digest": CFG.digest(), "epoch": 3, "installed": 7, "expected_next": 7,
    }
    args.update(kw)
    guard(token, **args)  # type: ignore[arg-type]


def test_the_fence_admits_the_installed_owner_at_the_installed_frontier() -> None:
    _guard()


@pytest.mark.parametrize(
    ("token", "kw", "error", "text"),
    [
        (Token("other", CFG.digest(), 0, 3), {}, FenceError, "another namespace"),
        (Token(CFG.namespace, "d" * 64, 0, 3), {}, FenceError, "another namespace or configuration"),
        (TOK, {"epoch": 4}, FenceError, "epoch 3 was replaced by 4 on partition 0"),
        (TOK, {"installed": 8}, FrontierMismatch, "expected frontier 7, installed 8"),
    ],
)
def test_the_fence_refuses_a_foreign_or_replaced_owner_and_a_moved_frontier(
    token: Token, kw: dict[str, object], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        _guard(token, **kw)


def test_a_record_must_come_from_the_source_the_partition_and_above_the_frontier() -> None:
    r = record(value(txn()), 5, key=K1.transport_key())
    src = r.coords.source
    check_coordinates(r, source=src, partition=0, frontier=5)
    for kw, text in [
        ({"source": "elsewhere", "partition": 0, "frontier": 5}, "record from source"),
        ({"source": src, "partition": 1, "frontier": 5}, "offered to owner of 1"),
        ({"source": src, "partition": 0, "frontier": 6}, "offset 5 is below the frontier 6"),
    ]:
        with pytest.raises(SourceMismatch, match=text):
            check_coordinates(r, **kw)  # type: ignore[arg-type]


def test_a_replay_refuses_a_record_of_another_partition() -> None:
    r = record(value(txn()), 0, key=K1.transport_key())
    with pytest.raises(ReplayMismatch, match="record of partition 0 in a replay of 1"):
        preflight.check_one_partition(1, [r])


def _replayed(r: object, **kw: object) -> None:
    states = {K1: fold.new_key_state(CFG.keys[0])}
    args: dict[str, object] = {
        "frontier": 10, "state_of": states.__getitem__, "latest": {}.get, "held_rejection": lambda: None,
    }
    args.update(kw)
    preflight.check_replayed(CFG, r, **args)  # type: ignore[arg-type]


def test_a_replayed_record_must_be_consumed_and_reflected() -> None:
    r = record(value(txn()), 4, key=K1.transport_key())
    with pytest.raises(ReplayMismatch, match="offset 4 of partition 0 has not been consumed"):
        _replayed(r, frontier=4)
    with pytest.raises(ReplayMismatch, match="has not been consumed"):
        _replayed(r, frontier=None)
    with pytest.raises(ReplayMismatch, match="no matching evidence at 0/4"):
        _replayed(r)  # consumed, but the state holds no evidence of it
    bad = record(b"{", 4, key=K1.transport_key())
    with pytest.raises(ReplayMismatch, match="no matching quarantine record at 0/4"):
        _replayed(bad)


def test_an_operator_skipped_record_is_compared_by_its_bytes_only() -> None:
    r = record(value(txn()), 4, key=K1.transport_key())
    _replayed(r, skipped_sha256=hashlib.sha256(r.value).hexdigest())
    with pytest.raises(ReplayMismatch, match="operator-skipped record at 0/4 has other bytes"):
        _replayed(r, skipped_sha256="0" * 64)


def test_the_boundary_rule_names_each_unfinished_stage() -> None:
    assert partition_reasons(2, worker_frontier=5, source_end=5, pending=0, view_frontier=9, output_end=9) == []
    got = partition_reasons(2, worker_frontier=4, source_end=5, pending=3, view_frontier=8, output_end=9)
    assert got == [
        "source partition 2: worker frontier 4, source end 5",
        "partition 2: 3 outbox rows not yet published (not yet acknowledged by a relay)",
        "output partition 2: view frontier 8, output end 9",
    ]

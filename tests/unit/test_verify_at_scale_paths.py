"""The shortcuts that make a boundary's check cheap at ten million records change no verdict.

Verification compares a key's rows one by one only when its rows differ, accepts the
store's rejections at once when they come in the oracle's order, projects the view
from plain tuples, and the oracle's parts are combined without sorting rejections
that each part already lists in offset order. Each shortcut is held here against the
path it skips: shuffled input, one changed value, one changed reason.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from amends_core.ledger import BalanceRow, Config, Envelope, Family, Payload, RejectReason
from amends_core.oracle import OracleResult
from amends_core.oracle.partial import combine, compute_partition
from amends_core.verify import Boundary, DiffKind, VerifyStatus, verify
from amends_core.view import Projected, project, reason_counts
from benchmarks.oracle_bench import generate
from benchmarks.snapshot_bench import view_of


@pytest.fixture(scope="module")
def history() -> tuple[Config, OracleResult]:
    cfg, by_partition = generate(3_000, keys=20, days=30, seed=5)
    parts = [compute_partition(cfg, p, by_partition.get(p, [])) for p in range(cfg.partitions)]
    return cfg, combine(cfg, parts)


def _check(cfg: Config, oracle: OracleResult, view: list[Envelope], quarantine: list) -> object:
    return verify(cfg, oracle, view, quarantine, list(oracle.conflicts), Boundary(True))


def test_a_view_equal_to_the_oracle_in_any_order_has_no_difference_and_counts_every_row(
    history: tuple[Config, OracleResult],
) -> None:
    cfg, oracle = history
    assert oracle.rejections, "the generated history must reject some records"
    view = view_of(cfg, oracle)
    random.Random(1).shuffle(view)
    report = _check(cfg, oracle, view, list(reversed(oracle.rejections)))
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS or report.status is VerifyStatus.BLOCKED
    assert report.differences == ()
    ready = [p for p in oracle.result.keys if p.status.value == "READY"]
    assert report.counts is not None
    assert report.counts.rows == sum(len(p.balances) + len(p.alerts) for p in ready)
    assert project(cfg, view) == project(cfg, view_of(cfg, oracle))


def test_one_changed_close_is_one_balance_difference(history: tuple[Config, OracleResult]) -> None:
    cfg, oracle = history
    view = view_of(cfg, oracle)
    ready = {p.key for p in oracle.result.keys if p.status.value == "READY"}
    at = next(i for i, e in enumerate(view) if e.output_id.family is Family.BALANCE and e.output_id.key in ready)
    env = view[at]
    assert env.payload.close is not None
    view[at] = dataclasses.replace(env, payload=Payload(True, close=env.payload.close + 1))
    report = _check(cfg, oracle, view, list(oracle.rejections))
    assert report.status is (VerifyStatus.BLOCKED if oracle.blocked else VerifyStatus.DRIFT)
    assert [(d.kind, d.subject) for d in report.differences] == [(DiffKind.BALANCE, env.output_id.encoded)]


def test_one_changed_reason_is_one_rejection_difference_whatever_the_order(
    history: tuple[Config, OracleResult],
) -> None:
    cfg, oracle = history
    quarantine = list(oracle.rejections)
    first = quarantine[0]
    other = next(r for r in RejectReason if r is not first.reason)
    quarantine[0] = dataclasses.replace(first, reason=other)
    for order in (quarantine, list(reversed(quarantine))):
        report = _check(cfg, oracle, view_of(cfg, oracle), order)
        assert [d.kind for d in report.differences] == [DiffKind.REJECTION]


def test_parts_whose_rejections_are_out_of_order_combine_sorted(history: tuple[Config, OracleResult]) -> None:
    cfg, oracle = history
    _, by_partition = generate(3_000, keys=20, days=30, seed=5)
    parts = [compute_partition(cfg, p, by_partition.get(p, [])) for p in range(cfg.partitions)]
    shuffled = [dataclasses.replace(p, rejections=tuple(reversed(p.rejections))) for p in parts]
    got = combine(cfg, shuffled)
    assert got.rejections == oracle.rejections
    assert [(r.record.coords.partition, r.record.coords.offset) for r in got.rejections] == sorted(
        (r.record.coords.partition, r.record.coords.offset) for r in oracle.rejections
    )


def test_projected_rows_are_in_day_order_whatever_the_envelope_order(history: tuple[Config, OracleResult]) -> None:
    cfg, oracle = history
    view = view_of(cfg, oracle)
    random.Random(2).shuffle(view)
    for p in project(cfg, view).values():
        assert list(p.balances) == sorted(p.balances, key=lambda b: b.day)
        assert all(isinstance(b, BalanceRow) for b in p.balances)
        assert [a.day for a in p.alerts] == sorted(a.day for a in p.alerts)


@pytest.mark.parametrize("change", [False, True])
def test_a_view_given_already_projected_is_compared_as_its_envelopes_are(
    history: tuple[Config, OracleResult], change: bool
) -> None:
    cfg, oracle = history
    view = view_of(cfg, oracle)
    if change:
        ready = {p.key for p in oracle.result.keys if p.status.value == "READY"}
        at = next(i for i, e in enumerate(view) if e.output_id.family is Family.BALANCE and e.output_id.key in ready)
        env = view[at]
        assert env.payload.close is not None
        view[at] = dataclasses.replace(env, payload=dataclasses.replace(env.payload, close=env.payload.close - 1))
    rows = list(oracle.rejections)
    by_envelopes = _check(cfg, oracle, view, rows)
    projected = Projected(project(cfg, view), reason_counts(view))
    assert verify(cfg, oracle, projected, rows, list(oracle.conflicts), Boundary(True)) == by_envelopes
    assert bool(by_envelopes.differences) is change

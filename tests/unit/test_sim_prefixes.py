"""The oracle over source prefixes from one classification equals ``compute`` over each prefix."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from amends_core.ledger import INT64_MAX, CloseOutOfRange, Record
from amends_core.oracle.compute import OracleInputError, OracleResult, compute
from amends_core.sim.generate import generate
from amends_core.sim.model import Actor, Model, Step, sorted_source
from amends_core.sim.prefixes import classify_many
from amends_core.sim.run import classify_batch, run_trace
from amends_core.sim.safety import SafetyViolation
from tests.builders import day, record, txn
from tests.unit.test_scenarios import CFG, K3, W, src


def _either(f: object) -> OracleResult | tuple[str, str]:
    try:
        return f()  # type: ignore[operator, no-any-return]
    except CloseOutOfRange as e:
        return ("close-out-of-range", str(e))


def _all_prefixes_agree(cfg: object, source: dict[int, list[Record]], classified: object) -> int:
    n = 0
    for counts in itertools.product(*(range(len(source[p]) + 1) for p in sorted(source))):
        if not any(counts):
            continue
        prefix = {p: source[p][:k] for p, k in enumerate(counts)}
        want = _either(lambda: compute(cfg, prefix))  # type: ignore[arg-type]  # noqa: B023
        got = _either(lambda: classified.derive_prefix(counts))  # type: ignore[attr-defined]  # noqa: B023
        assert got == want, counts
        n += 1
    return n


def test_every_prefix_of_generated_sources_classified_in_one_batch_equals_compute() -> None:
    traces = [generate(seed, max_records=9) for seed in range(24)]
    checked = 0
    for t, c in zip(traces, classify_batch(traces), strict=True):
        assert c is not None
        checked += _all_prefixes_agree(t.cfg, sorted_source(t.cfg, t.records), c)
    assert checked > 150


HOSTILE = (
    src(
        txn("T1", 1, "NEW", -50),
        b"junk",
        b"\xff\xfe not utf-8",
        txn("T1", 1, "NEW", -40),  # a same-revision conflict
        txn("T2", 1, "NEW", -5, key=K3),  # routed to partition 1
        txn("T3", 1, "NEW", -5, valid=day(3)),
    )
    + [replace(record(txn("T4", 1, "NEW", -1), 6), reserved_header=True)]
    + src(txn("T9", 1, "NEW", -7, key=K3), txn("T9", 2, "AMEND", 3, key=K3), partition=1)
)


def test_rejections_conflicts_and_reserved_headers_agree_on_every_prefix() -> None:
    source = sorted_source(CFG, HOSTILE)
    [c] = classify_many(CFG, [source])
    assert c is not None
    assert _all_prefixes_agree(CFG, source, c) == 8 * 3 - 1


def test_a_close_out_of_range_is_raised_for_exactly_the_prefixes_compute_raises_for() -> None:
    source = sorted_source(CFG, src(txn("T1", 1, "NEW", 10), txn("T2", 1, "NEW", INT64_MAX), txn("T2", 2, "CANCEL", 0)))
    [c] = classify_many(CFG, [source])
    assert c is not None
    assert _all_prefixes_agree(CFG, source, c) == 3
    with pytest.raises(CloseOutOfRange):
        c.derive_prefix([2, 0])


def test_a_source_compute_refuses_is_not_classified_and_each_prefix_computes_on_its_own() -> None:
    alien = replace(record(txn("T2", 1, "NEW", -5), 1), coords=replace(record(txn(), 1).coords, source="other"))
    good = record(txn("T1", 1, "NEW", -5), 0)
    assert classify_many(CFG, [{0: [good, alien], 1: []}, {0: [good], 1: []}])[0] is None
    m = Model(CFG, [good, alien])
    m.step(W())
    assert m.oracle_at([1, 0]) == compute(CFG, {0: [good], 1: []})
    with pytest.raises(OracleInputError):
        m.oracle_at([2, 0])


def test_a_classification_of_another_source_is_ignored_and_a_grown_source_is_classified_again() -> None:
    first = src(txn("T1", 1, "NEW", -5))
    m = Model(CFG, first)
    [other] = classify_many(CFG, [sorted_source(CFG, src(txn("T1", 1, "NEW", -6)))])
    m.preset_classified(other)
    m.step(W())
    assert m.oracle_at([1, 0]) == compute(CFG, {0: first, 1: []})
    more = src(txn("T2", 1, "NEW", -7), start=1)
    m.append(more)
    m.step(W())
    assert m.oracle_at([2, 0]) == compute(CFG, {0: first + more, 1: []})


def test_a_replaced_oracle_is_used_as_it_is_and_still_fires() -> None:
    class Lying(Model):
        def oracle(self, by_partition: object) -> OracleResult:  # type: ignore[override]
            return compute(self.cfg, {p: [] for p in range(self.cfg.partitions)})

    t = generate(3)
    r = run_trace(t, Lying, classified=classify_batch([t])[0])
    assert r.failure is not None and r.failure.check == "worker-oracle"
    m = Lying(CFG, src(txn("T1", 1, "NEW", -5)))
    with pytest.raises(SafetyViolation):
        m.step(Step(Actor.WORKER))

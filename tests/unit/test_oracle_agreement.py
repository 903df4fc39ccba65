"""Oracle and incremental engine agree: on the worked example and on generated histories.

Generated histories mix several keys on two partitions, amendments, moves
between days, cancellations and reactivations, canonical duplicates,
same-revision conflicts and their resolution by higher revisions, malformed
values, wrong transport keys and misrouted records. ``AMENDS_ORACLE_EXAMPLES``
sets the default example count; the slow variant runs thousands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from amends_core import demo, fold, wire
from amends_core.ledger import Coordinates, Record, Rejection, StockKey
from amends_core.oracle import compute
from amends_core.pipeline import MemoryPipeline, compute_incremental
from amends_core.verify import VerifyStatus, verify_memory
from tests.builders import K1, K2, K3, SOURCE, config, day, txn, value

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"
EXAMPLES = int(os.environ.get("AMENDS_ORACLE_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
# "Thousands of histories" run in every CI build (about 35 s); nightly raises the count.
MANY = settings(
    max_examples=int(os.environ.get("AMENDS_ORACLE_MANY_EXAMPLES", "1000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

CFG = config([(K1, 40, 30, 0), (K2, 0, -5, 0), (K3, 15, 10, 1)], partitions=2)
UNKNOWN = StockKey("PART-9", "DEPOT-Z")
TXN_IDS = ["A", "B", "C", "D"]

# ---------------------------------------------------------------- the worked example


def test_oracle_agrees_with_the_incremental_engine_at_every_worked_example_stage() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    stages = demo.load_stages((FIX / "stages.json").read_bytes(), lambda n: (FIX / n).read_bytes())
    results = demo.run(cfg, stages, lambda c, src: compute(c, src).result)
    assert len(results) == 3
    for r in results:
        assert r.oracle_agrees, r.name
        assert r.oracle == r.expected["view"], r.name


def test_oracle_matches_each_cumulative_fixture_stage_directly() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    manifest = json.loads((FIX / "stages.json").read_text())
    history: list[Record] = []
    for stage in manifest["stages"]:
        for line in (FIX / stage["source"]).read_bytes().splitlines():
            if line.strip():
                t = wire.decode_transaction(line)
                assert not isinstance(t, wire.DecodeError)
                coords = Coordinates(cfg.source_incarnation, 0, len(history))
                history.append(Record(line, t.stock_key.transport_key(), coords))
        expected = json.loads((FIX / stage["expected"]).read_text())["view"]
        out = compute(cfg, {0: list(history)})
        assert out.result.to_json() == expected, stage["name"]
        assert out.result == compute_incremental(cfg, {0: list(history)}), stage["name"]


# ---------------------------------------------------------------- generated histories


@st.composite
def assertion(draw: st.DrawFn, earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """A fresh assertion, or one derived from an earlier one (duplicate, rival, successor)."""
    if earlier and draw(st.integers(0, 2)) == 0:
        base = dict(draw(st.sampled_from(earlier)))
        how = draw(st.sampled_from(["duplicate", "rival", "successor", "cancel", "move"]))
        if how == "duplicate":  # canonical duplicate: only source time differs
            base["source_time"] = draw(
                st.sampled_from(["2026-03-01T00:00:00Z", "2026-03-02T00:00:00+01:00"])
            )
        elif how == "rival":  # same revision, distinct candidate
            if base["kind"] == "CANCEL":
                base["kind"], base["qty"] = "NEW", -1
            else:
                base["qty"] += draw(st.sampled_from([-1, 1]))
        elif how == "successor":  # higher revision, active again
            base["revision"] += draw(st.integers(1, 2))
            base["kind"] = draw(st.sampled_from(["NEW", "AMEND"]))
            base["qty"] = draw(st.integers(-20, 20))
        elif how == "cancel":
            base["revision"] += draw(st.integers(0, 1))
            base["kind"], base["qty"] = "CANCEL", 0
        else:  # move between days with a higher revision
            base["revision"] += 1
            base["kind"] = "AMEND"
            base["valid_time"] = day(draw(st.integers(1, 6)), draw(st.integers(0, 23)))
        return base
    kind = draw(st.sampled_from(["NEW", "NEW", "AMEND", "CANCEL"]))
    return txn(
        txn_id=draw(st.sampled_from(TXN_IDS)),
        revision=draw(st.integers(1, 3)),
        kind=kind,
        qty=0 if kind == "CANCEL" else draw(st.integers(-20, 20)),
        valid=day(draw(st.integers(1, 6)), draw(st.integers(0, 23))),
        key=draw(st.sampled_from([K1, K1, K2, K3])),
    )


def _mutate(draw: st.DrawFn, raw: bytes) -> bytes:
    data = bytearray(raw)
    pos = draw(st.integers(0, len(data) - 1))
    op = draw(st.integers(0, 2))
    if op == 0:
        del data[pos]
    elif op == 1:
        data[pos] = draw(st.sampled_from(b'"{}:,0x\\\xff'))
    else:
        data[pos:pos] = b"\\u0000"
    return bytes(data)


@st.composite
def histories(draw: st.DrawFn) -> dict[int, list[Record]]:
    earlier: list[dict[str, Any]] = []
    by_partition: dict[int, list[Record]] = {0: [], 1: []}
    next_offset = {0: 0, 1: 0}
    for _ in range(draw(st.integers(1, 24))):
        obj = draw(assertion(earlier))
        earlier.append(obj)
        sk = StockKey(obj["stock_key"]["item"], obj["stock_key"]["location"])
        kc = CFG.key_config(sk)
        partition = kc.partition if kc is not None else draw(st.integers(0, 1))
        raw = value(obj)
        key: bytes | None = sk.transport_key()
        flaw = draw(st.integers(0, 19))
        if flaw == 0:
            raw = _mutate(draw, raw)
        elif flaw == 1:
            partition = 1 - partition  # misrouted
        elif flaw == 2:
            key = draw(st.sampled_from([None, b"junk", K2.transport_key(), b'["PART-1"]']))
        elif flaw == 3:
            obj = dict(obj, revision=0)
            raw = value(obj)
        elif flaw == 4:
            raw = value(dict(obj, stock_key={"item": UNKNOWN.item, "location": UNKNOWN.location}))
            key = UNKNOWN.transport_key()
        elif flaw == 5:
            raw = value(dict(obj, kind="CANCEL", qty=3))
        next_offset[partition] += draw(st.integers(1, 2))  # gaps are allowed
        coords = Coordinates(SOURCE, partition, next_offset[partition])
        by_partition[partition].append(Record(raw, key, coords))
    return by_partition


def check_agreement(by_partition: dict[int, list[Record]]) -> None:
    oracle = compute(CFG, by_partition)
    pipe = MemoryPipeline(CFG)
    for recs in by_partition.values():
        pipe.append(recs)
    pipe.drain()
    assert oracle.result == pipe.result()
    assert oracle.result == compute_incremental(CFG, by_partition)
    held = tuple(sorted(pipe.store.rejections, key=lambda r: r.record.coords))
    assert oracle.rejections == held  # raw records and reasons
    report = verify_memory(pipe)
    event(f"status {report.status.value}")
    event(f"historical conflicts: {bool(oracle.conflicts)}")
    assert report.differences == ()
    assert report.status in (
        VerifyStatus.PASS,
        VerifyStatus.PASS_WITH_EXCLUSIONS,
        VerifyStatus.BLOCKED,
    )


@SETTINGS
@given(histories())
def test_oracle_and_incremental_engine_agree_on_generated_histories(
    by_partition: dict[int, list[Record]],
) -> None:
    check_agreement(by_partition)


@pytest.mark.slow
@MANY
@given(histories())
def test_oracle_and_incremental_engine_agree_on_thousands_of_histories(
    by_partition: dict[int, list[Record]],
) -> None:
    check_agreement(by_partition)


# ---------------------------------------------------------------- rejection classification


@st.composite
def hostile_records(draw: st.DrawFn) -> list[Record]:
    out = []
    for offset in range(draw(st.integers(1, 10))):
        obj = draw(assertion([]))
        if draw(st.booleans()):
            obj = dict(
                obj,
                **draw(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "txn_id": st.sampled_from(["", "A"]),
                            "revision": st.sampled_from([0, -1, 1, 2]),
                            "kind": st.sampled_from(["NEW", "X", "cancel", "CANCEL"]),
                            "qty": st.integers(-2, 2),
                            "valid_time": st.sampled_from(
                                [
                                    "2025-12-31T23:59:59Z",
                                    "2026-01-01T00:00:00Z",
                                    "0001-01-01T00:00:00Z",
                                ]
                            ),
                            "stock_key": st.sampled_from(
                                [
                                    {"item": "", "location": "L"},
                                    {"item": UNKNOWN.item, "location": UNKNOWN.location},
                                    {"item": K3.item, "location": K3.location},
                                ]
                            ),
                        },
                    )
                ),
            )
        raw = value(obj)
        if draw(st.integers(0, 3)) == 0:
            raw = _mutate(draw, raw)
        sk = obj["stock_key"]
        key = draw(
            st.sampled_from(
                [
                    StockKey(sk["item"], sk["location"]).transport_key(),
                    K1.transport_key(),
                    None,
                    b"\xff",
                    b'["a","b","c"]',
                ]
            )
        )
        out.append(Record(raw, key, Coordinates(SOURCE, draw(st.integers(0, 1)), offset)))
    return out


@SETTINGS
@given(hostile_records())
def test_the_oracle_classifies_every_record_as_fold_validate_does(recs: list[Record]) -> None:
    by_partition: dict[int, list[Record]] = {0: [], 1: []}
    for r in recs:
        by_partition[r.coords.partition].append(r)
    # Every record sits alone in its history as far as classification goes: the
    # reason does not depend on other records, so one oracle call covers all.
    out = compute(CFG, by_partition)
    mine = {r.record.coords: r.reason for r in out.rejections}
    for r in recs:
        verdict = fold.validate(CFG, r)
        expected = verdict.reason if isinstance(verdict, Rejection) else None
        assert mine.get(r.coords) == expected, (r, verdict)

"""Verification statuses, their precedence, the differences they keep, and ``accepts``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from amends_core.ledger import (
    Conflict,
    Envelope,
    Family,
    OutputID,
    Payload,
    Record,
    Rejection,
    RejectReason,
    Status,
)
from amends_core.oracle import OracleInputError, compute
from amends_core.pipeline import MemoryPipeline
from amends_core.result import RejectionRef
from amends_core.verify import (
    Boundary,
    DiffKind,
    Report,
    VerifyStatus,
    memory_boundary,
    verify,
    verify_memory,
)
from tests.builders import K1, K2, config, day, record, records, txn

CFG = config([(K1, 100, 60, 0), (K2, 10, 5, 0)])
CLEAN = [txn("A", qty=-50, valid=day(1)), txn("B", qty=-20, valid=day(2)), txn("C", qty=+5, key=K2)]
COMPLETE = Boundary(True, digests=(("store", CFG.digest()), ("view", CFG.digest())))


def pipeline(objs: list[dict[str, Any]] | list[Record], drain: bool = True) -> MemoryPipeline:
    pipe = MemoryPipeline(CFG)
    recs = [o if isinstance(o, Record) else record(o, i) for i, o in enumerate(objs)]
    pipe.append(recs)
    if drain:
        pipe.drain()
    return pipe


def check(pipe: MemoryPipeline, **overrides: Any) -> Report:
    """verify() over a pipeline's parts, any of which a test may replace."""
    args: dict[str, Any] = {
        "oracle": compute(CFG, pipe.source),
        "view_rows": pipe.view.rows,
        "quarantine": pipe.store.rejections,
        "conflicts": pipe.store.conflicts(),
        "boundary": memory_boundary(pipe),
        "stopped": pipe.view.stopped,
    }
    args.update(overrides)
    return verify(CFG, **args)


def balance_id(day_n: int, key: Any = K1) -> OutputID:
    return OutputID(CFG.namespace, Family.BALANCE, key, _day(day_n))


def _day(n: int) -> int:
    from amends_core import timefmt

    return timefmt.parse_rfc3339(day(n)) // timefmt.NS_PER_DAY


def with_close(rows: dict[OutputID, Envelope], oid: OutputID, close: int) -> dict[OutputID, Envelope]:
    out = dict(rows)
    out[oid] = dataclasses.replace(rows[oid], payload=Payload(True, close=close))
    return out


def blocked_history() -> list[dict[str, Any]]:
    return [*CLEAN, txn("A", qty=-49, valid=day(1))]


# ---------------------------------------------------------------- each status


def test_agreement_without_rejections_or_conflicts_is_pass() -> None:
    report = verify_memory(pipeline(CLEAN))
    assert report.status is VerifyStatus.PASS
    assert report.differences == ()
    assert report.counts.keys == 2 and report.counts.rows == 4  # 3 balances + 1 alert


def test_agreement_with_rejected_records_is_pass_with_exclusions() -> None:
    report = verify_memory(pipeline([*CLEAN, txn("D", revision=0)]))
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS
    assert report.rejection_refs == (RejectionRef(0, 3, RejectReason.REVISION),)


def test_a_resolved_historical_conflict_alone_is_pass_with_exclusions() -> None:
    pipe = pipeline([*blocked_history(), txn("A", revision=2, qty=-50, valid=day(1))])
    report = verify_memory(pipe)
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS
    assert report.conflicts == (Conflict(K1, "A", 1),)
    assert report.rejections == ()


def test_an_unresolved_conflict_is_blocked() -> None:
    report = verify_memory(pipeline(blocked_history()))
    assert report.status is VerifyStatus.BLOCKED
    assert [p.key for p in report.blocked] == [K1]
    assert report.differences == ()


def test_a_changed_balance_is_drift_and_every_differing_row_is_reported() -> None:
    pipe = pipeline(CLEAN)
    rows = with_close(pipe.view.rows, balance_id(1), 51)
    rows = with_close(rows, balance_id(2), 31)
    del rows[OutputID(CFG.namespace, Family.ALERT, K1, _day(1))]
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.DRIFT
    kinds = [(d.kind, d.expected, d.actual) for d in report.differences]
    assert kinds == [
        (DiffKind.ALERT, {"present": True, "threshold": 60, "close": 50}, None),
        (DiffKind.BALANCE, {"present": True, "close": 50}, {"present": True, "close": 51}),
        (DiffKind.BALANCE, {"present": True, "close": 30}, {"present": True, "close": 31}),
    ]
    assert report.differences[1].subject == balance_id(1).encoded


def test_a_row_the_oracle_does_not_have_is_drift() -> None:
    pipe = pipeline(CLEAN)
    rows = dict(pipe.view.rows)
    extra = balance_id(9)
    rows[extra] = dataclasses.replace(rows[balance_id(1)], output_id=extra)
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.DRIFT
    assert [(d.subject, d.expected) for d in report.differences] == [(extra.encoded, None)]


def test_a_withdrawn_row_is_absent_not_a_row() -> None:
    pipe = pipeline([*CLEAN, txn("B", revision=2, kind="CANCEL", qty=0)])
    assert any(not e.payload.present for e in pipe.view.rows.values())
    assert verify_memory(pipe).status is VerifyStatus.PASS


def test_a_trust_status_difference_is_drift() -> None:
    pipe = pipeline(CLEAN)
    sid = OutputID(CFG.namespace, Family.STATUS, K2, None)
    rows = dict(pipe.view.rows)
    rows[sid] = dataclasses.replace(
        rows[sid], payload=Payload(True, status=Status.BLOCKED, reasons=(Conflict(K2, "C", 1).ref,))
    )
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.DRIFT
    assert [d.kind for d in report.differences] == [DiffKind.KEY_STATUS]
    assert report.differences[0].expected == {"status": "READY", "reasons": []}


@pytest.mark.parametrize(
    "tamper",
    ["missing", "other reason", "other bytes", "other key bytes", "extra"],
)
def test_rejections_are_compared_by_exact_raw_record_and_reason(tamper: str) -> None:
    pipe = pipeline([*CLEAN, txn("D", revision=0)])
    held = pipe.store.rejections[0]
    if tamper == "missing":
        quarantine: list[Rejection] = []
    elif tamper == "other reason":
        quarantine = [Rejection(held.record, RejectReason.KIND)]
    elif tamper == "other bytes":
        quarantine = [
            Rejection(dataclasses.replace(held.record, value=held.record.value + b" "), held.reason)
        ]
    elif tamper == "other key bytes":
        quarantine = [Rejection(dataclasses.replace(held.record, key=None), held.reason)]
    else:
        quarantine = [held, Rejection(record(b"x", 99), RejectReason.MALFORMED)]
    report = check(pipe, quarantine=quarantine)
    assert report.status is VerifyStatus.DRIFT
    assert [d.kind for d in report.differences] == [DiffKind.REJECTION]


def test_a_detail_text_difference_is_not_a_rejection_difference() -> None:
    pipe = pipeline([*CLEAN, txn("D", revision=0)])
    held = pipe.store.rejections[0]
    report = check(pipe, quarantine=[Rejection(held.record, held.reason, "another wording")])
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS


def test_conflicts_are_compared_with_retained_evidence() -> None:
    pipe = pipeline([*blocked_history(), txn("A", revision=2, qty=-50, valid=day(1))])
    report = check(pipe, conflicts=[])
    assert report.status is VerifyStatus.DRIFT
    assert [(d.kind, d.actual) for d in report.differences] == [(DiffKind.CONFLICT, None)]
    report = check(pipe, conflicts=[*pipe.store.conflicts(), Conflict(K2, "C", 1)])
    assert report.status is VerifyStatus.DRIFT


# ---------------------------------------------------------------- precedence


def test_an_oracle_error_comes_first_even_before_protocol_errors_and_incomplete_boundaries() -> None:
    pipe = pipeline(CLEAN)
    report = check(
        pipe,
        oracle=OracleInputError("partition 7 is outside 0..0"),
        stopped={0: "offset 3: conflicting content"},
        boundary=Boundary(False, ("view behind",)),
    )
    assert report.status is VerifyStatus.ERROR
    assert report.error is not None and "partition 7" in report.error


def test_a_view_protocol_error_is_error_before_an_incomplete_boundary() -> None:
    pipe = pipeline(CLEAN)
    report = check(pipe, stopped={0: "offset 3: conflicting content"}, boundary=Boundary(False))
    assert report.status is VerifyStatus.ERROR
    assert report.error is not None and "offset 3" in report.error


def test_an_incomplete_boundary_beats_blocked_and_keeps_the_known_diagnostics() -> None:
    pipe = pipeline([*blocked_history(), txn("D", revision=0)], drain=False)
    pipe.run_worker(0)  # processed but neither published nor applied
    report = verify_memory(pipe)
    assert report.status is VerifyStatus.INCOMPLETE
    assert any("outbox" in r for r in report.boundary_reasons)
    assert [p.key for p in report.blocked] == [K1]
    assert report.conflicts == (Conflict(K1, "A", 1),)
    assert [r.reason for r in report.rejections] == [RejectReason.REVISION]


@pytest.mark.parametrize("stage", ["nothing", "worker", "relay"])
def test_an_undrained_memory_pipeline_is_incomplete(stage: str) -> None:
    pipe = pipeline(CLEAN, drain=False)
    if stage in ("worker", "relay"):
        pipe.run_worker(0)
    if stage == "relay":
        pipe.run_relay(0)
    assert not memory_boundary(pipe).complete
    assert verify_memory(pipe).status is VerifyStatus.INCOMPLETE


def test_a_component_under_another_configuration_is_incomplete() -> None:
    pipe = pipeline(CLEAN)
    other = config([(K1, 101, 60, 0), (K2, 10, 5, 0)]).digest()
    report = check(pipe, boundary=Boundary(True, digests=(("view", other),)))
    assert report.status is VerifyStatus.INCOMPLETE
    assert "view runs configuration" in report.boundary_reasons[0]


def test_blocked_takes_precedence_over_drift_and_keeps_the_difference() -> None:
    pipe = pipeline(blocked_history())
    rows = with_close(pipe.view.rows, OutputID(CFG.namespace, Family.BALANCE, K2, _day(1)), 99)
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.BLOCKED
    assert [(d.kind, d.actual) for d in report.differences] == [
        (DiffKind.BALANCE, {"present": True, "close": 99})
    ]


def test_a_blocked_key_compares_only_status_and_reasons_not_its_frozen_values() -> None:
    pipe = pipeline(blocked_history())
    assert any(
        oid.key == K1 and oid.family is Family.BALANCE and e.payload.present
        for oid, e in pipe.view.rows.items()
    )  # the view still holds frozen values for the blocked key
    rows = with_close(pipe.view.rows, balance_id(1), 12345)
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.BLOCKED and report.differences == ()


def test_different_reasons_on_a_blocked_key_are_a_kept_difference() -> None:
    pipe = pipeline(blocked_history())
    sid = OutputID(CFG.namespace, Family.STATUS, K1, None)
    rows = dict(pipe.view.rows)
    rows[sid] = dataclasses.replace(
        rows[sid], payload=Payload(True, status=Status.BLOCKED, reasons=(Conflict(K1, "Z", 9).ref,))
    )
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.BLOCKED
    assert [d.kind for d in report.differences] == [DiffKind.KEY_STATUS]


def test_verify_memory_reports_an_oracle_overflow_as_error() -> None:
    from amends_core.ledger import INT64_MAX

    cfg = config([(K1, INT64_MAX - 1, 0, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn("A", qty=-5), txn("B", qty=+5, valid=day(2))]))
    pipe.drain()
    pipe.source[0].append(record(txn("C", qty=+5, valid=day(3)), 2))  # never processed
    report = verify_memory(pipe)
    assert report.status is VerifyStatus.ERROR
    assert report.error is not None and "CloseOutOfRange" in report.error


# ---------------------------------------------------------------- accepts


def test_pass_accepts_only_empty_manifests() -> None:
    report = verify_memory(pipeline(CLEAN))
    assert report.accepts([], [])
    assert not report.accepts([RejectionRef(0, 0, RejectReason.MALFORMED)], [])
    assert not report.accepts([], [Conflict(K1, "A", 1)])


def test_pass_with_exclusions_accepts_only_manifests_that_match_exactly() -> None:
    pipe = pipeline([*blocked_history(), txn("A", revision=2, qty=-50), txn("D", revision=0)])
    report = verify_memory(pipe)
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS
    rejections = [RejectionRef(0, 5, RejectReason.REVISION)]
    conflicts = [Conflict(K1, "A", 1)]
    assert report.accepts(rejections, conflicts)
    assert report.accepts(pipe.store.rejections, conflicts)  # full rejections work too
    assert not report.accepts([], conflicts)
    assert not report.accepts(rejections, [])
    assert not report.accepts([], [])
    assert not report.accepts([RejectionRef(0, 5, RejectReason.KIND)], conflicts)
    assert not report.accepts(rejections * 2, conflicts)
    assert not report.accepts(rejections, [*conflicts, Conflict(K2, "C", 1)])


@pytest.mark.parametrize(
    "status",
    [VerifyStatus.BLOCKED, VerifyStatus.DRIFT, VerifyStatus.INCOMPLETE, VerifyStatus.ERROR],
)
def test_negative_statuses_never_accept(status: VerifyStatus) -> None:
    report = Report(status, CFG.namespace, CFG.digest())
    assert not report.accepts([], [])


# ---------------------------------------------------------------- renderings


def test_render_is_bounded_and_to_json_keeps_every_difference() -> None:
    pipe = pipeline([txn(f"T{n}", qty=-1, valid=day(n)) for n in range(1, 31)])
    rows = dict(pipe.view.rows)
    for n in range(1, 31):
        rows = with_close(rows, balance_id(n), 0)
    report = check(pipe, view_rows=rows)
    assert report.status is VerifyStatus.DRIFT and len(report.differences) == 30
    text = report.render(max_rows=5)
    assert "DRIFT" in text and "... and 25 more" in text
    assert len(text.splitlines()) <= 9
    assert balance_id(1).encoded in text and balance_id(6).encoded not in text
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["status"] == "DRIFT" and len(doc["differences"]) == 30
    assert doc["differences"][0] == {
        "kind": "balance",
        "subject": balance_id(1).encoded,
        "expected": {"present": True, "close": 99},
        "actual": {"present": True, "close": 0},
    }


def test_to_json_carries_raw_rejections_readably() -> None:
    bad = record(b"\xffnot json", 3, key=None)
    report = verify_memory(pipeline([*CLEAN, bad]))
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS
    (rej,) = report.to_json()["rejections"]
    assert rej["reason"] == "MALFORMED" and rej["offset"] == 3
    assert rej["key"] is None and rej["value_b64"] == "/25vdCBqc29u"

"""Verification with operator skips and operation stops (the pure report rules).

A record an operator skipped is left out of the oracle's input by the caller;
the report lists it and can then never be plain PASS: it is
PASS_WITH_EXCLUSIONS, accepted only when the skip manifest matches exactly. A
source partition stopped by an operation error is ERROR naming the partition,
the offset, the error and what to do.
"""

from __future__ import annotations

from amends_core.oracle import compute
from amends_core.pipeline import MemoryPipeline
from amends_core.verify import (
    Boundary,
    OperationStop,
    OperatorSkip,
    SkipRef,
    VerifyStatus,
    expectation_difference,
    memory_boundary,
    verify,
)
from amends_pipeline.inputs import parse_expectation_file
from tests.builders import K1, config, day, records, txn

SKIP = OperatorSkip(0, 7, "opening balance typo", "alice", "2026-03-01T10:00:00Z", "CloseOutOfRange: x")


def agreeing(**kw: object):  # type: ignore[no-untyped-def]
    cfg = config([(K1, 100, 0, 0)])
    pipe = MemoryPipeline(cfg)
    pipe.append(records([txn("A", qty=-5), txn("B", qty=3, valid=day(2))]))
    pipe.drain()
    oracle = compute(cfg, pipe.source)
    return verify(
        cfg, oracle, pipe.view.rows, pipe.store.rejections, pipe.store.conflicts(),
        memory_boundary(pipe), stopped=pipe.view.stopped, **kw,  # type: ignore[arg-type]
    )


def test_an_agreeing_report_without_skips_stays_plain_pass() -> None:
    report = agreeing()
    assert report.status is VerifyStatus.PASS
    assert report.accepts([], [])
    assert "skips" not in report.to_json() and "stops" not in report.to_json()


def test_an_operator_skip_turns_pass_into_pass_with_exclusions_listing_who_why_and_when() -> None:
    report = agreeing(skips=[SKIP])
    assert report.status is VerifyStatus.PASS_WITH_EXCLUSIONS
    assert report.skips == (SKIP,)
    assert report.to_json()["skips"] == [SKIP.to_json()]
    text = report.render()
    assert (
        "  skipped by an operator: partition/offset 0/7 by alice at 2026-03-01T10:00:00Z:"
        " opening balance typo (error: CloseOutOfRange: x)"
    ) in text.splitlines()


def test_a_report_with_a_skip_is_accepted_only_when_the_skip_is_expected_exactly() -> None:
    report = agreeing(skips=[SKIP])
    assert not report.accepts([], [])
    assert report.accepts([], [], [SkipRef(0, 7)])
    assert not report.accepts([], [], [SkipRef(0, 8)])
    assert not report.accepts([], [], [SkipRef(0, 7), SkipRef(0, 7)])
    diff = report.expectation_difference([], [], [])
    assert diff.unexpected_skips == (SkipRef(0, 7),) and not diff.empty
    assert diff.to_json()["unexpected"]["skips"] == [{"partition": 0, "offset": 7}]
    assert "  unexpected operator skip at partition/offset 0/7 (found, not expected)" in diff.render()


def test_expected_skips_on_a_plain_pass_are_missing() -> None:
    report = agreeing()
    assert not report.accepts([], [], [SkipRef(0, 7)])
    assert expectation_difference([], [], [], [], expected_skips=[SkipRef(0, 7)]).missing_skips == (
        SkipRef(0, 7),
    )


def test_without_skips_the_expectation_difference_json_is_unchanged() -> None:
    doc = expectation_difference([], [], [], []).to_json()
    assert doc == {
        "matches": True,
        "missing": {"rejections": [], "conflicts": []},
        "unexpected": {"rejections": [], "conflicts": []},
    }


def test_a_partition_stopped_by_an_operation_error_is_error_naming_partition_offset_error_and_remedy() -> None:
    stop = OperationStop(0, 2, "CloseOutOfRange: close of PART-1/DEPOT-A", "run `amends skip ...`")
    report = agreeing(stops=[stop], skips=[SKIP])
    assert report.status is VerifyStatus.ERROR
    assert report.error == (
        "source partition 0 is stopped by an operation error at offset 2:"
        " CloseOutOfRange: close of PART-1/DEPOT-A; run `amends skip ...`"
    )
    assert report.stops == (stop,) and report.to_json()["stops"] == [stop.to_json()]
    assert not report.accepts([], [], [SkipRef(0, 7)])


def test_a_stop_is_reported_even_when_the_oracle_failed_on_the_same_record() -> None:
    cfg = config()
    stop = OperationStop(0, 2, "CloseOutOfRange: c")
    report = verify(cfg, ValueError("oracle broke"), [], [], [], Boundary(False), stops=[stop])
    assert report.status is VerifyStatus.ERROR
    assert report.error is not None
    assert report.error.startswith("source partition 0 is stopped by an operation error at offset 2")
    assert report.error.endswith("oracle failed: ValueError: oracle broke")


def test_an_expectations_file_may_list_operator_skips() -> None:
    exp = parse_expectation_file(b'{"skips": [{"partition": 0, "offset": 7}]}')
    assert exp.skips == [SkipRef(0, 7)] and exp.rejections == [] and exp.conflicts == []
    assert parse_expectation_file(b"{}").skips == []


def test_a_malformed_skip_entry_names_the_field_at_fault() -> None:
    import pytest

    from amends_pipeline.inputs import ExpectationsError

    for raw, fault in (
        (b'{"skips": [{"partition": 0}]}', 'skips[0] has no "offset"'),
        (b'{"skips": [{"partition": 0, "offset": -1}]}', "skips[0].offset: -1 is negative"),
        (b'{"skips": {"partition": 0}}', "skips is an object; expected a list"),
    ):
        with pytest.raises(ExpectationsError) as caught:
            parse_expectation_file(raw)
        assert str(caught.value) == fault


def test_the_dagster_verification_metadata_names_the_stopped_partition_and_the_skip_command() -> None:
    from amends_pipeline.defs import metadata
    from amends_pipeline.ops.certify import Verification

    remedy = "skip it with `amends skip --config c.json --partition 0 --offset 2 --reason TEXT`"
    report = agreeing(stops=[OperationStop(0, 2, "CloseOutOfRange: too big", remedy)])
    md = metadata.verification(Verification(report, "", False))
    assert md["status"] == "ERROR" and md["accepted"] is False
    assert md["stopped_partitions"].data == [
        {"partition": 0, "offset": 2, "error": "CloseOutOfRange: too big", "remedy": remedy}
    ]
    text = md["report"].value
    assert "- partition 0, offset 2: CloseOutOfRange: too big." in text
    assert "`amends skip --config c.json --partition 0 --offset 2 --reason TEXT`" in text


def test_the_dagster_verification_report_lists_operator_skips() -> None:
    from amends_pipeline.defs import metadata

    text = metadata.report_markdown(agreeing(skips=[SKIP]))
    assert "Operator skips (excluded, `amends skip`):" in text
    assert "| 0 | 7 | opening balance typo | alice | 2026-03-01T10:00:00Z | CloseOutOfRange: x |" in text

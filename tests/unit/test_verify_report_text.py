"""The verification text report: exclusions listed, the expectation difference, escaped ids.

Reports are built from hand-written values; every expected line is written out by hand.
"""

from __future__ import annotations

from amends_core.ledger import Conflict, Coordinates, Record, Rejection, RejectReason, StockKey
from amends_core.result import RejectionRef
from amends_core.verify import (
    ExpectationDifference,
    Report,
    VerifyStatus,
    expectation_difference,
    printable,
)

DIGEST = "0123456789abcdef" * 4
KEY = StockKey("DEMO-PART", "DEPOT-A")


def rejection(partition: int, offset: int, reason: RejectReason) -> Rejection:
    return Rejection(Record(b"x", None, Coordinates("src", partition, offset)), reason)


def report(
    status: VerifyStatus = VerifyStatus.PASS_WITH_EXCLUSIONS,
    rejections: tuple[Rejection, ...] = (),
    conflicts: tuple[Conflict, ...] = (),
) -> Report:
    return Report(status, "ns", DIGEST, rejections=rejections, conflicts=conflicts)


SEEN = report(
    rejections=(
        rejection(1, 4, RejectReason.REVISION),
        rejection(0, 9, RejectReason.MALFORMED),
        rejection(0, 2, RejectReason.MALFORMED),
    ),
    conflicts=(Conflict(KEY, "X", 1), Conflict(StockKey("B", "C"), "T-7", 3)),
)


def test_render_lists_rejections_by_reason_and_every_conflict() -> None:
    assert SEEN.render().splitlines() == [
        "verification PASS_WITH_EXCLUSIONS: namespace 'ns', config 0123456789ab",
        "  compared 0 keys (0 blocked), 0 balance/alert rows; 3 rejections, 2 conflicts, 0 differences",
        "  rejected MALFORMED: 2 at partition/offset 0/2, 0/9",
        "  rejected REVISION: 1 at partition/offset 1/4",
        "  conflict DEMO-PART/DEPOT-A txn_id X revision 1",
        "  conflict B/C txn_id T-7 revision 3",
    ]


def test_render_bounds_refs_per_reason_and_conflicts_by_max_rows() -> None:
    r = report(
        rejections=tuple(rejection(0, n, RejectReason.KIND) for n in (5, 1, 3, 2)),
        conflicts=tuple(Conflict(KEY, t, 1) for t in ("A", "B", "C")),
    )
    assert r.render(max_rows=2).splitlines()[2:] == [
        "  rejected KIND: 4 at partition/offset 0/1, 0/2, ... and 2 more",
        "  conflict DEMO-PART/DEPOT-A txn_id A revision 1",
        "  conflict DEMO-PART/DEPOT-A txn_id B revision 1",
        "  ... and 1 more",
    ]


def test_render_without_exclusions_adds_no_lines() -> None:
    assert report(VerifyStatus.PASS).render().splitlines() == [
        "verification PASS: namespace 'ns', config 0123456789ab",
        "  compared 0 keys (0 blocked), 0 balance/alert rows; 0 rejections, 0 conflicts, 0 differences",
    ]


def test_ids_with_control_characters_are_escaped() -> None:
    r = report(conflicts=(Conflict(StockKey("P\nART", "D\x1b[2J"), "T\u202e1", 2),))
    assert r.render().splitlines()[-1] == (
        "  conflict 'P\\nART'/'D\\x1b[2J' txn_id 'T\\u202e1' revision 2"
    )
    assert printable("DEMO-PÄRT 1") == "DEMO-PÄRT 1"
    assert printable("a\tb") == "'a\\tb'"


def test_difference_names_missing_and_unexpected_entries() -> None:
    expected_rej = [
        RejectionRef(0, 2, RejectReason.MALFORMED),
        RejectionRef(1, 4, RejectReason.KIND),  # found with reason REVISION
        RejectionRef(3, 0, RejectReason.MALFORMED),  # not found at all
    ]
    expected_con = [Conflict(KEY, "X", 1), Conflict(KEY, "Y", 2)]
    diff = SEEN.expectation_difference(expected_rej, expected_con)
    assert diff == ExpectationDifference(
        missing_rejections=(
            RejectionRef(1, 4, RejectReason.KIND),
            RejectionRef(3, 0, RejectReason.MALFORMED),
        ),
        unexpected_rejections=(
            RejectionRef(0, 9, RejectReason.MALFORMED),
            RejectionRef(1, 4, RejectReason.REVISION),
        ),
        missing_conflicts=(Conflict(KEY, "Y", 2),),
        unexpected_conflicts=(Conflict(StockKey("B", "C"), "T-7", 3),),
    )
    assert not diff.empty
    assert not SEEN.accepts(expected_rej, expected_con)
    assert diff.render().splitlines() == [
        "  missing rejection KIND at partition/offset 1/4 (expected, not found)",
        "  missing rejection MALFORMED at partition/offset 3/0 (expected, not found)",
        "  unexpected rejection MALFORMED at partition/offset 0/9 (found, not expected)",
        "  unexpected rejection REVISION at partition/offset 1/4 (found, not expected)",
        "  missing conflict DEMO-PART/DEPOT-A txn_id Y revision 2 (expected, not found)",
        "  unexpected conflict B/C txn_id T-7 revision 3 (found, not expected)",
    ]
    assert diff.to_json() == {
        "matches": False,
        "missing": {
            "rejections": [
                {"partition": 1, "offset": 4, "reason": "KIND"},
                {"partition": 3, "offset": 0, "reason": "MALFORMED"},
            ],
            "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "Y", "revision": 2}],
        },
        "unexpected": {
            "rejections": [
                {"partition": 0, "offset": 9, "reason": "MALFORMED"},
                {"partition": 1, "offset": 4, "reason": "REVISION"},
            ],
            "conflicts": [{"item": "B", "location": "C", "txn_id": "T-7", "revision": 3}],
        },
    }


def test_an_exact_manifest_has_no_difference_and_is_accepted() -> None:
    rej = [
        RejectionRef(1, 4, RejectReason.REVISION),
        RejectionRef(0, 2, RejectReason.MALFORMED),
        RejectionRef(0, 9, RejectReason.MALFORMED),
    ]
    con = [Conflict(StockKey("B", "C"), "T-7", 3), Conflict(KEY, "X", 1)]
    diff = SEEN.expectation_difference(rej, con)
    assert diff.empty and diff.render() == "  expectations: match"
    assert diff.to_json()["matches"] is True
    assert SEEN.accepts(rej, con)


def test_entries_count_with_multiplicity() -> None:
    once = RejectionRef(0, 2, RejectReason.MALFORMED)
    diff = expectation_difference([once, once], [], [once], [])
    assert diff == ExpectationDifference(missing_rejections=(once,))


def test_only_pass_and_pass_with_exclusions_ever_accept() -> None:
    for status in (VerifyStatus.BLOCKED, VerifyStatus.DRIFT, VerifyStatus.INCOMPLETE, VerifyStatus.ERROR):
        assert not report(status).accepts([], [])
    assert report(VerifyStatus.PASS).accepts([], [])
    assert not report(VerifyStatus.PASS).accepts([RejectionRef(0, 0, RejectReason.KIND)], [])

"""`amends verify` through real processes: the exclusions it found and the `--expect` difference.

Same set-up as test_pipeline_processes' rejections-and-conflicts test: the
worked example's first stage, one malformed record and a conflict at revision 1
resolved by revision 2, which verifies as PASS_WITH_EXCLUSIONS.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import FIXTURE, Pipeline

CFG = str(FIXTURE / "config.json")
NEW_X = (
    '{"txn_id":"X","revision":%d,"kind":"%s","stock_key":{"item":"DEMO-PART","location":"DEPOT-A"},'
    '"valid_time":"2026-01-02T00:00:00Z","qty":%d,"source_time":"2026-01-0%dT00:00:00Z"}\n'
)
# Offsets in the one source partition: 0 the marker, 1-3 before.jsonl, 4 the malformed record.
MALFORMED_AT = 4


def with_exclusions(p: Pipeline) -> None:
    p.provision()
    bad = p.tmp / "bad.jsonl"
    bad.write_text("not json at all\n" + NEW_X % (1, "NEW", -1, 2) + NEW_X % (1, "NEW", -2, 2))
    fix = p.tmp / "fix.jsonl"
    fix.write_text(NEW_X % (2, "AMEND", -3, 3))
    p.load(FIXTURE / "before.jsonl", bad, fix)
    p.roles_until_idle()


def write(p: Pipeline, name: str, doc: object) -> str:
    path = p.tmp / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.slow
def test_a_wrong_expect_prints_the_missing_and_unexpected_entries(pipeline: Pipeline) -> None:
    p = pipeline
    with_exclusions(p)

    r = p.verify()  # no --expect: the exclusions are listed, and how to acknowledge them
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith("verification PASS_WITH_EXCLUSIONS: namespace 'core-demo'")
    assert lines[2:] == [
        f"  rejected MALFORMED: 1 at partition/offset 0/{MALFORMED_AT}",
        "  conflict DEMO-PART/DEPOT-A txn_id X revision 1",
    ]
    assert r.stderr.startswith(
        "accepted: no (PASS_WITH_EXCLUSIONS: acknowledge the 1 rejections and 1 conflicts above with --expect"
    )

    wrong = write(p, "wrong.json", {
        "rejections": [
            {"partition": 0, "offset": MALFORMED_AT, "reason": "KIND"},
            {"partition": 0, "offset": 99, "reason": "MALFORMED"},
        ],
        "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "X", "revision": 2}],
    })
    r = p.verify("--expect", wrong)
    assert r.returncode == 1
    assert r.stdout.splitlines()[2:] == [
        f"  rejected MALFORMED: 1 at partition/offset 0/{MALFORMED_AT}",
        "  conflict DEMO-PART/DEPOT-A txn_id X revision 1",
        f"  missing rejection KIND at partition/offset 0/{MALFORMED_AT} (expected, not found)",
        "  missing rejection MALFORMED at partition/offset 0/99 (expected, not found)",
        f"  unexpected rejection MALFORMED at partition/offset 0/{MALFORMED_AT} (found, not expected)",
        "  missing conflict DEMO-PART/DEPOT-A txn_id X revision 2 (expected, not found)",
        "  unexpected conflict DEMO-PART/DEPOT-A txn_id X revision 1 (found, not expected)",
    ]
    assert r.stderr == (
        "accepted: no (PASS_WITH_EXCLUSIONS, but --expect does not match:"
        " see the missing and unexpected entries)\n"
    )

    r = p.verify("--expect", wrong, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "PASS_WITH_EXCLUSIONS"
    assert [(x["partition"], x["offset"], x["reason"]) for x in doc["rejections"]] == [
        (0, MALFORMED_AT, "MALFORMED")
    ]
    assert doc["expectation_difference"] == {
        "matches": False,
        "missing": {
            "rejections": [
                {"partition": 0, "offset": MALFORMED_AT, "reason": "KIND"},
                {"partition": 0, "offset": 99, "reason": "MALFORMED"},
            ],
            "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "X", "revision": 2}],
        },
        "unexpected": {
            "rejections": [{"partition": 0, "offset": MALFORMED_AT, "reason": "MALFORMED"}],
            "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "X", "revision": 1}],
        },
    }
    assert "expectation_difference" not in json.loads(p.verify("--json").stdout)

    right = write(p, "right.json", {
        "rejections": [{"partition": 0, "offset": MALFORMED_AT, "reason": "MALFORMED"}],
        "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "X", "revision": 1}],
    })
    r = p.verify("--expect", right)
    assert (r.returncode, r.stderr) == (0, "accepted: yes\n")
    assert r.stdout.splitlines()[-1] == "  expectations: match"

"""`amends compute`: both engines give the same answer on oversized and many-conflict histories.

Run through the console script, as an operator would. Before identifiers were
bounded, two conflicting records with a 600 KB txn_id produced a key-status
envelope above 1 MiB; the view refused it, its partition stopped, and the
incremental engine reported the stale view (close 91, no alert) while the
oracle reported the resolved history (close 35 with an alert), both exit 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from amends_core import limits

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "fixtures" / "worked-example" / "config.json"
EXE = Path(sys.executable).with_name("amends")


def txn(tid: str, revision: int, kind: str, qty: int, valid_day: int) -> dict[str, Any]:
    return {
        "txn_id": tid, "revision": revision, "kind": kind,
        "stock_key": {"item": "DEMO-PART", "location": "DEPOT-A"},
        "valid_time": f"2026-01-{valid_day:02d}T12:00:00Z", "qty": qty,
        "source_time": "2026-01-05T00:00:00Z",
    }


def two_conflicting_then_resolved(tid: str) -> list[dict[str, Any]]:
    """A receipt, two distinct candidates of one identity (BLOCKED), then a higher revision."""
    return [
        txn("A", 1, "NEW", 1, 1),
        txn(tid, 1, "NEW", -10, 2),
        txn(tid, 1, "NEW", -20, 2),
        txn(tid, 2, "AMEND", -66, 2),
    ]


def run_both(tmp: Path, history: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    recs = tmp / "records.jsonl"
    recs.write_text(
        "".join(
            json.dumps(
                {"partition": 0, "offset": i, "key": '["DEMO-PART","DEPOT-A"]',
                 "value": json.dumps(t, separators=(",", ":"))}
            ) + "\n"
            for i, t in enumerate(history)
        )
    )
    out = []
    for engine in ("incremental", "oracle"):
        p = subprocess.run(
            [str(EXE), "compute", "--config", str(CONFIG), "--engine", engine, "--records", str(recs)],
            capture_output=True, text=True, check=False,
        )
        assert p.returncode == 0, p.stderr
        out.append(json.loads(p.stdout))
    return out[0], out[1]


def test_compute_engines_agree_on_two_conflicting_600_kb_records(tmp_path: Path) -> None:
    incremental, oracle = run_both(tmp_path, two_conflicting_then_resolved("X" * 600_000))
    assert incremental == oracle
    assert oracle["rejections"] == [
        {"partition": 0, "offset": o, "reason": "MALFORMED"} for o in (1, 2, 3)
    ]
    assert oracle["keys"][0]["balances"] == [{"day": "2026-01-01", "close": 101}]
    # At the longest legal txn_id the same history is accepted, blocks, resolves, and agrees.
    incremental, oracle = run_both(tmp_path, two_conflicting_then_resolved("X" * limits.MAX_ID_BYTES))
    assert incremental == oracle
    key = oracle["keys"][0]
    assert key["status"] == "READY"
    assert key["alerts"] == [{"day": "2026-01-02", "threshold": 60, "close": 35}]


def test_compute_engines_agree_on_more_conflicting_identities_than_a_status_carries(tmp_path: Path) -> None:
    n = limits.MAX_STATUS_REASONS + 5
    history = []
    for i in range(n):
        tid = f"T{i:03d}".ljust(limits.MAX_ID_BYTES, "y")
        history += [txn(tid, 1, "NEW", -1, 1), txn(tid, 1, "NEW", -2, 1)]
    incremental, oracle = run_both(tmp_path, history)
    assert incremental == oracle
    key = oracle["keys"][0]
    assert key["status"] == "BLOCKED"
    assert [r["txn_id"][:4] for r in key["reasons"]] == [f"T{i:03d}" for i in range(limits.MAX_STATUS_REASONS)]
    assert len(oracle["conflicts"]) == n  # the full list stays in the conflict evidence

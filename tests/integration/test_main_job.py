"""The README's first command: the worked example end to end through Dagster, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amends_pipeline.showcase import changes

AMENDS = str(Path(sys.executable).with_name("amends"))


def _demo(pg_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMENDS_PG_DSN=pg_dsn)
    env.pop("AMENDS_KAFKA_BOOTSTRAP", None)
    return subprocess.run([AMENDS, "demo", *args], env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("broker", ["real", "dev"])
def test_amends_demo_prints_three_stages_with_pass_through_dagster_and_exits_0(pg_dsn: str, broker: str) -> None:
    r = _demo(pg_dsn, "--broker", broker)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    out = r.stdout
    assert out.count("verification: PASS") == 3
    assert "restated balance 2026-01-01: 50 -> 70" in out
    assert "withdrawn alert 2026-01-01" in out and "new alert 2026-01-02: close 50 below threshold 60" in out
    assert "withdrawn balance 2026-01-03 (was 100)" in out
    assert out.rstrip().endswith("PASS: every stage verified PASS and matched its hand-written expectation")
    assert ("Apache Kafka" if broker == "real" else "development broker") in out.splitlines()[0]
    steps = [line for line in r.stderr.splitlines() if "] stage " in line]
    assert len(steps) == 12  # load, refold, relay, boundary per stage: a progress line per step


@pytest.mark.slow
def test_amends_demo_json_reports_each_stage_view_and_changes(pg_dsn: str) -> None:
    r = _demo(pg_dsn, "--broker", "dev", "--json", "--quiet")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and [s["status"] for s in doc["stages"]] == ["PASS"] * 3
    closes = [[b["close"] for b in s["view"][0]["balances"]] for s in doc["stages"]]
    assert closes == [[50, 30, 80], [70, 50, 100], [70, 50]]
    assert r.stderr.strip() == "" or "]" not in r.stderr  # --quiet: no progress lines


@pytest.mark.slow
def test_the_main_job_leaves_no_schema_behind(pg_dsn: str) -> None:
    import psycopg

    assert _demo(pg_dsn, "--broker", "dev", "--quiet").returncode == 0
    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'demo\\_%'").fetchall()
    assert left == []


def test_changes_name_restatements_withdrawals_and_new_alerts() -> None:
    before = [{"item": "I", "location": "L", "balances": [{"day": "d1", "close": 5}, {"day": "d2", "close": 1}],
               "alerts": [{"day": "d2", "threshold": 2, "close": 1}]}]
    after = [{"item": "I", "location": "L", "balances": [{"day": "d1", "close": 6}],
              "alerts": [{"day": "d1", "threshold": 9, "close": 6}]}]
    assert changes(before, after) == [
        "restated balance d1: 5 -> 6", "withdrawn balance d2 (was 1)", "withdrawn alert d2",
        "new alert d1: close 6 below threshold 9",
    ]

"""Balance-history charts from the real pipeline: ``amends plot`` and the certified_balances materialization.

The worked example flows through the Dagster definitions in process against
the real PostgreSQL server and a real Kafka broker (refold job, relay sensor
tick, boundary job); the chart is then drawn from what PostgreSQL holds.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from amends_core.timefmt import parse_day
from amends_pipeline.defs.definitions import build
from amends_pipeline.defs.resources import AmendsResource
from amends_pipeline.defs.sensors import relay_sensor
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.ops.plot import view_charts
from amends_pipeline.ops.provision import provision
from tests.integration.test_dagster_pipeline import FIXTURE, STAGES, Harness

AMENDS = str(Path(sys.executable).with_name("amends"))
CONFIG = str(FIXTURE / "config.json")
D1, D2, D3 = parse_day("2026-01-01"), parse_day("2026-01-02"), parse_day("2026-01-03")


@pytest.fixture
def h(pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str]) -> Iterator[Harness]:
    res = AmendsResource(
        config_path=CONFIG, pg_dsn=pg_dsn, pg_schema=pg_schema, kafka_bootstrap=kafka_broker.bootstrap,
    )
    provision(res.runtime(), topic_name("source"), topic_name("output"))
    with dg.DagsterInstance.ephemeral() as instance:
        yield Harness(res, build(res), instance, pg_dsn, pg_schema)


def run_stage(h: Harness, stage: str) -> str:
    """One stage through Dagster; returns the certified_balances chart markdown."""
    h.load(stage)
    assert h.refold().success
    h.tick(relay_sensor)
    b = h.boundary()
    assert b.success
    (mat,) = [e for e in b.get_asset_materialization_events() if e.asset_key.to_user_string() == "certified_balances"]
    chart = mat.materialization.metadata["balance_history"]
    assert isinstance(chart, dg.MarkdownMetadataValue)
    return chart.value


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    w, h = struct.unpack(">II", png[16:24])
    return w, h


def embedded_pngs(markdown: str) -> list[bytes]:
    return [
        base64.b64decode(x)
        for x in re.findall(r"!\[balance history\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", markdown)
    ]


def plot(h: Harness, *args: str, cwd: Path, config: str = CONFIG) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AMENDS_PG_DSN=h.dsn, AMENDS_PG_SCHEMA=h.schema)
    return subprocess.run(
        [AMENDS, "plot", "--config", config, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )


@pytest.mark.slow
def test_each_certified_materialization_embeds_the_chart_of_what_it_certified(h: Harness) -> None:
    md1 = run_stage(h, STAGES[0])
    assert [png_size(p) for p in embedded_pngs(md1)] == [(800, 400)]
    assert "**DEMO-PART/DEPOT-A** (no change)" in md1
    md2 = run_stage(h, STAGES[1])
    (png,) = embedded_pngs(md2)
    assert png_size(png) == (800, 400) and len(md2) < 100_000
    # each fact against the value its latest version replaced: the Jan 2 alert is at version 1
    assert "**DEMO-PART/DEPOT-A** (restated 2026-01-01: 50 -> 70; restated 2026-01-02: 30 -> 50;" \
        " restated 2026-01-03: 80 -> 100; withdrawn alert 2026-01-01 (close 50 below 60))" in md2
    md3 = run_stage(h, STAGES[2])
    assert len(embedded_pngs(md3)) == 1
    assert "**DEMO-PART/DEPOT-A** (restated 2026-01-01: 50 -> 70; restated 2026-01-02: 30 -> 50;" \
        " withdrawn balance 2026-01-03 (was 100); withdrawn alert 2026-01-01 (close 50 below 60))" in md3


@pytest.mark.slow
def test_the_live_chart_shows_each_correction_against_the_value_it_replaced(h: Harness, tmp_path: Path) -> None:
    for stage in STAGES:
        run_stage(h, stage)
    (c,) = view_charts(h.res.runtime())
    assert c.closes == ((D1, 70), (D2, 50)) and c.threshold == 60 and c.opening == 100
    assert c.alert_days == (D2,)
    assert [(r.day, r.old, r.new) for r in c.restated] == [(D1, 50, 70), (D2, 30, 50)]
    assert c.withdrawn == ((D3, 100),)
    assert [(a.day, a.close) for a in c.withdrawn_alerts] == [(D1, 50)]
    assert c.previous_missing == 0

    r = plot(h, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    png = (tmp_path / "amends-DEMO-PART-DEPOT-A.png").read_bytes()
    assert png_size(png) == (800, 400)
    assert r.stdout.splitlines() == [
        "amends-DEMO-PART-DEPOT-A.png: DEMO-PART/DEPOT-A READY, 2 closes, 1 alerts",
        "  restated 2026-01-01: 50 -> 70",
        "  restated 2026-01-02: 30 -> 50",
        "  withdrawn balance 2026-01-03 (was 100)",
        "  withdrawn alert 2026-01-01 (close 50 below 60)",
    ]
    out = tmp_path / "chart.png"
    r = plot(h, "--key", "DEMO-PART/DEPOT-A", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert png_size(out.read_bytes()) == (800, 400)


def test_plot_refuses_an_unknown_key_with_one_line_and_exit_2(h: Harness, tmp_path: Path) -> None:
    r = plot(h, "--key", "NO-SUCH/PLACE", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == "amends plot: stock key 'NO-SUCH/PLACE' is not configured in namespace 'core-demo'"
    assert list(tmp_path.iterdir()) == []


def test_plot_refuses_a_namespace_that_was_never_provisioned_with_one_line_and_exit_2(
    h: Harness, tmp_path: Path
) -> None:
    cfg = json.loads(Path(CONFIG).read_text())
    cfg["namespace"] = "never-provisioned"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = plot(h, cwd=tmp_path, config=str(path))
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("amends plot: namespace 'never-provisioned' is not provisioned in PostgreSQL ")
    assert r.stderr.strip().endswith(f": run `amends provision --config {path}`")
    assert list(tmp_path.iterdir()) == [path]

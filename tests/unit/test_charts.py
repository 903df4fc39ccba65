"""The balance-history chart of the worked example: its data, and that the picture draws that data."""

from __future__ import annotations

import base64
import json
import re
import struct
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from amends_core import demo, wire
from amends_core.ledger import AlertRow, BalanceRow, Envelope, OutputID, Projection, Status, StockKey
from amends_core.timefmt import parse_day
from amends_pipeline import charts
from amends_pipeline.charts import AlertMark, ChartData, Restated

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"
KEY = StockKey("DEMO-PART", "DEPOT-A")
THRESHOLD, OPENING = 60, 100
D1, D2, D3 = parse_day("2026-01-01"), parse_day("2026-01-02"), parse_day("2026-01-03")


def stage_view(name: str) -> Projection:
    """A hand-written expected view of the worked example as a Projection."""
    k = json.loads((FIX / "expected" / name).read_text())["view"]["keys"][0]
    return Projection(
        StockKey(k["item"], k["location"]),
        Status(k["status"]),
        (),
        tuple(BalanceRow(parse_day(b["day"]), b["close"]) for b in k["balances"]),
        tuple(AlertRow(parse_day(a["day"]), a["threshold"], a["close"]) for a in k["alerts"]),
    )


INITIAL, AMENDED, CANCELLED = (
    stage_view("1-initial.json"), stage_view("2-amendment.json"), stage_view("3-cancellation.json")
)


def data(current: Projection, previous: Projection | None) -> ChartData:
    return charts.chart_data(
        current, previous, threshold=THRESHOLD, opening=OPENING, compared_with="the previous stage"
    )


# ------------------------------------------------------------------ chart data


def test_the_initial_stage_charts_its_closes_the_threshold_and_the_one_alert_with_no_changes() -> None:
    d = data(INITIAL, None)
    assert d.key == KEY and d.status is Status.READY
    assert d.closes == ((D1, 50), (D2, 30), (D3, 80))
    assert d.threshold == 60 and d.opening == 100
    assert d.alert_days == (D1,)
    assert d.alerts == (AlertMark(D1, 60, 50),)
    assert not d.changed and d.describe() == [] and d.previous_closes == () and d.compared_with == ""


def test_the_amendment_restates_the_three_days_withdraws_the_first_alert_and_raises_the_second() -> None:
    d = data(AMENDED, INITIAL)
    assert d.closes == ((D1, 70), (D2, 50), (D3, 100))
    assert d.previous_closes == ((D1, 50), (D2, 30), (D3, 80))
    assert d.restated == (Restated(D1, 50, 70), Restated(D2, 30, 50), Restated(D3, 80, 100))
    assert d.alert_days == (D2,)
    assert d.withdrawn_alerts == (AlertMark(D1, 60, 50),)
    assert d.raised_alerts == (AlertMark(D2, 60, 50),)
    assert d.withdrawn == () and d.added == ()
    assert d.describe() == [
        "restated 2026-01-01: 50 -> 70",
        "restated 2026-01-02: 30 -> 50",
        "restated 2026-01-03: 80 -> 100",
        "withdrawn alert 2026-01-01 (close 50 below 60)",
        "new alert 2026-01-02: close 50 below 60",
    ]


def test_the_cancellation_withdraws_the_third_days_balance_and_changes_nothing_else() -> None:
    d = data(CANCELLED, AMENDED)
    assert d.closes == ((D1, 70), (D2, 50))
    assert d.withdrawn == ((D3, 100),)
    assert d.restated == () and d.withdrawn_alerts == () and d.raised_alerts == () and d.added == ()
    assert d.alert_days == (D2,)
    assert d.describe() == ["withdrawn balance 2026-01-03 (was 100)"]


def test_a_previous_projection_of_another_key_is_refused() -> None:
    other = Projection.untouched(StockKey("OTHER", "DEPOT-A"))
    with pytest.raises(ValueError, match="OTHER"):
        data(AMENDED, other)


def _worked_example_envelopes() -> list[list[Envelope]]:
    """The envelopes each stage of the worked example commits, through the memory pipeline."""
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    stages = demo.load_stages((FIX / "stages.json").read_bytes(), lambda n: (FIX / n).read_bytes())
    return [list(r.envelopes) for r in demo.run(cfg, stages)]


def _view_and_outbox(stages: list[list[Envelope]]) -> tuple[list[Envelope], dict[OutputID, Envelope]]:
    """The view's rows (highest version per output) and, per row, the envelope it replaced."""
    latest: dict[OutputID, Envelope] = {}
    replaced: dict[OutputID, Envelope] = {}
    for env in (e for stage in stages for e in stage):
        if env.output_id in latest:
            replaced[env.output_id] = latest[env.output_id]
        latest[env.output_id] = env
    return list(latest.values()), replaced


def test_in_the_live_view_each_corrected_fact_is_drawn_against_the_value_its_latest_version_replaced() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    rows, replaced = _view_and_outbox(_worked_example_envelopes())
    from amends_core.view import project

    previous, missing = charts.previous_from_versions(cfg, rows, replaced)
    d = charts.chart_data(project(cfg, rows)[KEY], previous[KEY], threshold=THRESHOLD)
    # balances 1 and 2 are at version 2 (replacing 50 and 30); balance 3 is withdrawn at
    # version 3 (replacing 100); the first alert is withdrawn at version 2; the second alert is
    # at version 1 (never corrected).
    assert missing == {}
    assert d.closes == ((D1, 70), (D2, 50))
    assert d.restated == (Restated(D1, 50, 70), Restated(D2, 30, 50))
    assert d.withdrawn == ((D3, 100),)
    assert d.withdrawn_alerts == (AlertMark(D1, 60, 50),)
    assert d.raised_alerts == () and d.alert_days == (D2,)


def test_a_corrected_fact_whose_replaced_version_is_gone_is_drawn_unchanged_and_counted() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    rows, replaced = _view_and_outbox(_worked_example_envelopes()[:2])
    gone = next(oid for oid in replaced if oid.day == D1 and oid.family.value == "balance")
    del replaced[gone]
    from amends_core.view import project

    previous, missing = charts.previous_from_versions(cfg, rows, replaced)
    d = charts.chart_data(project(cfg, rows)[KEY], previous[KEY], threshold=THRESHOLD, previous_missing=missing[KEY])
    assert missing == {KEY: 1}
    assert d.restated == (Restated(D2, 30, 50), Restated(D3, 80, 100))
    assert d.describe()[-1] == "1 corrected facts without their replaced version (drawn as unchanged)"


# ------------------------------------------------------------------ rendering


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    assert png[12:16] == b"IHDR"
    w, h = struct.unpack(">II", png[16:24])
    return w, h


def lines_by_label(fig: Any) -> dict[str, Any]:
    (ax,) = fig.axes
    return {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def texts(fig: Any) -> list[str]:
    (ax,) = fig.axes
    return [t.get_text() for t in ax.texts]


def previous_segments(fig: Any) -> list[Any]:
    (ax,) = fig.axes
    return [ln for ln in ax.get_lines() if ln.get_gid() == charts.GID_PREVIOUS]


def xy(line: Any) -> list[tuple[date, float]]:
    return list(zip(line.get_xdata(), [float(y) for y in line.get_ydata()], strict=True))


def test_the_rendered_chart_is_an_800_by_400_png_under_100_kb() -> None:
    for current, previous in ((INITIAL, None), (AMENDED, INITIAL), (CANCELLED, AMENDED)):
        png = charts.render_png(data(current, previous))
        assert png_size(png) == (800, 400)
        assert len(png) < 100_000


def test_the_amendment_chart_draws_new_closes_bold_old_closes_dashed_the_threshold_and_both_alerts() -> None:
    fig = charts.figure(data(AMENDED, INITIAL))
    lines = lines_by_label(fig)
    d1, d2, d3 = date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 3)
    assert xy(lines[charts.LABEL_CLOSE]) == [(d1, 70), (d2, 50), (d3, 100)]
    assert lines[charts.LABEL_CLOSE].get_drawstyle() == "steps-post"
    prev = previous_segments(fig)
    assert [xy(p) for p in prev] == [[(d1, 50), (d2, 50)], [(d2, 30), (d3, 30)], [(d3, 80), (date(2026, 1, 4), 80)]]
    assert all(p.get_linestyle() == "--" for p in prev)
    assert all(p.get_linewidth() < lines[charts.LABEL_CLOSE].get_linewidth() for p in prev)
    assert [float(y) for y in lines["reorder threshold 60"].get_ydata()] == [60, 60]
    assert xy(lines[charts.LABEL_ALERT]) == [(d2, 50)]
    assert xy(lines[charts.LABEL_WITHDRAWN_ALERT]) == [(d1, 50)]
    assert lines[charts.LABEL_WITHDRAWN_ALERT].get_markerfacecolor() == "white"  # hollow
    assert xy(lines[charts.LABEL_RESTATED]) == [(d1, 70), (d2, 50), (d3, 100)]
    assert charts.LABEL_WITHDRAWN not in lines
    t = texts(fig)
    assert {"restated 50\u219270", "restated 30\u219250", "restated 80\u2192100"} <= set(t)
    assert "alert withdrawn" in t and "new alert" in t
    (ax,) = fig.axes
    assert [x.get_text() for x in ax.get_legend().get_texts()] == [
        "opening balance 100", "value before the change", "close", "reorder threshold 60",
        "restated", "alert", "withdrawn alert",
    ]
    assert [t.get_text() for t in ax.texts if t.get_gid() == charts.GID_NOTE] == ["dashed: the previous stage"]


def test_the_cancellation_chart_marks_the_withdrawn_balance_where_it_was() -> None:
    fig = charts.figure(data(CANCELLED, AMENDED))
    lines = lines_by_label(fig)
    assert xy(lines[charts.LABEL_CLOSE]) == [(date(2026, 1, 1), 70), (date(2026, 1, 2), 50)]
    assert xy(lines[charts.LABEL_WITHDRAWN]) == [(date(2026, 1, 3), 100)]
    assert [xy(p) for p in previous_segments(fig)] == [[(date(2026, 1, 3), 100), (date(2026, 1, 4), 100)]]
    assert "withdrawn (was 100)" in texts(fig)
    assert charts.LABEL_RESTATED not in lines and charts.LABEL_WITHDRAWN_ALERT not in lines


def test_the_x_axis_shows_iso_dates_of_the_charted_days() -> None:
    fig = charts.figure(data(AMENDED, INITIAL))
    fig.canvas.draw()
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert {"2026-01-01", "2026-01-02", "2026-01-03"} <= set(labels)
    assert ax.get_title(loc="left") == "DEMO-PART/DEPOT-A: daily closing balance"


def test_a_blocked_key_says_its_values_are_not_certified() -> None:
    blocked = Projection(KEY, Status.BLOCKED, (), INITIAL.balances, INITIAL.alerts)
    fig = charts.figure(data(blocked, None))
    assert "BLOCKED" in fig.axes[0].get_title(loc="left")


def test_a_key_without_activity_draws_only_the_threshold() -> None:
    png = charts.render_png(data(Projection.untouched(KEY), None))
    assert png_size(png) == (800, 400)
    lines = lines_by_label(charts.figure(data(Projection.untouched(KEY), None)))
    assert set(lines) == {"reorder threshold 60"}


# ------------------------------------------------------------------ markdown for the Dagster UI


def test_markdown_embeds_each_chart_as_a_png_data_uri_changed_keys_first() -> None:
    other = Projection(StockKey("A*PART", "X"), Status.READY, (), (BalanceRow(D1, 5),), ())
    quiet = charts.chart_data(other, other, threshold=1)
    text, left = charts.markdown([quiet, data(AMENDED, INITIAL)])
    assert left == []
    images = re.findall(r"!\[balance history\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", text)
    assert [png_size(base64.b64decode(i)) for i in images] == [(800, 400), (800, 400)]
    assert text.index("DEMO-PART/DEPOT-A") < text.index("A\\*PART/X")
    assert "restated 2026-01-01: 50 -> 70" in text


def test_markdown_stays_within_its_budget_and_names_the_charts_left_out() -> None:
    a, b = data(AMENDED, INITIAL), data(CANCELLED, AMENDED)
    text, left = charts.markdown([a, b], budget=10_000)
    assert text.count("data:image/png") == 1  # the first chart always, the second would exceed it
    assert left == [b]

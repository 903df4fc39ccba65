"""The Dagster UI, seen in a real browser: lineage, refold metadata, a passing verification, the chart.

`amends up` runs the worked example's three stages on a real broker with the
Dagster daemon and webserver on dagster-postgres storage; headless Chromium
from Debian's package (/usr/bin/chromium, installed by scripts/ensure-chromium.sh,
never downloaded by a test tool) driven by playwright opens the pages a user
would and the test asserts on what they show. Screenshots go to
var/test-artifacts/ui-browser/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright

from tests.e2e.conftest import ROOT
from tests.e2e.up_process import Up, up_session

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "ui-browser"
ASSETS = ["source_snapshot", "refold", "published_envelopes", "view", "oracle_partition", "oracle", "certified_balances"]
GRAPH_VIEWPORT = {"width": 1600, "height": 640}
PAGE_VIEWPORT = {"width": 1400, "height": 900}
NAV_WIDTH = 68
"""The collapsed navigation bar on the left."""
NODE_WIDTH = 230
"""About the width of a zoomed-in asset node, from its title to its right edge."""
WAIT_MS = 90_000
"""How long to wait for the React app to show something (generous: 2 shared cores).

Both the page's actions and ``expect`` assertions wait this long: ``expect`` keeps its
own timeout (5 s by default, not the page's), which a loaded CI machine exceeded while
the asset graph was still rendering.
"""
expect.set_options(timeout=WAIT_MS)


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is required: run `bash scripts/ensure-chromium.sh`"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _open(page: Page, url: str) -> None:
    page.goto(url, wait_until="domcontentloaded")


def new_page(browser: Browser) -> Page:
    """A page in a fresh browser context, as a user who already dismissed Dagster's newsletter dialog.

    The dialog (shown once per browser on 127.0.0.1) would lie over the page at
    an unpredictable moment; the UI itself stores its dismissal this way.
    """
    context = browser.new_context(viewport=GRAPH_VIEWPORT)
    context.add_init_script("window.localStorage.setItem('communityNux', JSON.stringify('1'))")
    return context.new_page()


def _shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def _final_boundary(up: Up) -> str:
    """Wait until the third stage verified PASS and certified_balances (with its chart) was written."""
    m = up.wait_for_line(r"up: stage 3: verification PASS at boundary (\S+); certified_balances written", 600)
    with up.instance() as inst:
        rec = inst.fetch_materializations(dg.AssetKey("certified_balances"), limit=1).records[0]
        assert rec.asset_materialization is not None
        md = rec.asset_materialization.metadata
        assert md["boundary"].value == m.group(1) and "balance_history" in md, sorted(md)
    return m.group(1)


def _row(page: Page, key: str) -> Locator:
    """The metadata table row whose first cell is ``key``."""
    return page.locator("tr").filter(has=page.get_by_text(key, exact=True)).first


def _value(page: Page, key: str) -> Locator:
    """The value cell (the last) of a metadata table row."""
    return _row(page, key).locator("td").last


@pytest.mark.slow
def test_the_ui_shows_the_asset_graph_refold_records_a_passing_verification_and_the_balance_chart(
    pg_dsn: str, tmp_path: Path, browser: Browser
) -> None:
    with up_session(pg_dsn, tmp_path, "--stages", "3") as up:
        up.wait_for_line(r"^Dagster UI: ", 300)
        boundary = _final_boundary(up)
        page = new_page(browser)
        try:
            look_at_the_ui(page, up.url, boundary)
        finally:
            page.context.close()


def look_at_the_ui(page: Page, url: str, boundary: str) -> None:
    """What a person checks in the UI after the worked example, asserted on what is shown."""
    page.set_default_timeout(WAIT_MS)

    # The asset graph: every asset of the pipeline is a node, by name; zoomed in, the
    # oracle's node says its verification check passed.
    _open(page, f"{url}/asset-groups")
    for name in ASSETS:
        expect(page.get_by_text(re.compile(rf"^{name}$")).first).to_be_visible()
    _focus_graph(page)
    for name in ASSETS:
        expect(page.get_by_text(name, exact=True).last).to_be_in_viewport()
    expect(page.get_by_text("1 / 1 Passed", exact=True)).to_be_visible()
    _shot(page, "1-asset-graph")
    page.set_viewport_size(PAGE_VIEWPORT)

    # A refold partition's latest materialization (the cancellation: one record) and its metadata.
    _open(page, f"{url}/assets/refold?partition=0")
    expect(_value(page, "records")).to_have_text("1")
    expect(_value(page, "rejected")).to_have_text("0")
    expect(_value(page, "reached_target")).to_have_text("true")
    _shot(page, "2-refold-partition-0")

    # The verification check's latest evaluation: passed, status PASS, at the final boundary.
    _open(page, f"{url}/assets/oracle?view=checks")
    expect(page.get_by_text("Passed", exact=True).first).to_be_visible()
    expect(_value(page, "status")).to_have_text("PASS")
    expect(_value(page, "boundary")).to_have_text(boundary)
    expect(_value(page, "differences")).to_have_text("0")
    _shot(page, "3-verification-check")

    # The balance chart on certified_balances: an embedded PNG the browser decoded and drew,
    # under a caption naming what the amendment and the cancellation changed.
    _open(page, f"{url}/assets/certified_balances")
    _row(page, "balance_history").get_by_text("[Show Markdown]").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("DEMO-PART/DEPOT-A")
    expect(dialog).to_contain_text(re.compile(r"restated 2026-01-01: 50 (->|→) 70"))
    expect(dialog).to_contain_text("withdrawn alert 2026-01-01")
    chart = dialog.locator("img[src^='data:image/png']")
    expect(chart).to_be_visible()
    assert chart.evaluate("img => img.complete ? img.naturalWidth : 0") > 200
    png = base64.b64decode((chart.get_attribute("src") or ",").split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    page.wait_for_timeout(1_000)  # the dialog fades in: picture it once it has
    _shot(page, "4-balance-chart")


def _focus_graph(page: Page) -> None:
    """Make room, zoom in one step until the nodes show their details, and centre the graph."""
    page.get_by_role("button", name="Hide navigation").click()
    page.locator("input[placeholder^='Jump to']").locator("xpath=following::button[1]").click()  # asset list
    page.wait_for_timeout(1_500)
    first, last = _node_titles(page)
    upper = page.get_by_text("oracle", exact=True).last.bounding_box()
    lower = page.get_by_text("refold", exact=True).last.bounding_box()
    assert upper and lower
    page.mouse.move((first["x"] + last["x"] + last["width"]) / 2, (upper["y"] + lower["y"] + lower["height"]) / 2)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -200)
    page.keyboard.up("Control")
    expect(page.get_by_text("1 / 1 Passed", exact=True)).to_be_visible()
    page.wait_for_timeout(1_500)
    # Drag the canvas so that the graph (first title to last node's right edge) is centred.
    first, last = _node_titles(page)
    width, height = GRAPH_VIEWPORT["width"], GRAPH_VIEWPORT["height"]
    dx = (NAV_WIDTH + width) / 2 - (first["x"] + last["x"] + NODE_WIDTH) / 2
    x, y = width - 200, height - 60
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y, steps=10)
    page.mouse.up()
    page.wait_for_timeout(1_500)


def _node_titles(page: Page) -> tuple[dict[str, float], dict[str, float]]:
    first = page.get_by_text("source_snapshot", exact=True).last.bounding_box()
    last = page.get_by_text("certified_balances", exact=True).last.bounding_box()
    assert first and last
    return first, last  # type: ignore[return-value]

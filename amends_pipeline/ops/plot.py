"""Balance-history charts of the live view and of the certified balances, read from PostgreSQL.

What is drawn and where the previous version comes from is described in
``amends_pipeline.charts``: the view's envelope versions say which facts were
restated or withdrawn, the outbox holds the values they replaced.
"""

from __future__ import annotations

from collections.abc import Iterable

from amends_core.ledger import Status, StockKey
from amends_core.timefmt import format_day
from amends_core.view import project
from amends_pipeline.charts import ChartData, chart_data, markdown, previous_from_versions
from amends_pipeline.postgres.reports import read_certified, replaced_versions
from amends_pipeline.runtime import Runtime

COMPARED = "each corrected value before its latest correction"


def view_charts(rt: Runtime, keys: Iterable[StockKey] | None = None) -> list[ChartData]:
    """Chart data of the given keys, in that order (default: every configured key, sorted).

    Raises ManifestMissing when the namespace was never provisioned.
    """
    cfg = rt.cfg
    wanted = list(dict.fromkeys(keys)) if keys is not None else sorted(kc.key for kc in cfg.keys)
    chosen = set(wanted)
    with rt.store("amends-plot") as store:
        rt.manifest(store)
        with rt.view_store() as vs:
            snap = vs.snapshot()
        rows = [env for env in snap.rows.values() if env.output_id.key in chosen]
        replaced = replaced_versions(store, {env.output_id: env.version for env in rows})
    current = project(cfg, rows)
    previous, missing = previous_from_versions(cfg, rows, replaced)
    out = []
    for k in wanted:
        kc = cfg.key_config(k)
        assert kc is not None
        out.append(
            chart_data(
                current[k], previous[k], threshold=kc.reorder_threshold, opening=kc.opening_balance,
                compared_with=COMPARED, previous_missing=missing.get(k, 0),
            )
        )
    return out


def certified_charts(rt: Runtime) -> tuple[list[ChartData], str]:
    """Charts of the certified keys, or none and why.

    The view is charted only where it still equals the certified rows (the
    pipeline may have moved on since certification); BLOCKED keys are never
    certified and are not charted.
    """
    charts = [c for c in view_charts(rt) if c.status is Status.READY]
    with rt.store("amends-plot") as store:
        balances, alerts = read_certified(store)
    cert_b: dict[tuple[str, str], list[tuple[str, int]]] = {}
    cert_a: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
    for item, loc, day, close in balances:
        cert_b.setdefault((item, loc), []).append((day, close))
    for item, loc, day, threshold, close in alerts:
        cert_a.setdefault((item, loc), []).append((day, threshold, close))
    for c in charts:
        k = (c.key.item, c.key.location)
        drawn_b = [(format_day(d), v) for d, v in c.closes]
        drawn_a = [(format_day(a.day), a.threshold, a.close) for a in c.alerts]
        if drawn_b != cert_b.get(k, []) or drawn_a != cert_a.get(k, []):
            return [], "The view moved on after this certification; `amends plot` draws the live view."
    return charts, ""


def certified_markdown(rt: Runtime, budget: int = 100_000) -> str:
    """The certified keys' charts as markdown with embedded PNGs (see ``charts.markdown``)."""
    charts, why = certified_charts(rt)
    if not charts:
        return why or "No certified keys to draw."
    text, left = markdown(charts, budget)
    if left:
        names = ", ".join(f"`{c.name}`" for c in left[:10]) + (", ..." if len(left) > 10 else "")
        text += f"\n\n{len(left)} more keys not drawn here ({names}): `amends plot --key ITEM/LOCATION`."
    return text

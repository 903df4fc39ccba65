"""Balance-history charts: one stock key's daily closes, its threshold and alerts, and what changed.

Two halves, tested apart:

* ``chart_data`` is pure: from the key's current projection and, optionally,
  a previous one, it computes everything the picture shows: the closes as
  steps, the reorder threshold, the alert days, the restated days (old and new
  close), the balances and alerts that were withdrawn, and the alerts that are
  new. Nothing is drawn that is not in this value.
* ``figure`` and ``render_png`` draw a ``ChartData`` with matplotlib's Agg
  canvas (no display, no pyplot state): the current closes bold as steps; for
  each restated or withdrawn day the value before the change as a faint dashed
  segment over that day (never joined into a line: in the live view those
  values may come from different corrections); withdrawn balances and alerts
  as hollow markers labelled "withdrawn".

Where "previous" comes from for the live view (``previous_from_versions``).
The view keeps, per output (balance or alert of one key and day), only the
highest version it applied, withdrawals included (``present = false``). So the
view itself says *which* facts were corrected: a fact whose current version is
above 1 was restated (or withdrawn, when not present); a fact at version 1 has
never changed. It does not hold the value a correction replaced. That value
comes from the outbox, which keeps every envelope the worker committed, in
order (``amends_pipeline.postgres.reports.replaced_versions``): for each fact
at version ``v > 1`` we take the highest version below ``v``, which is what
readers of the output topic saw before the correction. The previous
projection is therefore each fact as it stood before its latest version, not
a single earlier instant: facts corrected at different times are each shown
against the value they replaced. A fact whose replaced version the outbox no
longer holds is drawn as unchanged and counted in ``previous_missing``.
Between two fixed stages (tests, the worked example) the previous projection
is simply the earlier stage's view.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, cast

from amends_core.ledger import Config, Envelope, OutputID, Projection, Status, StockKey
from amends_core.timefmt import MAX_DAY, MIN_DAY, format_day
from amends_core.view import project

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import ArrayLike

WIDTH_PX, HEIGHT_PX, DPI = 800, 400, 100
MAX_NOTES = 8
"""Annotations drawn per kind of change; further changes are marked but not labelled."""

_EPOCH = date(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class Restated:
    """A day present in both versions whose close changed."""

    day: int
    old: int
    new: int


@dataclass(frozen=True, slots=True)
class AlertMark:
    day: int
    threshold: int
    close: int


@dataclass(frozen=True, slots=True)
class ChartData:
    """Everything one key's chart shows; days are days since 1970-01-01."""

    key: StockKey
    status: Status
    threshold: int
    opening: int | None
    """The opening balance (the level before the first close), when known."""
    closes: tuple[tuple[int, int], ...]
    """(day, close) of the current version, by day: drawn as steps."""
    previous_closes: tuple[tuple[int, int], ...]
    """(day, close) of the previous version; empty without one."""
    alerts: tuple[AlertMark, ...]
    """Current alerts (a close that crossed below the threshold)."""
    restated: tuple[Restated, ...]
    added: tuple[tuple[int, int], ...]
    """Balances present now but not in the previous version."""
    withdrawn: tuple[tuple[int, int], ...]
    """(day, close as it was) of balances in the previous version that are gone now."""
    raised_alerts: tuple[AlertMark, ...]
    """Current alerts the previous version did not have."""
    withdrawn_alerts: tuple[AlertMark, ...]
    """Alerts of the previous version that are gone now, as they were."""
    compared_with: str = ""
    """What the previous version is, in words; empty without one."""
    previous_missing: int = 0
    """Corrected facts whose replaced version is no longer held (drawn as unchanged)."""

    @property
    def name(self) -> str:
        return f"{self.key.item}/{self.key.location}"

    @property
    def alert_days(self) -> tuple[int, ...]:
        return tuple(a.day for a in self.alerts)

    @property
    def changed(self) -> bool:
        return bool(
            self.restated or self.added or self.withdrawn or self.raised_alerts or self.withdrawn_alerts
        )

    def describe(self) -> list[str]:
        """The differences from the previous version, one line each."""
        out = [f"restated {format_day(r.day)}: {r.old:,} -> {r.new:,}" for r in self.restated]
        out += [f"new balance {format_day(d)}: {c:,}" for d, c in self.added]
        out += [f"withdrawn balance {format_day(d)} (was {c:,})" for d, c in self.withdrawn]
        out += [
            f"withdrawn alert {format_day(a.day)} (close {a.close:,} below {a.threshold:,})"
            for a in self.withdrawn_alerts
        ]
        out += [
            f"new alert {format_day(a.day)}: close {a.close:,} below {a.threshold:,}"
            for a in self.raised_alerts
        ]
        if self.previous_missing:
            out.append(
                f"{self.previous_missing} corrected facts without their replaced version (drawn as unchanged)"
            )
        return out


def chart_data(
    current: Projection,
    previous: Projection | None = None,
    *,
    threshold: int,
    opening: int | None = None,
    compared_with: str = "",
    previous_missing: int = 0,
) -> ChartData:
    """The chart of ``current``, with the differences from ``previous`` when given."""
    if previous is not None and previous.key != current.key:
        msg = f"previous projection is of {previous.key}, not {current.key}"
        raise ValueError(msg)
    now = {b.day: b.close for b in current.balances}
    alerts = {a.day: AlertMark(a.day, a.threshold, a.close) for a in current.alerts}
    if previous is None:
        was, was_alerts = dict(now), dict(alerts)
    else:
        was = {b.day: b.close for b in previous.balances}
        was_alerts = {a.day: AlertMark(a.day, a.threshold, a.close) for a in previous.alerts}
    return ChartData(
        key=current.key,
        status=current.status,
        threshold=threshold,
        opening=opening,
        closes=tuple(sorted(now.items())),
        previous_closes=() if previous is None else tuple(sorted(was.items())),
        alerts=tuple(alerts[d] for d in sorted(alerts)),
        restated=tuple(
            Restated(d, was[d], now[d]) for d in sorted(now.keys() & was.keys()) if was[d] != now[d]
        ),
        added=tuple((d, now[d]) for d in sorted(now.keys() - was.keys())),
        withdrawn=tuple((d, was[d]) for d in sorted(was.keys() - now.keys())),
        raised_alerts=tuple(alerts[d] for d in sorted(alerts.keys() - was_alerts.keys())),
        withdrawn_alerts=tuple(was_alerts[d] for d in sorted(was_alerts.keys() - alerts.keys())),
        compared_with="" if previous is None else compared_with,
        previous_missing=previous_missing,
    )


def previous_from_versions(
    cfg: Config, rows: Iterable[Envelope], replaced: Mapping[OutputID, Envelope]
) -> tuple[dict[StockKey, Projection], dict[StockKey, int]]:
    """Each fact as it stood before its latest version (see the module docstring).

    ``rows`` are the view's envelopes (withdrawals included); ``replaced`` maps
    an output to the envelope its current version replaced. Returns the
    previous projections and, per key, how many corrected facts had no
    replaced version (those count as unchanged).
    """
    before: list[Envelope] = []
    missing: dict[StockKey, int] = {}
    for env in rows:
        if env.version > 1:
            old = replaced.get(env.output_id)
            if old is None or old.version >= env.version:
                missing[env.output_id.key] = missing.get(env.output_id.key, 0) + 1
                old = env
            before.append(old)
        else:
            before.append(env)
    return project(cfg, before), missing


# ------------------------------------------------------------------ rendering


def _date(day: int) -> date:
    return _EPOCH + timedelta(days=min(max(day, MIN_DAY), MAX_DAY))


def _xs(days: Iterable[int]) -> ArrayLike:
    # Dates: matplotlib plots them through its units registry, but its stubs type data as numbers.
    return cast("ArrayLike", [_date(d) for d in days])


CURRENT = "#1f4e9c"
PREVIOUS = "#8c8c8c"
ALERT = "#c62828"
LABEL_CLOSE = "close"
LABEL_PREVIOUS = "value before the change"
GID_PREVIOUS = "previous"
GID_NOTE = "note"
LABEL_ALERT = "alert"
LABEL_RESTATED = "restated"
LABEL_WITHDRAWN = "withdrawn balance"
LABEL_WITHDRAWN_ALERT = "withdrawn alert"
LABEL_OPENING = "opening balance"


def figure(data: ChartData) -> Figure:
    """The chart as a matplotlib Figure on an Agg canvas (800 x 400 px).

    Artists carry the labels above (``LABEL_*``, the threshold line
    ``"reorder threshold N"``; the segments of values before a change have the
    gid ``GID_PREVIOUS``) so the drawn data can be checked.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    days = [d for d, _ in data.closes] + [d for d, _ in data.previous_closes]
    days += [a.day for a in data.withdrawn_alerts]
    first, last = (min(days), max(days)) if days else (None, None)

    if data.opening is not None and first is not None:
        first_close = dict(data.closes).get(first)
        ys = [data.opening, data.opening] + ([] if first_close is None else [first_close])
        ax.plot(_xs([first - 1, first, first][: len(ys)]), ys, color=CURRENT, lw=1.2, ls=":",
                label=f"{LABEL_OPENING} {data.opening:,}")
    # The previous value of each changed day as a dashed segment over that day only: in the live
    # view the replaced values may come from different corrections, never one earlier series.
    old = [(r.day, r.old) for r in data.restated] + list(data.withdrawn)
    for i, (d, c) in enumerate(sorted(old)):
        ax.plot(_xs([d, d + 1]), [c, c], color=PREVIOUS, lw=1.8, ls="--", gid=GID_PREVIOUS,
                label=LABEL_PREVIOUS if i == 0 else "_nolegend_")
    if data.closes:
        cd, cc = zip(*data.closes, strict=True)
        ax.step(_xs(cd), list(cc), where="post", color=CURRENT, lw=2.6, label=LABEL_CLOSE, zorder=3)
        if len(cd) <= 60:  # points only where they stay readable
            ax.plot(_xs(cd), list(cc), ls="none", marker="o", ms=4, color=CURRENT, zorder=3)
        assert last is not None
        ax.plot(_xs([cd[-1], last + 1]), [cc[-1], cc[-1]], color=CURRENT, lw=2.6, zorder=3)
    ax.axhline(data.threshold, color=ALERT, lw=1.2, ls="-.", label=f"reorder threshold {data.threshold:,}")

    if data.restated:
        ax.plot(_xs(r.day for r in data.restated), [r.new for r in data.restated], ls="none", marker="o",
                ms=8, mfc="white", mec=CURRENT, mew=2, zorder=4, label=LABEL_RESTATED)
        for r in data.restated[:MAX_NOTES]:
            ax.annotate(f"restated {r.old:,}\u2192{r.new:,}", (_date(r.day), r.new), xytext=(4, 8),
                        textcoords="offset points", fontsize=8, color=CURRENT, fontweight="bold")
    if data.alerts:
        ax.plot(_xs(a.day for a in data.alerts), [a.close for a in data.alerts], ls="none", marker="v",
                ms=11, color=ALERT, zorder=5, label=LABEL_ALERT)
        for a in data.raised_alerts[:MAX_NOTES]:
            ax.annotate("new alert", (_date(a.day), a.close), xytext=(6, -16), textcoords="offset points",
                        fontsize=8, color=ALERT)
    if data.withdrawn:
        ax.plot(_xs(d for d, _ in data.withdrawn), [c for _, c in data.withdrawn], ls="none", marker="X",
                ms=10, mfc="white", mec=PREVIOUS, mew=1.5, zorder=4, label=LABEL_WITHDRAWN)
        for d, c in data.withdrawn[:MAX_NOTES]:
            ax.annotate(f"withdrawn (was {c:,})", (_date(d), c), xytext=(4, 8), textcoords="offset points",
                        fontsize=8, color=PREVIOUS, style="italic")
    if data.withdrawn_alerts:
        wa = data.withdrawn_alerts
        ax.plot(_xs(a.day for a in wa), [a.close for a in wa], ls="none", marker="v", ms=11, mfc="white",
                mec=ALERT, mew=1.5, zorder=4, label=LABEL_WITHDRAWN_ALERT)
        ax.plot(_xs(a.day for a in wa), [a.close for a in wa], ls="none", marker="x", ms=7, color=ALERT,
                zorder=5)
        for a in wa[:MAX_NOTES]:
            ax.annotate("alert withdrawn", (_date(a.day), a.close), xytext=(6, -16),
                        textcoords="offset points", fontsize=8, color=ALERT, style="italic")

    _axes(ax, data, first, last)
    return fig


def _axes(ax: object, data: ChartData, first: int | None, last: int | None) -> None:
    import matplotlib.dates as mdates
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    title = f"{data.name}: daily closing balance"
    if data.status is Status.BLOCKED:
        title += " (BLOCKED: values frozen, not certified)"
    ax.set_title(title, fontsize=11, loc="left", pad=16)
    notes = []
    if data.compared_with:
        notes.append(f"dashed: {data.compared_with}" if data.changed else "no restatements or withdrawals")
    if not data.closes:
        notes.append("no activity")
    if data.previous_missing:
        notes.append(f"{data.previous_missing} corrections without their replaced version")
    if notes:
        ax.text(0, 1.015, "; ".join(notes), transform=ax.transAxes, fontsize=8, color=PREVIOUS, gid=GID_NOTE)
    ax.set_ylabel("closing balance")
    ax.grid(True, color="#e6e6e6", lw=0.8)
    ax.set_axisbelow(True)
    if first is not None and last is not None:
        ax.set_xlim(_date(first - 1), _date(last + 1))  # type: ignore[arg-type]  # dates, as in _xs
        span = last - first + 2
        if span <= 120:
            ax.xaxis.set_major_locator(mdates.DayLocator(interval=max(1, span // 8)))
        else:
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=9))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.tick_params(axis="x", labelsize=8, labelrotation=20)
    ax.tick_params(axis="y", labelsize=8)
    ax.yaxis.set_major_formatter("{x:,.0f}")
    ax.margins(y=0.18)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def render_png(data: ChartData) -> bytes:
    """The chart as PNG bytes, WIDTH_PX x HEIGHT_PX."""
    fig = figure(data)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _md(text: str) -> str:
    """Text shown literally in markdown (names may hold markdown punctuation)."""
    return re.sub(r"([\\`*_{}\[\]<|])", r"\\\1", " ".join(text.split()))


def markdown(charts: Iterable[ChartData], budget: int = 100_000) -> tuple[str, list[ChartData]]:
    """Charts embedded as base64 PNG data URIs in markdown, within ``budget`` characters.

    Charts with differences come first; at least one is embedded. Returns the
    markdown and the charts left out.
    """
    import base64

    ordered = sorted(charts, key=lambda c: (not c.changed, c.key.item, c.key.location))
    parts: list[str] = []
    size = 0
    left: list[ChartData] = []
    for c in ordered:
        if left:
            left.append(c)
            continue
        img = base64.b64encode(render_png(c)).decode("ascii")
        changes = "; ".join(c.describe()) or "no change"
        part = f"**{_md(c.name)}** ({_md(changes)})\n\n![balance history](data:image/png;base64,{img})"
        if parts and size + len(part) > budget:
            left.append(c)
            continue
        parts.append(part)
        size += len(part)
    return "\n\n".join(parts), left

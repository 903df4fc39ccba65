"""``amends plot``: draw the live view's balance history of stock keys as PNG files."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from amends_core.ledger import Config, StockKey
from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.postgres.errors import NamespaceUnknown
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a key's balance history (closes, threshold, alerts, corrections) as PNG",
        description=(
            "Reads the live view of the namespace from PostgreSQL and draws, per stock key, the"
            " daily closing balances as steps, the reorder threshold, the alerts, and what the"
            " latest corrections changed: restated closes (the value each replaced dashed, the"
            " new one bold) and withdrawn balances and alerts (hollow markers labelled"
            " 'withdrawn'). A fact counts as corrected when the view holds a version above 1"
            " of it; the value it replaced comes from the outbox. One 800x400 PNG per key:"
            " without --out, amends-<item>-<location>.png in the current directory (characters"
            " other than letters, digits, '.', '_' and '-' become '_'); --out FILE with exactly"
            " one key writes FILE; --out DIR (an existing directory) writes the default names"
            " there. Exit 0, 1 on a store error, 2 on an unknown key, a namespace that was"
            " never provisioned, or an unusable environment."
        ),
    )
    add_config(p)
    p.add_argument(
        "--key", action="append", metavar="ITEM/LOCATION",
        help="only this key (repeatable); default: every configured key",
    )
    p.add_argument("--out", metavar="FILE|DIR", help="output file (one key) or existing directory")
    p.set_defaults(func=run)


def default_name(key: StockKey) -> str:
    """``amends-<item>-<location>.png`` with unsafe characters replaced by '_'."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{key.item}-{key.location}")
    return f"amends-{safe}.png"


def choose_keys(cfg: Config, names: list[str] | None) -> list[StockKey]:
    """The configured keys named ``ITEM/LOCATION`` (all when none); UsageError on an unknown one."""
    by_name: dict[str, list[StockKey]] = {}
    for kc in cfg.keys:
        by_name.setdefault(f"{kc.key.item}/{kc.key.location}", []).append(kc.key)
    if not names:
        return sorted(kc.key for kc in cfg.keys)
    chosen: list[StockKey] = []
    for name in names:
        if name not in by_name:
            msg = f"stock key {name!r} is not configured in namespace {cfg.namespace!r}"
            raise UsageError(msg)
        chosen += [k for k in by_name[name] if k not in chosen]
    return chosen


def targets(keys: list[StockKey], out: str | None) -> list[Path]:
    """Where each key's chart goes; UsageError when --out cannot take them."""
    if out is not None and not Path(out).is_dir():
        if len(keys) != 1:
            msg = f"--out {out!r} names a file but {len(keys)} keys were chosen; give an existing directory"
            raise UsageError(msg)
        return [Path(out)]
    base = Path(out) if out is not None else Path()
    paths = [base / default_name(k) for k in keys]
    if len(set(paths)) != len(paths):
        msg = "two chosen keys map to the same file name; choose them one at a time with --key and --out"
        raise UsageError(msg)
    return paths


@operational
def run(args: argparse.Namespace) -> int:
    from amends_pipeline.charts import render_png
    from amends_pipeline.ops.plot import view_charts

    cfg = load_config(args.config)
    keys = choose_keys(cfg, args.key)
    paths = targets(keys, args.out)
    try:
        charts = view_charts(Runtime(cfg, read_only=True), keys)
    except NamespaceUnknown as e:
        raise UsageError(e.message(args.config)) from None
    for c, path in zip(charts, paths, strict=True):
        try:
            path.write_bytes(render_png(c))
        except OSError as e:
            msg = f"cannot write {str(path)!r}: {e.strerror or e}"
            raise UsageError(msg) from None
        n_alerts = len(c.alerts)
        print(f"{path}: {c.name} {c.status.value}, {len(c.closes)} closes, {n_alerts} alerts")
        for line in c.describe():
            print(f"  {line}")
    return 0

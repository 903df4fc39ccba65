"""Dagster code location of amends.

Orchestration (per-partition refold assets, relay and view sensors, the
blocking verification check and rebuild backfills) is built on top of the
foundation's bounded "do one batch" functions in its own issue; until then
this location loads and exposes no assets.
"""

from __future__ import annotations

import dagster as dg

defs = dg.Definitions()

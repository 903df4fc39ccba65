"""The worked example, stage by stage, through the memory pipeline.

Pure: the caller reads the fixture files and passes their bytes in; this
module returns per-stage results and whether each matches the hand-written
expectation. Printing is the command line's job.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amends_core import timefmt, wire
from amends_core.ledger import Config, Coordinates, Envelope, Record
from amends_core.pipeline import MemoryPipeline
from amends_core.result import ComputeResult

OracleFn = Callable[[Config, dict[int, list[Record]]], ComputeResult]


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    values: tuple[bytes, ...]
    """Raw source values of this stage, appended to partition 0 in order."""
    expected: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StageResult:
    name: str
    envelopes: tuple[Envelope, ...]
    source_frontier: int
    output_frontier: int
    view: dict[str, Any]
    expected: dict[str, Any]
    oracle: dict[str, Any] | None

    @property
    def envelope_summary(self) -> list[dict[str, Any]]:
        return [
            {
                "type": e.type.value,
                "day": None if e.output_id.day is None else timefmt.format_day(e.output_id.day),
                "version": e.version,
                "cause_offset": e.cause.offset,
            }
            for e in self.envelopes
        ]

    @property
    def matches_expected(self) -> bool:
        exp = self.expected
        return bool(
            self.source_frontier == exp["source_frontier"]
            and self.output_frontier == exp["output_frontier"]
            and self.envelope_summary == exp["envelopes"]
            and self.view == exp["view"]
        )

    @property
    def oracle_agrees(self) -> bool | None:
        if self.oracle is None:
            return None
        agrees: bool = self.oracle == self.view
        return agrees


def load_stages(manifest: bytes, read: Callable[[str], bytes]) -> list[Stage]:
    """Stages from ``stages.json``; ``read`` returns a fixture file's bytes by name."""
    doc = json.loads(manifest)
    stages = []
    for s in doc["stages"]:
        values = tuple(line for line in read(s["source"]).splitlines() if line.strip())
        stages.append(Stage(s["name"], values, json.loads(read(s["expected"]))))
    return stages


def run(cfg: Config, stages: list[Stage], oracle: OracleFn | None = None) -> list[StageResult]:
    """Append each stage to one model, drain it, and compare with its expectation."""
    pipe = MemoryPipeline(cfg)
    results = []
    for stage in stages:
        records: list[Record] = []
        for v in stage.values:
            off = pipe.next_offset(0) + len(records)
            t = wire.decode_transaction(v)
            key = None if isinstance(t, wire.DecodeError) else t.stock_key.transport_key()
            records.append(Record(v, key, Coordinates(cfg.source_incarnation, 0, off)))
        before = len(pipe.committed)
        pipe.append(records)
        pipe.drain()
        view = pipe.result().to_json()
        oracle_view = None
        if oracle is not None:
            oracle_view = oracle(cfg, {p: list(rs) for p, rs in pipe.source.items()}).to_json()
        results.append(
            StageResult(
                stage.name,
                tuple(r.envelope for r in pipe.committed[before:]),
                pipe.store.frontier(0),
                pipe.view.frontier(0),
                view,
                stage.expected,
                oracle_view,
            )
        )
    return results

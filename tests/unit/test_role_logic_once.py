"""The worker, relay and view steps exist once, in amends_core.roles, and everything runs them.

Production wires PostgreSQL and Kafka adapters into them, the memory pipeline
memory adapters, and the simulator fault-injecting memory adapters; the
broken variants are subclasses of the production logic or of the memory
store and view, never a second copy of a step.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from amends_core.pipeline import MemoryPipeline
from amends_core.roles.relay import Relay
from amends_core.roles.view import View
from amends_core.roles.worker import Worker
from amends_core.sim.model import Model
from amends_core.sim.variants import VARIANTS
from amends_pipeline.roles.relay import RelayPartition
from amends_pipeline.roles.view import ViewPartition
from amends_pipeline.roles.worker import WorkerPartition
from tests.builders import K1, config
from tests.unit.test_import_boundary import reachable

REPO = Path(__file__).resolve().parents[2]
LOGIC = {
    Worker: ("step", "prepare", "commit", "claim", "settle_claim", "settle_lost_commit", "frontier"),
    Relay: ("step", "pending", "receipts"),
    View: ("step",),
}
STEP_DEFINED_BY = {
    "amends_core/roles/worker.py:Worker",
    "amends_core/roles/relay.py:Relay",
    "amends_core/roles/view.py:View",
    "amends_core/sim/model.py:Model",  # the scheduler: it calls the role steps above
    "amends_pipeline/commands/_progress.py:Progress",  # a progress bar's phase line, no role logic
}


def _step_methods() -> set[str]:
    """Every class in the two packages that defines a method named ``step``."""
    found = set()
    for pkg in ("amends_core", "amends_pipeline"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "step" for f in node.body
                ):
                    found.add(f"{path.relative_to(REPO)}:{node.name}")
    return found


def test_only_the_core_roles_define_a_step() -> None:
    assert _step_methods() == STEP_DEFINED_BY


def test_the_step_scan_sees_a_second_copy() -> None:
    tree = ast.parse("class Copy:\n    def step(self):\n        return 1\n")
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef) and cls.body[0].name == "step"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("production", "core"),
    [(WorkerPartition, Worker), (RelayPartition, Relay), (ViewPartition, View)],
)
def test_the_production_roles_are_the_core_logic_with_adapters(production: type, core: type) -> None:
    assert issubclass(production, core)
    assert [m for m in LOGIC[core] if m in production.__dict__] == []


def test_the_simulator_and_the_memory_pipeline_import_and_run_the_same_logic() -> None:
    for start in ("amends_core.sim.model", "amends_core.pipeline"):
        seen = reachable(start)
        assert {"amends_core.roles.worker", "amends_core.roles.relay", "amends_core.roles.view"} <= set(seen)
    cfg = config([(K1, 100, 0, 0)])
    for holder in (Model(cfg), MemoryPipeline(cfg)):
        assert {type(w) for w in holder.workers.values()} == {Worker}
        assert {type(r) for r in holder.relays.values()} == {Relay}
        assert {type(v) for v in holder.views.values()} == {View}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_broken_variant_runs_production_logic_or_a_subclass_of_it(name: str) -> None:
    m = VARIANTS[name](config([(K1, 100, 0, 0)]))
    assert all(isinstance(w, Worker) for w in m.workers.values())
    assert all(isinstance(r, Relay) for r in m.relays.values())
    assert all(type(v) is View for v in m.views.values())

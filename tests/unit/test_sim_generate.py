"""Seeded generation: deterministic, explicit randomness only, every history feature and fault appears."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from amends_core import fold
from amends_core.ledger import Rejection, RejectReason, Transaction
from amends_core.sim.generate import SIM_CONFIG, generate
from amends_core.sim.model import Actor, Outcome
from amends_core.sim.trace import dumps

SIM_DIR = Path(__file__).resolve().parents[2] / "amends_core" / "sim"
FORBIDDEN = {"os", "io", "time", "sys", "socket", "subprocess", "pathlib", "shutil", "tempfile",
             "threading", "asyncio", "urllib", "http", "multiprocessing", "concurrent", "platform"}


def test_the_same_seed_always_yields_the_same_trace() -> None:
    assert dumps(generate(42)) == dumps(generate(42))
    assert dumps(generate(42)) != dumps(generate(43))


def test_generation_never_touches_the_global_random_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("global randomness used")

    for name in ("random", "randint", "randrange", "choice", "choices", "shuffle", "seed"):
        monkeypatch.setattr(random, name, refuse)
    generate(7)


def test_the_simulator_package_does_no_io_reads_no_clock_and_only_uses_explicit_random_instances() -> None:
    problems = []
    for path in sorted(SIM_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
                if node.module == "random":
                    problems.append(f"{path.name}: from random import ...")
            problems += [f"{path.name}: imports {n}" for n in names if n in FORBIDDEN]
            if names == ["random"] and path.name != "generate.py":
                problems.append(f"{path.name}: imports random")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"open", "print", "input"}:
                problems.append(f"{path.name}: calls {node.func.id}()")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "random"
                and node.attr != "Random"
            ):
                problems.append(f"{path.name}: uses random.{node.attr}")
    assert problems == []


def test_histories_use_three_keys_on_two_partitions() -> None:
    assert len(SIM_CONFIG.keys) == 3 and SIM_CONFIG.partitions == 2
    assert {kc.partition for kc in SIM_CONFIG.keys} == {0, 1}


def _kinds(seeds: range) -> Counter[str]:
    seen: Counter[str] = Counter()
    for seed in seeds:
        t = generate(seed)
        by_ident: dict[tuple[object, str], list[Transaction]] = {}
        for r in t.records:
            v = fold.validate(t.cfg, r)
            if isinstance(v, Rejection):
                seen[f"reject:{v.reason.value}"] += 1
                continue
            seen[v.kind] += 1
            by_ident.setdefault((v.stock_key, v.txn_id), []).append(v)
        for txns in by_ident.values():
            for a, b in zip(txns, txns[1:], strict=False):
                if b.revision < a.revision:
                    seen["lower-revision-after-higher"] += 1
                if b.revision == a.revision and b.canonical == a.canonical:
                    seen["canonical-duplicate"] += 1
                if b.revision == a.revision and b.canonical != a.canonical:
                    seen["same-revision-conflict"] += 1
                if b.revision > a.revision and b.kind != "CANCEL" and b.day != a.day and b.qty == a.qty:
                    seen["move-between-days"] += 1
                if a.kind == "CANCEL" and b.revision > a.revision and b.kind != "CANCEL":
                    seen["reactivation"] += 1
            revs = {t.revision for t in txns}
            tops = [t for t in txns if t.revision == max(revs)]
            if len({t.canonical for t in txns if t.revision == min(revs)}) > 1 and len({x.canonical for x in tops}) == 1 and max(revs) > min(revs):
                seen["resolved-conflict"] += 1
        for s in t.steps:
            seen[f"step:{s.actor.value}"] += 1
            seen[f"outcome:{s.outcome.value}"] += 1
    return seen


def test_generated_histories_and_schedules_cover_every_feature_and_fault() -> None:
    seen = _kinds(range(300))
    for feature in ("NEW", "AMEND", "CANCEL", "lower-revision-after-higher", "canonical-duplicate",
                    "same-revision-conflict", "move-between-days", "reactivation", "resolved-conflict"):
        assert seen[feature] > 0, feature
    for reason in (RejectReason.MALFORMED, RejectReason.REVISION, RejectReason.CANCEL_QUANTITY,
                   RejectReason.ROUTING, RejectReason.KEY_MISMATCH, RejectReason.UNKNOWN_KEY):
        assert seen[f"reject:{reason.value}"] > 0, reason
    for actor in Actor:
        assert seen[f"step:{actor.value}"] > 0, actor
    for outcome in Outcome:
        assert seen[f"outcome:{outcome.value}"] > 0, outcome


def test_every_generated_schedule_carries_failed_or_lost_replies() -> None:
    for seed in range(200):
        outcomes = {s.outcome for s in generate(seed).steps}
        assert outcomes & {Outcome.ABORT, Outcome.UNKNOWN_COMMITTED, Outcome.UNKNOWN_ABORTED}, seed

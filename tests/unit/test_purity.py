"""amends_core is pure: no I/O, clocks or global randomness in fold, diff, view and friends."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "amends_core"
PURE = [
    "ledger.py", "timefmt.py", "wire.py", "fold.py", "diff.py", "view.py", "process.py", "result.py",
    "store/memory.py", "ports.py", "fence.py", "preflight.py", "adapters.py", "roles/worker.py",
    "roles/relay.py", "roles/view.py", "sim/faults.py", "sim/model.py", "pipeline.py",
]
FORBIDDEN_MODULES = {"os", "io", "time", "random", "socket", "subprocess", "pathlib", "shutil", "tempfile", "threading", "asyncio", "sys", "urllib", "http"}
FORBIDDEN_CALLS = {"open", "print", "input"}
FORBIDDEN_ATTRS = {"now", "utcnow", "today", "time", "perf_counter", "monotonic", "random", "getenv"}


def test_pure_modules_import_no_io_clock_or_randomness() -> None:
    problems = []
    for rel in PURE:
        tree = ast.parse((CORE / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                problems += [f"{rel}: import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FORBIDDEN_MODULES:
                problems.append(f"{rel}: from {node.module}")
            elif isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                    problems.append(f"{rel}: call {f.id}()")
                if isinstance(f, ast.Attribute) and f.attr in FORBIDDEN_ATTRS:
                    problems.append(f"{rel}: call .{f.attr}()")
    assert problems == []


def test_the_purity_check_detects_a_clock() -> None:
    tree = ast.parse("import time\nx = datetime.now()\n")
    names = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.Call))]
    assert any(isinstance(n, ast.Import) and n.names[0].name == "time" for n in names)
    assert any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "now" for n in names)


ADAPTER_PACKAGES = {"amends_pipeline", "benchmarks", "psycopg", "confluent_kafka", "dagster", "tests"}


def test_no_core_module_imports_an_adapter_or_a_driver() -> None:
    """The core is below everything: no module of amends_core names the pipeline, a driver or Dagster."""
    problems = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            problems += [f"{path.relative_to(CORE)}: {n}" for n in names if n.split(".")[0] in ADAPTER_PACKAGES]
    assert problems == []


def test_the_adapter_check_sees_an_adapter_import() -> None:
    tree = ast.parse("from amends_pipeline.postgres.store import PgStore\n")
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom) and node.module is not None
    assert node.module.split(".")[0] in ADAPTER_PACKAGES

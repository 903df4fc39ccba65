"""The oracle cannot reach the incremental path: its import graph is walked, not grepped.

Every ``import`` and ``from ... import`` statement (including those under
``TYPE_CHECKING`` and inside functions) of every ``amends_core`` module the
oracle reaches is followed, package ``__init__`` modules included. A second
test imports the oracle in a fresh interpreter and inspects ``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import amends_core

ROOT = Path(amends_core.__file__).resolve().parent
FORBIDDEN = (
    "amends_core.fold",
    "amends_core.diff",
    "amends_core.view",
    "amends_core.process",
    "amends_core.pipeline",
    "amends_core.store",
    "amends_core.verify",
    "amends_core.sim",
    "amends_core.roles",
    "amends_core.adapters",
)
ALLOWED = {
    "amends_core",
    "amends_core.ledger",
    "amends_core.timefmt",
    "amends_core.result",
    "amends_core.records",
    "amends_core.limits",
    "amends_core.memo",  # bounded dictionaries; imports nothing of amends (checked below)
}


def module_path(name: str) -> Path | None:
    """Source file of an ``amends_core`` module or package, None when there is none."""
    rel = Path(*name.split(".")[1:])
    for candidate in (ROOT / rel / "__init__.py", (ROOT / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imported_by(name: str) -> set[str]:
    """``amends_core`` modules named by the import statements of one module."""
    path = module_path(name)
    assert path is not None, name
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from pkg import sub`` may import a submodule.
            found.update(f"{target}.{alias.name}" for alias in node.names)
    out = set()
    for mod in found:
        if mod == "amends_core" or mod.startswith("amends_core."):
            if module_path(mod) is not None:
                out.add(mod)
    return out


def parents(name: str) -> list[str]:
    """Importing ``a.b.c`` runs ``a`` and ``a.b`` first."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def reachable(start: str) -> dict[str, str]:
    """Every amends_core module reachable from ``start``, mapped to who imports it."""
    seen: dict[str, str] = {start: "(start)"}
    todo = [start, *parents(start)]
    for p in parents(start):
        seen.setdefault(p, start)
    while todo:
        mod = todo.pop()
        for dep in imported_by(mod) | set(parents(mod)):
            if dep not in seen:
                seen[dep] = mod
                todo.append(dep)
                for p in parents(dep):
                    if p not in seen:
                        seen[p] = dep
                        todo.append(p)
    return seen


def chain(seen: dict[str, str], mod: str) -> str:
    path = [mod]
    while seen[path[-1]] != "(start)":
        path.append(seen[path[-1]])
    return " <- ".join(path)


def oracle_modules() -> list[str]:
    return sorted(
        "amends_core.oracle" + ("" if p.stem == "__init__" else f".{p.stem}")
        for p in (ROOT / "oracle").glob("*.py")
    )


def test_the_walk_sees_the_incremental_path_from_the_pipeline() -> None:
    """The walker itself works: the pipeline does reach fold, diff, view and the store."""
    seen = reachable("amends_core.pipeline")
    for mod in ("amends_core.fold", "amends_core.diff", "amends_core.view"):
        assert mod in seen
    assert "amends_core.store.memory" in seen


def test_the_oracle_reaches_neither_fold_diff_view_process_pipeline_nor_store() -> None:
    for start in oracle_modules():
        seen = reachable(start)
        bad = [m for m in seen if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
        assert not bad, "\n".join(chain(seen, m) for m in bad)


def test_the_oracle_depends_only_on_ledger_time_result_and_records() -> None:
    for start in oracle_modules():
        seen = reachable(start)
        outside = sorted(
            m for m in seen if m not in ALLOWED and not m.startswith("amends_core.oracle")
        )
        assert not outside, "\n".join(chain(seen, m) for m in outside)


def test_the_memo_helper_the_oracle_may_reach_imports_nothing_of_amends() -> None:
    """``memo`` is on the allowlist as a leaf: it must stay one."""
    assert imported_by("amends_core.memo") == set()


def test_the_oracle_does_not_even_share_the_wire_decoder() -> None:
    for start in oracle_modules():
        assert "amends_core.wire" not in reachable(start)


def test_importing_the_oracle_loads_none_of_the_incremental_modules() -> None:
    code = (
        "import sys, amends_core.oracle, amends_core.oracle.decode, amends_core.oracle.compute\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('amends_core'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert not bad
    assert "amends_core.wire" not in loaded


def test_the_oracle_does_not_import_dynamically() -> None:
    for path in (ROOT / "oracle").glob("*.py"):
        text = path.read_text()
        assert "importlib" not in text and "__import__" not in text, path

"""Arrows between the pipeline's layers point down: read from every import statement.

Every ``import`` and ``from ... import`` of every module (including those inside functions
and under ``TYPE_CHECKING``) is read with ``ast``; relative imports are resolved. The
Dagster definitions (``defs/``) never import a command (``commands/``): ``amends up``
drives Dagster and may read what the definitions recorded, never the reverse. The readers
of the user's files (``inputs.py``) stand below both.
"""

from __future__ import annotations

import ast
from pathlib import Path

import amends_pipeline

PACKAGE = Path(amends_pipeline.__file__).resolve().parent


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            mod = node.module or ""
            full = (f"{base}.{mod}" if mod else base) if node.level else mod
            out.add(full)
            out.update(f"{full}.{a.name}" for a in node.names)
    return out


def importers_of(prefix: str, among: str) -> list[tuple[str, str]]:
    """(module, import) pairs: modules under ``among`` importing anything under ``prefix``."""
    return [
        (name, imp)
        for name, path in modules().items()
        if name == among or name.startswith(among + ".")
        for imp in sorted(imports(name, path))
        if imp == prefix or imp.startswith(prefix + ".")
    ]


def test_the_walk_sees_imports_inside_functions_and_relative_ones() -> None:
    found = imports("amends_pipeline.cli", modules()["amends_pipeline.cli"])
    assert any(i.startswith("amends_pipeline.commands") for i in found), sorted(found)


def test_the_dagster_definitions_import_no_command() -> None:
    assert importers_of("amends_pipeline.commands", "amends_pipeline.defs") == []


def test_the_input_files_readers_stand_below_commands_and_definitions() -> None:
    for above in ("amends_pipeline.commands", "amends_pipeline.defs", "amends_pipeline.ops"):
        assert importers_of(above, "amends_pipeline.inputs") == []


def test_kafka_settings_do_not_reach_back_into_the_topics_module() -> None:
    assert importers_of("amends_pipeline.kafka.topics", "amends_pipeline.kafka.settings") == []
    assert importers_of("amends_pipeline.kafka", "amends_pipeline.kafka.errors") == []

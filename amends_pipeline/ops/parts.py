"""What an oracle part depends on: the inputs a stored part must match to be used.

``code_version`` is a digest of the oracle's own source and every ``amends_core``
module it imports (found by reading their imports, not by a number someone must
remember to bump), so a changed decoder or rule never reuses a part computed by
the old code.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable
from pathlib import Path

from amends_pipeline.manifest import Manifest
from amends_pipeline.postgres.oracle_parts import PartInputs
from amends_pipeline.postgres.store import SkipEntry

_CORE = Path(__file__).resolve().parents[2] / "amends_core"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n == "amends_core" or n.startswith("amends_core.")}


def _file(module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for candidate in (_CORE / rel / "__init__.py", (_CORE / rel).with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def oracle_files() -> list[Path]:
    """The oracle package's files and every amends_core module they import, transitively."""
    todo = sorted((_CORE / "oracle").glob("*.py"))
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo += [p for m in _imports(f) if (p := _file(m)) is not None and p not in seen]
    return sorted(seen)


@functools.cache
def code_version() -> str:
    h = hashlib.sha256()
    for f in oracle_files():
        h.update(str(f.relative_to(_CORE)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def inputs(m: Manifest, partition: int, source_end: int, skips: Iterable[SkipEntry]) -> PartInputs:
    """The inputs of partition ``partition``'s part at source end ``source_end`` (``skips``: the
    namespace's operator skips; those of this partition are part of the inputs)."""
    return PartInputs(
        partition,
        f"{m.source_incarnation}/{m.source_topic_id or ''}",
        source_end,
        m.config_digest,
        code_version(),
        ",".join(str(o) for o in sorted(s.offset for s in skips if s.partition == partition)),
    )

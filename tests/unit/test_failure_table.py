"""docs/operations.md's failure table names every error class a command or role can exit with.

The roles and commands end on the error classes below the three roots that
``commands._common.operational`` turns into one line and an exit code
(``OperationError``, ``StoreError``, ``KafkaError``), plus Kafka's refusal of
credentials. The classes are found by walking the subclass tree after importing
every module that defines one, so a new error class without a row fails here.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import amends_core
import amends_pipeline
from amends_core.errors import OperationError
from amends_pipeline.kafka.settings import KafkaRefused
from amends_pipeline.kafka.topics import KafkaError
from amends_pipeline.postgres.errors import StoreError

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SKIP_PACKAGES = ("amends_core.sim", "amends_pipeline.defs")  # no error classes; heavy imports


def _import_everything() -> None:
    for pkg in (amends_core, amends_pipeline):
        for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not mod.name.startswith(SKIP_PACKAGES):
                importlib.import_module(mod.name)


def _descendants(root: type) -> set[type]:
    out: set[type] = set()
    todo = [root]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in out:
                out.add(sub)
                todo.append(sub)
    return out


def exit_error_classes() -> set[str]:
    _import_everything()
    found: set[type] = {KafkaRefused}
    for root in (OperationError, StoreError, KafkaError):
        found |= {root} | _descendants(root)
    return {c.__name__ for c in found if c.__module__.startswith(("amends_core", "amends_pipeline"))}


def failure_table() -> str:
    text = DOC.read_text()
    start = text.index("## Failure modes at a glance")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_every_error_class_a_command_can_exit_with_has_a_row() -> None:
    table = failure_table()
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", table))
    missing = sorted(exit_error_classes() - named)
    assert not missing, f"docs/operations.md failure table lacks rows for: {missing}"


def test_the_table_names_no_class_that_does_not_exist() -> None:
    table = failure_table()
    named = {n for n in re.findall(r"`([A-Z][A-Za-z]+)`", table) if n.endswith(("Error", "Lost", "Mismatch"))}
    stale = sorted(named - exit_error_classes())
    assert not stale, f"docs/operations.md failure table names unknown classes: {stale}"

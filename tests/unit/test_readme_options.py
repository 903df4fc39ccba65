"""README's command table lists every option of every command a user runs.

The options come from the CLI's own parser, so a new flag without a mention
in the table fails here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from amends_pipeline.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def command_table() -> dict[str, str]:
    """The README's command table: command name -> its whole row."""
    text = README.read_text()
    start = text.index("| command | what it does | exit codes |")
    rows: dict[str, str] = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        name = line.split("`amends ", 1)[1].split()[0].rstrip("`")
        rows[name] = rows.get(name, "") + line
    return rows


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_has_a_row() -> None:
    missing = sorted(set(subcommands()) - set(command_table()))
    assert not missing, f"README command table lacks: {missing}"


def test_every_option_of_every_command_is_in_its_row() -> None:
    rows = command_table()
    missing = []
    for name, parser in sorted(subcommands().items()):
        for action in parser._actions:
            longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            if longs and not any(o in rows.get(name, "") for o in longs):
                missing.append(f"amends {name} {longs[0]}")
    assert not missing, f"README command table lacks options: {missing}"


def test_global_options_are_documented() -> None:
    parser = build_parser()
    text = README.read_text()
    for action in parser._actions:
        for o in action.option_strings:
            if o.startswith("--") and o not in ("--help", "--version"):
                assert o in text, f"README does not mention the global option {o}"

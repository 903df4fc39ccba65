"""A command that runs builds only its own module's parser, and it parses as the whole one does.

``amends`` imports just the command module the arguments name (``cli._command_module``):
the other modules' imports (Polars, Delta Lake, Dagster's helpers) would cost every
process about half a second of CPU. These tests hold that the shortcut changes nothing a
user sees: each command's options, defaults and help are those of the whole parser, and
whatever the shortcut cannot place falls back to it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from amends_pipeline.cli import _command_module, build_parser, command_modules


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _shape(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    return [
        (tuple(a.option_strings), a.dest, a.default, a.nargs, a.required, str(a.choices), a.help)
        for a in parser._actions
    ]


@pytest.mark.parametrize("module", command_modules())
def test_each_command_module_alone_registers_its_command_as_the_whole_parser_has_it(module: str) -> None:
    whole = _choices(build_parser())
    alone = _choices(build_parser(only=module))
    assert list(alone) == [module], f"commands/{module}.py must register exactly `amends {module}`"
    assert _shape(alone[module]) == _shape(whole[module])
    assert alone[module].format_help() == whole[module].format_help()


def test_every_command_of_the_whole_parser_has_its_module() -> None:
    assert sorted(_choices(build_parser())) == command_modules()


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["view", "--config", "c.json"], "view"),
        (["--verbose", "role", "worker", "--config", "c.json"], "role"),
        (["rebuild", "--config", "c.json"], "rebuild"),
        (["--verbose"], None),
        (["--help"], None),
        (["veiw"], None),  # mistyped: the whole parser names the choices
        ([], None),
    ],
)
def test_the_module_is_the_first_argument_that_is_not_an_option(argv: list[str], module: str | None) -> None:
    assert _command_module(argv) == module


def test_a_command_process_does_not_import_the_other_commands() -> None:
    code = (
        "import sys\n"
        "from amends_pipeline.cli import main\n"
        "try:\n"
        "    main(['compute', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('amends_pipeline.commands.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = out.strip().splitlines()[-1]
    assert "amends_pipeline.commands.compute" in loaded
    for other in ("bench", "up", "view", "verify", "role"):
        assert f"amends_pipeline.commands.{other}'" not in loaded, loaded


def test_a_mistyped_command_is_refused_naming_the_real_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser(only=_command_module(["veiw"])).parse_args(["veiw"])
    assert e.value.code == 2
    assert "invalid choice: 'veiw'" in capsys.readouterr().err

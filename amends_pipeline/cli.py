"""The ``amends`` command line.

Each subcommand lives in its own module under ``amends_pipeline.commands`` and
exposes ``register(subparsers)``; modules are discovered, so adding a command
never means editing this file. A command's handler returns the exit code.
Exit codes: 0 success, 1 a check failed (e.g. verification not accepted),
2 unusable arguments, configuration or environment, 3 the history cannot be
computed (a daily close outside signed 64-bit), 130 interrupted.

An unreachable Kafka or PostgreSQL is exit 2 with one line naming the address
and what to check; the client libraries' own log lines (librdkafka's
reconnection chatter, psycopg's warnings) are not shown, except a summary
with ``AMENDS_DEBUG=1``. The global ``--verbose`` flag (before the command)
prints every one of them on stderr, secrets redacted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import traceback
from collections.abc import Sequence

from amends_pipeline import commands
from amends_pipeline.errors import ComputeError, UsageError
from amends_pipeline.redaction import redact


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with ``only`` just the command module of that name
    (one of ``command_modules()``).

    Every command module imports what its handler needs (Kafka, PostgreSQL, Polars,
    Delta Lake), so building the whole parser costs about half a second of CPU; a
    command that runs needs only its own module (``_command_module``).
    """
    parser = argparse.ArgumentParser(
        prog="amends",
        description="Keep derived inventory facts correct when source history is revised.",
    )
    parser.add_argument(
        "--verbose", action="store_true", dest="client_logs",
        help=(
            "print the Kafka and PostgreSQL client libraries' own log lines on stderr (secrets"
            " redacted); without it they are summarised in the one-line error"
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in command_modules() if only is None else [only]:
        importlib.import_module(f"{commands.__name__}.{name}").register(sub)
    return parser


def command_modules() -> list[str]:
    """The modules under ``amends_pipeline.commands`` that register commands, by name."""
    found = (m.name for m in pkgutil.iter_modules(commands.__path__))
    return sorted(name for name in found if not name.startswith("_"))


def _command_module(argv: Sequence[str]) -> str | None:
    """The command module of the command ``argv`` names: each module registers the one
    command of its name (``amends view`` is ``commands/view.py``).

    The command is the first argument that is not an option (the only global option,
    ``--verbose``, takes no value). No command or a mistyped one: None, the whole parser
    (whose error names the commands there are).
    """
    name = next((a for a in argv if not a.startswith("-")), None)
    return name if name in command_modules() else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command_module(argv))
    args = parser.parse_args(argv)
    if args.client_logs:
        from amends_pipeline.kafka.settings import show_client_logs

        show_client_logs()
    try:
        code: int = args.func(args)
    except UsageError as e:
        print(redact(f"amends {args.command}: {e}"), file=sys.stderr)
        return 2
    except ComputeError as e:
        print(redact(f"amends {args.command}: {e}"), file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(f"amends {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a defect: say so in one line; AMENDS_DEBUG=1 shows the traceback
        if os.environ.get("AMENDS_DEBUG"):
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
        text = " ".join(f"{type(e).__name__}: {e}".split())
        print(redact(f"amends {args.command}: internal error: {text}"), file=sys.stderr)
        return 70
    return code


if __name__ == "__main__":
    sys.exit(main())

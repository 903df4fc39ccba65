"""What the subcommands share: turning operation errors into one line, and the repository paths."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from amends_pipeline.errors import UsageError
from amends_pipeline.redaction import redact

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "fixtures"

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``add_subparsers`` returns, named once: argparse keeps the class private."""


def add_config(p: argparse.ArgumentParser) -> None:
    """The ``--config CONFIG.json`` option every command that acts on a namespace takes."""
    p.add_argument("--config", required=True, metavar="CONFIG.json")


def operational(fn: Callable[..., int]) -> Callable[..., int]:
    """Turn operation errors (store, Kafka, fencing, retention) into one line and exit 1.

    Unreachable services, refused credentials and missing set-up are environment
    problems: exit 2. Every line is redacted (no password or other secret).
    """

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> int:
        from amends_core.errors import OperationError
        from amends_core.roles.worker import ClaimUnsettled
        from amends_pipeline.kafka.topics import KafkaError, KafkaUnavailable
        from amends_pipeline.manifest import ManifestMissing
        from amends_pipeline.postgres.errors import (
            NamespaceUnknown,
            SchemaError,
            StoreError,
            StoreUnavailable,
        )

        try:
            return fn(*args, **kwargs)
        except NamespaceUnknown as e:  # name the configuration file the user passed
            config = getattr(args[0], "config", None) if args else None
            raise UsageError(redact(e.message(config or "CONFIG.json"))) from None
        except (StoreUnavailable, ClaimUnsettled, KafkaUnavailable, SchemaError, ManifestMissing) as e:
            raise UsageError(redact(e)) from None
        except (OperationError, StoreError, KafkaError) as e:
            print(redact(f"amends: {type(e).__name__}: {e}"), file=sys.stderr)
            return 1

    return wrapper

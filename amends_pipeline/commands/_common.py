"""Helpers shared by subcommands: reading configuration and records files."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path

from amends_core import wire
from amends_core.ledger import Config, ConfigError
from amends_pipeline.errors import UsageError
from amends_pipeline.redaction import redact

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "fixtures"


def read_bytes(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        msg = f"cannot read {what} {str(path)!r}: {e.strerror or e}"
        raise UsageError(msg) from None


def load_config(path: str | Path) -> Config:
    try:
        return wire.decode_config(read_bytes(path, "configuration"))
    except ConfigError as e:
        msg = f"invalid configuration {str(path)!r}: {e}"
        raise UsageError(msg) from None


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

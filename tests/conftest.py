"""Fixtures shared by every test layer that talks to the real PostgreSQL server.

PostgreSQL is required, never mocked and never skipped: when it cannot be
reached, the tests that need it FAIL with the reason and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from amends_pipeline.postgres.connection import check_available, dsn_from_env
from amends_pipeline.postgres.errors import StoreUnavailable
from amends_pipeline.postgres.migrate import scratch_schema


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = dsn_from_env()
    try:
        check_available(dsn)
    except StoreUnavailable as e:
        pytest.fail(
            f"PostgreSQL is required for these tests and is unavailable: {e}."
            " Run `bash scripts/ensure-postgres.sh` or set AMENDS_PG_DSN.",
            pytrace=False,
        )
    return dsn


@pytest.fixture
def pg_schema(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A freshly migrated schema of its own, dropped after the test."""
    layer = request.path.parent.name[:4]
    with scratch_schema(pg_dsn, f"t_{layer}") as schema:
        yield schema

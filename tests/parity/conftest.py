"""Fixtures for the parity suite: every test runs once per store.

PostgreSQL is required, never skipped: when it cannot be reached the
PostgreSQL variants fail with the reason and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from amends_core.ledger import Config
from tests.parity.harness import Adapter, MemoryAdapter, PgAdapter


@pytest.fixture(params=["memory", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_adapter(
    store_kind: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Adapter]]:
    """Factory: ``make_adapter(cfg)`` gives an adapter of this test's store kind."""
    made: list[Adapter] = []

    def make(cfg: Config, **kw: Any) -> Adapter:
        a: Adapter
        if store_kind == "memory":
            a = MemoryAdapter(cfg)
        else:
            a = PgAdapter(request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema"),
                          cfg, **kw)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()

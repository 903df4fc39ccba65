"""Fixtures shared by every test layer that talks to the real PostgreSQL server.

PostgreSQL is required, never mocked and never skipped: when it cannot be
reached, the tests that need it FAIL with the reason and the fix.

Each test run creates a database of its own on the server of ``AMENDS_PG_DSN``
(default: the local development server) and drops it at the end, so the
create path of the set-up runs in every build and nothing depends on a
database someone made by hand.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterator, Mapping

import pytest

from amends_pipeline.kafka.realbroker import RealBroker, RealBrokerError
from amends_pipeline.postgres.connection import check_available, dsn_from_env
from amends_pipeline.postgres.ensure import (
    create_database,
    drop_database,
    scratch_database_name,
    with_dbname,
)
from amends_pipeline.postgres.errors import StoreUnavailable
from amends_pipeline.postgres.migrate import scratch_schema


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """The DSN of a database created for this test run (dropped when the run ends)."""
    base = dsn_from_env()
    name = scratch_database_name("amends_test")
    try:
        create_database(base, name)
        dsn = with_dbname(base, name)
        check_available(dsn)
    except StoreUnavailable as e:
        pytest.fail(
            f"PostgreSQL is required for these tests and is unavailable: {e}."
            " Run `bash scripts/ensure-postgres.sh` or set AMENDS_PG_DSN.",
            pytrace=False,
        )
    yield dsn
    drop_database(base, name)


@pytest.fixture
def pg_schema(pg_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A freshly migrated schema of its own, dropped after the test."""
    layer = request.path.parent.name[:4]
    with scratch_schema(pg_dsn, f"t_{layer}") as schema:
        yield schema


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBroker]:
    """One real Apache Kafka broker (single KRaft node on loopback) for the whole test run.

    Tests share it, so each uses topics of its own; a test that kills, restarts
    or reconfigures a broker starts its own with ``make_broker``.
    """
    try:
        broker = RealBroker(tmp_path_factory.mktemp("kafka")).start()
    except RealBrokerError as e:
        pytest.fail(f"the real Kafka broker is required for these tests and did not start: {e}", pytrace=False)
    yield broker
    broker.stop()


@pytest.fixture
def make_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RealBroker]]:
    """Factory of real brokers owned by one test (stopped afterwards), with extra settings."""
    made: list[RealBroker] = []

    def make(settings: Mapping[str, str] | None = None) -> RealBroker:
        b = RealBroker(tmp_path_factory.mktemp("kafka-own"), settings)
        made.append(b)
        return b.start()

    yield make
    for b in made:
        b.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic names for one test on the shared broker."""
    tag = secrets.token_hex(3)
    base = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:60].strip("-")

    def name(role: str) -> str:
        return f"{base}-{tag}-{role}"

    return name

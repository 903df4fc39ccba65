"""Fixtures shared by every test layer that talks to the real PostgreSQL server.

PostgreSQL is required, never mocked and never skipped: when it cannot be
reached, the tests that need it FAIL with the reason and the fix.

Each test run creates a database of its own on the server of ``AMENDS_PG_DSN``
(default: the local development server) and drops it at the end, so the
create path of the set-up runs in every build and nothing depends on a
database someone made by hand.
"""

from __future__ import annotations

import itertools
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

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
from tests import leftovers, shared_broker
from tests.schema_pool import SchemaPool


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


@pytest.fixture(scope="session")
def schema_pool(pg_dsn: str) -> Iterator[SchemaPool]:
    """Migrated schemas of this run (this worker), handed to one test at a time and emptied between."""
    pool = SchemaPool(pg_dsn)
    yield pool
    pool.close()


@pytest.fixture
def pg_schema(schema_pool: SchemaPool) -> Iterator[str]:
    """A migrated schema holding no data, for this test alone.

    Migrating a schema per test cost about a third of a second each; a schema from the
    pool is emptied instead (``SchemaPool``). Tests of migration itself use
    ``scratch_schema`` directly.
    """
    schema = schema_pool.lease()
    try:
        yield schema
    finally:
        schema_pool.give_back(schema)


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[RealBroker]:
    """One real Apache Kafka broker (single KRaft node on loopback) for the whole test run.

    Every test and every xdist worker shares it (``tests/shared_broker.py``), so each
    test uses topics of its own; a test that kills, restarts or reconfigures a broker
    starts its own with ``make_broker``.
    """
    try:
        broker = shared_broker.acquire(Path(os.environ[shared_broker.SHARED_ENV]))
    except RealBrokerError as e:
        pytest.fail(f"the real Kafka broker is required for these tests and did not start: {e}", pytrace=False)
    yield broker
    if not hasattr(request.config, "workerinput"):
        # A run without workers: this process is the controller, and the broker its child.
        shared_broker.release(Path(os.environ[shared_broker.SHARED_ENV]))
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


# ---------------------------------------------------------------- tiers


SERVICE_FIXTURES = frozenset({"pg_dsn", "kafka_broker", "make_broker"})
"""Fixtures that reach a real server: a test using any of them is at least ``integration``."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test exactly one tier marker (``unit``, ``integration`` or ``e2e``), slow tests first.

    ``tests/unit``, ``tests/integration`` and ``tests/e2e`` name their tier; elsewhere (the
    contract suites) a test that reaches PostgreSQL or Kafka through the fixtures above is
    integration and any other is unit. ``slow`` is set by hand on tests that take more than
    about 10 s here (docs/testing.md). Slow tests run first, so that with several workers
    the run does not end waiting on one long test that started last.
    """
    for item in items:
        parts = set(item.path.relative_to(config.rootpath).parts)
        tier = next((t for t in ("e2e", "integration", "unit") if t in parts), None)
        if tier is None:
            tier = "integration" if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())) else "unit"
        item.add_marker(getattr(pytest.mark, tier))
    _slow_first(items, int(getattr(config, "workerinput", {}).get("workercount", 1)))


def _slow_first(items: list[pytest.Item], workers: int) -> None:
    """Order the run so that every worker starts with its share of the slow tests.

    pytest-xdist's ``worksteal`` scheduler first hands each of the ``workers`` a contiguous
    block of the collection (block j holds ``rest // (workers - j)`` tests) and later moves
    tests from the tail of the longest queue to an idle worker. So the slow tests are dealt
    round-robin to the heads of those blocks and the fast ones fill the rest: no worker is
    left alone with the long tests at the end of the run.
    """
    slow = [i for i in items if i.get_closest_marker("slow") is not None]
    fast = iter([i for i in items if i.get_closest_marker("slow") is None])
    blocks: list[list[pytest.Item]] = [[] for _ in range(max(1, workers))]
    for k, item in enumerate(slow):
        blocks[k % len(blocks)].append(item)
    rest = len(items)
    for j, block in enumerate(blocks):
        size = rest // (len(blocks) - j)
        block.extend(itertools.islice(fast, max(0, size - len(block))))
        rest -= len(block)
    items[:] = [i for block in blocks for i in block] + list(fast)


# ---------------------------------------------------------------- leftovers


def pytest_configure(config: pytest.Config) -> None:
    """Mark every process the run starts from now on, so the session-end check finds it.

    The controlling pytest process puts the run's token into its environment before any
    worker or test starts (``tests/leftovers.py``); workers and tests inherit it.
    """
    if not hasattr(config, "workerinput"):
        config.stash[RUN_TOKEN] = leftovers.mark_run()
        # Snapshot tables of the run's processes go to a folder of the run, not the checkout's var/.
        if "AMENDS_SNAPSHOT_URI" not in os.environ:
            os.environ["AMENDS_SNAPSHOT_URI"] = tempfile.mkdtemp(prefix="amends-test-snapshots-")
            config.add_cleanup(lambda: shutil.rmtree(os.environ.pop("AMENDS_SNAPSHOT_URI"), ignore_errors=True))
        # The folder where the run's one Kafka broker lives (``tests/shared_broker.py``).
        shared = tempfile.mkdtemp(prefix="amends-test-shared-")
        os.environ[shared_broker.SHARED_ENV] = shared
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(shared_broker.SHARED_ENV), ignore_errors=True))


RUN_TOKEN = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run, naming each one, when a process the tests started is still running."""
    if hasattr(session.config, "workerinput") or RUN_TOKEN not in session.config.stash:
        return
    shared_broker.release(Path(os.environ[shared_broker.SHARED_ENV]))
    token = session.config.stash[RUN_TOKEN]
    # Dagster's code servers (`dagster api grpc --heartbeat --heartbeat-timeout 20`) end by
    # themselves within 20 s of their webserver or daemon stopping; one orphaned by a test that
    # ended just before the run did is not a leftover until that has passed.
    left = leftovers.wait_for_leftovers(token, frozenset({os.getpid()}), grace_s=30.0)
    if not left:
        return
    lines = [f"  pid {p.pid}: {p.what}: {p.cmdline[:160]}" for p in left]
    leftovers.kill(left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    text = "the test run left processes running (killed now):\n" + "\n".join(lines)
    if reporter is not None:
        reporter.write_line(text, red=True, bold=True)
    else:
        print(text, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED

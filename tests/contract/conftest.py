"""The adapter fixtures of the contract suites: one factory per kind of adapter.

A suite (``class ...Contract`` in a test module) runs once per subclass, and
each subclass takes its adapters from one kind through the mixins of
``tests.contract.kinds``. Each factory asks only for the servers its kind needs,
so a ``[memory]`` or ``[sim]`` test never reaches PostgreSQL or Kafka and a
``[postgres]`` or ``[kafka]`` one names ``pg_dsn`` or ``kafka_broker`` among its
fixtures. PostgreSQL and Kafka are required, never skipped: the shared fixtures
of tests/conftest.py fail with the reason when they are missing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from amends_core.ledger import Config
from amends_pipeline.kafka.realbroker import RealBroker
from tests import builders as b
from tests.contract.kits import MemoryKit, PgKit, SimKit
from tests.contract.logs import (
    KafkaOutputKit,
    KafkaSourceKit,
    MemoryOutputKit,
    MemorySourceKit,
    SimOutputKit,
    SimSourceKit,
    SnapshotSourceKit,
)

Factory = Callable[..., Any]


def _factory(build: Factory) -> Iterator[Factory]:
    made: list[Any] = []

    def make(*args: Any, **kw: Any) -> Any:
        kit = build(*args, **kw)
        made.append(kit)
        return kit

    yield make
    for kit in made:
        kit.close()


# ---------------------------------------------------------------- stores: make(cfg)


@pytest.fixture
def memory_stores() -> Iterator[Factory]:
    yield from _factory(MemoryKit)


@pytest.fixture
def sim_stores() -> Iterator[Factory]:
    yield from _factory(SimKit)


@pytest.fixture
def postgres_stores(pg_dsn: str, pg_schema: str) -> Iterator[Factory]:
    def build(cfg: Config, **kw: Any) -> PgKit:
        return PgKit(pg_dsn, pg_schema, cfg, **kw)

    yield from _factory(build)


# ---------------------------------------------------------------- source logs: make(cfg=None)


@pytest.fixture
def memory_sources() -> Iterator[Factory]:
    yield from _factory(lambda cfg=None: MemorySourceKit(cfg or b.config()))


@pytest.fixture
def sim_sources() -> Iterator[Factory]:
    yield from _factory(lambda cfg=None: SimSourceKit(cfg or b.config()))


@pytest.fixture
def kafka_sources(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[Factory]:
    def build(cfg: Config | None = None) -> KafkaSourceKit:
        return KafkaSourceKit(cfg or b.config(), pg_dsn, pg_schema, kafka_broker, topic_name)

    yield from _factory(build)


@pytest.fixture
def snapshot_sources(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str], tmp_path: Path
) -> Iterator[Factory]:
    def build(cfg: Config | None = None) -> SnapshotSourceKit:
        return SnapshotSourceKit(cfg or b.config(), pg_dsn, pg_schema, kafka_broker, topic_name, str(tmp_path / "snap"))

    yield from _factory(build)


# ---------------------------------------------------------------- output logs: make(partitions=1)


@pytest.fixture
def memory_outputs() -> Iterator[Factory]:
    yield from _factory(MemoryOutputKit)


@pytest.fixture
def sim_outputs() -> Iterator[Factory]:
    yield from _factory(SimOutputKit)


@pytest.fixture
def kafka_outputs(kafka_broker: RealBroker, topic_name: Callable[[str], str]) -> Iterator[Factory]:
    numbers = itertools.count()

    def build(partitions: int = 1) -> KafkaOutputKit:
        return KafkaOutputKit(partitions, kafka_broker, topic_name(f"output{next(numbers)}"))

    yield from _factory(build)

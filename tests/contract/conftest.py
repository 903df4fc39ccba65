"""The adapter fixtures of the contract suites: every test runs once per adapter of its port.

``make_kit`` gives stores (processing, outbox, view) of the kinds memory,
postgres and sim; ``make_source`` and ``make_output`` give logs of the kinds
memory, sim and kafka. PostgreSQL and Kafka are required, never skipped: the
shared fixtures of tests/conftest.py fail with the reason when they are missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from amends_core.ledger import Config
from tests import builders as b
from tests.contract.kits import MemoryKit, PgKit, SimKit
from tests.contract.logs import (
    KafkaOutputKit,
    KafkaSourceKit,
    MemoryOutputKit,
    MemorySourceKit,
    SimOutputKit,
    SimSourceKit,
)


def _factory(request: pytest.FixtureRequest, build: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    made: list[Any] = []

    def make(*args: Any, **kw: Any) -> Any:
        kit = build(*args, **kw)
        made.append(kit)
        return kit

    yield make
    for kit in made:
        kit.close()


@pytest.fixture(params=["memory", "postgres", "sim"])
def make_kit(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_kit(cfg)``: the processing store, outbox and view store of this test's kind."""

    def build(cfg: Config, **kw: Any) -> Any:
        if request.param == "memory":
            return MemoryKit(cfg)
        if request.param == "sim":
            return SimKit(cfg)
        dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
        return PgKit(dsn, schema, cfg, **kw)

    yield from _factory(request, build)


@pytest.fixture(params=["memory", "sim", "kafka"])
def make_source(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_source(cfg=None)``: partition 0 of an empty source log of this test's kind."""

    def build(cfg: Config | None = None) -> Any:
        cfg = cfg or b.config()
        if request.param == "memory":
            return MemorySourceKit(cfg)
        if request.param == "sim":
            return SimSourceKit(cfg)
        return KafkaSourceKit(
            cfg, request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema"),
            request.getfixturevalue("kafka_broker"), request.getfixturevalue("topic_name"),
        )

    yield from _factory(request, build)


@pytest.fixture(params=["memory", "sim", "kafka"])
def make_output(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``make_output(partitions=1)``: an empty output log of this test's kind."""

    def build(partitions: int = 1) -> Any:
        if request.param == "memory":
            return MemoryOutputKit(partitions)
        if request.param == "sim":
            return SimOutputKit(partitions)
        topic = request.getfixturevalue("topic_name")("output")
        return KafkaOutputKit(partitions, request.getfixturevalue("kafka_broker"), topic)

    yield from _factory(request, build)

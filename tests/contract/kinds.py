"""Which adapters a suite's subclass runs on: one mixin per kind, naming that kind's fixtures.

A contract suite is a class ``...Contract`` of tests written against the ports,
asking for ``make_kit`` (stores), ``make_source`` or ``make_output`` (logs). A
test module runs it per kind with one subclass each, e.g.
``class TestPostgres(OnPostgres, ProcessingStoreContract)``; the fixtures
themselves are in conftest.py.
"""

from __future__ import annotations

from typing import Any

import pytest


class OnMemory:
    """The memory adapters of ``amends_core.adapters``."""

    @pytest.fixture
    def make_kit(self, memory_stores: Any) -> Any:
        return memory_stores

    @pytest.fixture
    def make_source(self, memory_sources: Any) -> Any:
        return memory_sources

    @pytest.fixture
    def make_output(self, memory_outputs: Any) -> Any:
        return memory_outputs


class OnSim:
    """The simulator's fault adapters (``amends_core.sim.faults``) with no fault armed."""

    @pytest.fixture
    def make_kit(self, sim_stores: Any) -> Any:
        return sim_stores

    @pytest.fixture
    def make_source(self, sim_sources: Any) -> Any:
        return sim_sources

    @pytest.fixture
    def make_output(self, sim_outputs: Any) -> Any:
        return sim_outputs


class OnPostgres:
    """PgStore and PgViewStore on the test's schema."""

    @pytest.fixture
    def make_kit(self, postgres_stores: Any) -> Any:
        return postgres_stores


class OnKafka:
    """KafkaSource, KafkaOutput and KafkaOutputSource on the shared real broker."""

    @pytest.fixture
    def make_source(self, kafka_sources: Any) -> Any:
        return kafka_sources

    @pytest.fixture
    def make_output(self, kafka_outputs: Any) -> Any:
        return kafka_outputs


class OnSnapshot:
    """The worker's source of ``Runtime.source``: a source snapshot (a Delta table on disk) holding
    what retention deleted from a topic on the shared real broker, then that topic."""

    @pytest.fixture
    def make_source(self, snapshot_sources: Any) -> Any:
        return snapshot_sources


__all__ = ["OnKafka", "OnMemory", "OnPostgres", "OnSim", "OnSnapshot"]

"""Composition root: configuration, environment, stores and Kafka clients in one place.

Everything else receives what it needs as arguments; only this module reads
``AMENDS_PG_DSN``, ``AMENDS_PG_SCHEMA`` and ``AMENDS_KAFKA_BOOTSTRAP``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from amends_core.ledger import Config
from amends_pipeline.kafka import bootstrap_from_env
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.manifest import Manifest, read_manifest
from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, dsn_from_env
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore


@dataclass
class Runtime:
    cfg: Config
    dsn: str = field(default_factory=dsn_from_env)
    schema: str = field(default_factory=lambda: os.environ.get("AMENDS_PG_SCHEMA") or DEFAULT_SCHEMA)
    bootstrap: str | None = None
    migrate: bool = True

    def kafka(self) -> str:
        if self.bootstrap is None:
            self.bootstrap = bootstrap_from_env()
        return self.bootstrap

    def store(self, application_name: str = "amends-worker") -> PgStore:
        return PgStore.open(
            self.dsn, self.cfg, schema=self.schema, migrate=self.migrate,
            application_name=application_name,
        )

    def view_store(self) -> PgViewStore:
        return PgViewStore.open(self.dsn, self.cfg, schema=self.schema, migrate=self.migrate)

    def manifest(self, store: PgStore) -> Manifest:
        return read_manifest(store.db, store.ns_id, self.cfg)

    def reader(self, topic: str) -> Reader:
        return Reader(self.kafka(), topic)

    def writer(self) -> Writer:
        return Writer(self.kafka())

    def admin(self) -> AdminClient:
        """An admin client for the cluster (topic creation and description)."""
        return AdminClient({"bootstrap.servers": self.kafka(), "log_level": 3})

"""Composition root: configuration, environment, stores and Kafka clients in one place.

Everything else receives what it needs as arguments; only this module reads
``AMENDS_PG_DSN``, ``AMENDS_PG_SCHEMA``, ``AMENDS_KAFKA_BOOTSTRAP`` and the topic
settings ``AMENDS_KAFKA_REPLICATION_FACTOR`` / ``AMENDS_KAFKA_MIN_INSYNC_REPLICAS``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from amends_core.ledger import Config
from amends_pipeline.errors import UsageError
from amends_pipeline.kafka import bootstrap_from_env
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.manifest import Manifest, read_manifest
from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, dsn_from_env
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore

REPLICATION_FACTOR_ENV = "AMENDS_KAFKA_REPLICATION_FACTOR"
MIN_INSYNC_REPLICAS_ENV = "AMENDS_KAFKA_MIN_INSYNC_REPLICAS"


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """How ``amends provision`` creates topics on a real cluster (existing topics are kept)."""

    replication_factor: int = 1
    min_insync_replicas: int | None = None
    """Topic-level ``min.insync.replicas``; None leaves the broker's default."""


def _count(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 32767:
        msg = f"{name}={text[:20]!r} is not a whole number from 1 to 32767"
        raise UsageError(msg)
    return int(text)


def topic_settings_from_env(environ: Mapping[str, str] | None = None) -> TopicSettings:
    """Topic settings from the environment; UsageError (one line) when unusable."""
    env = os.environ if environ is None else environ
    rf = _count(env, REPLICATION_FACTOR_ENV) or 1
    isr = _count(env, MIN_INSYNC_REPLICAS_ENV)
    if isr is not None and isr > rf:
        msg = (
            f"{MIN_INSYNC_REPLICAS_ENV}={isr} exceeds {REPLICATION_FACTOR_ENV}={rf}:"
            " every acknowledged write to such a topic would fail"
        )
        raise UsageError(msg)
    return TopicSettings(rf, isr)


@dataclass
class Runtime:
    cfg: Config
    dsn: str = field(default_factory=dsn_from_env)
    schema: str = field(default_factory=lambda: os.environ.get("AMENDS_PG_SCHEMA") or DEFAULT_SCHEMA)
    bootstrap: str | None = None
    migrate: bool = True
    topics: TopicSettings | None = None
    """Topic settings for provisioning; read from the environment on first use."""

    def kafka(self) -> str:
        if self.bootstrap is None:
            self.bootstrap = bootstrap_from_env()
        return self.bootstrap

    def topic_settings(self) -> TopicSettings:
        if self.topics is None:
            self.topics = topic_settings_from_env()
        return self.topics

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

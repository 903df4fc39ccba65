"""Composition root: configuration, environment, stores, Kafka clients and workers in one place.

A worker reads its source partition through ``Runtime.worker``: the topic, and
below what the topic still retains, the source snapshot (``SnapshotThenTopic``).
Everything else receives what it needs as arguments; only this module reads
``AMENDS_PG_DSN``, ``AMENDS_PG_SCHEMA``, ``AMENDS_KAFKA_BOOTSTRAP``, the topic
settings ``AMENDS_KAFKA_REPLICATION_FACTOR`` / ``AMENDS_KAFKA_MIN_INSYNC_REPLICAS`` and
the snapshot location ``AMENDS_SNAPSHOT_URI``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

from confluent_kafka.admin import AdminClient

from amends_core.ledger import Config
from amends_pipeline.errors import UsageError
from amends_pipeline.kafka import bootstrap_from_env
from amends_pipeline.kafka.settings import KafkaSettings, preflight
from amends_pipeline.kafka.topics import BROKER_WAIT_FETCH_MAX_MS, WAIT_FETCH_MAX_MS, Reader, Writer
from amends_pipeline.manifest import Manifest, read_manifest
from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, dsn_from_env
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore
from amends_pipeline.redaction import remember_dsn
from amends_pipeline.roles.worker import KafkaSource, WorkerPartition
from amends_pipeline.snapshot import URI_ENV
from amends_pipeline.snapshot.source import SnapshotThenTopic

if TYPE_CHECKING:
    from amends_pipeline.snapshot.read import PartitionRows

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
    dsn: str = field(default_factory=dsn_from_env, repr=False)
    """PostgreSQL connection string; may hold a password, so it is never in ``repr``."""
    schema: str = field(default_factory=lambda: os.environ.get("AMENDS_PG_SCHEMA") or DEFAULT_SCHEMA)
    bootstrap: str | None = None
    migrate: bool = True
    topics: TopicSettings | None = None
    """Topic settings for provisioning; read from the environment on first use."""
    kafka_client: KafkaSettings | None = field(default=None, repr=False)
    """Kafka client settings (TLS, SASL, ...); from the environment on first use."""
    _kafka_checked: bool = field(default=False, init=False, repr=False, compare=False)
    read_only: bool = False
    """Open every store read-only: never migrate, never register a namespace (look it up;
    NamespaceUnknown when it was never provisioned). For commands that only read."""
    snapshot_uri: str | None = field(default_factory=lambda: os.environ.get(URI_ENV))
    """Where source snapshot tables live (``AMENDS_SNAPSHOT_URI``); None: ``var/snapshot/``."""

    def __post_init__(self) -> None:
        remember_dsn(self.dsn)

    def kafka(self) -> str:
        if self.bootstrap is None:
            self.bootstrap = bootstrap_from_env()
        return self.bootstrap

    def kafka_settings(self) -> KafkaSettings:
        """The settings every client of this runtime gets, checked against the cluster once.

        The check turns refused credentials, TLS failures and unusable settings
        into one ``KafkaRefused`` line (exit 2) before any work starts.
        """
        if self.kafka_client is None:
            self.kafka_client = KafkaSettings.from_env(self.kafka())
        if not self._kafka_checked:
            preflight(self.kafka_client)
            self._kafka_checked = True
        return self.kafka_client

    def topic_settings(self) -> TopicSettings:
        if self.topics is None:
            self.topics = topic_settings_from_env()
        return self.topics

    def store(self, application_name: str = "amends-worker", *, read_only: bool = False) -> PgStore:
        """The processing store; ``read_only`` (or a read-only runtime) never migrates or registers."""
        return PgStore.open(
            self.dsn, self.cfg, schema=self.schema, migrate=self.migrate,
            application_name=application_name, read_only=read_only or self.read_only,
        )

    def view_store(self, *, read_only: bool = False) -> PgViewStore:
        """The view store; ``read_only`` (or a read-only runtime) never migrates or registers."""
        return PgViewStore.open(
            self.dsn, self.cfg, schema=self.schema, migrate=self.migrate,
            read_only=read_only or self.read_only,
        )

    def reading(self) -> Runtime:
        """This runtime with every store opened read-only (same settings otherwise)."""
        return replace(self, read_only=True)

    def manifest(self, store: PgStore) -> Manifest:
        return read_manifest(store.db, store.ns_id, self.cfg)

    def reader(self, topic: str) -> Reader:
        ks = self.kafka_settings()
        return Reader(ks.bootstrap, topic, **ks.client_config())

    def waiting_reader(self, topic: str) -> Reader:
        """A second reader of ``topic`` that a role only waits in (``Reader.wait``).

        Its own consumer, so that the fetch it leaves in flight when it wakes
        never holds up the role's reads; ``fetch.wait.max.ms`` is
        ``BROKER_WAIT_FETCH_MAX_MS`` on a cluster that answers waiting fetches
        as soon as data arrives, ``WAIT_FETCH_MAX_MS`` on librdkafka's mock
        cluster, unless the Kafka settings give one.
        """
        ks = self.kafka_settings()
        with self.reader(topic) as probe:
            early = probe.answers_waiting_fetches()
        wait_ms = BROKER_WAIT_FETCH_MAX_MS if early else WAIT_FETCH_MAX_MS
        return Reader(ks.bootstrap, topic, **{"fetch.wait.max.ms": wait_ms, **ks.client_config()})

    def writer(self) -> Writer:
        ks = self.kafka_settings()
        return Writer(ks.bootstrap, **ks.client_config())

    def admin(self) -> AdminClient:
        """An admin client for the cluster (topic creation and description)."""
        return AdminClient(self.kafka_settings().admin_config())

    def worker(
        self, store: PgStore, reader: Reader, m: Manifest, partition: int, *,
        batch_size: int = 1000, recheck_seconds: float = 5.0,
    ) -> WorkerPartition:
        """The worker of one source partition, reading ``source``: every worker is wired here."""
        source = self.source(reader, m, partition, recheck_seconds=recheck_seconds)
        return WorkerPartition(store, reader, m, partition, batch_size=batch_size, source=source)

    def source(
        self, reader: Reader, m: Manifest, partition: int, *, recheck_seconds: float = 5.0
    ) -> SnapshotThenTopic:
        """A worker's SourceLog of one partition: the topic and, below what the topic still
        retains, the source snapshot up to its captured end (``snapshot.source``)."""
        topic = KafkaSource(reader, m, partition, recheck_seconds=recheck_seconds)
        return SnapshotThenTopic(topic, partial(self.snapshot_rows, m, partition))

    def snapshot_rows(self, m: Manifest, partition: int) -> PartitionRows:
        """One partition of the namespace's source snapshot as of its latest version; NoSnapshot
        when none was taken. Imports deltalake, so only a worker that needs the snapshot calls it."""
        from amends_pipeline.snapshot.read import PartitionRows
        from amends_pipeline.snapshot.table import namespace_table

        table = namespace_table(self.snapshot_uri, m, create=False)
        version = table.version()
        return PartitionRows(table, version, m, partition, table.ends([partition], version)[partition])

"""Bind a namespace to its source and output topics (idempotent)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import NewTopic

from amends_core.errors import OperationError
from amends_pipeline.kafka.topics import KafkaError
from amends_pipeline.manifest import Manifest, ManifestMissing, new_nonce, write_manifest, write_markers
from amends_pipeline.runtime import Runtime


class ProvisionError(OperationError):
    """The topics or the existing manifest do not fit the request."""


@dataclass(frozen=True, slots=True)
class Provisioned:
    manifest: Manifest
    created: bool
    """False when the namespace was already provisioned with the same topics."""


def ensure_topic(rt: Runtime, topic: str, partitions: int) -> None:
    """The topic must exist with ``partitions`` partitions; create it where the cluster allows."""
    with rt.reader(topic) as r:
        try:
            n = r.partitions(timeout=5.0)
        except KafkaError:
            n = None
    if n is None:
        admin = rt.admin()
        fut = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=10.0)[topic]
        try:
            fut.result(timeout=15.0)
        except Exception as e:  # noqa: BLE001 - any failure means: create it yourself
            msg = (
                f"topic {topic!r} does not exist and could not be created ({str(e)[:80]});"
                f" create it with {partitions} partitions (development broker:"
                f" `amends broker --topic {topic}:{partitions}`)"
            )
            raise ProvisionError(msg) from None
        return
    if n != partitions:
        msg = f"topic {topic!r} has {n} partitions; the configuration needs {partitions}"
        raise ProvisionError(msg)


def provision(rt: Runtime, source_topic: str, output_topic: str) -> Provisioned:
    cfg = rt.cfg
    with rt.store("amends-provision") as store:
        try:
            existing = rt.manifest(store)
        except ManifestMissing:
            existing = None
        if existing is not None:
            if (existing.source_topic, existing.output_topic) != (source_topic, output_topic):
                msg = (
                    f"namespace {cfg.namespace!r} is already bound to {existing.source_topic!r}"
                    f" -> {existing.output_topic!r}"
                )
                raise ProvisionError(msg)
            return Provisioned(existing, False)
        ensure_topic(rt, source_topic, cfg.partitions)
        ensure_topic(rt, output_topic, cfg.partitions)
        nonce = new_nonce()
        w = rt.writer()
        markers = write_markers(w, source_topic, cfg, nonce)
        m = Manifest(
            cfg.namespace, source_topic, output_topic, cfg.partitions, cfg.source_incarnation,
            cfg.digest(), nonce, markers, cfg.namespace,
        )
        write_manifest(store.db, store.ns_id, m)
        return Provisioned(m, True)

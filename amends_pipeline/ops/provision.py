"""Bind a namespace to its source and output topics (idempotent)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaError as _DriverError
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from amends_core.errors import OperationError
from amends_pipeline.kafka.topics import KafkaError
from amends_pipeline.manifest import (
    Manifest,
    ManifestMissing,
    markers_confirm,
    new_nonce,
    record_topic_id,
    write_manifest,
    write_markers,
)
from amends_pipeline.runtime import MIN_INSYNC_REPLICAS_ENV, REPLICATION_FACTOR_ENV, Runtime


class ProvisionError(OperationError):
    """The topics or the existing manifest do not fit the request."""


@dataclass(frozen=True, slots=True)
class Provisioned:
    manifest: Manifest
    created: bool
    """False when the namespace was already provisioned with the same topics."""


OUTPUT_TOPIC_CONFIG = {"cleanup.policy": "compact"}
"""Topic settings of an output topic that provision creates: the log keeps the latest
envelope of every output ID (keyed by its encoded output ID) for ever, so a view can be
rebuilt from offset 0. Deletion versions are envelopes too, never Kafka null tombstones."""


def ensure_topic(rt: Runtime, topic: str, partitions: int, *, output: bool = False) -> None:
    """The topic must exist with ``partitions`` partitions; create it where the cluster allows.

    Created topics take their replication factor and ``min.insync.replicas`` from
    the runtime's topic settings; an output topic is created log-compacted. An
    existing topic is used as it is, except that a wrong partition count, or an
    output topic whose cleanup policy can delete records (not compacted, or
    compacted with time or size retention), is refused with the fix.
    """
    settings = rt.topic_settings()  # unusable settings fail before the cluster is touched
    with rt.reader(topic) as r:
        try:
            n = r.partitions(timeout=5.0)
        except KafkaError:
            n = None
    if n is None:
        if _create_topic(rt, topic, partitions, output, settings.replication_factor,
                         settings.min_insync_replicas):
            return
        with rt.reader(topic) as r:  # created concurrently by someone else: check it as found
            n = r.partitions(timeout=10.0)
    if n != partitions:
        msg = f"topic {topic!r} has {n} partitions; the configuration needs {partitions}"
        raise ProvisionError(msg)
    if output:
        _check_compacted(rt, topic)


def _create_topic(
    rt: Runtime, topic: str, partitions: int, output: bool, rf: int, min_isr: int | None
) -> bool:
    """Create the topic; False when it already exists (a concurrent creation)."""
    config = dict(OUTPUT_TOPIC_CONFIG) if output else {}
    if min_isr is not None:
        config["min.insync.replicas"] = str(min_isr)
    admin = rt.admin()  # keep a reference while waiting: a destroyed client fails its futures
    try:
        admin.create_topics(
            [NewTopic(topic, partitions, rf, config=config)], request_timeout=10.0
        )[topic].result(timeout=15.0)
    except Exception as e:  # noqa: BLE001 - every failure is reported; the known ones precisely
        err = e.args[0] if isinstance(e, KafkaException) and e.args else None
        code = err.code() if isinstance(err, _DriverError) else None
        why = err.str() if isinstance(err, _DriverError) else str(e)
        if code == _DriverError.TOPIC_ALREADY_EXISTS:
            return False
        if code == _DriverError.INVALID_REPLICATION_FACTOR:
            msg = (
                f"topic {topic!r} cannot be created with replication factor {rf}"
                f" ({REPLICATION_FACTOR_ENV}): {why}"
            )
            raise ProvisionError(msg) from None
        if code == _DriverError.INVALID_CONFIG and min_isr is not None:
            msg = f"topic {topic!r} refuses min.insync.replicas={min_isr} ({MIN_INSYNC_REPLICAS_ENV}): {why}"
            raise ProvisionError(msg) from None
        msg = (
            f"topic {topic!r} does not exist and could not be created ({why[:120]});"
            f" create it with {partitions} partitions"
            + (", cleanup.policy=compact" if output else "")
            + f" (development broker: `amends broker --topic {topic}:{partitions}`)"
        )
        raise ProvisionError(msg) from None
    return True


def _check_compacted(rt: Runtime, topic: str) -> None:
    """Refuse an output topic whose cleanup policy may delete the latest envelope of an ID."""
    admin = rt.admin()
    try:
        md = admin.list_topics(timeout=10.0)
    except KafkaException as e:
        msg = f"cannot read cluster metadata to check that topic {topic!r} is compacted: {e}"
        raise ProvisionError(msg) from None
    if md.controller_id not in md.brokers:
        # librdkafka's mock cluster names no controller and cannot describe topic
        # settings (nor does it compact or expire anything): nothing to check there.
        return
    res = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = next(iter(admin.describe_configs([res], request_timeout=10.0).values())).result(
            timeout=15.0
        )
    except Exception as e:  # noqa: BLE001 - a driver error or no answer in time
        msg = f"cannot read the settings of topic {topic!r} to check that it is compacted: {e}"
        raise ProvisionError(msg) from None

    def value(name: str) -> str:
        entry = entries.get(name)
        return "" if entry is None or entry.value is None else str(entry.value)

    policy = {p.strip() for p in value("cleanup.policy").split(",") if p.strip()}
    deletes = "delete" in policy and (value("retention.ms") != "-1" or value("retention.bytes") != "-1")
    if "compact" not in policy or deletes:
        msg = (
            f"output topic {topic!r} has cleanup.policy={','.join(sorted(policy)) or '?'}"
            + (f" with retention.ms={value('retention.ms')}" if deletes else "")
            + ": the view can rebuild itself from the output log only when the log is compacted"
            " and never deletes by time or size; set cleanup.policy=compact on it"
            f" (kafka-configs.sh --alter --entity-type topics --entity-name {topic}"
            " --add-config cleanup.policy=compact) or let provision create the topic"
        )
        raise ProvisionError(msg)


def _topic_id(rt: Runtime, topic: str, wait: float = 15.0) -> str | None:
    """The topic's ID; a topic created a moment ago may not be describable yet, so retry briefly."""
    deadline = time.monotonic() + wait
    with rt.reader(topic) as r:
        while True:
            try:
                return r.topic_id()
            except KafkaError as e:
                if "UNKNOWN_TOPIC" not in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)


def provision(rt: Runtime, source_topic: str, output_topic: str) -> Provisioned:
    """Bind the namespace: markers, and the source topic's ID where the cluster reports one.

    Re-running it on a namespace bound before topic IDs were recorded records
    the ID once the still-retained markers confirm the incarnation.
    """
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
            if existing.source_topic_id is None:
                with rt.reader(source_topic) as r:
                    tid = r.topic_id()
                    if tid is not None and markers_confirm(r, existing):
                        record_topic_id(store.db, store.ns_id, cfg.namespace, tid)
                        existing = rt.manifest(store)
            return Provisioned(existing, False)
        ensure_topic(rt, source_topic, cfg.partitions)
        ensure_topic(rt, output_topic, cfg.partitions, output=True)
        topic_id = _topic_id(rt, source_topic)  # None without topic IDs: markers bind alone
        nonce = new_nonce()
        w = rt.writer()
        markers = write_markers(w, source_topic, cfg, nonce)
        m = Manifest(
            cfg.namespace, source_topic, output_topic, cfg.partitions, cfg.source_incarnation,
            cfg.digest(), nonce, markers, cfg.namespace, topic_id,
        )
        write_manifest(store.db, store.ns_id, m)
        return Provisioned(m, True)

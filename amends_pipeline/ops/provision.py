"""Bind a namespace to its source and output topics (idempotent)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError as _DriverError
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType

from amends_core.errors import OperationError
from amends_pipeline.kafka.topics import (
    DEFAULT_OUTPUT_TOPIC,
    DEFAULT_SOURCE_TOPIC,
    KafkaError,
    KafkaUnavailable,
)
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
    recorded_topic_id: bool = False
    """True when this run recorded the source topic ID of an earlier binding."""


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
        except KafkaUnavailable:
            raise
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


def driver_error(e: KafkaException) -> tuple[int | None, str]:
    """(code, one line of text) of an admin client failure, with nothing cut off."""
    err = e.args[0] if e.args else None
    if isinstance(err, _DriverError):
        return err.code(), " ".join(f"{err.name()}: {err.str()}".split()).rstrip(".")
    return None, " ".join(str(e).split()) or type(e).__name__


def _create_by_hand(topic: str, partitions: int, output: bool) -> str:
    return (
        f"create it with {partitions} partitions"
        + (" and cleanup.policy=compact" if output else "")
        + f" (development broker: `amends broker --topic {topic}:{partitions}`), then run provision again"
    )


def replication_warning(topic: str, replication_factor: int, brokers: int) -> str | None:
    """The warning line for a topic created with one replica on a multi-broker cluster, else None.

    One replica is right for a single development broker; on a cluster of
    several brokers it means losing one broker loses the topic's data (source
    history, or the compacted output a view rebuilds from), which is rarely meant.
    """
    if replication_factor != 1 or brokers <= 1:
        return None
    return (
        f"amends provision: warning: topic {topic!r} was created with replication factor 1 on a"
        f" cluster of {brokers} brokers: losing one broker loses its data; set"
        f" {REPLICATION_FACTOR_ENV} (e.g. 3) before provisioning, or raise it with"
        " kafka-reassign-partitions.sh"
    )


def _create_topic(
    rt: Runtime, topic: str, partitions: int, output: bool, rf: int, min_isr: int | None
) -> bool:
    """Create the topic; False when it already exists (a concurrent creation)."""
    config = dict(OUTPUT_TOPIC_CONFIG) if output else {}
    if min_isr is not None:
        config["min.insync.replicas"] = str(min_isr)
    admin = rt.admin()  # keep a reference while waiting: a destroyed client fails its futures
    try:
        md = admin.list_topics(timeout=10.0)
    except KafkaException as e:
        msg = f"topic {topic!r} does not exist and cluster metadata cannot be read ({driver_error(e)[1]})"
        raise KafkaUnavailable(msg) from None
    if md.controller_id not in md.brokers:
        # librdkafka's mock cluster names no controller and cannot create topics:
        # asking would only wait for a controller that never comes.
        msg = (
            f"topic {topic!r} does not exist and this cluster cannot create topics (it names no"
            " controller among its brokers, like the development broker);"
            f" {_create_by_hand(topic, partitions, output)}"
        )
        raise ProvisionError(msg)
    try:
        admin.create_topics(
            [NewTopic(topic, partitions, rf, config=config)], request_timeout=10.0
        )[topic].result(timeout=15.0)
    except TimeoutError:
        msg = (
            f"topic {topic!r} does not exist and the cluster did not confirm its creation within"
            f" 15 s; check the cluster's health, or {_create_by_hand(topic, partitions, output)}"
        )
        raise ProvisionError(msg) from None
    except KafkaException as e:
        code, why = driver_error(e)
        if code == _DriverError.TOPIC_ALREADY_EXISTS:
            return False
        if code == _DriverError.INVALID_REPLICATION_FACTOR:
            msg = (
                f"topic {topic!r} cannot be created with replication factor {rf}"
                f" ({REPLICATION_FACTOR_ENV}): {why}; set {REPLICATION_FACTOR_ENV} to at most the"
                " number of brokers, or create the topic by hand"
            )
            raise ProvisionError(msg) from None
        if code == _DriverError.INVALID_CONFIG and min_isr is not None:
            msg = (
                f"topic {topic!r} refuses min.insync.replicas={min_isr} ({MIN_INSYNC_REPLICAS_ENV}):"
                f" {why}; lower or unset {MIN_INSYNC_REPLICAS_ENV}"
            )
            raise ProvisionError(msg) from None
        if code == _DriverError.TOPIC_EXCEPTION:
            msg = (
                f"topic {topic!r} cannot be created: {why}; choose another name"
                " (--source-topic / --output-topic)"
            )
            raise ProvisionError(msg) from None
        msg = (
            f"topic {topic!r} does not exist and could not be created ({why});"
            f" {_create_by_hand(topic, partitions, output)}"
        )
        raise ProvisionError(msg) from None
    warning = replication_warning(topic, rf, len(md.brokers))
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    return True


def _check_compacted(rt: Runtime, topic: str) -> None:
    """Refuse an output topic whose cleanup policy may delete the latest envelope of an ID."""
    admin = rt.admin()
    try:
        md = admin.list_topics(timeout=10.0)
    except KafkaException as e:
        msg = (
            f"cannot read cluster metadata to check that topic {topic!r} is compacted:"
            f" {driver_error(e)[1]}"
        )
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
    except KafkaException as e:
        msg = (
            f"cannot read the settings of topic {topic!r} to check that it is compacted:"
            f" {driver_error(e)[1]}"
        )
        raise ProvisionError(msg) from None
    except TimeoutError:
        msg = f"cannot read the settings of topic {topic!r} to check that it is compacted: no answer in 15 s"
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


def binding_text(m: Manifest) -> str:
    """``source 'a' (topic id ...) and output 'b'``: what a namespace is bound to."""
    tid = f"topic id {m.source_topic_id}" if m.source_topic_id else "no topic id: bound by markers"
    return f"source {m.source_topic!r} ({tid}) and output {m.output_topic!r}"


def provision(
    rt: Runtime, source_topic: str | None = None, output_topic: str | None = None
) -> Provisioned:
    """Bind the namespace: markers, and the source topic's ID where the cluster reports one.

    Idempotent: a namespace already bound is left as it is when the topics are
    not given or are the bound ones; other topics are a ProvisionError naming
    both bindings. A new binding uses the default topic names for those not given.
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
            _check_same_binding(cfg.namespace, existing, source_topic, output_topic)
            if existing.source_topic_id is None:
                with rt.reader(existing.source_topic) as r:
                    tid = r.topic_id()
                    if tid is not None and markers_confirm(r, existing):
                        record_topic_id(store.db, store.ns_id, cfg.namespace, tid)
                        return Provisioned(rt.manifest(store), False, recorded_topic_id=True)
            return Provisioned(existing, False)
        source_topic = source_topic or DEFAULT_SOURCE_TOPIC
        output_topic = output_topic or DEFAULT_OUTPUT_TOPIC
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


def _check_same_binding(
    namespace: str, existing: Manifest, source_topic: str | None, output_topic: str | None
) -> None:
    """A different topic than the bound one is a conflict that names both bindings."""
    want_source = source_topic or existing.source_topic
    want_output = output_topic or existing.output_topic
    if (want_source, want_output) == (existing.source_topic, existing.output_topic):
        return
    msg = (
        f"namespace {namespace!r} is already bound to {binding_text(existing)};"
        f" this run asks for source {want_source!r} and output {want_output!r}."
        " A namespace keeps its topics: run provision without --source-topic/--output-topic"
        " (or with the bound ones), or give the configuration another namespace to bind other topics"
    )
    raise ProvisionError(msg)

"""`amends provision` through the real command: idempotent, conflicts named, creation failures explained.

Real Kafka broker and PostgreSQL; the last test uses the development broker
(librdkafka's mock cluster, what `amends broker` runs) because that is the
cluster a new user meets that cannot create topics.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.postgres.migrate import scratch_schema
from tests.e2e.conftest import FIXTURE, Pipeline, _env

CFG = str(FIXTURE / "config.json")


def test_provision_again_with_or_without_the_topic_flags_succeeds_and_says_what_is_bound(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    src, out = p.source_topic, p.output_topic
    first = p.provision()
    assert first == (
        f"namespace 'core-demo' provisioned: bound to source {src!r}"
        f" (topic id {p.broker.topic_id(src)}) and output {out!r}; markers p0@0\n"
    )
    already = (
        f"namespace 'core-demo' already bound to source {src!r} (topic id {p.broker.topic_id(src)})"
        f" and output {out!r}; markers p0@0; nothing to do (already provisioned)\n"
    )
    r = p.run("provision", "--config", CFG)  # without the topic flags
    assert (r.returncode, r.stdout, r.stderr) == (0, already, "")
    r = p.run("provision", "--config", CFG, "--source-topic", src, "--output-topic", out)
    assert (r.returncode, r.stdout, r.stderr) == (0, already, "")
    r = p.run("provision", "--config", CFG, "--output-topic", out)  # one flag, the bound topic
    assert (r.returncode, r.stdout, r.stderr) == (0, already, "")


def test_provision_with_other_topics_is_a_conflict_naming_both_bindings(pipeline: Pipeline) -> None:
    p = pipeline
    src, out = p.source_topic, p.output_topic
    p.provision()
    tid = p.broker.topic_id(src)
    r = p.run("provision", "--config", CFG, "--source-topic", "other-source", "--output-topic", out)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        f"amends: ProvisionError: namespace 'core-demo' is already bound to source {src!r}"
        f" (topic id {tid}) and output {out!r}; this run asks for source 'other-source' and output {out!r}."
        " A namespace keeps its topics: run provision without --source-topic/--output-topic"
        " (or with the bound ones), or give the configuration another namespace to bind other topics\n"
    )
    r = p.run("provision", "--config", CFG, "--output-topic", "other-output")
    assert r.returncode == 1
    assert f"asks for source {src!r} and output 'other-output'" in r.stderr
    assert len(r.stderr.splitlines()) == 1
    # the binding is unchanged
    assert "already bound to source" in p.ok("provision", "--config", CFG)


def test_a_topic_the_broker_refuses_to_create_is_one_line_with_the_full_kafka_text(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    r = p.run("provision", "--config", CFG, "--source-topic", "bad topic!", "--output-topic", p.output_topic)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        "amends: ProvisionError: topic 'bad topic!' cannot be created: TOPIC_EXCEPTION: Topic name is"
        " invalid: 'bad topic!' contains one or more characters other than ASCII alphanumerics,"
        " '.', '_' and '-'; choose another name (--source-topic / --output-topic)\n"
    )
    rf3 = dataclasses.replace(p, env={**p.env, "AMENDS_KAFKA_REPLICATION_FACTOR": "3"})
    r = rf3.run("provision", "--config", CFG, "--source-topic", p.source_topic, "--output-topic", p.output_topic)
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith(
        f"amends: ProvisionError: topic {p.source_topic!r} cannot be created with replication factor 3"
        " (AMENDS_KAFKA_REPLICATION_FACTOR): INVALID_REPLICATION_FACTOR:"
    )
    # the broker's own explanation, in full (it was cut at 120 characters before)
    assert "only 1 broker(s) are registered" in r.stderr
    assert r.stderr.endswith(
        "; set AMENDS_KAFKA_REPLICATION_FACTOR to at most the number of brokers, or create the topic by hand\n"
    )
    # nothing was bound: provisioning with usable settings still works
    assert "provisioned: bound to source" in p.provision()


def test_a_cluster_that_cannot_create_topics_says_how_to_create_them(
    pg_dsn: str, tmp_path: Path
) -> None:
    with scratch_schema(pg_dsn, "t_e2e") as schema, DevBroker(topics={}, workdir=tmp_path) as broker:
        p = Pipeline(_env(dict(broker.env()), pg_dsn, schema), broker, tmp_path)
        r = p.run("provision", "--config", CFG)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        "amends: ProvisionError: topic 'amends-source' does not exist and this cluster cannot create"
        " topics (it names no controller among its brokers, like the development broker);"
        " create it with 1 partitions (development broker: `amends broker --topic amends-source:1`),"
        " then run provision again\n"
    )


"""End-to-end fixtures: a real Apache Kafka broker, a real PostgreSQL schema, real processes.

``pipeline`` runs on the test run's shared Kafka broker with topics of its own;
``pipeline_on`` runs on a broker the test owns (to kill, restart or reconfigure
it); ``mock_pipeline`` runs on librdkafka's mock cluster, used only where a
test needs faults a real broker cannot produce on demand (injected request
errors), and each such test says so. Nothing is faked and nothing is skipped:
when PostgreSQL or a broker cannot be started the tests fail with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.postgres.migrate import scratch_schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "worked-example"
AMENDS = str(Path(sys.executable).with_name("amends"))



@dataclass
class Pipeline:
    """Runs `amends` subcommands as separate processes against one broker and schema."""

    env: dict[str, str]
    broker: Any
    """A RealBroker, or a DevBroker for ``mock_pipeline``."""
    tmp: Path
    source_topic: str = "amends-source"
    output_topic: str = "amends-output"
    config: Path = FIXTURE / "config.json"

    def provision(self, *extra: str) -> str:
        return self.ok(
            "provision", "--config", str(self.config),
            "--source-topic", self.source_topic, "--output-topic", self.output_topic, *extra,
        )

    def delete_records(self, partition: int, before: int) -> None:
        """Delete the source partition's records below ``before`` (what retention does)."""
        from confluent_kafka import TopicPartition

        admin = self.broker.admin()
        fut = admin.delete_records([TopicPartition(self.source_topic, partition, before)])
        for f in fut.values():
            f.result(timeout=30)

    def load(self, *files: Path | str) -> str:
        return self.ok("load", "--config", str(self.config), *map(str, files))

    def run(
        self, *args: str, timeout: float = 120, env_extra: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AMENDS, *args], env={**self.env, **(env_extra or {})}, capture_output=True, text=True,
            timeout=timeout, check=False,
        )

    def ok(self, *args: str, timeout: float = 120) -> str:
        r = self.run(*args, timeout=timeout)
        assert r.returncode == 0, f"amends {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [AMENDS, *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def roles_until_idle(self) -> None:
        for role in ("worker", "relay", "view"):
            self.ok("role", role, "--config", str(self.config), "--until-idle", "--quiet")

    def verify(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("verify", "--config", str(self.config), *extra)


def _env(broker_env: dict[str, str], pg_dsn: str, schema: str) -> dict[str, str]:
    env = dict(broker_env)
    env.update({"AMENDS_PG_DSN": pg_dsn, "AMENDS_PG_SCHEMA": schema})
    env.pop("AMENDS_DEBUG", None)
    return env


@pytest.fixture
def pipeline(
    pg_dsn: str, tmp_path: Path, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[Pipeline]:
    """The pipeline on the run's shared real Kafka broker, with topics of its own."""
    with scratch_schema(pg_dsn, "t_e2e") as schema:
        yield Pipeline(
            _env(kafka_broker.env(), pg_dsn, schema), kafka_broker, tmp_path,
            source_topic=topic_name("source"), output_topic=topic_name("output"),
        )


@pytest.fixture
def pipeline_on(
    pg_dsn: str, tmp_path: Path, make_broker: Callable[..., RealBroker]
) -> Iterator[Callable[..., Pipeline]]:
    """``pipeline_on(settings)``: the pipeline on a real broker this test owns."""
    with scratch_schema(pg_dsn, "t_e2e") as schema:

        def make(settings: dict[str, str] | None = None) -> Pipeline:
            broker = make_broker(settings)
            return Pipeline(_env(broker.env(), pg_dsn, schema), broker, tmp_path)

        yield make


@pytest.fixture
def mock_pipeline(pg_dsn: str, tmp_path: Path) -> Iterator[Pipeline]:
    """The pipeline on librdkafka's mock cluster: only for injected request errors."""
    with scratch_schema(pg_dsn, "t_e2e") as schema, DevBroker(
        topics={"amends-source": 1, "amends-output": 1}, workdir=tmp_path
    ) as broker:
        yield Pipeline(_env(dict(broker.env()), pg_dsn, schema), broker, tmp_path)
    assert os.path.exists(tmp_path)

"""End-to-end fixtures: a real development broker process and a real PostgreSQL schema.

Nothing is faked and nothing is skipped: when PostgreSQL or the broker cannot
be started the tests fail with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.postgres.migrate import scratch_schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "worked-example"
AMENDS = str(Path(sys.executable).with_name("amends"))



@dataclass
class Pipeline:
    """Runs `amends` subcommands as separate processes against one broker and schema."""

    env: dict[str, str]
    broker: DevBroker
    tmp: Path
    config: Path = FIXTURE / "config.json"

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AMENDS, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
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


@pytest.fixture
def pipeline(pg_dsn: str, tmp_path: Path) -> Iterator[Pipeline]:
    with scratch_schema(pg_dsn, "t_e2e") as schema, DevBroker(
        topics={"amends-source": 1, "amends-output": 1}, workdir=tmp_path
    ) as broker:
        env = dict(broker.env())
        env.update({"AMENDS_PG_DSN": pg_dsn, "AMENDS_PG_SCHEMA": schema})
        env.pop("AMENDS_DEBUG", None)
        yield Pipeline(env, broker, tmp_path)
    assert os.path.exists(tmp_path)

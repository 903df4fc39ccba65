"""The one Dagster resource: where amends runs (configuration, PostgreSQL, Kafka).

Values come from the environment through ``EnvVar`` (Dagster shows the
variable's name, never its value), so no secret reaches run configuration or
metadata. Kafka client settings beyond the bootstrap address (TLS, SASL) are
read by the composition root from the environment, as for every command.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from amends_core.ledger import Config
from amends_pipeline.inputs import load_config
from amends_pipeline.postgres.connection import DEFAULT_DSN, DEFAULT_SCHEMA
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot import URI_ENV

ROOT = Path(__file__).resolve().parents[2]
CONFIG_ENV = "AMENDS_CONFIG"
ORACLE_RUNS_ENV = "AMENDS_ORACLE_RUNS"
ORACLE_ONE, ORACLE_PER_PARTITION = "one", "per-partition"
ORACLE_RUNS = (ORACLE_ONE, ORACLE_PER_PARTITION)
DEFAULT_CONFIG = ROOT / "fixtures" / "worked-example" / "config.json"


def config_path() -> str:
    """The namespace configuration the code location serves (``AMENDS_CONFIG``)."""
    return os.environ.get(CONFIG_ENV) or str(DEFAULT_CONFIG)


def location_config() -> Config:
    """The configuration read when the code location loads (its partition count shapes the assets)."""
    return load_config(config_path())


# Unparametrized, as dagster documents it: ConfigurableResource is a pydantic generic, and
# subscripting it would make a new base class at run time.
class AmendsResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Connects assets, checks and sensors to one amends namespace."""

    config_path: str
    """Path of the namespace configuration JSON."""
    pg_dsn: str = DEFAULT_DSN
    pg_schema: str = DEFAULT_SCHEMA
    kafka_bootstrap: str = ""
    expect_path: str = ""
    """Optional expectations file: the exact rejections and conflicts PASS_WITH_EXCLUSIONS must list."""
    snapshot_uri: str = ""
    """Where the source snapshot tables live (``AMENDS_SNAPSHOT_URI``); empty: ``var/snapshot/``."""
    oracle_runs: str = ORACLE_ONE
    """``one``: the verification run computes the oracle over every partition. ``per-partition``
    (``AMENDS_ORACLE_RUNS``): each source partition's oracle is a run of its own (the
    ``oracle_partition`` asset, on whichever host the run launcher picks) and verification
    combines the stored parts."""

    @property
    def split_oracle(self) -> bool:
        if self.oracle_runs not in ORACLE_RUNS:
            msg = f"AMENDS_ORACLE_RUNS must be one of {', '.join(ORACLE_RUNS)}, not {self.oracle_runs!r}"
            raise ValueError(msg)
        return self.oracle_runs == ORACLE_PER_PARTITION

    def runtime(self, namespace: str | None = None) -> Runtime:
        """The composition root for the served namespace, or for ``namespace`` (a rebuild of it).

        A rebuild namespace shares the configuration except its name, and was
        provisioned (bound to its own output topic) by ``amends rebuild``.
        """
        cfg = load_config(self.config_path)
        if namespace and namespace != cfg.namespace:
            cfg = cfg.with_namespace(namespace)
        return Runtime(
            cfg, dsn=self.pg_dsn, schema=self.pg_schema, bootstrap=self.kafka_bootstrap or None,
            snapshot_uri=self.snapshot_uri or os.environ.get(URI_ENV),
        )


def _env_or(name: str, default: str) -> str | dg.EnvVar:
    return dg.EnvVar(name) if os.environ.get(name) else default


def resource_from_env() -> AmendsResource:
    """The resource as the code location builds it: environment variables, else local defaults."""
    return AmendsResource(
        config_path=_env_or(CONFIG_ENV, str(DEFAULT_CONFIG)),
        pg_dsn=_env_or("AMENDS_PG_DSN", DEFAULT_DSN),
        pg_schema=_env_or("AMENDS_PG_SCHEMA", DEFAULT_SCHEMA),
        kafka_bootstrap=_env_or("AMENDS_KAFKA_BOOTSTRAP", ""),
        expect_path=_env_or("AMENDS_EXPECT", ""),
        snapshot_uri=_env_or(URI_ENV, ""),
        oracle_runs=_env_or(ORACLE_RUNS_ENV, ORACLE_ONE),
    )

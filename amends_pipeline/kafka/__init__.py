"""Kafka transport for the pipeline.

The project talks to Kafka only through confluent-kafka and a bootstrap address
taken from ``AMENDS_KAFKA_BOOTSTRAP``. In development and tests that address is
the one printed by ``amends kafka`` or ``amends broker``; pointing the variable at
a real Kafka or Redpanda cluster is the whole change needed for production. A
cluster that needs TLS or SASL gets its client settings from ``AMENDS_KAFKA_CONFIG``
and ``AMENDS_KAFKA_*`` variables (``settings``), applied by the composition root
(``amends_pipeline.runtime``) to every producer, consumer and admin client.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from amends_pipeline.errors import UsageError

BOOTSTRAP_ENV = "AMENDS_KAFKA_BOOTSTRAP"


def bootstrap_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The bootstrap address from ``AMENDS_KAFKA_BOOTSTRAP``; UsageError if unset."""
    env = os.environ if environ is None else environ
    value = env.get(BOOTSTRAP_ENV, "").strip()
    if not value:
        msg = (
            f"{BOOTSTRAP_ENV} is not set: start `amends broker` and export the "
            "bootstrap address it prints, or point it at a Kafka/Redpanda cluster"
        )
        raise UsageError(msg)
    return value

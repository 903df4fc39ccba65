"""Provisioning warns when it creates a topic with one replica on a cluster of several brokers."""

from __future__ import annotations

from amends_pipeline.ops.provision import replication_warning
from amends_pipeline.runtime import REPLICATION_FACTOR_ENV


def test_one_replica_on_a_multi_broker_cluster_is_warned_about_naming_the_variable() -> None:
    line = replication_warning("source", 1, 3)
    assert line is not None and "\n" not in line
    assert line.startswith("amends provision: warning: topic 'source' was created with replication factor 1")
    assert "cluster of 3 brokers" in line and REPLICATION_FACTOR_ENV in line


def test_a_single_broker_or_more_than_one_replica_is_not_warned_about() -> None:
    assert replication_warning("source", 1, 1) is None
    assert replication_warning("source", 3, 3) is None
    assert replication_warning("source", 2, 5) is None

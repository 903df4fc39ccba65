"""Dagster run tags amends gives meaning to (plain strings: no Dagster import needed)."""

NAMESPACE_TAG = "amends/namespace"
"""Names a rebuild namespace; runs without it work on the namespace the code location serves."""
PARTITION_TAG = "amends/partition"
TARGET_TAG = "amends/target"
"""The source offset a sensor-requested refold run aims at."""

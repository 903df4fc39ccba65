"""Dagster definitions: a thin shell over amends_core and amends_pipeline."""

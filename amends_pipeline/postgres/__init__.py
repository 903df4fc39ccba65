"""Durable PostgreSQL adapter: processing store, view store, migrations."""

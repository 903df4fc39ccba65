"""A namespace's registration in PostgreSQL: create or look up its rows, refuse another configuration.

``register_namespace`` provisions (idempotently), ``lookup_namespace`` only reads;
both return the namespace id and the key ids the stores work with.
"""

from __future__ import annotations

from psycopg import sql

from amends_core import wire
from amends_core.ledger import Config, StockKey
from amends_pipeline.postgres import migrate as migrations
from amends_pipeline.postgres.connection import Database
from amends_pipeline.postgres.errors import ConfigMismatch, MigrationError, NamespaceUnknown, SchemaError


def register_namespace(db: Database, cfg: Config) -> tuple[int, dict[StockKey, int]]:
    """Create (or find) the namespace's rows; refuse another configuration digest.

    Idempotent and safe under concurrent callers. Returns (ns_id, key ids).
    """
    digest = cfg.digest()
    with db.transaction(f"registering namespace {cfg.namespace!r}") as conn:
        migrations.check_current(conn, db.schema)
        conn.execute(
            "INSERT INTO namespaces (name, config_digest, config, partitions)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
            (cfg.namespace, digest, wire.encode_config(cfg).decode("utf-8"), cfg.partitions),
        )
        row = conn.execute(
            "SELECT ns_id, config_digest FROM namespaces WHERE name = %s", (cfg.namespace,)
        ).fetchone()
        assert row is not None
        ns_id, registered = row
        same_configuration(cfg, registered, digest)
        for table in ("partitions", "relay_progress", "view_progress"):
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (ns_id, partition)"
                    " SELECT %s, g FROM generate_series(0, %s) g ON CONFLICT DO NOTHING"
                ).format(sql.Identifier(table)),
                (ns_id, cfg.partitions - 1),
            )
        conn.execute(
            "INSERT INTO stock_keys (ns_id, item, location, partition)"
            " SELECT %s, i, l, p FROM unnest(%s::text[], %s::text[], %s::int[]) AS u(i, l, p)"
            " ON CONFLICT DO NOTHING",
            (
                ns_id,
                [kc.key.item for kc in cfg.keys],
                [kc.key.location for kc in cfg.keys],
                [kc.partition for kc in cfg.keys],
            ),
        )
        rows = conn.execute(
            "SELECT key_id, item, location FROM stock_keys WHERE ns_id = %s", (ns_id,)
        ).fetchall()
    return ns_id, {StockKey(i, loc): kid for kid, i, loc in rows}


def same_configuration(cfg: Config, registered: str, digest: str) -> None:
    """ConfigMismatch unless the namespace was registered with this configuration's digest."""
    if registered != digest:
        msg = (
            f"namespace {cfg.namespace!r} is registered with configuration digest"
            f" {registered[:12]}, this configuration has {digest[:12]}"
        )
        raise ConfigMismatch(msg)


def lookup_namespace(db: Database, cfg: Config) -> tuple[int, dict[StockKey, int]]:
    """Find the namespace's rows without writing anything (read-only commands).

    Raises NamespaceUnknown when the schema, its migrations or the namespace's
    registration are missing, MigrationError when the schema disagrees with
    the code, ConfigMismatch when it is registered with another digest.
    Returns (ns_id, key ids) like ``register_namespace``.
    """
    digest = cfg.digest()
    with db.transaction(f"looking up namespace {cfg.namespace!r}", snapshot=True) as conn:
        try:
            migrations.check_current(conn, db.schema)
        except MigrationError:
            raise
        except SchemaError as e:
            detail = str(e).split("; run the migrations")[0]
            raise NamespaceUnknown(cfg.namespace, db.where, db.schema, detail) from None
        row = conn.execute(
            "SELECT ns_id, config_digest FROM namespaces WHERE name = %s", (cfg.namespace,)
        ).fetchone()
        if row is None:
            detail = f"schema {db.schema!r} has no namespace of that name"
            raise NamespaceUnknown(cfg.namespace, db.where, db.schema, detail)
        ns_id, registered = row
        same_configuration(cfg, registered, digest)
        rows = conn.execute(
            "SELECT key_id, item, location FROM stock_keys WHERE ns_id = %s", (ns_id,)
        ).fetchall()
    return ns_id, {StockKey(i, loc): kid for kid, i, loc in rows}


__all__ = ["lookup_namespace", "register_namespace", "same_configuration"]

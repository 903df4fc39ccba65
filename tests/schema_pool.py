"""Migrated PostgreSQL schemas reused from test to test instead of one migration per test.

A test leases a schema; when it ends, the schema is emptied (every table but the
migration record, in foreign-key order; sequences restarted) and handed to the
next test. Only a schema whose shape is exactly as migrated is reused: the
catalogue (tables, columns, defaults, constraints, indexes, functions, triggers,
privileges) and the migration record are compared with the pristine shape, and a
schema a test altered, or one that cannot be emptied within the lock timeout
(a session the test left holding locks), is dropped and replaced by a fresh one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

import psycopg
from psycopg import sql

from amends_pipeline.postgres.migrate import drop_schema, migrate

KEEP = "schema_migrations"

SHAPE = """
SELECT 'col', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull::text,
       coalesce(pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
 WHERE n.nspname = %(s)s
UNION ALL
SELECT 'rel', c.relname, c.relkind::text, coalesce(c.relacl::text, ''), '', ''
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'con', conname, pg_get_constraintdef(co.oid), '', '', ''
  FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'idx', indexname, indexdef, '', '', '' FROM pg_indexes WHERE schemaname = %(s)s
UNION ALL
SELECT 'fn', p.proname, md5(p.prosrc), pg_get_function_identity_arguments(p.oid), '', ''
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s
UNION ALL
SELECT 'trg', t.tgname, t.tgrelid::regclass::text, t.tgenabled::text, '', ''
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(s)s AND NOT t.tgisinternal
UNION ALL
SELECT 'nsp', coalesce(nspacl::text, ''), '', '', '', '' FROM pg_namespace WHERE nspname = %(s)s
"""


class SchemaPool:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.idle: list[str] = []
        self.made: list[str] = []
        self.pristine: str | None = None

    def lease(self) -> str:
        if self.idle:
            return self.idle.pop()
        schema = f"t_pool_{os.getpid()}_{secrets.token_hex(4)}"
        migrate(self.dsn, schema)
        self.made.append(schema)
        if self.pristine is None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.pristine = _shape(conn, schema)
        return schema

    def give_back(self, schema: str) -> None:
        """Empty the schema for the next test, or drop it when it cannot be trusted to be as migrated."""
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '3s'")
                if _shape(conn, schema) == self.pristine:
                    with conn.transaction():
                        _empty(conn, schema)
                    self.idle.append(schema)
                    return
        except psycopg.Error:
            pass
        self.made.remove(schema)
        drop_schema(self.dsn, schema)

    def close(self) -> None:
        for schema in self.made:
            drop_schema(self.dsn, schema)
        self.made.clear()
        self.idle.clear()


def _shape(conn: psycopg.Connection[Any], schema: str) -> str:
    """A digest of the schema's catalogue and migration record, its own name taken out."""
    rows = conn.execute(SHAPE, {"s": schema}).fetchall()
    rows += conn.execute(
        sql.SQL("SELECT 'mig', version::text, '', '', '', '' FROM {}").format(sql.Identifier(schema, KEEP))
    ).fetchall()
    text = "\n".join(sorted("\t".join(str(v) for v in r) for r in rows)).replace(schema, "<schema>")
    return hashlib.sha256(text.encode()).hexdigest()


def _empty(conn: psycopg.Connection[Any], schema: str) -> None:
    """Delete every row but the migration record (referencing tables first); restart sequences."""
    tables = [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND c.relname <> %s", (schema, KEEP),
    )]
    refs = conn.execute(
        "SELECT c.relname, f.relname FROM pg_constraint co JOIN pg_class c ON c.oid = co.conrelid"
        " JOIN pg_class f ON f.oid = co.confrelid JOIN pg_namespace n ON n.oid = co.connamespace"
        " WHERE co.contype = 'f' AND n.nspname = %s", (schema,),
    ).fetchall()
    for table in _referencing_first(tables, refs):
        conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, table)))
    for (seq,) in conn.execute(
        "SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (schema,)
    ).fetchall():
        conn.execute(
            "SELECT setval(%s::regclass, (SELECT start_value FROM pg_sequences"
            " WHERE schemaname = %s AND sequencename = %s), false)",
            (sql.Identifier(schema, seq).as_string(conn), schema, seq),
        )


def _referencing_first(tables: list[str], refs: list[tuple[str, str]]) -> list[str]:
    """Tables ordered so that each comes before every table it references."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(t: str, path: frozenset[str]) -> None:
        if t in seen or t in path:
            return
        for child, parent in refs:
            if parent == t and child != t:
                visit(child, path | {t})
        seen.add(t)
        order.append(t)

    for t in sorted(tables):
        visit(t, frozenset())
    return order

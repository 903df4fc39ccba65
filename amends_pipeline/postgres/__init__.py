"""Durable PostgreSQL adapter (psycopg 3): processing store, view store, migrations.

Modules:

* ``migrate``: versioned SQL files in ``migrations/``, applied in order inside
  one transaction under an advisory lock and recorded with SHA-256 checksums
  in ``schema_migrations``; ``migrate(dsn, schema)``, ``check_current``,
  ``scratch_schema`` (tests, benchmarks).
* ``store.PgStore``: fenced ownership (``claim``/``observe``), batched atomic
  processing (``process``, or ``begin`` -> ``batch.ProcessingTx.apply``/``commit``),
  ``resolve_unknown`` for a lost COMMIT reply, the relay's outbox API
  (``pending``, ``record_receipt``, ``acknowledge``/``acknowledge_many``),
  consistent ``snapshot``s, ``check_replay``/``replay`` and ``measurements``.
* ``batch``: ``ProcessingTx``, the fenced batch transaction, and the
  ``BatchContext``/``BatchState`` a store gives it (the transaction reads
  nothing private of the store).
* ``sql``: the processing store's SQL text and statement builders.
* ``namespace``: ``register_namespace``/``lookup_namespace``.
* ``view_store.PgViewStore``: the core view's version rule under the
  view-progress row lock (``apply``), ``progress``, ``resolve_unknown`` and a
  consistent ``snapshot`` returned as an ``amends_core.view.ViewState``.
* ``errors``: our exception types and the single translation of psycopg errors.
* ``connection``: sessions bound to a schema, DSN handling (``AMENDS_PG_DSN``).
* ``codec``: KeyState and output intent to rows and back.

Every table is scoped by namespace; everything lives in one schema (default
``amends``) chosen through ``search_path``, so tests use a schema each.
"""

"""A secret in the configuration never appears in any output of a failing command, nor in storage.

The secrets are a PostgreSQL password (in a DSN that works, in one the server
rejects, and in DSNs libpq cannot parse, some of which it quotes in its error
text), a SASL password and a TLS key password in the Kafka client settings
(file and variables). Every command that touches PostgreSQL or Kafka runs
against a real broker and server in several failing set-ups, also with
``AMENDS_DEBUG=1`` and librdkafka's own debug logging switched on; stdout and
stderr are scanned, then every table of the schema and every message of both
topics.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from amends_pipeline.kafka.realbroker import RealBroker, free_port
from amends_pipeline.kafka.topics import Reader
from tests.e2e.conftest import FIXTURE, Pipeline

CFG = str(FIXTURE / "config.json")
PG_SECRET = f"Pg:{secrets.token_hex(6)}@/?#%'x"
"""The password of a LOGIN role (scram on loopback): a DSN with it works."""
PG_WRONG = f"PgWrong-{secrets.token_hex(6)}"
SASL_SECRET = f"sasl-{secrets.token_hex(8)}"
KEY_SECRET = f"keypw-{secrets.token_hex(8)}"
SECRETS = [PG_SECRET, quote(PG_SECRET, safe=""), PG_SECRET.replace("'", ""), PG_WRONG,
           SASL_SECRET, KEY_SECRET]


@pytest.fixture(scope="module")
def login_role(pg_dsn: str) -> Iterator[str]:
    """A LOGIN role whose password is PG_SECRET; dropped afterwards."""
    name = f"amends_leak_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(PG_SECRET)))
        conn.execute(sql.SQL("GRANT CONNECT, CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(str(conninfo_to_dict(pg_dsn)["dbname"])), sql.Identifier(name)))
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def grant_schema(pg_dsn: str, schema: str, role: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for stmt in (
            "GRANT USAGE, CREATE ON SCHEMA {s} TO {r}",
            "GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {r}",
            "GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        ):
            conn.execute(sql.SQL(stmt).format(s=sql.Identifier(schema), r=sql.Identifier(role)))


def dsns(pg_dsn: str, role: str) -> dict[str, str]:
    d = conninfo_to_dict(pg_dsn)
    host, port, db = d.get("host") or "127.0.0.1", d.get("port") or "5432", d["dbname"]
    enc = quote(PG_SECRET, safe="")
    return {
        "works": f"postgresql://{role}:{enc}@{host}:{port}/{db}?sslmode=prefer",
        "wrong password": f"postgresql://{role}:{quote(PG_WRONG)}@{host}:{port}/{db}",
        "bad sslmode": f"postgresql://{role}:{enc}@{host}:{port}/{db}?sslmode=bogus",
        "unterminated IPv6 host (quoted whole)": f"postgresql://{role}:{enc}@[::1/{db}",
        "bad percent token (quoted)": f"postgresql://{role}:{enc}%zz@{host}:{port}/{db}",
        "key=value, bad option": make_conninfo(pg_dsn, user=role, password=PG_SECRET) + " bogus",
        "key=value, unterminated quote": f"host={host} user={role} password='{PG_SECRET.replace(chr(39), '')}",
    }


def kafka_files(tmp: Path) -> dict[str, Path]:
    sasl = tmp / "sasl.properties"
    sasl.write_text(
        "# credentials a plaintext listener will not accept\n"
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=amends\nsasl.password={SASL_SECRET}\n"
    )
    broken = tmp / "broken.properties"
    broken.write_text(f"security.protocol=SASL_SSL\nsasl.password {SASL_SECRET}\n")
    fixed = tmp / "fixed.properties"
    fixed.write_text(f"sasl.password={SASL_SECRET}\nenable.idempotence=false\n")
    return {"sasl": sasl, "broken": broken, "fixed": fixed}


def commands(p: Pipeline) -> list[tuple[str, ...]]:
    return [
        ("provision", "--config", CFG, "--source-topic", p.source_topic, "--output-topic", p.output_topic),
        ("load", "--config", CFG, str(FIXTURE / "correction.jsonl")),
        ("role", "worker", "--config", CFG, "--until-idle"),
        ("role", "relay", "--config", CFG, "--until-idle"),
        ("role", "view", "--config", CFG, "--until-idle"),
        ("verify", "--config", CFG),
        ("view", "--config", CFG, "--last", "0"),
    ]


def stored_text(pg_dsn: str, schema: str) -> str:
    """Every row of every table of the schema as text (bytea as hex)."""
    parts = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))]
        assert "partitions" in tables and "view_rows" in tables, tables
        for t in tables:
            q = sql.SQL("SELECT coalesce(string_agg(x::text, E'\\n'), '') FROM {}.{} x").format(
                sql.Identifier(schema), sql.Identifier(t))
            row = conn.execute(q).fetchone()
            parts.append(f"[{t}]\n{row[0] if row else ''}")
    return "\n".join(parts)


def topic_bytes(bootstrap: str, topic: str) -> bytes:
    out = []
    with Reader(bootstrap, topic) as r:
        for part in range(r.partitions()):
            w = r.watermarks(part)
            for m in r.messages(part, w.low, w.high):
                out += [m.key() or b"", m.value() or b""]
                out += [k.encode() + v for k, v in m.headers() or []]
    return b"\n".join(out)


@pytest.mark.slow
def test_a_secret_in_the_configuration_never_appears_in_any_output_or_in_storage(
    pipeline: Pipeline, pg_dsn: str, login_role: str, tmp_path: Path, kafka_broker: RealBroker
) -> None:
    p = pipeline
    schema = p.env["AMENDS_PG_SCHEMA"]
    grant_schema(pg_dsn, schema, login_role)
    pg = dsns(pg_dsn, login_role)
    files = kafka_files(tmp_path)
    # Real work first, through the password DSN, so that failing commands meet live state.
    good = Pipeline({**p.env, "AMENDS_PG_DSN": pg["works"]}, p.broker, p.tmp,
                    source_topic=p.source_topic, output_topic=p.output_topic)
    good.provision()
    good.load(FIXTURE / "before.jsonl")
    good.roles_until_idle()
    r = good.verify()
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr

    with_kafka_secrets = {"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["sasl"]),
                          "AMENDS_KAFKA_SSL_KEY_PASSWORD": KEY_SECRET}
    debug = {"AMENDS_DEBUG": "1", "AMENDS_KAFKA_DEBUG": "security,broker,protocol,conf"}
    setups: dict[str, tuple[dict[str, str], list[tuple[str, ...]]]] = {
        "Kafka refuses the SASL settings": (with_kafka_secrets, commands(p)),
        "... with every debug log on": ({**with_kafka_secrets, **debug}, commands(p)),
        "nothing listens at the bootstrap address": (
            {**with_kafka_secrets, **debug, "AMENDS_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"},
            [c for c in commands(p) if c[0] == "verify"],
        ),
        "a config line without '=' holds the secret": (
            {"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["broken"])}, commands(p)),
        "a fixed setting beside the secret": (
            {"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["fixed"]), **debug}, commands(p)),
    }
    for name, dsn in pg.items():
        if name != "works":
            setups[f"PostgreSQL DSN: {name}"] = ({"AMENDS_PG_DSN": dsn, **debug}, commands(p))

    failures = 0
    for name, (env, cmds) in setups.items():
        run = Pipeline({**p.env, **env}, p.broker, p.tmp,
                       source_topic=p.source_topic, output_topic=p.output_topic)
        for args in cmds:
            r = run.run(*args, timeout=120)
            out = r.stdout + r.stderr
            leaked = [s for s in SECRETS if s in out]
            assert not leaked, f"{name}: amends {' '.join(args)} showed a secret:\n{out}"
            failures += r.returncode != 0
            assert r.returncode in (0, 1, 2), f"{name}: amends {' '.join(args)} -> {r.returncode}\n{out}"
    # Everything but the commands that never need Kafka failed (view, and provision of a
    # namespace already provisioned, read only PostgreSQL).
    assert failures >= sum(len(c) for _, c in setups.values()) - 2 * len(setups)

    stored = stored_text(pg_dsn, schema)
    assert "core-demo" in stored
    assert not [s for s in SECRETS if s in stored]
    assert not [s for s in SECRETS if s.encode().hex() in stored]
    logs = topic_bytes(kafka_broker.bootstrap, p.source_topic) + topic_bytes(kafka_broker.bootstrap, p.output_topic)
    assert logs and not [s for s in SECRETS if s.encode() in logs]


def test_a_failing_command_says_why_in_one_line_without_the_secret(
    pipeline: Pipeline, pg_dsn: str, login_role: str, tmp_path: Path
) -> None:
    pg = dsns(pg_dsn, login_role)
    files = kafka_files(tmp_path)
    p = pipeline
    grant_schema(pg_dsn, p.env["AMENDS_PG_SCHEMA"], login_role)
    Pipeline({**p.env, "AMENDS_PG_DSN": pg["works"]}, p.broker, p.tmp,
             source_topic=p.source_topic, output_topic=p.output_topic).provision()
    cases = [
        ({"AMENDS_PG_DSN": pg["wrong password"]}, "password authentication failed"),
        ({"AMENDS_PG_DSN": pg["unterminated IPv6 host (quoted whole)"]}, "invalid connection string"),
        ({"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["sasl"])}, "refused the connection"),
        ({"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["broken"])}, "line 2: expected key=value"),
        ({"AMENDS_PG_DSN": pg["works"], "AMENDS_KAFKA_CONFIG": str(files["fixed"])},
         "enable.idempotence cannot be set"),
    ]
    for env, reason in cases:
        r = Pipeline({**p.env, **env}, p.broker, p.tmp, source_topic=p.source_topic,
                     output_topic=p.output_topic).run("verify", "--config", CFG)
        out = r.stdout + r.stderr
        assert not [s for s in SECRETS if s in out], out
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and reason in r.stderr, out

"""Secured connections: Kafka over SASL and TLS, PostgreSQL with a password and TLS.

Everything is real: one Apache Kafka broker (started for this module) with a
SASL_PLAINTEXT listener using SASL/PLAIN and an SSL listener that requires a
client certificate (PEM keystore and truststore made here with openssl); a
LOGIN role with a password on the test run's PostgreSQL server (scram on
loopback, TLS available), dropped at the end. Commands are the real ``amends``
console script, with the Kafka client settings in an ``AMENDS_KAFKA_CONFIG``
file and/or ``AMENDS_KAFKA_*`` variables.
"""

from __future__ import annotations

import ast
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from amends_pipeline.errors import UsageError
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.settings import FIXED, KafkaSettings
from amends_pipeline.kafka.topics import consumer_config, producer_config
from amends_pipeline.postgres.ensure import target
from amends_pipeline.redaction import dsn_secrets, redact
from amends_pipeline.runtime import Runtime
from tests.e2e.conftest import FIXTURE, Pipeline

ROOT = Path(__file__).resolve().parents[2]
CFG = str(FIXTURE / "config.json")
KAFKA_USER = "amends-client"
KAFKA_PASSWORD = f"kafka-pw-{secrets.token_hex(8)}"
KEY_PASSWORD = f"key-pw-{secrets.token_hex(8)}"


# ---------------------------------------------------------------- fixtures


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"openssl {' '.join(args)}: {r.stderr}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA, a broker certificate for 127.0.0.1 and a client certificate with an encrypted key."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "2", "-subj", "/CN=amends-test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=amends-client")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr",
                 "-subj", subject, cwd=d)
        ext = ["-extfile", "san.ext"] if who == "server" else []
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", *ext, cwd=d)
    _openssl("pkcs8", "-topk8", "-nocrypt", "-in", "server.key", "-out", "server.p8", cwd=d)
    (d / "server.pem").write_text((d / "server.p8").read_text() + (d / "server.crt").read_text())
    _openssl("pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", f"pass:{KEY_PASSWORD}",
             "-in", "client.key", "-out", "client.enc.key", cwd=d)
    return d


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory, tls: Path) -> Iterator[RealBroker]:
    """A real broker with a SASL/PLAIN listener ("SASL") and a mutual-TLS listener ("TLS")."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' user_{KAFKA_USER}="{KAFKA_PASSWORD}";'
    )
    broker = RealBroker(
        tmp_path_factory.mktemp("kafka-secured"),
        {
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl.plain.sasl.jaas.config": jaas,
            "listener.name.tls.ssl.keystore.type": "PEM",
            "listener.name.tls.ssl.keystore.location": str(tls / "server.pem"),
            "listener.name.tls.ssl.truststore.type": "PEM",
            "listener.name.tls.ssl.truststore.location": str(tls / "ca.pem"),
            "listener.name.tls.ssl.client.auth": "required",
        },
        listeners={"SASL": "SASL_PLAINTEXT", "TLS": "SSL"},
    )
    broker.start()
    yield broker
    broker.stop()


@dataclass(frozen=True)
class LoginRole:
    name: str
    password: str
    host: str
    port: str
    dbname: str

    def uri(self, password: str | None = None, query: str = "sslmode=require") -> str:
        pw = quote(self.password if password is None else password, safe="")
        return f"postgresql://{self.name}:{pw}@{self.host}:{self.port}/{self.dbname}?{query}"


@pytest.fixture(scope="module")
def login_role(pg_dsn: str) -> Iterator[LoginRole]:
    """A LOGIN role with a password (URI-hostile characters) on the test database; dropped afterwards."""
    name = f"amends_login_{secrets.token_hex(4)}"
    password = f"Pw:{secrets.token_hex(6)}@/?#%&='x"
    d = conninfo_to_dict(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(name), sql.Literal(password)))
        conn.execute(sql.SQL("GRANT CONNECT, CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(str(d["dbname"])), sql.Identifier(name)))
    yield LoginRole(name, password, str(d.get("host") or "127.0.0.1"), str(d.get("port") or "5432"),
                    str(d["dbname"]))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A schema name of this test's own; the commands create and migrate it."""
    name = f"t_sec_{secrets.token_hex(4)}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def kafka_config(tmp_path: Path) -> Callable[..., Path]:
    """Write an AMENDS_KAFKA_CONFIG file of key=value lines."""

    def write(**settings: str) -> Path:
        path = tmp_path / f"kafka-{secrets.token_hex(3)}.properties"
        lines = ["# Kafka client settings for amends", ""]
        lines += [f"{k.replace('_', '.')} = {v}" for k, v in settings.items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


def sasl_settings(password: str = KAFKA_PASSWORD) -> dict[str, str]:
    return {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
        "sasl_username": KAFKA_USER, "sasl_password": password,
    }


def tls_settings(tls: Path, key_password: str = KEY_PASSWORD) -> dict[str, str]:
    return {
        "security_protocol": "SSL", "ssl_ca_location": str(tls / "ca.pem"),
        "ssl_certificate_location": str(tls / "client.crt"),
        "ssl_key_location": str(tls / "client.enc.key"), "ssl_key_password": key_password,
    }


def pipeline(tmp: Path, bootstrap: str, dsn: str, schema: str, **env: str) -> Pipeline:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith(("AMENDS_", "PG"))}
    base.update({
        "AMENDS_KAFKA_BOOTSTRAP": bootstrap, "AMENDS_PG_DSN": dsn, "AMENDS_PG_SCHEMA": schema, **env,
    })
    tag = secrets.token_hex(3)
    return Pipeline(base, None, tmp, source_topic=f"sec-{tag}-source", output_topic=f"sec-{tag}-output")


def run_whole_pipeline(p: Pipeline) -> None:
    p.provision()
    p.load(FIXTURE / "before.jsonl", FIXTURE / "correction.jsonl")
    p.roles_until_idle()
    r = p.verify()
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


def assert_one_line_exit_2(r: subprocess.CompletedProcess[str], *secrets_: str) -> str:
    out = r.stdout + r.stderr
    for s in secrets_:
        assert s not in out, f"a secret leaked:\n{out}"
    assert r.returncode == 2, out
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# ---------------------------------------------------------------- Kafka: SASL


def test_the_pipeline_runs_through_a_sasl_listener_with_credentials_from_the_config_file(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, kafka_config: Callable[..., Path]
) -> None:
    conf = kafka_config(**sasl_settings())
    p = pipeline(tmp_path, secured_broker.address("SASL"), pg_dsn, schema, AMENDS_KAFKA_CONFIG=str(conf))
    run_whole_pipeline(p)


@pytest.mark.slow
def test_a_wrong_sasl_password_ends_every_kafka_command_with_exit_2_in_one_line_without_the_password(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, kafka_config: Callable[..., Path]
) -> None:
    good = pipeline(tmp_path, secured_broker.address("SASL"), pg_dsn, schema,
                    AMENDS_KAFKA_CONFIG=str(kafka_config(**sasl_settings())))
    good.provision()
    wrong = f"wrong-{secrets.token_hex(6)}"
    bad_env = {**good.env, "AMENDS_KAFKA_CONFIG": str(kafka_config(**sasl_settings(wrong)))}
    bad = Pipeline(bad_env, None, tmp_path, source_topic=good.source_topic, output_topic=good.output_topic)
    for args in (
        ("load", "--config", CFG, str(FIXTURE / "before.jsonl")),
        ("role", "worker", "--config", CFG, "--until-idle", "--quiet"),
        ("role", "relay", "--config", CFG, "--until-idle", "--quiet"),
        ("role", "view", "--config", CFG, "--until-idle", "--quiet"),
        ("verify", "--config", CFG),
    ):
        line = assert_one_line_exit_2(bad.run(*args, timeout=90), wrong, KAFKA_PASSWORD)
        assert "SASL authentication" in line and "sasl.password" in line, line
    fresh = pipeline(tmp_path, secured_broker.address("SASL"), pg_dsn, f"{schema}_fresh",
                     AMENDS_KAFKA_CONFIG=bad_env["AMENDS_KAFKA_CONFIG"])
    try:
        assert_one_line_exit_2(fresh.run("provision", "--config", CFG, "--source-topic", "x-src",
                                         "--output-topic", "x-out", timeout=90), wrong)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(f"{schema}_fresh")))


def test_kafka_variables_override_the_config_file_so_a_secret_can_come_from_the_environment(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, kafka_config: Callable[..., Path]
) -> None:
    conf = kafka_config(**sasl_settings(password="not-the-password"))
    p = pipeline(tmp_path, secured_broker.address("SASL"), pg_dsn, schema,
                 AMENDS_KAFKA_CONFIG=str(conf), AMENDS_KAFKA_SASL_PASSWORD=KAFKA_PASSWORD)
    run_whole_pipeline(p)


def test_a_client_without_sasl_settings_cannot_use_the_sasl_listener(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, kafka_config: Callable[..., Path]
) -> None:
    conf = kafka_config(**{**sasl_settings(), "sasl_mechanism": "SCRAM-SHA-256"})
    p = pipeline(tmp_path, secured_broker.address("SASL"), pg_dsn, schema, AMENDS_KAFKA_CONFIG=str(conf))
    line = assert_one_line_exit_2(p.run("provision", "--config", CFG, "--source-topic", "a",
                                        "--output-topic", "b", timeout=90), KAFKA_PASSWORD)
    assert "Unsupported SASL mechanism" in line and "sasl.mechanism" in line


# ---------------------------------------------------------------- Kafka: TLS


@pytest.mark.slow
def test_the_pipeline_runs_through_a_mutual_tls_listener_with_an_encrypted_client_key(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, tls: Path,
    kafka_config: Callable[..., Path],
) -> None:
    conf = kafka_config(**tls_settings(tls))
    p = pipeline(tmp_path, secured_broker.address("TLS"), pg_dsn, schema, AMENDS_KAFKA_CONFIG=str(conf))
    run_whole_pipeline(p)


def test_tls_failures_end_with_exit_2_in_one_line_without_the_key_password(
    secured_broker: RealBroker, pg_dsn: str, schema: str, tmp_path: Path, tls: Path,
    kafka_config: Callable[..., Path],
) -> None:
    wrong = f"wrong-key-pw-{secrets.token_hex(4)}"
    no_client_cert = {k: v for k, v in tls_settings(tls).items() if k.startswith(("security", "ssl_ca"))}
    untrusted_ca = {**tls_settings(tls), "ssl_ca_location": str(tls / "client.crt")}
    cases = [
        (tls_settings(tls, key_password=wrong), "ssl.key.location"),
        (no_client_cert, "bad certificate"),
        (untrusted_ca, "certificate verify failed"),
    ]
    for settings, reason in cases:
        p = pipeline(tmp_path, secured_broker.address("TLS"), pg_dsn, schema,
                     AMENDS_KAFKA_CONFIG=str(kafka_config(**settings)))
        r = p.run("provision", "--config", CFG, "--source-topic", "a", "--output-topic", "b", timeout=90)
        line = assert_one_line_exit_2(r, wrong, KEY_PASSWORD)
        assert reason in line, line


# ---------------------------------------------------------------- Kafka: the settings themselves


def test_settings_amends_relies_on_are_refused_from_the_file_and_from_variables(tmp_path: Path) -> None:
    for key in FIXED:
        conf = tmp_path / "k.properties"
        conf.write_text(f"# comment\n\nsecurity.protocol=SSL\n{key}=whatever\n")
        with pytest.raises(UsageError) as e:
            KafkaSettings.from_env("127.0.0.1:9", {"AMENDS_KAFKA_CONFIG": str(conf)})
        assert f"line 4: {key} cannot be set" in str(e.value) and "whatever" not in str(e.value)
        if "_" not in key:
            var = "AMENDS_KAFKA_" + key.upper().replace(".", "_")
            with pytest.raises(UsageError) as e:
                KafkaSettings.from_env("127.0.0.1:9", {var: "whatever"})
            assert str(e.value).startswith(f"{var}: {key} cannot be set")


def test_the_client_defaults_amends_relies_on_cannot_be_changed_by_any_caller() -> None:
    for make, key in ((consumer_config, "enable.auto.commit"), (consumer_config, "isolation.level"),
                      (producer_config, "enable.idempotence"), (producer_config, "acks")):
        with pytest.raises(UsageError, match=key):
            make("127.0.0.1:9", **{key: "read_uncommitted" if key == "isolation.level" else "0"})
    assert consumer_config("127.0.0.1:9")["isolation.level"] == "read_committed"
    assert producer_config("127.0.0.1:9", **{"sasl.username": "u"})["sasl.username"] == "u"


def test_a_fixed_setting_in_the_config_file_ends_a_command_with_exit_2_naming_the_line(
    pg_dsn: str, schema: str, tmp_path: Path, kafka_broker: RealBroker, kafka_config: Callable[..., Path]
) -> None:
    conf = kafka_config(acks="1")
    p = pipeline(tmp_path, kafka_broker.bootstrap, pg_dsn, schema, AMENDS_KAFKA_CONFIG=str(conf))
    line = assert_one_line_exit_2(p.run("provision", "--config", CFG, "--source-topic", "a",
                                        "--output-topic", "b"))
    assert f"{conf} line 3: acks cannot be set" in line


def test_a_config_line_without_equals_is_refused_by_line_number_without_echoing_it(tmp_path: Path) -> None:
    secret = f"s3cret-{secrets.token_hex(4)}"
    conf = tmp_path / "k.properties"
    conf.write_text(f"security.protocol=SASL_SSL\n! a comment\n\nsasl.password {secret}\n")
    with pytest.raises(UsageError) as e:
        KafkaSettings.from_env("127.0.0.1:9", {"AMENDS_KAFKA_CONFIG": str(conf)})
    assert "line 4: expected key=value" in str(e.value) and secret not in str(e.value)
    conf.write_text("sasl.username=a\nsasl.username=b\n")
    with pytest.raises(UsageError, match="line 2: sasl.username is already set on line 1"):
        KafkaSettings.from_env("127.0.0.1:9", {"AMENDS_KAFKA_CONFIG": str(conf)})
    with pytest.raises(UsageError, match="cannot read"):
        KafkaSettings.from_env("127.0.0.1:9", {"AMENDS_KAFKA_CONFIG": str(tmp_path / "missing")})


def test_values_may_hold_equals_signs_and_amends_own_variables_are_not_client_settings(tmp_path: Path) -> None:
    conf = tmp_path / "k.properties"
    conf.write_text("sasl.oauthbearer.config = scope=a principal=b\n")
    s = KafkaSettings.from_env("127.0.0.1:9", {
        "AMENDS_KAFKA_CONFIG": str(conf), "AMENDS_KAFKA_BOOTSTRAP": "x:1", "AMENDS_KAFKA_CACHE": "/c",
        "AMENDS_KAFKA_REPLICATION_FACTOR": "3", "AMENDS_KAFKA_CLIENT_ID": "amends-test",
    })
    assert dict(s.user) == {"sasl.oauthbearer.config": "scope=a principal=b", "client.id": "amends-test"}
    assert "scope=a" not in repr(s) and "amends-test" in repr(s)


def test_every_kafka_client_of_the_pipeline_is_made_by_the_runtime() -> None:
    """Clients made anywhere else would miss the TLS/SASL settings."""
    allowed = {
        "amends_pipeline/runtime.py",  # Reader, Writer, AdminClient with the settings
        "amends_pipeline/kafka/topics.py",  # Reader and Writer wrap Consumer and Producer
        "amends_pipeline/kafka/settings.py",  # the preflight admin client, with the settings
        "amends_pipeline/kafka/devbroker.py",  # development/test broker infrastructure
        "amends_pipeline/kafka/realbroker.py",  # development/test broker infrastructure
    }
    makers = {"Consumer", "Producer", "AdminClient", "Reader", "Writer", "SerializingProducer",
              "DeserializingConsumer"}
    found = []
    for path in sorted((ROOT / "amends_pipeline").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in makers:
                    found.append(f"{rel}:{node.lineno} {name}(")
    assert found == []


# ---------------------------------------------------------------- PostgreSQL


@pytest.mark.slow
def test_commands_work_with_a_password_role_over_tls(
    login_role: LoginRole, kafka_broker: RealBroker, schema: str, tmp_path: Path
) -> None:
    dsn = login_role.uri()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert row == (True,)
    run_whole_pipeline(pipeline(tmp_path, kafka_broker.bootstrap, dsn, schema))
    kv = make_conninfo(dsn)  # the same DSN as key=value pairs (the password quoted)
    p = pipeline(tmp_path, kafka_broker.bootstrap, kv, schema)
    assert p.run("view", "--config", CFG, "--last", "0").returncode == 0


def test_a_wrong_postgres_password_ends_with_exit_2_in_one_line_without_the_password(
    login_role: LoginRole, kafka_broker: RealBroker, schema: str, tmp_path: Path
) -> None:
    wrong = f"Wr0ng:{secrets.token_hex(4)}@x"
    p = pipeline(tmp_path, kafka_broker.bootstrap, login_role.uri(wrong), schema)
    for args in (("provision", "--config", CFG), ("verify", "--config", CFG),
                 ("view", "--config", CFG), ("role", "worker", "--config", CFG, "--until-idle")):
        line = assert_one_line_exit_2(p.run(*args), wrong, quote(wrong, safe=""))
        assert "password authentication failed" in line, line


def malformed_dsns(role: LoginRole) -> list[str]:
    """DSNs holding the password that libpq refuses, several of which it quotes in its error."""
    enc = quote(role.password, safe="")
    host = f"{role.host}:{role.port}"
    return [
        role.uri(query="sslmode=bogus"),
        role.uri(query="nonsense=1"),
        f"postgresql://{role.name}:{enc}@[::1/{role.dbname}",  # libpq quotes this one whole
        f"postgresql://{role.name}:{enc}%zz@{host}/{role.dbname}",  # ... and this token
        f"postgresql://{role.name}:{enc}@{host}:99999/{role.dbname}",
        f"host={role.host} user={role.name} password='{role.password.replace(chr(39), '')} dbname",
        f"host={role.host} user={role.name} password={enc} sslmode=bogus",
        f"host={role.host} user={role.name} password={enc} bogus",
    ]


def test_a_malformed_dsn_holding_the_password_ends_with_exit_2_in_one_line_without_the_password(
    login_role: LoginRole, kafka_broker: RealBroker, schema: str, tmp_path: Path
) -> None:
    hidden = [login_role.password, quote(login_role.password, safe=""),
              login_role.password.replace("'", "")]
    for dsn in malformed_dsns(login_role):
        p = pipeline(tmp_path, kafka_broker.bootstrap, dsn, schema)
        assert_one_line_exit_2(p.run("provision", "--config", CFG), *hidden)


def test_ensure_postgres_never_prints_the_password(login_role: LoginRole, tmp_path: Path) -> None:
    import os

    wrong = f"Wr0ng-{secrets.token_hex(4)}"
    hidden = [login_role.password, quote(login_role.password, safe=""), wrong]
    for dsn in [login_role.uri(wrong), *malformed_dsns(login_role)]:
        env = {**os.environ, "AMENDS_PG_DSN": dsn}
        r = subprocess.run(["bash", str(ROOT / "scripts" / "ensure-postgres.sh")], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        out = r.stdout + r.stderr
        assert r.returncode != 0 and all(h not in out for h in hidden), out
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_runtime_and_the_kafka_settings_never_show_a_secret_in_their_repr(
    login_role: LoginRole, tls: Path
) -> None:
    from amends_pipeline.inputs import load_config

    settings = KafkaSettings("127.0.0.1:9", tuple((k.replace("_", "."), v) for k, v in {
        **tls_settings(tls), "sasl_password": KAFKA_PASSWORD}.items()))
    rt = Runtime(load_config(CFG), dsn=login_role.uri(), bootstrap="127.0.0.1:9", kafka_client=settings)
    shown = repr(rt) + str(rt) + repr(settings)
    assert login_role.password not in shown and quote(login_role.password, safe="") not in shown
    assert KEY_PASSWORD not in shown and KAFKA_PASSWORD not in shown
    assert "ssl.ca.location" in repr(settings)


def test_redaction_removes_dsn_passwords_even_from_texts_of_dsns_that_do_not_parse(login_role: LoginRole) -> None:
    for dsn in malformed_dsns(login_role):
        hidden = dsn_secrets(dsn)
        assert hidden, dsn
        text = redact(f'libpq said: "{dsn}"', hidden)
        assert all(h not in text for h in hidden if len(h) >= 4), text
    assert str(target(login_role.uri())) == (
        f"{login_role.host}:{login_role.port}/{login_role.dbname} as {login_role.name}"
    )
    assert redact("postgresql://u:hunter2@h/db") == "postgresql://u:***@h/db"
    assert redact("sasl.password=abc ssl.key.password = 'x y'") == "sasl.password=*** ssl.key.password = ***"




def test_a_failed_connection_keeps_the_driver_error_as_cause_with_the_password_redacted(
    login_role: LoginRole,
) -> None:
    import traceback

    from amends_pipeline.postgres.connection import open_connection
    from amends_pipeline.postgres.errors import StoreUnavailable

    hidden = [login_role.password, quote(login_role.password, safe="")]
    for dsn in [login_role.uri("Wr0ng-pw-x"), *malformed_dsns(login_role)]:
        with pytest.raises(StoreUnavailable) as caught:
            open_connection(dsn, None)
        assert isinstance(caught.value.__cause__, psycopg.Error)
        shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value.__cause__)
        assert all(h not in shown for h in hidden), shown

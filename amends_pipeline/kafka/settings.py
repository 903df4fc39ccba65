"""Kafka client settings from the environment: TLS, SASL and anything else librdkafka takes.

Every producer, consumer and admin client amends makes gets the same user
settings, from two places (later wins):

1. ``AMENDS_KAFKA_CONFIG``: the path of a file of ``key=value`` lines in
   librdkafka's names (``security.protocol=SASL_SSL``, ``sasl.password=...``).
   Blank lines and lines starting with ``#`` or ``!`` are ignored; whitespace
   around the key and the value is dropped; the value runs to the end of the
   line and may contain ``=``. A line without ``=``, a malformed key or a key
   given twice is refused with the file and line number (never its content).
2. ``AMENDS_KAFKA_<NAME>`` variables, ``NAME`` being the setting in upper case
   with ``_`` for ``.``: ``AMENDS_KAFKA_SASL_PASSWORD`` is ``sasl.password``.
   They override the file, so a secret can come from a secret store while
   the rest stays in a file. amends' own variables (``OWN_VARIABLES``) are
   not client settings.

The bootstrap address comes only from ``AMENDS_KAFKA_BOOTSTRAP``. Settings
amends relies on for correctness (``FIXED``) cannot be overridden: giving one
is an error naming where it was given and why it is fixed, never silently
ignored. Secret values (``sasl.password``, ``ssl.key.password``, ...) are
remembered for redaction and never shown, not even in ``repr``.

librdkafka's log lines and error callbacks go through ``ClientLog``: redacted,
summarised (the first line of each endpoint's distinct failure; repeats are
dropped) and handed to the Python logger ``amends.kafka.client``, which prints
on stderr only with ``AMENDS_DEBUG=1``. The global ``amends --verbose`` flag
(``show_client_logs``) prints every line instead, still redacted.
Authentication or TLS refusals are kept so that a command fails with one line
saying why (``KafkaRefused``, exit 2) instead of timing out with "all brokers
down"; each endpoint's last connection failure is kept so that an unreachable
cluster is reported in one line naming the address and what to check
(``preflight``: a metadata probe bounded by ``PROBE_SECONDS``).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amends_pipeline.errors import UsageError
from amends_pipeline.kafka import BOOTSTRAP_ENV
from amends_pipeline.redaction import MASK, is_secret_key, redact, remember

CONFIG_ENV = "AMENDS_KAFKA_CONFIG"
PREFIX = "AMENDS_KAFKA_"
OWN_VARIABLES = frozenset({
    "AMENDS_KAFKA_BOOTSTRAP",
    "AMENDS_KAFKA_CONFIG",
    "AMENDS_KAFKA_CACHE",
    "AMENDS_KAFKA_REPLICATION_FACTOR",
    "AMENDS_KAFKA_MIN_INSYNC_REPLICAS",
})
"""``AMENDS_KAFKA_*`` variables that configure amends itself, not the Kafka clients."""

_CORRECTNESS = "amends relies on it for correctness"
FIXED: Mapping[str, str] = {
    "bootstrap.servers": "the bootstrap address comes from AMENDS_KAFKA_BOOTSTRAP",
    "metadata.broker.list": "the bootstrap address comes from AMENDS_KAFKA_BOOTSTRAP",
    "enable.idempotence": f"{_CORRECTNESS}: retried sends must never duplicate or reorder output",
    "acks": f"{_CORRECTNESS}: a message is delivered only once every in-sync replica has it",
    "request.required.acks": f"{_CORRECTNESS}: a message is delivered only once every in-sync replica has it",
    "isolation.level": f"{_CORRECTNESS}: readers see committed records only",
    "enable.auto.commit": f"{_CORRECTNESS}: progress lives in PostgreSQL, never in Kafka commits",
    "auto.commit.enable": f"{_CORRECTNESS}: progress lives in PostgreSQL, never in Kafka commits",
    "enable.auto.offset.store": f"{_CORRECTNESS}: progress lives in PostgreSQL, never in Kafka commits",
    "auto.offset.reset": f"{_CORRECTNESS}: a missing offset is an error, never a silent jump",
    "enable.partition.eof": f"{_CORRECTNESS}: readers detect the end of a partition with it",
    "allow.auto.create.topics": f"{_CORRECTNESS}: a deleted topic must stay deleted",
    "transactional.id": "amends' producers are idempotent, not transactional",
    "logger": "amends installs its own (redacting) log handler",
    "error_cb": "amends installs its own error callback",
    "throttle_cb": "callbacks cannot be set from text",
    "stats_cb": "callbacks cannot be set from text",
    "oauth_cb": "callbacks cannot be set from text",
    "on_delivery": "callbacks cannot be set from text",
    "on_commit": "callbacks cannot be set from text",
    "log.queue": "amends serves librdkafka's logs itself",
}
"""Settings a user may not give, with the reason shown when one is given."""

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
LOGGER_NAME = "amends.kafka.client"


class KafkaRefused(UsageError):
    """Kafka refused us or cannot be used as configured: credentials, TLS, permissions, settings.

    Not transient (retrying changes nothing): commands exit 2 with one line.
    """


def _bad(where: str, what: str) -> UsageError:
    return UsageError(f"{where}: {what}")


def read_config_file(path: str | Path) -> list[tuple[str, str, str]]:
    """(key, value, where) for each setting of a ``key=value`` file; UsageError on bad syntax."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        msg = f"{CONFIG_ENV}: cannot read {str(p)!r}: {e.strerror or type(e).__name__}"
        raise UsageError(msg) from None
    except UnicodeDecodeError:
        msg = f"{CONFIG_ENV}: {str(p)!r} is not UTF-8 text"
        raise UsageError(msg) from None
    out: list[tuple[str, str, str]] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        where = f"{CONFIG_ENV} {p} line {n}"
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            raise _bad(where, "expected key=value (a librdkafka setting, e.g. security.protocol=SASL_SSL)")
        if not _KEY.fullmatch(key):
            raise _bad(where, "the key before '=' is not a setting name (letters, digits, '.', '_', '-')")
        if key in seen:
            raise _bad(where, f"{key} is already set on line {seen[key]}")
        seen[key] = n
        out.append((key, value.strip(), where))
    return out


def variable_settings(environ: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(key, value, where) for each ``AMENDS_KAFKA_<NAME>`` variable that is a client setting."""
    out = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in OWN_VARIABLES:
            continue
        suffix = name[len(PREFIX):]
        key = suffix.lower().replace("_", ".")
        if not suffix or not _KEY.fullmatch(key):
            what = "is not a Kafka client setting (expected e.g. AMENDS_KAFKA_SASL_PASSWORD)"
            raise _bad(name, what)
        out.append((key, environ[name].strip(), name))
    return out


def _check_allowed(key: str, where: str) -> None:
    why = FIXED.get(key)
    if why is not None:
        raise _bad(where, f"{key} cannot be set: {why}")


_ENDPOINT_FAILURE = re.compile(r"(?:^|\s)(?P<ep>\S+?)/(?:bootstrap|\d+): (?P<reason>.+)$")
"""``HOST:PORT/bootstrap: reason``: how librdkafka reports one broker connection's failure."""
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")
_CLIENT = re.compile(r"\[(?:rdkafka#\w+-\d+|thrd:[^\]]*)\]:?\s*")
_NUMBERS = re.compile(r"\d+")

_verbose = False
"""Set by ``show_client_logs`` (``amends --verbose``): every client log line, none summarised."""


def short_reason(reason: str) -> str:
    """A broker connection failure in a few words (``connection refused``, ...)."""
    text = _AFTER.sub("", reason).strip()
    low = text.lower()
    if "connection refused" in low:
        return "connection refused"
    if "resolve" in low:
        return text
    if "timed out" in low:
        return "no answer (connection setup timed out)"
    return text


class ClientLog:
    """librdkafka's log lines and error callbacks, redacted; remembers refusals and failures.

    One instance serves every client of one ``KafkaSettings``. Callbacks run
    inside poll/consume/flush on the calling thread. Unless ``--verbose`` was
    given, a line is passed on only the first time its endpoint reports that
    failure (numbers, client and thread names aside): an unreachable broker is
    one line, not one per reconnection attempt.
    """

    def __init__(self) -> None:
        self.refusal: str | None = None
        """The last authentication, TLS or protocol refusal reported by a client."""
        self.unreachable: str | None = None
        """The last "cannot connect" report (nothing answers at the address)."""
        self.failures: dict[str, str] = {}
        """Each endpoint's last connection failure, in a few words (``short_reason``)."""
        self._seen: set[str] = set()
        self._logger = client_logger()

    def _note_failure(self, text: str) -> str | None:
        """Remember an endpoint's failure from a line; the summary key of the line."""
        m = _ENDPOINT_FAILURE.search(_CLIENT.sub("", text))
        if m is None:
            return None
        reason = short_reason(m["reason"])
        self.failures[m["ep"]] = reason
        return f"{m['ep']}: {_NUMBERS.sub('#', reason)}"

    def _emit(self, level: int, key: str, text: str) -> None:
        if not self._logger.isEnabledFor(level):
            return
        if not _verbose:
            if key in self._seen:
                return
            self._seen.add(key)
            if len(self._seen) > 10_000:  # a pathological variety of lines: forget, never grow
                self._seen.clear()
        self._logger.log(level, "kafka: %s", text)

    def log(self, level: int, fmt: str, *args: object) -> None:
        """The ``logger`` protocol confluent-kafka calls (``logger.log(level, fmt, *args)``)."""
        failure = bool(args) and args[0] == "FAIL"  # a broker connection failed
        if not failure and not self._logger.isEnabledFor(level):
            return
        try:
            text = fmt % args
        except (TypeError, ValueError):
            text = " ".join(map(str, (fmt, *args)))
        text = redact(" ".join(text.split()))
        endpoint_key = self._note_failure(text) if failure else None
        key = endpoint_key or _NUMBERS.sub("#", _AFTER.sub("", _CLIENT.sub("", text)))
        self._emit(level, key, text)

    def error(self, err: Any) -> None:
        """The ``error_cb`` of every client."""
        text = redact(" ".join(str(err.str()).split()))
        if _is_refusal(err.code(), text):
            self.refusal = text
            _note_refusal(text)
        elif err.code() in _UNREACHABLE:
            self.unreachable = text
        # The same failure as a FAIL log line shares its key: one line per endpoint and error.
        key = self._note_failure(text) or f"{err.name()}: {_NUMBERS.sub('#', _AFTER.sub('', text))}"
        self._emit(logging.WARNING, key, f"{err.name()}: {text}")

    def unreachable_message(self, bootstrap: str, seconds: float) -> str:
        """One line: Kafka at ``bootstrap`` did not answer, why, and what to check."""
        reasons = sorted(set(self.failures.values()))
        if not reasons:
            why = "no answer to a metadata request"
        elif len(self.failures) == 1 or len(reasons) == 1:
            why = reasons[0]
        else:
            why = ", ".join(f"{ep}: {r}" for ep, r in sorted(self.failures.items()))
        low = why.lower()
        if "resolve" in low:
            hint = f"check the host names in {BOOTSTRAP_ENV}"
        elif low == "connection refused":
            hint = f"start the broker or point {BOOTSTRAP_ENV} at the address it listens on"
        elif "disconnect" in low:
            hint = (
                f"the listener closes the connection: check security.protocol ({CONFIG_ENV} or"
                f" {PREFIX}* variables) against the listener at {bootstrap}"
            )
        else:
            hint = (
                f"check that {BOOTSTRAP_ENV} names a Kafka listener reachable from here"
                " (firewall, advertised listeners) and that the broker is up"
            )
        return (
            f"cannot reach Kafka at {bootstrap} ({BOOTSTRAP_ENV}): {why}, timed out after"
            f" {seconds:.0f}s; {hint}"
        )


def _codes() -> tuple[frozenset[int], frozenset[int]]:
    from confluent_kafka import KafkaError as E

    refusals = frozenset({
        E._AUTHENTICATION, E._SSL, E.SASL_AUTHENTICATION_FAILED, E.ILLEGAL_SASL_STATE,
        E.UNSUPPORTED_SASL_MECHANISM, E.CLUSTER_AUTHORIZATION_FAILED,
        E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    })
    return refusals, frozenset({E._ALL_BROKERS_DOWN, E._RESOLVE})


_REFUSALS, _UNREACHABLE = _codes()


_REFUSAL_TEXTS = ("security.protocol", "SSL routines", "ssl/tls alert", "SSL handshake", "SASL")


def _is_refusal(code: int, text: str) -> bool:
    # A rejected client certificate or a client speaking the wrong protocol to a
    # listener is reported as a transport failure; the text says which.
    return code in _REFUSALS or any(t in text for t in _REFUSAL_TEXTS)


_last_refusal: tuple[float, str] | None = None
_refusal_lock = threading.Lock()


def _note_refusal(text: str) -> None:
    global _last_refusal
    with _refusal_lock:
        _last_refusal = (time.monotonic(), text)


def recent_refusal(within: float = 120.0) -> str | None:
    """The last refusal any client of this process reported in the last ``within`` seconds."""
    r = _last_refusal
    if r is None or time.monotonic() - r[0] > within:
        return None
    return r[1]


class RedactingFormatter(logging.Formatter):
    """``amends: <message>`` with every secret removed (client libraries may quote settings)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _stderr_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("amends: %(message)s"))
    return handler


def client_logger() -> logging.Logger:
    """The logger librdkafka's lines go to; silent unless configured, ``AMENDS_DEBUG`` or ``--verbose``."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        if os.environ.get("AMENDS_DEBUG"):
            logger.addHandler(_stderr_handler())
            logger.setLevel(logging.DEBUG)
        else:
            logger.addHandler(logging.NullHandler())
    return logger


CLIENT_LOGGERS = {LOGGER_NAME: logging.DEBUG, "psycopg": logging.INFO}
"""The client libraries' loggers ``--verbose`` prints, and from which level: librdkafka's
(through ours; librdkafka itself filters by its ``log_level`` and ``debug`` settings)
and psycopg's (whose debug level traces every poll of a connection attempt)."""


def show_client_logs() -> None:
    """``amends --verbose``: every client library log line on stderr, redacted, none summarised."""
    global _verbose
    _verbose = True
    for name, level in CLIENT_LOGGERS.items():
        logger = logging.getLogger(name)
        for h in list(logger.handlers):
            logger.removeHandler(h)
        logger.addHandler(_stderr_handler())
        logger.setLevel(level)
        logger.propagate = False


@dataclass(frozen=True)
class KafkaSettings:
    """The bootstrap address and the user's client settings, applied to every client."""

    bootstrap: str
    user: tuple[tuple[str, str], ...] = ()
    """(librdkafka key, value) pairs from the file and the variables, in precedence order."""
    log: ClientLog = field(default_factory=ClientLog, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key, _ in self.user:
            _check_allowed(key, "Kafka client settings")
        remember(v for k, v in self.user if is_secret_key(k))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={MASK if is_secret_key(k) else v}" for k, v in self.user)
        return f"KafkaSettings(bootstrap={self.bootstrap!r}, user=[{shown}])"

    @classmethod
    def from_env(cls, bootstrap: str, environ: Mapping[str, str] | None = None) -> KafkaSettings:
        """Settings from ``AMENDS_KAFKA_CONFIG`` and ``AMENDS_KAFKA_*`` (variables win)."""
        env = os.environ if environ is None else environ
        merged: dict[str, tuple[str, str]] = {}
        path = env.get(CONFIG_ENV, "").strip()
        found = read_config_file(path) if path else []
        found += variable_settings(env)
        for key, value, where in found:
            _check_allowed(key, where)
            if is_secret_key(key):
                remember([value])
            merged[key] = (value, where)
        return cls(bootstrap, tuple((k, v) for k, (v, _) in merged.items()))

    def client_config(self) -> dict[str, Any]:
        """What every client gets on top of its own defaults: user settings, log and error hooks."""
        return {**dict(self.user), "logger": self.log, "error_cb": self.log.error}

    def admin_config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "log_level": 4,
            "socket.connection.setup.timeout.ms": CONNECTION_SETUP_TIMEOUT_MS,
            **self.client_config(),
        }

    def refused(self, what: str, reason: str) -> KafkaRefused:
        """A one-line refusal for ``what``, with a hint at the settings to check."""
        return KafkaRefused(f"{what}: {reason}{_hint(reason, self)}")


def _hint(reason: str, s: KafkaSettings) -> str:
    low = reason.lower()
    where = f"({CONFIG_ENV} or {PREFIX}* variables)"
    if "sasl" in low or "authentication" in low:
        return f"; check sasl.mechanism, sasl.username and sasl.password {where}"
    if "ssl" in low or "certificate" in low or "handshake" in low:
        return f"; check security.protocol and the ssl.* settings {where}"
    if "security.protocol" in low:
        return f"; check security.protocol {where} against the listener at {s.bootstrap}"
    if "authorization" in low:
        return "; the Kafka principal lacks a permission (ACL) amends needs"
    return ""


def merge(base: dict[str, Any], extra: Mapping[str, Any], fixed: tuple[str, ...]) -> dict[str, Any]:
    """``base`` updated with ``extra``; a ``fixed`` key of ``base`` that ``extra`` changes is refused."""
    for key in fixed:
        if key in extra and extra[key] != base.get(key):
            why = FIXED.get(key, _CORRECTNESS)
            msg = f"Kafka client setting {key} cannot be changed: {why}"
            raise UsageError(msg)
    out = dict(base)
    out.update(extra)
    return out


PROBE_SECONDS = 5.0
"""How long ``preflight`` waits for the cluster to answer a metadata request."""
CONNECTION_SETUP_TIMEOUT_MS = 10_000
"""``socket.connection.setup.timeout.ms`` of every client (TCP, TLS and SASL handshakes);
librdkafka's default (30 s) would hide a silent address behind half a minute of waiting."""


def preflight(settings: KafkaSettings, timeout: float = PROBE_SECONDS) -> None:
    """Fail fast, in one line, when Kafka refuses these settings or cannot be reached.

    Returns once the cluster answers a metadata request. A refusal (credentials,
    TLS, bad settings) is ``KafkaRefused``; no answer within ``timeout`` seconds
    is ``KafkaUnavailable`` naming the address, the reason (connection refused,
    unresolvable host, no answer) and what to check. Both mean exit 2.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from amends_pipeline.kafka.errors import KafkaUnavailable

    where = f"Kafka at {settings.bootstrap}"
    probe = {
        **settings.admin_config(),
        # Try about twice a second (librdkafka's 100 ms would be some twenty attempts a second
        # against a refusing address) and notice a broker that comes up during the probe.
        "reconnect.backoff.ms": 500,
        "reconnect.backoff.max.ms": 1000,
        "socket.connection.setup.timeout.ms": max(1000, int(timeout * 800)),
        **dict(settings.user),  # what the user set explicitly still wins
    }
    try:
        admin = AdminClient(probe)
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if e.args else e
        text = err.str() if hasattr(err, "str") else str(err)
        msg = f"the Kafka client settings are not usable: {redact(text)}"
        raise KafkaRefused(msg) from None
    start = time.monotonic()
    while True:
        began = time.monotonic()
        try:
            admin.list_topics(timeout=0.5)
            return
        except KafkaException:
            pass
        admin.poll(0)
        if settings.log.refusal is not None:
            what = f"{where} refused the connection"
            raise settings.refused(what, settings.log.refusal)
        now = time.monotonic()
        if now - start >= timeout:
            raise KafkaUnavailable(settings.log.unreachable_message(settings.bootstrap, now - start))
        time.sleep(max(0.0, 0.2 - (now - began)))  # a refused connection fails at once: do not spin

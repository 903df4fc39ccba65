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
handed to the Python logger ``amends.kafka.client`` (printed on stderr only
with ``AMENDS_DEBUG=1``), and authentication or TLS refusals are kept so that
a command fails with one line saying why (``KafkaRefused``, exit 2) instead
of timing out with "all brokers down".
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


class ClientLog:
    """librdkafka's log lines and error callbacks, redacted; remembers refusals.

    One instance serves every client of one ``KafkaSettings``. Callbacks run
    inside poll/consume/flush on the calling thread.
    """

    def __init__(self) -> None:
        self.refusal: str | None = None
        """The last authentication, TLS or protocol refusal reported by a client."""
        self.unreachable: str | None = None
        """The last "cannot connect" report (nothing answers at the address)."""
        self._logger = client_logger()

    def log(self, level: int, fmt: str, *args: object) -> None:
        """The ``logger`` protocol confluent-kafka calls (``logger.log(level, fmt, *args)``)."""
        if not self._logger.isEnabledFor(level):
            return
        try:
            text = fmt % args
        except (TypeError, ValueError):
            text = " ".join(map(str, (fmt, *args)))
        self._logger.log(level, "kafka: %s", redact(" ".join(text.split())))

    def error(self, err: Any) -> None:
        """The ``error_cb`` of every client."""
        text = redact(" ".join(str(err.str()).split()))
        if _is_refusal(err.code(), text):
            self.refusal = text
            _note_refusal(text)
        elif err.code() in _UNREACHABLE:
            self.unreachable = text
        self._logger.warning("kafka: %s: %s", err.name(), text)


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


def client_logger() -> logging.Logger:
    """The logger librdkafka's lines go to; silent unless configured or ``AMENDS_DEBUG`` is set."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        if os.environ.get("AMENDS_DEBUG"):
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("amends: %(message)s"))
            logger.setLevel(logging.DEBUG)
        else:
            handler = logging.NullHandler()
        logger.addHandler(handler)
    return logger


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
        return {"bootstrap.servers": self.bootstrap, "log_level": 4, **self.client_config()}

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


def preflight(settings: KafkaSettings, timeout: float = 10.0) -> None:
    """Fail fast, in one line, when Kafka refuses these settings (credentials, TLS, bad settings).

    Returns once the cluster answers a metadata request. When nothing answers at
    all, it also returns: unavailability is reported (or waited out, by the
    roles) by the operation that needs the cluster, as without settings.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    where = f"Kafka at {settings.bootstrap}"
    try:
        admin = AdminClient(settings.admin_config())
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if e.args else e
        text = err.str() if hasattr(err, "str") else str(err)
        msg = f"the Kafka client settings are not usable: {redact(text)}"
        raise KafkaRefused(msg) from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=0.5)
            return
        except KafkaException:
            pass
        admin.poll(0)
        if settings.log.refusal is not None:
            what = f"{where} refused the connection"
            raise settings.refused(what, settings.log.refusal)
        if settings.log.unreachable is not None or time.monotonic() > deadline:
            return

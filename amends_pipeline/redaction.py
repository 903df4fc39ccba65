"""The one place that keeps secrets out of what amends prints, raises, logs or stores.

``redact(text)`` is applied wherever a text crosses our boundary: a driver's
error message becoming one of our exceptions, a librdkafka log line or error
callback, a command's last line on stderr. It removes

- every secret value the process has been told about (``remember``): the
  password of each PostgreSQL DSN we connect with (as written and as
  percent-decoded), ``PGPASSWORD``, and every secret Kafka client setting
  (``sasl.password``, ``ssl.key.password``, ...);
- whatever *looks* like a secret even when nobody told us: the password part
  of a URI (``scheme://user:SECRET@host``) and the value of a ``key=value``
  pair whose key names a password, secret, passphrase or private key.

libpq quotes a malformed DSN whole (or the offending token) in its error
text, which is why the DSN's password is extracted by pattern as well as by
parsing: a DSN that does not parse still has its secrets removed.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"
_MIN_PLAIN = 4
"""Secrets at least this long are replaced wherever they occur; shorter ones only as whole words."""

_lock = threading.Lock()
_known: frozenset[str] = frozenset()

_URI_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s\"']*:)([^@\s\"']*)@")
_SECRET_KEY = r"[\w.-]*(?:password|passwd|secret|passphrase|key\.pem|oauthbearer\.config|token)"
_KEY_VALUE = re.compile(
    rf"(?i)(\b{_SECRET_KEY}\s*[=:]\s*)('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&,;'\"]+)"
)
_KV_PASSWORD = re.compile(r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s']+)")
_URI_QUERY_PASSWORD = re.compile(r"(?i)[?&]password=([^&#\s\"']*)")


def is_secret_key(key: str) -> bool:
    """True for a setting whose value is a secret (``sasl.password``, ``ssl.key.pem``, ...)."""
    return re.fullmatch(_SECRET_KEY, key.strip(), flags=re.IGNORECASE) is not None


def remember(values: Iterable[str | None]) -> None:
    """Add secret values that ``redact`` must remove from every text from now on."""
    fresh = {v for v in (s.strip() if s else "" for s in values) if v}
    if not fresh:
        return
    global _known
    with _lock:
        _known = _known | fresh


def dsn_secrets(dsn: str) -> set[str]:
    """The password(s) of a PostgreSQL DSN, as written and percent-decoded, even when it does not parse."""
    found: set[str] = set()
    try:
        from psycopg.conninfo import conninfo_to_dict

        pw = conninfo_to_dict(dsn).get("password")
        if pw:
            found.add(str(pw))
    except Exception:  # noqa: BLE001, S110 - a malformed DSN: the patterns below still apply
        pass
    for m in _URI_USERINFO.finditer(dsn):
        found.add(m.group(2))
    for m in _URI_QUERY_PASSWORD.finditer(dsn):
        found.add(m.group(1))
    for m in _KV_PASSWORD.finditer(dsn):
        raw = m.group(1)
        found.add(raw)
        if raw.startswith("'"):
            inner = raw.strip("'").replace("\\'", "'").replace("\\\\", "\\")
            # an unterminated quote runs to the end of the DSN: its first word may be the password
            found |= {inner, inner.split(" ")[0]}
    found |= {unquote(v) for v in found}
    return {v for v in found if v}


def remember_dsn(dsn: str) -> None:
    """Remember the secrets of a DSN (see ``dsn_secrets``) and libpq's ``PGPASSWORD``."""
    remember([*dsn_secrets(dsn), os.environ.get("PGPASSWORD")])


def redact(text: object, extra: Iterable[str] = ()) -> str:
    """``text`` with every known secret (and anything that looks like one) replaced by ``***``."""
    s = str(text)
    secrets = sorted(_known.union(v for v in extra if v), key=len, reverse=True)
    for v in secrets:
        if len(v) >= _MIN_PLAIN:
            s = s.replace(v, MASK)
        elif v in s:
            s = re.sub(rf"(?<![\w]){re.escape(v)}(?![\w])", MASK, s)
    s = _URI_USERINFO.sub(rf"\1{MASK}@", s)
    return _KEY_VALUE.sub(rf"\1{MASK}", s)


def _forget_all() -> None:
    """Tests only: start from no remembered secrets."""
    global _known
    with _lock:
        _known = frozenset()

"""Turn a libpq DSN (URI or key=value) into the SQLAlchemy URL dagster-postgres wants."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

DAGSTER_DB_ENV = "AMENDS_DAGSTER_PG_DB"
DEFAULT_DAGSTER_DB = "amends_dagster"


def sqlalchemy_url(dsn: str, dbname: str | None = None) -> str:
    """``postgresql+psycopg2://user:pw@host:port/db?...`` for the DSN (optionally another database).

    dagster-postgres, with psycopg 3 and SQLAlchemy 2.1 installed beside it,
    needs the psycopg2 driver named in the scheme. Every other libpq setting
    (sslmode, sslrootcert, ...) is carried over as a query parameter.
    """
    d = {k: str(v) for k, v in conninfo_to_dict(dsn).items() if v is not None}
    user = d.pop("user", "")
    password = d.pop("password", "")
    host = d.pop("host", "") or d.pop("hostaddr", "")
    port = d.pop("port", "")
    db = dbname or d.pop("dbname", "")
    d.pop("dbname", None)
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    netloc = (auth + "@" if auth else "") + quote(host, safe="") + (":" + port if port else "")
    query = "?" + urlencode(d) if d else ""
    return f"postgresql+psycopg2://{netloc}/{quote(db, safe='')}{query}"

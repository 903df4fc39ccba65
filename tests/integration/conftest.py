"""Fixtures for tests against the real PostgreSQL server (never a mock).

Each test gets a freshly migrated schema of its own, dropped afterwards.
PostgreSQL is required: when it cannot be reached, these tests FAIL with the
reason and the fix instead of being skipped.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from amends_core.ledger import Config
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore


@pytest.fixture
def admin(pg_dsn: str, pg_schema: str) -> Iterator[psycopg.Connection[Any]]:
    """An independent autocommit session on the test's schema (for inspection and kills)."""
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(pg_schema)))
    yield conn
    conn.close()


@pytest.fixture
def open_store(pg_dsn: str, pg_schema: str) -> Iterator[Callable[..., PgStore]]:
    """Factory for processing stores on the test's schema; all closed afterwards."""
    made: list[PgStore] = []

    def make(cfg: Config, dsn: str | None = None, **kw: Any) -> PgStore:
        s = PgStore.open(dsn or pg_dsn, cfg, schema=pg_schema, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def open_view(pg_dsn: str, pg_schema: str) -> Iterator[Callable[..., PgViewStore]]:
    made: list[PgViewStore] = []

    def make(cfg: Config, dsn: str | None = None) -> PgViewStore:
        v = PgViewStore.open(dsn or pg_dsn, cfg, schema=pg_schema)
        made.append(v)
        return v

    yield make
    for v in made:
        v.close()


# ---------------------------------------------------------------- fault proxy


class CommitProxy:
    """A TCP proxy in front of the real server that can interfere with one COMMIT.

    It frames the client's protocol messages, so it recognises the COMMIT
    statement exactly. Modes, armed with ``arm``:

    * ``"swallow"``: the COMMIT never reaches the server; the client's socket
      is closed while the server session stays open, idle in its transaction
      and holding its locks (a commit lost on the way in).
    * ``"cut-reply"``: the COMMIT reaches the server; everything the server
      sends afterwards is withheld until ``release()``, then the client's socket
      is closed (a reply lost on the way out).
    * ``"hold"``: the COMMIT is held back until ``release()``, then forwarded.

    ``commit_seen`` is set when the COMMIT arrives from the client.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode: str | None = None
        self.commit_seen = threading.Event()
        self.released = threading.Event()
        self._sockets: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, base: str) -> str:
        d = conninfo_to_dict(base)
        d.update(host="127.0.0.1", port=str(self.port), sslmode="disable", gssencmode="disable")
        d.pop("hostaddr", None)
        return make_conninfo(**d)

    def arm(self, mode: str) -> None:
        self.mode = mode
        self.commit_seen.clear()
        self.released.clear()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self._stop = True
        self.released.set()
        for s in [self.listener, *self._sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            state = {"cut": False}
            threading.Thread(target=self._c2s, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._s2c, args=(server, client, state), daemon=True).start()

    @staticmethod
    def _recv_exact(sock: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _c2s(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        try:
            head = self._recv_exact(client, 4)  # startup message: length, then body
            (n,) = struct.unpack("!I", head)
            server.sendall(head + self._recv_exact(client, n - 4))
            while True:
                t = self._recv_exact(client, 1)
                ln = self._recv_exact(client, 4)
                (n,) = struct.unpack("!I", ln)
                body = self._recv_exact(client, n - 4)
                msg = t + ln + body
                is_commit = (t == b"Q" and body.rstrip(b"\0").strip().upper() == b"COMMIT") or (
                    t == b"P" and body.split(b"\0")[1].strip().upper() == b"COMMIT"
                )
                if is_commit and self.mode is not None:
                    mode, self.mode = self.mode, None
                    self.commit_seen.set()
                    if mode == "swallow":
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                        return  # the server session stays open, idle in transaction
                    if mode == "hold":
                        self.released.wait(30)
                        server.sendall(msg)
                        continue
                    if mode == "cut-reply":
                        state["cut"] = True
                        server.sendall(msg)
                        self.released.wait(30)
                        client.shutdown(socket.SHUT_RDWR)
                        client.close()
                        return
                server.sendall(msg)
        except (OSError, ConnectionError, IndexError):
            pass

    def _s2c(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if state["cut"]:
                    continue  # withheld: the reply is lost
                client.sendall(data)
        except OSError:
            pass
        finally:
            if not state["cut"]:
                try:
                    client.close()
                except OSError:
                    pass


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[CommitProxy]:
    d = conninfo_to_dict(pg_dsn)
    p = CommitProxy(d.get("host") or "127.0.0.1", int(d.get("port") or 5432))
    yield p
    p.close()

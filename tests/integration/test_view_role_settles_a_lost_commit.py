"""The view role settles a lost COMMIT reply instead of dropping it (issue 14).

A view step whose commit reply is lost cannot know whether its batch landed.
Dropping the error leaves the abandoned server session open, idle in its
transaction and holding the partition's progress lock, so the next step waits
on that lock until the lock timeout. The step must settle it
(``PgViewStore.resolve_unknown``: end that session, re-read progress) and the
next step must apply from the installed frontier.
Real PostgreSQL behind the commit proxy (tests/integration/conftest.py), real Kafka broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore
from amends_pipeline.roles.relay import RelayPartition
from amends_pipeline.roles.view import ViewPartition
from tests import builders as b
from tests.integration.conftest import CommitProxy


def test_a_view_step_whose_commit_reply_is_lost_ends_that_session_and_the_next_step_applies(
    pg_dsn: str,
    open_store: Callable[..., PgStore],
    open_view: Callable[..., PgViewStore],
    proxy: CommitProxy,
    admin: psycopg.Connection[Any],
    kafka_broker: RealBroker,
    topic_name: Callable[[str], str],
) -> None:
    cfg = b.config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, cfg.partitions)
    store = open_store(cfg)
    tok = store.claim(0)
    store.process(tok, 0, b.records([b.txn("I1", qty=-50), b.txn("I2", qty=-20, valid=b.day(2))]))
    relay = RelayPartition(store, Writer(kafka_broker.bootstrap), topic, 0)
    while relay.step().published:
        pass

    view = open_view(cfg, dsn=proxy.dsn(pg_dsn))
    real_apply = view.apply
    lost: list[bool] = []

    class LosesOneCommit:
        """The view store, with the first application's COMMIT swallowed by the proxy."""

        def __getattr__(self, name: str) -> Any:
            return getattr(view, name)

        def apply(self, *args: Any, **kwargs: Any) -> Any:
            if not lost:
                lost.append(True)
                proxy.arm("swallow")
            return real_apply(*args, **kwargs)

    with Reader(kafka_broker.bootstrap, topic) as reader:
        end = reader.watermarks(0).high
        assert end > 0
        step = ViewPartition(LosesOneCommit(), reader, 0)  # type: ignore[arg-type]
        step.step()
        assert lost and proxy.commit_seen.is_set()
        # Settled: no session of ours is left idle in a transaction holding the lock.
        idle = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%%'"
            " AND datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        assert idle == (0,)
        while step.step().applied:
            pass
    assert view.frontier(0) == end

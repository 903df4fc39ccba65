"""Open the resources a role needs and return its bounded step callables.

One place builds worker, relay and view steps, for the long-running
``amends role`` processes and for in-process drains such as a rebuild.
Everything opened is registered on the caller's ExitStack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack

from amends_pipeline.roles.relay import RelayLock, RelayPartition
from amends_pipeline.roles.view import ViewPartition
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime

Step = Callable[[], int]
ROLES = ("worker", "relay", "view")


def _silent(text: str) -> None:
    del text


def open_steps(
    rt: Runtime,
    role: str,
    parts: Sequence[int],
    batch: int,
    stack: ExitStack,
    log: Callable[[str], None] = _silent,
) -> list[Step]:
    """Steps of one role over ``parts``; each returns how much work it did."""
    if role == "worker":
        store = stack.enter_context(rt.store("amends-worker"))
        m = rt.manifest(store)
        reader = stack.enter_context(rt.reader(m.source_topic))
        workers = [WorkerPartition(store, reader, m, p, batch_size=batch) for p in parts]
        for w in workers:
            tok = w.claim()
            log(f"partition {w.partition}: epoch {tok.epoch}, frontier {store.frontier(w.partition)}")
        return [lambda w=w: w.step().records for w in workers]
    if role == "relay":
        store = stack.enter_context(rt.store("amends-relay"))
        m = rt.manifest(store)
        writer = rt.writer()
        relays = []
        for p in parts:
            stack.callback(RelayLock(rt.dsn, rt.schema, rt.cfg.namespace, p).close)
            relays.append(RelayPartition(store, writer, m.output_topic, p, batch_size=batch))
        return [lambda r=r: r.step().published for r in relays]
    if role == "view":
        store = stack.enter_context(rt.store("amends-view-manifest"))
        m = rt.manifest(store)
        vstore = stack.enter_context(rt.view_store())
        reader = stack.enter_context(rt.reader(m.output_topic))
        views = [ViewPartition(vstore, reader, p, batch_size=max(batch, 1000)) for p in parts]
        return [lambda v=v: v.step().applied for v in views]
    msg = f"unknown role {role!r}; expected one of {', '.join(ROLES)}"
    raise ValueError(msg)

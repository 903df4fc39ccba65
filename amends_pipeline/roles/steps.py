"""Open the resources a role needs and return its bounded step callables.

One place builds worker, relay and view steps, for the long-running
``amends role`` processes and for in-process drains such as a rebuild.
Everything opened is registered on the caller's ExitStack.

Start-up is as resilient as steady state: every start-up step (opening the
store, which migrates and registers the namespace; reading the manifest;
opening the Kafka clients; taking the relay lock; claiming each partition) is
retried on transient failures (``TRANSIENT``: database or broker unreachable,
lock conflicts) with the same capped backoff and retry budget as the loop
(it runs through ``run_loop``), logging one line per failure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TypeVar

from amends_pipeline.kafka.topics import Reader
from amends_pipeline.postgres.view_store import PgViewStore
from amends_pipeline.postgres.wake import OutboxListener
from amends_pipeline.roles.loop import Stop, Wait, run_loop
from amends_pipeline.roles.relay import RelayLock, RelayPartition
from amends_pipeline.roles.view import ViewPartition
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime

Step = Callable[[], int]
ROLES = ("worker", "relay", "view")
BATCH_SIZE = 5000
"""Default largest batch of the long-running roles (``amends role --batch-size``), in records.

A maximum, never a target: a step takes what is already there up to it and never waits
for a batch to fill, so a single record at low load is still a batch of one. Only a
backlog makes batches this large, where the per-batch costs (a fenced transaction and its
statements, a produce flush, the view's progress reads) are shared by five times as many
records as at the 1,000 it used to be: in the end-to-end benchmark's bulk (20,000 records)
that was 11 to 15% less CPU per record over the roles, the broker, PostgreSQL and the
benchmark's producer together (two runs each on a loaded machine). The worker's batch also
ends at ``BATCH_BYTES`` of keys and values."""
T = TypeVar("T")


def _silent(text: str) -> None:
    del text


class StartupStopped(Exception):
    """A stop was requested while a start-up step was waiting to be retried."""


def start_up(
    action: Callable[[], T],
    stop: Stop,
    log: Callable[[str], None] = _silent,
    *,
    max_retries: int = 8,
) -> T:
    """``action()``, retried on transient failures exactly as ``run_loop`` retries a step.

    One log line per failure; the failure is raised once the retry budget is
    spent. Raises StartupStopped when a stop is requested before it succeeded.
    """
    done: list[T] = []

    def once() -> int:
        done.append(action())
        return 0

    run_loop(
        [once], stop, until_idle=True, max_retries=max_retries,
        on_error=lambda e, n: log(f"start-up: transient failure {n}: {e}"),
    )
    if not done:
        raise StartupStopped
    return done[0]


class _Retried:
    """Runs start-up steps through ``start_up`` with one stop, log and retry budget."""

    def __init__(self, stop: Stop, log: Callable[[str], None], max_retries: int) -> None:
        self.stop = stop
        self.log = log
        self.max_retries = max_retries

    def __call__(self, action: Callable[[], T]) -> T:
        return start_up(action, self.stop, self.log, max_retries=self.max_retries)


@dataclass(frozen=True)
class RoleSteps:
    """The bounded steps of a role and how it waits for work when they are idle (``run_loop``)."""

    steps: list[Step]
    wait: Wait | None = None


def open_steps(
    rt: Runtime,
    role: str,
    parts: Sequence[int],
    batch: int,
    stack: ExitStack,
    log: Callable[[str], None] = _silent,
    *,
    stop: Stop | None = None,
    max_retries: int = 8,
) -> list[Step]:
    """Steps of one role over ``parts``; each returns how much work it did.

    Start-up steps are retried on transient failures (see the module text);
    when ``stop`` is requested during start-up no step is returned.
    """
    return _role(rt, role, parts, batch, stack, log, stop, max_retries, waits=False).steps


def open_role(
    rt: Runtime,
    role: str,
    parts: Sequence[int],
    batch: int,
    stack: ExitStack,
    log: Callable[[str], None] = _silent,
    *,
    stop: Stop | None = None,
    max_retries: int = 8,
) -> RoleSteps:
    """``open_steps`` with the role's idle wait: a Kafka fetch past the frontiers (worker,
    view) or the outbox notification (relay), see ``run_loop``.

    Drains that run until idle (``open_steps``) never wait and open neither
    the waiting reader nor the listening session.
    """
    return _role(rt, role, parts, batch, stack, log, stop, max_retries, waits=True)


def _role(
    rt: Runtime,
    role: str,
    parts: Sequence[int],
    batch: int,
    stack: ExitStack,
    log: Callable[[str], None],
    stop: Stop | None,
    max_retries: int,
    *,
    waits: bool,
) -> RoleSteps:
    if role not in ROLES:
        msg = f"unknown role {role!r}; expected one of {', '.join(ROLES)}"
        raise ValueError(msg)
    retried = _Retried(Stop() if stop is None else stop, log, max_retries)
    try:
        return _open(rt, role, parts, batch, stack, log, retried, waits)
    except StartupStopped:
        return RoleSteps([])


def _open(
    rt: Runtime,
    role: str,
    parts: Sequence[int],
    batch: int,
    stack: ExitStack,
    log: Callable[[str], None],
    retried: _Retried,
    waits: bool,
) -> RoleSteps:
    if role == "worker":
        store = stack.enter_context(retried(lambda: rt.store("amends-worker")))
        m = retried(lambda: rt.manifest(store))
        reader = stack.enter_context(retried(lambda: rt.reader(m.source_topic)))
        workers = [rt.worker(store, reader, m, p, batch_size=batch) for p in parts]
        for w in workers:
            tok = retried(w.claim)
            frontier = retried(functools.partial(store.frontier, w.partition))
            log(f"partition {w.partition}: epoch {tok.epoch}, frontier {frontier}")
        steps = [_worker_step(w) for w in workers]
        if not waits:
            return RoleSteps(steps)
        waiter = stack.enter_context(retried(lambda: rt.waiting_reader(m.source_topic)))
        return RoleSteps(steps, _worker_wait(waiter, workers))
    if role == "relay":
        store = stack.enter_context(retried(lambda: rt.store("amends-relay")))
        m = retried(lambda: rt.manifest(store))
        writer = retried(rt.writer)
        relays = []
        for p in parts:
            lock = retried(functools.partial(RelayLock, rt.dsn, rt.schema, rt.cfg.namespace, p))
            stack.callback(lock.close)
            relays.append(RelayPartition(store, writer, m.output_topic, p, batch_size=batch))
        if not waits:
            return RoleSteps([_relay_step(r) for r in relays])
        # Listening before the first step: a commit after that step's look wakes the wait.
        listener = OutboxListener(rt.dsn, rt.schema, rt.cfg.namespace)
        stack.callback(listener.close)
        retried(listener.listen)
        # First in every round, so a busy relay still reads its notifications (see drain).
        return RoleSteps([_drain_step(listener), *(_relay_step(r) for r in relays)], listener.wait)
    store = stack.enter_context(retried(lambda: rt.store("amends-view-manifest")))
    m = retried(lambda: rt.manifest(store))
    vstore = stack.enter_context(retried(rt.view_store))
    reader = stack.enter_context(retried(lambda: rt.reader(m.output_topic)))
    views = [ViewPartition(vstore, reader, p, batch_size=max(batch, 1000)) for p in parts]
    if not waits:
        return RoleSteps([_view_step(v) for v in views])
    waiter = stack.enter_context(retried(lambda: rt.waiting_reader(m.output_topic)))
    return RoleSteps([_view_step(v) for v in views], _view_wait(waiter, vstore, parts))


def _worker_wait(waiter: Reader, workers: Sequence[WorkerPartition]) -> Wait:
    """Until a source message arrives past any worker's frontier."""
    return lambda seconds: waiter.wait({w.partition: w.frontier() for w in workers}, seconds)


def _view_wait(waiter: Reader, vstore: PgViewStore, parts: Sequence[int]) -> Wait:
    """Until an output message arrives past any view partition's frontier."""
    return lambda seconds: waiter.wait({p: vstore.progress(p)[0] for p in parts}, seconds)


def _worker_step(w: WorkerPartition) -> Step:
    return lambda: w.step().records


def _relay_step(r: RelayPartition) -> Step:
    return lambda: r.step().published


def _drain_step(listener: OutboxListener) -> Step:
    """Reads the notifications a busy relay has not waited for; no work of its own."""

    def step() -> int:
        listener.drain()
        return 0

    return step


def _view_step(v: ViewPartition) -> Step:
    return lambda: v.step().applied

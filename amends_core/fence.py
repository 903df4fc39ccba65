"""The rules every write of a source partition passes, in one copy for every store.

``guard`` is the ownership fence: a writer's token must be for this namespace and
configuration, at the epoch still installed, and the writer must expect the
frontier that is installed. ``check_coordinates`` keeps a record to its source,
its partition and the part of it not yet consumed. ``settled`` answers whether a
batch whose commit reply was lost committed. The memory store calls them on its
state; the PostgreSQL store calls them on the partition row it locked.
"""

from __future__ import annotations

from amends_core.errors import FenceError, FrontierMismatch, SourceMismatch
from amends_core.ledger import Record
from amends_core.ports import Token


def guard(
    token: Token,
    *,
    namespace: str,
    digest: str,
    epoch: int,
    installed: int,
    expected_next: int,
) -> None:
    """FenceError unless ``token`` is this namespace's and configuration's (``digest``, as
    registered) at the installed ``epoch``; FrontierMismatch unless the writer's
    ``expected_next`` is the ``installed`` frontier."""
    check_scope(token, namespace=namespace, digest=digest)
    if token.epoch != epoch:
        msg = f"epoch {token.epoch} was replaced by {epoch} on partition {token.partition}"
        raise FenceError(msg)
    if expected_next != installed:
        msg = f"expected frontier {expected_next}, installed {installed}"
        raise FrontierMismatch(msg)


def check_scope(token: Token, *, namespace: str, digest: str) -> None:
    """FenceError unless ``token`` was issued for this namespace and configuration ``digest``
    (the first part of ``guard``; a store may check it before it locks anything)."""
    if token.namespace != namespace or token.digest != digest:
        msg = "token belongs to another namespace or configuration"
        raise FenceError(msg)


def check_coordinates(record: Record, *, source: str, partition: int, frontier: int) -> None:
    """SourceMismatch unless ``record`` comes from ``source``, from ``partition``, at or above
    ``frontier`` (the next offset the owner has not consumed)."""
    c = record.coords
    if c.source != source:
        msg = f"record from source {c.source!r}, expected {source!r}"
        raise SourceMismatch(msg)
    if c.partition != partition:
        msg = f"record from partition {c.partition} offered to owner of {partition}"
        raise SourceMismatch(msg)
    if c.offset < frontier:
        msg = f"record offset {c.offset} is below the frontier {frontier}"
        raise SourceMismatch(msg)


__all__ = ["check_coordinates", "check_scope", "guard"]


def settled(partition: int, installed: int, *, before: int, after: int) -> bool:
    """Whether a batch whose commit reply was lost committed, from the frontier installed now.

    The caller has made sure that the batch can no longer commit (the PostgreSQL
    store ends the server process that received the COMMIT and locks the
    partition row). ``before`` and ``after`` are the frontiers the batch started
    from and would install; any third value means another owner moved it.
    """
    if installed == after:
        return True
    if installed == before:
        return False
    msg = (
        f"partition {partition} frontier is {installed}, neither {before} (not committed)"
        f" nor {after} (committed); another owner moved it"
    )
    raise FrontierMismatch(msg)

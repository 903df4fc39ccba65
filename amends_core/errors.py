"""Operation errors: conditions that stop processing without quarantining input.

A rejection is a business verdict on one record and advances progress. An
operation error means the step must not commit at all (stale owner, wrong
frontier, incompatible source, arithmetic that leaves int64).
"""

from __future__ import annotations


class OperationError(Exception):
    """Base of every error that aborts a processing step without progress."""


class FenceError(OperationError):
    """The token's namespace, configuration digest or epoch is no longer installed."""


class FrontierMismatch(OperationError):
    """The caller's expected frontier differs from the installed one."""


class SourceMismatch(OperationError):
    """A record's coordinates do not belong to this source incarnation or partition."""


class OutboxOrderError(OperationError):
    """Acknowledgement of anything but the earliest pending outbox row."""


class ReplayMismatch(OperationError):
    """A replayed record does not match the evidence already held for it."""


class Transient(OperationError):
    """Nothing was committed and the cause may pass (a lost connection, a busy lock):
    retrying the same step later is safe. Adapters raise their own subclasses."""


class CommitUnknown(OperationError):
    """A commit was sent but its reply was lost: it may or may not have taken effect.

    Never assume either outcome. The role logic settles it through its port
    (``resolve_unknown`` of a processing or view store, ``settle_claim`` for a
    claim), which re-reads durable state. Adapters raise subclasses that carry
    what they need to settle (the PostgreSQL one names the server process).
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        partition: int | None = None,
        before: int | None = None,
        after: int | None = None,
        backend: tuple[int, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.partition = partition
        self.before = before
        """Frontier the transaction started from (processing batches)."""
        self.after = after
        """Frontier the transaction installs if it committed (processing batches)."""
        self.backend = backend
        """(pid, backend_start) of the server process that received the COMMIT (PostgreSQL)."""


class BatchAborted(OperationError):
    """A record of a batch raised an operation error; the whole batch committed nothing.

    ``offset`` names the failing record; the records before it can be retried
    as a smaller batch. The core error (e.g. CloseOutOfRange) is ``__cause__``.
    """

    def __init__(self, message: str, *, partition: int, offset: int) -> None:
        super().__init__(message)
        self.partition = partition
        self.offset = offset


class PredecessorFailed(Transient):
    """A batch folded while the batch before it was still committing, and that one did not
    commit: nothing of this batch was written. The predecessor's own outcome (its error, or
    a lost reply to settle) is what the caller must act on; this batch is simply read again."""

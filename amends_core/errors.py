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

"""Errors the command line turns into one-line messages and exit codes."""

from __future__ import annotations


class UsageError(Exception):
    """Unusable arguments, configuration or environment: one line, exit 2."""


class ComputeError(Exception):
    """The history cannot be computed (a close outside signed 64-bit): exit 3."""

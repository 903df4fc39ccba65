"""Subcommands of ``amends``; each module exposes ``register(subparsers)``."""

"""Text meant for people: identifiers and messages made safe to print on a terminal.

Data (item, location, txn_id, diagnostics that quote them) may hold characters
a terminal interprets: ESC starts a control sequence, a carriage return
overwrites a line, a bidirectional override reorders what follows. Human
output passes every piece of data through ``printable`` (one value: shown as
is when harmless, else quoted with escapes, so it cannot be mistaken for
anything else) or a whole rendered text through ``terminal_safe``. JSON
output never goes through here: it stays exact, with JSON's own escapes.
"""

from __future__ import annotations

from amends_core.ledger import StockKey, printable

_KEEP = frozenset("\n")
"""Characters ``terminal_safe`` leaves alone: line breaks separate the lines of a text."""


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def terminal_safe(text: str) -> str:
    """``text`` with every unprintable character except a newline written as an escape.

    Already printable text (the usual case) is returned unchanged, so it is
    safe to apply to a text whose fields went through ``printable``.
    """
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch in _KEEP else _escape(ch) for ch in text)


def key_text(key: StockKey) -> str:
    """``ITEM/LOCATION`` with each part escaped by ``printable``."""
    return f"{printable(key.item)}/{printable(key.location)}"


__all__ = ["key_text", "printable", "terminal_safe"]

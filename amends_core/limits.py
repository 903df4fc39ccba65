"""Every size and character limit of amends, declared once, each with its reason.

Pure constants: no I/O, no imports from the rest of the package. Both engines
read their limits from here (the oracle may import this module and nothing
else of the incremental path), so the two decoders enforce the same rules
even though they share no parsing code.

Sizes of text are counted in UTF-8 bytes, never in characters: bytes are what
Kafka messages, PostgreSQL rows and envelopes pay for, and a character limit
would let four-byte characters quadruple the cost of a "short" identifier.
"""

from __future__ import annotations

MAX_VALUE_BYTES = 1 << 20
"""A source value (or transport key) above 1 MiB is refused before parsing.

Kafka's default maximum message size is 1 MiB; anything larger cannot be a
record we produced, and parsing it would only cost memory. Exceeded: the
record is quarantined as MALFORMED.
"""

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects a decoder follows.

A transaction nests two levels; the margin tolerates sloppy producers while
keeping the standard library parser far from Python's recursion limit.
Exceeded: MALFORMED.
"""

MAX_ID_BYTES = 256
"""Longest ``txn_id``, ``item`` and ``location``, in UTF-8 bytes.

These identifiers are stored in every piece of evidence, in every output
identity and envelope cause, and are repeated in key-status reasons; their
length multiplies into every downstream size. 256 bytes holds any realistic
business identifier (UUIDs take 36). Exceeded in a source value: MALFORMED,
with the member and its byte length named. Exceeded by a configured key: the
configuration is refused.
"""

MAX_NAME_BYTES = 256
"""Longest namespace and source incarnation name, in UTF-8 bytes.

The namespace is part of every output identity and the source incarnation
of every envelope cause. Exceeded: the configuration is refused.
"""

# Control characters are deliberately not a limit. Apart from NUL (which
# PostgreSQL text cannot hold, refused by both decoders), any character is
# legal in an identifier and kept exactly: refusing ESC or TAB now would
# quarantine records that earlier versions accepted and break replays of
# existing histories. Instead every human-readable output escapes
# unprintable characters (``amends_pipeline.text``), while JSON output stays
# exact, with JSON's own escapes.

MAX_STATUS_REASONS = 16
"""Most conflict references one key-status envelope carries.

The envelope carries the total number of current references and the first
``MAX_STATUS_REASONS`` of them in sorted order; the complete list stays in the
processing store's conflict evidence (and the verification report). Without
this bound, n conflicting identities on one key cost O(n) bytes per status
envelope and O(n^2) bytes over the key's history.
"""

MAX_ENVELOPE_BYTES = 64 * 1024
"""Largest encoded output envelope, checked before an outbox row is written.

Well under Kafka's default 1 MiB message size, which the relay must never
exceed (it could not publish, and would fail on every restart) and which the
view's decoder refuses (a larger envelope would stop its output partition).
With the identifier limits above, the largest possible envelope is about
10 KiB, so reaching this is a defect: processing stops with an operation
error instead of committing an envelope that cannot be delivered.
"""


# Input files of `amends load` and `amends compute`.

MAX_LINE_BYTES = 8 << 20
"""Longest line of an input file (8 MiB), checked before parsing.

A framed line carries one source value. Kafka's default message limit (and the
decoder's, ``MAX_VALUE_BYTES``) is 1 MiB; as JSON text a value can grow up
to six times (``\\u00XX`` escapes), as base64 by a third. 8 MiB holds any value
a broker would take, while a runaway line (a file without newlines, a binary
file) is refused before it is held and parsed.
"""

MAX_FILE_BYTES = 4 << 30
"""Largest input file (4 GiB), checked before reading.

``amends compute`` holds a whole history in memory (about 1 KiB per record
with its decoded state); 4 GiB of lines is some 15 million records, beyond
what one machine's run here is meant for. A larger input is almost certainly
the wrong file.
"""

MAX_LINE_DEPTH = 32
"""Deepest nesting of arrays and objects in a line, checked before parsing.

A framed line nests one level and a raw transaction two; the same margin as the
value decoder (``MAX_JSON_DEPTH``). Deeper input would reach the standard
library parser's recursion limit (RecursionError); it is refused as an error
of the line instead.
"""

CHUNK_BYTES = MAX_LINE_BYTES + 3
"""How much of one line a file reader takes at most (``readline(CHUNK_BYTES)``): a
chunk this long holds a line above the limit (the longest allowed line with its
``\\r\\n`` is ``MAX_LINE_BYTES + 2``)."""

MAX_OFFSET = (1 << 63) - 1
"""Highest offset a framed record may name: Kafka offsets are signed 64-bit."""


__all__ = [
    "CHUNK_BYTES",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_LINE_DEPTH",
    "MAX_OFFSET",
    "MAX_ENVELOPE_BYTES",
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_NAME_BYTES",
    "MAX_STATUS_REASONS",
    "MAX_VALUE_BYTES",
]

"""The durable profile assigns each function's own time to the stage it belongs to."""

from __future__ import annotations

import pytest

from benchmarks.profile_durable import STAGES, stage_of


@pytest.mark.parametrize(
    ("filename", "function", "stage"),
    [
        ("/x/amends_core/wire.py", "decode_transaction", "strict decode"),
        ("/x/amends_core/wire.py", "_fast_transaction", "strict decode"),
        ("~", "<method 'decode' of 'msgspec.json.Decoder' objects>", "strict decode"),
        ("/usr/lib/python3.11/json/decoder.py", "raw_decode", "strict decode"),
        ("/usr/lib/python3.11/json/encoder.py", "iterencode", "encode"),
        ("/x/amends_core/ledger.py", "to_bytes", "encode"),
        ("/x/amends_core/ledger.py", "compact_json", "encode"),
        ("/x/amends_core/ledger.py", "_envelope_text", "encode"),
        ("/x/amends_core/ledger.py", "_key_text", "encode"),
        ("/x/amends_core/timefmt.py", "format_day", "encode"),
        ("/x/amends_core/ledger.py", "__hash__", "validate/fold"),
        ("/x/amends_core/fold.py", "apply", "validate/fold"),
        ("/x/amends_core/timefmt.py", "parse_rfc3339", "validate/fold"),
        ("/x/amends_core/diff.py", "reconcile", "diff"),
        ("/x/amends_core/process.py", "decide", "diff"),
        ("/x/site-packages/psycopg/connection.py", "wait", "database"),
        ("/x/amends_pipeline/postgres/batch.py", "_write", "database"),
        ("/x/amends_pipeline/postgres/batch.py", "_apply", "other"),
        ("~", "<method 'get' of 'dict' objects>", "other"),
    ],
)
def test_stage_of_names_the_stage(filename: str, function: str, stage: str) -> None:
    assert stage_of(filename, function) == stage
    assert stage in STAGES

"""An input file above ``limits.MAX_FILE_BYTES`` is refused by its size before it is read (issue 14).

`amends load` and both engines of `amends compute` read input files the same
way; a file above the limit ends each of them with exit 2 and one line naming
the file, its size and the limit, instead of being read until some later
check trips. The file is sparse: it takes no disk space, only its size counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from amends_core import limits

AMENDS = str(Path(sys.executable).with_name("amends"))
CONFIG = {
    "schema_version": 1, "namespace": "size-test", "source_incarnation": "src-1", "partitions": 1,
    "origin": "2026-01-01T00:00:00Z",
    "keys": [{"item": "P", "location": "D", "opening_balance": 100, "reorder_threshold": 60, "partition": 0}],
}
FIRST_LINE = json.dumps({
    "partition": 0, "offset": 0, "key": '["P","D"]',
    "value": json.dumps({"txn_id": "A", "revision": 1, "kind": "NEW", "stock_key": {"item": "P", "location": "D"},
                         "valid_time": "2026-01-02T12:00:00Z", "qty": -1, "source_time": "2026-01-05T00:00:00Z"}),
})


def test_a_file_above_the_file_size_limit_is_refused_naming_its_size_by_load_and_compute(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        f.write(FIRST_LINE.encode() + b"\n")  # a well-formed first line
        f.truncate(4 * 2**30 + 1)  # 4 GiB + 1 byte: one above the documented limit
    assert limits.MAX_FILE_BYTES == 4 * 2**30
    expected = f"{big}: file of {4 * 2**30 + 1} bytes is above the {4 * 2**30} byte limit"
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("AMENDS_")}
    env_free.update(AMENDS_PG_DSN="postgresql://nobody@127.0.0.1:1/none", AMENDS_KAFKA_BOOTSTRAP="127.0.0.1:1")
    commands = [
        ["load", "--config", str(config), "--check", str(big)],
        ["compute", "--config", str(config), "--engine", "incremental", "--records", str(big)],
        ["compute", "--config", str(config), "--engine", "oracle", "--records", str(big)],
    ]
    for args in commands:
        r = subprocess.run([AMENDS, *args], capture_output=True, text=True, timeout=120, env=env_free, check=False)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert r.stderr == f"amends {args[0]}: {expected}\n", (args, r.stderr)

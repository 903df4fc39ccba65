"""Run the fuzz targets under atheris (coverage-guided libFuzzer) and count inputs and escapes.

    python -m tests.fuzz --runs 1000000            # every target, one million inputs each
    python -m tests.fuzz --runs 20000 --targets value,envelope
    python -m tests.fuzz --one value -- -runs=100   # one target, libFuzzer arguments after --

Each target runs in its own process (libFuzzer runs once per process), ``--jobs`` at a
time. Each target's corpus (its seeds plus every input libFuzzer found new coverage
with) is kept in ``--out``/corpus/<target> and grows from run to run. An escape is any exception out of a target: libFuzzer stops that target and
writes the input to ``--out`` (``<target>-crash-<sha1>``), and the run exits 1.
Needs atheris (``pip install -e '.[fuzz]'``, which `make fuzz-nightly` does).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DICT = Path(__file__).with_name("json.dict")
DONE = re.compile(rb"Done (\d+) runs in (\d+) second")
COMPARED = re.compile(rb"amends-fuzz: (\d+) values compared with the oracle")


@dataclass
class Result:
    target: str
    runs: int
    seconds: float
    rc: int
    escape: str
    note: str


def _one(name: str, libfuzzer_args: list[str]) -> None:
    """Child: instrument the core, then hand the target to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["amends_core"]):
        import amends_core.fold  # noqa: F401
        import amends_core.oracle.decode  # noqa: F401
        import amends_core.records  # noqa: F401
        import amends_core.view  # noqa: F401
        import amends_core.wire  # noqa: F401
    from tests.fuzz.targets import CANARY, TARGETS

    target = (TARGETS | {CANARY.name: CANARY})[name].run
    atheris.Setup([sys.argv[0], *libfuzzer_args], target)
    atheris.Fuzz()


def _run_target(name: str, runs: int, seed: int, out: Path, max_len: int) -> Result:
    from tests.fuzz.targets import CANARY, TARGETS

    corpus = out / "corpus" / name  # kept between runs, so coverage found once is kept
    corpus.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate((TARGETS | {CANARY.name: CANARY})[name].seeds()):
        (corpus / f"seed-{i}").write_bytes(s)
    args = [
        f"-runs={runs}",
        f"-seed={seed}",
        f"-max_len={max_len}",
        f"-dict={DICT}",
        f"-artifact_prefix={out}/{name}-",
        "-print_final_stats=1",
        "-close_fd_mask=1",
        str(corpus),
    ]
    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--one", name, "--", *args],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0", "AMENDS_FUZZ_RUNS": str(runs)},
        check=False,
    )
    seconds = time.monotonic() - start
    log = p.stdout + p.stderr
    (out / f"{name}.log").write_bytes(log)
    m = DONE.search(log)
    escape = ""
    if p.returncode != 0 or m is None:
        tail = [ln for ln in log.decode(errors="replace").splitlines() if ln.strip()][-12:]
        escape = "\n".join(tail)
    c = COMPARED.search(log)
    note = f"{int(c.group(1)):,} compared with the oracle" if c else ""
    return Result(name, int(m.group(1)) if m else 0, seconds, p.returncode, escape, note)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000, help="inputs per target")
    ap.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="targets run at the same time")
    ap.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed")
    ap.add_argument("--max-len", type=int, default=4096, help="longest input in bytes")
    ap.add_argument("--out", type=Path, default=ROOT / "var" / "fuzz", help="logs and escaping inputs")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args(argv)
    if a.one:
        _one(a.one, [x for x in rest if x != "--"])
        return 0
    from tests.fuzz.targets import CANARY, TARGETS

    names = [t for t in a.targets.split(",") if t] or list(TARGETS)
    unknown = sorted(set(names) - set(TARGETS) - {CANARY.name})
    if unknown:
        print(f"fuzz: unknown target(s) {', '.join(unknown)}; known: {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(lambda n: _run_target(n, a.runs, a.seed, a.out, a.max_len), names))
    total = 0
    failed = 0
    for r in results:
        total += r.runs
        ok = r.rc == 0 and r.runs == a.runs and not r.escape
        failed += not ok
        rate = r.runs / r.seconds if r.seconds else 0.0
        print(f"{r.target:13} {r.runs:>11,} inputs {r.seconds:8.1f} s {rate:9,.0f}/s  {'ok' if ok else 'ESCAPE'}  {r.note}")
        if not ok:
            print("    " + r.escape.replace("\n", "\n    "))
    print(f"fuzz: {len(results)} targets, {total:,} inputs, {failed} with an escape (logs in {a.out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

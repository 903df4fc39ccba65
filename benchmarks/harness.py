"""Measuring helpers: repeated runs, medians with min and max, and the report files.

Figures are medians of several runs; comparisons are ratios measured in the
same run. No figure here is ever asserted by a test: machines are shared and
noisy, so the tests only check that the benchmark code computes correct
results at tiny sizes.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figure:
    group: str
    name: str
    median: float
    low: float
    high: float
    unit: str
    conditions: str
    runs: int
    command: str = "make bench"
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> str:
        def fmt(x: float) -> str:
            if abs(x) >= 100:
                return f"{x:,.0f}"
            if abs(x) >= 1:
                return f"{x:,.2f}"
            return f"{x:.4g}"

        spread = f"{fmt(self.low)} – {fmt(self.high)}" if self.runs > 1 else "single run"
        labels = {
            "rows_per_record": ("database rows written per record", "{:.2f}"),
            "db_share": ("share of worker time outside the fold (database work it waited for)", "{:.0%}"),
            "vs_core": ("vs core ceiling", "{:.2f}x"),
            "ratio": ("oracle vs this baseline", "{:.1f}x"),
            "columns_ratio": ("vs the canonical layout as columns, same run", "{:.2f}x"),
            "p95": ("p95", "{:.0f} ms"),
            "p99": ("p99", "{:.0f} ms"),
            "worker_rps": ("worker caught up at", "{:,.0f} records/s"),
            "relay_rps": ("relay at", "{:,.0f} records/s"),
            "worker_ms": ("of which the worker process", "{:.1f} ms"),
        }
        more = "".join(
            f"; {labels[k][0]} {labels[k][1].format(v)}" for k, v in self.extra.items() if k in labels
        )
        return (
            f"| {self.group} | {self.name} | {fmt(self.median)} | {self.unit} | {spread} |"
            f" {self.conditions}{more} | `{self.command}` |"
        )


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def repeat(fn: Callable[[], float], runs: int) -> list[float]:
    """Call ``fn`` (which returns one measurement) ``runs`` times."""
    return [fn() for _ in range(runs)]


def figure(
    group: str, name: str, samples: Sequence[float], unit: str, conditions: str, **extra: Any
) -> Figure:
    return Figure(
        group, name, statistics.median(samples), min(samples), max(samples), unit, conditions,
        len(samples), extra=extra,
    )


REFERENCE_ITERATIONS = 2_000_000
"""Iterations of the reference loop that ``machine`` times (about 0.1 s a timing on 2026's machines)."""
REFERENCE_RUNS = 3
"""Timings of the reference loop; their median is the machine speed."""


def reference_loop_ns(runs: int = REFERENCE_RUNS) -> float:
    """Nanoseconds per iteration of a plain Python loop: the median of ``runs`` timings.

    Every figure of a run is interpreted Python at heart, so this one number says how fast
    the machine ran Python at the time: two runs' absolute figures compare through it, which
    the machine's name and CPU count alone do not tell (shared hosts differ and vary).
    """
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        total = 0
        for i in range(REFERENCE_ITERATIONS):
            total += i
        samples.append((time.perf_counter() - t0) * 1e9 / REFERENCE_ITERATIONS)
    return statistics.median(samples)


def cpu_model() -> str | None:
    """The CPU's model name as /proc/cpuinfo gives it; None where there is no such file."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name" and value.strip():
            return value.strip()
    return None


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "reference_loop_ns": reference_loop_ns(),
    }


def _where(update: Mapping[str, Any], m: Mapping[str, Any]) -> str:
    """Where a later or earlier run measured, as far as it was recorded (older records say nothing)."""
    platform_then = update.get("platform")
    if platform_then is None:
        return ""
    return " on the same machine" if platform_then == m["platform"] else f" on {platform_then}"


def _speed(update: Mapping[str, Any]) -> str:
    """A later or earlier run's machine speed, where it was recorded."""
    ns = update.get("reference_loop_ns")
    return "" if ns is None else f"; machine speed then {ns:.1f} ns per loop iteration"


def machine_line(m: Mapping[str, Any]) -> str:
    """The report's line about the machine; runs recorded before the reference loop lack it."""
    cpu = f" ({m['cpu_model']})" if m.get("cpu_model") else ""
    line = f"on {m['platform']}, Python {m['python']}, {m['cpus']} CPUs{cpu}."
    if m.get("reference_loop_ns") is not None:
        line += (
            f" Machine speed: {m['reference_loop_ns']:.1f} ns per iteration of a plain Python loop"
            f" (`total += i`, median of {REFERENCE_RUNS}); absolute figures of two runs compare through it."
        )
    return line


def write_report(
    figures: Sequence[Figure],
    md_path: Path,
    json_path: Path,
    started: str,
    updates: Sequence[Mapping[str, Any]] = (),
    measured_on: Mapping[str, Any] | None = None,
) -> None:
    """Write both report files; ``updates`` name the groups that a later partial run replaced.

    ``measured_on`` is the machine of the figures when it is not this one (a re-render).
    """
    from benchmarks import targets  # it reads Figure from here

    md_path.parent.mkdir(parents=True, exist_ok=True)
    m = dict(measured_on) if measured_on is not None else machine()
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (equivalently `amends bench`); do not edit by hand.",
        f"Run started {started} {machine_line(m)}",
    ]
    lines += [
        f"Group{'s' if len(u['groups']) > 1 else ''} {', '.join(repr(g) for g in u['groups'])}:"
        f" from {'an earlier' if u.get('earlier') else 'a later'} run started {u['started']}{_where(u, m)}"
        f" (`{u['command']}`{_speed(u)})."
        for u in updates
    ]
    lines += [
        "Each figure is the median of several runs (range = min – max); ratios compare",
        "measurements taken in the same run. Machines are shared and noisy: read ratios",
        "before absolute numbers. Sizes are parameters (`amends bench --help`).",
        "",
        *targets.section(figures),
        "| group | figure | median | unit | range | conditions | command |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f.row() for f in figures]
    notes = [f for f in figures if f.extra.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{f.name}**: {f.extra['note']}" for f in notes]
    md_path.write_text("\n".join(lines) + "\n")
    doc: dict[str, Any] = {"started": started, "machine": m}
    if updates:
        doc["updates"] = [dict(u) for u in updates]
    doc["figures"] = [asdict(f) for f in figures]
    json_path.write_text(json.dumps(doc, indent=2) + "\n")


def rewrite_markdown(json_path: Path, md_path: Path) -> None:
    """Re-render the markdown report from its JSON twin (no measurement)."""
    doc = json.loads(json_path.read_text())
    figs = [Figure(**f) for f in doc["figures"]]
    write_report(figs, md_path, json_path, doc["started"], doc.get("updates", ()), doc["machine"])


def merge_report(
    json_path: Path, figures: Sequence[Figure], started: str, command: str
) -> tuple[list[Figure], str, list[dict[str, Any]], dict[str, Any]]:
    """An existing report with the groups of ``figures`` replaced by them, everything else kept.

    Returns (figures, started, updates, machine) for ``write_report``: the new
    figures take the place of the first figure of their groups (the end when the
    report had none), the report keeps its own start time and the machine its
    run recorded, and ``updates`` records when and how the replaced groups were
    measured, with the machine speed at that time.
    """
    doc = json.loads(json_path.read_text())
    groups = list(dict.fromkeys(f.group for f in figures))
    merged: list[Figure] = []
    placed = False
    for old in (Figure(**f) for f in doc["figures"]):
        if old.group not in groups:
            merged.append(old)
        elif not placed:
            merged += figures
            placed = True
    if not placed:
        merged += figures
    # An earlier partial run keeps only the groups this one does not measure again.
    updates = [
        {**u, "groups": kept}
        for u in doc.get("updates", [])
        if (kept := [g for g in u["groups"] if g not in groups])
    ]
    now = machine()
    updates.append(
        {
            "started": started, "groups": groups, "command": command,
            "platform": now["platform"], "reference_loop_ns": now["reference_loop_ns"],
        }
    )
    return merged, doc["started"], updates, doc["machine"]


def carried_over(json_path: Path, groups: Sequence[str]) -> tuple[list[Figure], list[dict[str, Any]]]:
    """The figures of ``groups`` in an existing report and when and how they were measured.

    A default run measures no opt-in suite: it keeps their figures from the
    report it replaces instead of dropping them. Returns (figures, updates)
    for ``write_report``; nothing when the report has none of them.
    """
    doc = json.loads(json_path.read_text())
    kept = [Figure(**f) for f in doc["figures"] if f["group"] in groups]
    if not kept:
        return [], []
    found = list(dict.fromkeys(f.group for f in kept))
    measured = [u for u in doc.get("updates", []) if set(u["groups"]) & set(found)]
    covered = {g for u in measured for g in u["groups"]}
    rest = [g for g in found if g not in covered]
    if rest:  # measured by the report's own run
        measured.append({"started": doc["started"], "groups": rest, "command": "amends bench"})
    return kept, [{**u, "groups": [g for g in u["groups"] if g in found], "earlier": True} for u in measured]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Units per second of the CPU times in ``/proc/stat`` and ``/proc/<pid>/stat``."""


def proc_text(pid: int, name: str) -> str | None:
    """``/proc/<pid>/<name>``, or None when the process is gone (or this is not Linux)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return None


def process_name(pid: int) -> str | None:
    """The command name the kernel keeps for a process (``comm``), or None when it is gone."""
    comm = proc_text(pid, "comm")
    return None if comm is None else comm.strip()


def pids_named(name: str) -> list[int]:
    """Process IDs whose command name is ``name`` (every PostgreSQL process: ``postgres``)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(e) for e in entries if e.isdigit() and process_name(int(e)) == name]


def process_cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of a process and all its threads, or None when it is gone.

    The one per-process CPU reading of every benchmark: the kernel's
    accounting in ticks (``CLOCK_TICKS`` per second), whole process.
    """
    stat = proc_text(pid, "stat")
    if stat is None:
        return None
    f = stat.rsplit(")", 1)[1].split()  # fields from the state on: utime and stime are 11, 12
    return (int(f[11]) + int(f[12])) / CLOCK_TICKS


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has been busy since boot, or None off Linux.

    The one definition of "busy" of every benchmark: user, nice, system,
    interrupts and soft interrupts. Idle, waiting for I/O and stolen time
    (a hypervisor running someone else) are not busy: the machine did not
    work for anyone here in them.
    """
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        t = [int(x) for x in first[1:8]]  # user nice system idle iowait irq softirq
    except (OSError, ValueError):
        return None
    return (t[0] + t[1] + t[2] + t[5] + t[6]) / CLOCK_TICKS


class RoleProcesses:
    """The three long-running roles (``amends role worker|relay|view``) as processes of a
    benchmark, stderr to one log file each."""

    def __init__(
        self, env: dict[str, str], cfg: Path, tmp: Path, batch: int | None, partitions: int | None = None
    ) -> None:
        """``batch``: ``--batch-size`` of every role; None runs them with their own default.

        ``partitions``: one process of each role per partition (``--partition P``), named
        ``role/P``; None: one process of each role serving every partition, named ``role``.
        """
        amends = str(Path(sys.executable).with_name("amends"))
        size = [] if batch is None else ["--batch-size", str(batch)]
        which: dict[str, list[str]] = {}
        for r in ("worker", "relay", "view"):
            if partitions is None:
                which[r] = []
            else:
                which.update({f"{r}/{p}": ["--partition", str(p)] for p in range(partitions)})
        self.logs = {name: tmp / f"{name.replace('/', '-')}.log" for name in which}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        for name, path in self.logs.items():
            with open(path, "wb") as err:
                self.procs[name] = subprocess.Popen(
                    [amends, "role", self.role(name), "--config", str(cfg), "--quiet", *size, *which[name]],
                    env=env, stdout=subprocess.DEVNULL, stderr=err,
                )

    @staticmethod
    def role(name: str) -> str:
        """The role a process of ``procs`` runs: ``worker`` for ``worker`` and ``worker/1``."""
        return name.split("/", 1)[0]

    def pids(self, role: str) -> list[int]:
        """Process IDs of every process running ``role``."""
        return [p.pid for name, p in self.procs.items() if self.role(name) == role]

    def check(self) -> None:
        """RuntimeError naming the role and its last log lines if one has exited."""
        for r, p in self.procs.items():
            if p.poll() is not None:
                tail = self.logs[r].read_text(errors="replace")[-800:]
                msg = f"the {r} role exited with {p.returncode} during the benchmark: {tail}"
                raise RuntimeError(msg)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


_TREE_GUARD = """import pathlib as _p
import amends_core as _c, benchmarks as _b
_root = _p.Path({tree!r}).resolve()
for _m in (_c, _b):
    if _root not in _p.Path(_m.__file__).resolve().parents:
        raise SystemExit(f"{{_m.__name__}} is imported from {{_m.__file__}}, not from {{_root}}")
"""


def run_in_tree(tree: Path, code: str, what: str) -> str:
    """Standard output of ``code`` run by a fresh interpreter on ``tree``'s own code.

    Refuses to run when that interpreter imports amends_core or benchmarks from
    anywhere else (an installed copy would stand in for a checkout without
    them). Raises RuntimeError naming ``what`` on any failure.
    """
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _TREE_GUARD.format(tree=str(tree)) + code],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        msg = f"{what} in {tree} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        raise RuntimeError(msg)
    return done.stdout


def baseline_tree(root: Path, ref: str) -> Path:
    """A checkout of ``root``'s commit ``ref`` under ``root``/var/bench-baseline/, made once.

    Raises RuntimeError when ``root`` is not a git repository or ``ref`` names
    no commit in it. The checkout shares ``root``'s objects (``git clone
    --shared``) and is reused by later runs; delete the folder to drop it.
    """

    def git(*args: str, cwd: Path = root) -> str:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            msg = f"git {' '.join(args)} in {cwd} failed: {done.stderr.strip()}"
            raise RuntimeError(msg)
        return done.stdout.strip()

    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except RuntimeError as e:
        msg = f"{ref!r} names no commit of the repository at {root}"
        raise RuntimeError(msg) from e
    tree = root / "var" / "bench-baseline" / sha[:12]
    if not (tree / ".git").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        git("clone", "--quiet", "--shared", "--no-checkout", str(root), str(tree))
        git("checkout", "--quiet", "--detach", sha, cwd=tree)
    elif git("rev-parse", "HEAD", cwd=tree) != sha:
        msg = f"{tree} is not a checkout of {sha}; delete it and run again"
        raise RuntimeError(msg)
    return tree


def in_tree_env(tree: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for child processes (``amends role ...``) that must run ``tree``'s own code.

    Checked once: RuntimeError when an interpreter started with it imports
    amends_core or amends_pipeline from anywhere else.
    """
    out = {**env, "PYTHONPATH": str(tree)}
    code = (
        "import pathlib, amends_core, amends_pipeline\n"
        f"root = pathlib.Path({str(tree)!r}).resolve()\n"
        "bad = [m.__file__ for m in (amends_core, amends_pipeline)"
        " if root not in pathlib.Path(m.__file__).resolve().parents]\n"
        "raise SystemExit(f'imported from {bad}' if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=out, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"processes on {tree} would not run its code: {(done.stdout + done.stderr).strip()[-500:]}"
        raise RuntimeError(msg)
    return out

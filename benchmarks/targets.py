"""The throughput targets (issue 16) beside this run's figures: now, before, when filed, goal.

``section`` renders the table at the top of docs/benchmarks.md from the
figures of the run (or of a merged report), so the targets are read off the
same numbers as the rows below them. "before" is the same figure measured on
the baseline checkout in the same run (``--baseline-checkout`` or
``--baseline-ref``; ``make bench`` passes the commit before issue 16); "when
filed" is what the issue said when it was written, from an older run on the
same kind of machine. A target whose figure this run did not measure says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.harness import Figure

SPREAD = 2
"""Source partitions of the end-to-end benchmark's partitioned bulk (``e2e_bench.SPREAD``)."""

Find = Callable[[str, str], Figure | None]


def finder(figures: Sequence[Figure]) -> Find:
    """Looks a figure up by group and name; a name ending in "(" matches any baseline label."""

    def find(group: str, name: str) -> Figure | None:
        for f in figures:
            if f.group == group and (f.name == name or (name.endswith("(") and f.name.startswith(name))):
                return f
        return None

    return find


def _n(x: float, unit: str) -> str:
    if unit == "x":
        return f"{x:.2f}x"
    if unit == "ms":
        return f"{x:.1f} ms"
    return f"{x:,.0f} {unit}"


@dataclass(frozen=True)
class Target:
    item: str
    group: str
    now: str
    unit: str
    filed: str
    goal: str
    before: str | None = None
    before_extra: str | None = None
    """Take "before" from this extra key of the ``before`` figure instead of its median."""
    at_least: float | None = None
    at_most: float | None = None
    judge: Callable[[Find], str] | None = None
    """More of the verdict (after the goal check, when there is one), read from other figures."""

    def row(self, find: Find) -> str:
        now = find(self.group, self.now)
        before = self._before(find)
        if now is None:
            return f"| {self.item} | not measured in this run | {before} | {self.filed} | {self.goal} | |"
        verdicts = []
        if self.at_least is not None:
            verdicts.append("met" if now.median >= self.at_least else "not met")
        elif self.at_most is not None:
            verdicts.append("met" if now.median <= self.at_most else "not met")
        if self.judge is not None:
            verdicts.append(self.judge(find))
        met = "; ".join(v for v in verdicts if v)
        return (
            f"| {self.item} | {_n(now.median, self.unit)} | {before} | {self.filed} | {self.goal} | {met} |"
        )

    def _before(self, find: Find) -> str:
        if self.before is None:
            return "not measured"
        f = find(self.group, self.before)
        if f is None:
            return "no baseline in this run"
        value = f.extra.get(self.before_extra) if self.before_extra else f.median
        return "not measured" if value is None else _n(float(value), self.unit)


def _ratio_judge(group: str, top: str, bottom: str, say: Callable[[float], str]) -> Callable[[Find], str]:
    """A verdict on figure ``top`` over figure ``bottom`` (both of ``group``); empty if one is missing."""

    def judge(find: Find) -> str:
        a, b = find(group, top), find(group, bottom)
        return "" if a is None or b is None else say(a.median / b.median)

    return judge


def _live_state_bound(find: Find) -> str:
    """Bounded by the live state: a revision history 10x longer over the same live identities
    grows the worker's memory by at most a quarter more."""
    ratio = find("worker memory", "revision history 10x longer: RSS growth ratio")
    if ratio is None:
        return ""
    r = ratio.median
    return f"{'met' if r <= 1.25 else 'not met'}: 10x the revision history grows RSS {r:.2f}x"


def _kept_in_memory(find: Find) -> str:
    """How much the compact key states save against keeping every revision in memory."""
    now = find("worker memory", f"RSS growth, {_LIVE} live identities then {_REVISIONS[0]} records of revisions")
    full = find("worker memory", f"RSS growth, {_LIVE} live identities then {_REVISIONS[0]} records of revisions, "
                "every revision kept in memory")
    return "" if now is None or full is None else f"now / every revision kept {now.median / full.median:.2f}x"


_oracle_memory = _ratio_judge(
    "oracle memory", "peak RSS, oracle over 10,000,000 records", "peak RSS, oracle over 10,000,000 records (",
    lambda r: f"{'reduced' if r < 1 else 'not reduced'}: now / before {r:.2f}x",
)


_LIVE, _REVISIONS = "100,000", ("1,000,000", "10,000,000")
"""The sizes of the worker memory benchmark's revisions history (``amends bench`` defaults)."""


def _sim_doubled(find: Find) -> str:
    ratio = find("sim", "checked schedules, now / before (ci size)")
    if ratio is None:
        return ""
    return f"{'met' if ratio.median >= 2 else 'not met'}: now / before {ratio.median:.2f}x"


def _durable_ratio(find: Find) -> str:
    ratio = find("durable", "worker, batch 10,000, now / before")
    return "" if ratio is None else f"now / before {ratio.median:.2f}x"


def _cpus(find: Find) -> str:
    """Where the CPUs went with two workers: the reason two partitions scale as they do."""
    got = [find("durable", f"CPUs used by {who}, 2 partitions") for who in ("the worker processes", "PostgreSQL")]
    busy = find("durable", "CPUs busy on the machine, 2 partitions")
    if busy is None or None in got:
        return ""
    workers, pg = (f.median for f in got if f is not None)
    return f"with 2 workers: workers {workers:.2f}, PostgreSQL {pg:.2f}, whole machine {busy.median:.2f} CPUs busy"


def _bulk_cpu(find: Find) -> str:
    """What limits the bulk rate: the CPU the whole pipeline needs per record and the CPUs it kept busy."""
    ratio = find("end to end", "now / before, bulk records/s (real broker)")
    ceiling = find("end to end", "bulk ceiling with every CPU busy (real broker)")
    whole = find("end to end", "bulk CPU per 1,000 records: the whole pipeline (real broker)")
    busy = find("end to end", "bulk: CPUs busy, whole machine (real broker)")
    said = [] if ratio is None else [f"now / before {ratio.median:.2f}x"]
    if ceiling is not None and whole is not None and busy is not None:
        said.append(
            f"{whole.median:.0f} ms of CPU per 1,000 records over all processes: at most"
            f" {ceiling.median:,.0f} records/s with every CPU busy; {busy.median:.2f} CPUs were busy"
        )
    drained = find("end to end", "backlog drained through worker, relay and view (real broker)")
    if drained is not None:
        said.append(f"a backlog with no producer on the machine drained at {drained.median:,.0f} records/s")
    return "; ".join(said)


def _spread(find: Find) -> str:
    """How the spread bulk compares with one partition and what limits it."""
    said = []
    ratio = find("end to end", f"{SPREAD} partitions / 1 partition, bulk records/s (real broker)")
    if ratio is not None:
        said.append(f"{ratio.median:.2f}x the single partition in the same runs")
    whole = find("end to end", f"bulk over {SPREAD} partitions CPU per 1,000 records: the whole pipeline (real broker)")
    busy = find("end to end", f"bulk over {SPREAD} partitions: CPUs busy, whole machine (real broker)")
    if whole is not None and busy is not None:
        said.append(f"{whole.median:.0f} ms of CPU per 1,000 records; {busy.median:.2f} CPUs were busy")
    return "; ".join(said)


TARGETS: tuple[Target, ...] = (
    Target("2. durable worker, batch 10,000, one partition", "durable", "worker, batch 10,000",
           "records/s", "about 9,900 records/s", ">= 20,000 records/s (aim 50,000)",
           before="worker, batch 10,000, before", at_least=20_000, judge=_durable_ratio),
    Target("3. all workers, 2 partitions / 1 partition", "durable", "2 partitions / 1 partition", "x",
           "not measured", "measured, scaling explained (2 CPUs, PostgreSQL on the same machine)",
           judge=_cpus),
    Target("4. oracle end to end, 1,000,000 records", "oracle memory", "end to end, 1,000,000 records, now",
           "records/s", "about 400,000 records/s", "toward 1,000,000 records/s",
           before="end to end, 1,000,000 records (", at_least=1_000_000),
    Target("4. oracle end to end, 10,000,000 records", "oracle", "end to end, 10,000,000 records",
           "records/s", "about 400,000 records/s", "toward 1,000,000 records/s", at_least=1_000_000),
    Target("4. oracle peak RSS, 10,000,000 records", "oracle memory",
           "peak RSS, oracle over 10,000,000 records", "MiB", "about 14 GB", "measured and reduced",
           before="peak RSS, oracle over 10,000,000 records (", judge=_oracle_memory),
    Target("5. end to end in bulk (real broker)", "end to end",
           "bulk records through worker, relay and view (real broker)", "records/s",
           "about 6,800 records/s", ">= 20,000 records/s",
           before="bulk records through worker, relay and view (real broker), before", at_least=20_000,
           judge=_bulk_cpu),
    Target(f"5. end to end in bulk, {SPREAD} source partitions (real broker)", "end to end",
           f"bulk records through worker, relay and view, {SPREAD} partitions (real broker)", "records/s",
           "not measured", ">= 20,000 records/s (one worker, relay and view process per partition)",
           at_least=20_000, judge=_spread),
    Target("5. correction visible in the view, p50 (real broker)", "end to end",
           "produce -> view visible, p50 (roles, real broker)", "ms", "72 ms", "< 25 ms",
           before="produce -> view visible, p50 (roles, real broker), before", at_most=25),
    Target("5. correction visible in the view, p99 (real broker)", "end to end",
           "produce -> view visible, p99 (roles, real broker)", "ms", "125 ms", "< 100 ms",
           before="produce -> view visible, p50 (roles, real broker), before", before_extra="p99",
           at_most=100),
    Target("6. worker RSS growth, 100,000 keys", "worker memory", "RSS growth, 100,000 keys (100,000 records)",
           "MiB", "not measured", "measured"),
    Target("6. worker RSS growth, 1,000,000 records of the 95/4/1 mix over 1,000 keys", "worker memory",
           "RSS growth, 1,000,000 records of history over 1,000 keys", "MiB", "not measured",
           "measured (95% of these records are new transactions: live state)"),
    Target(f"6. worker RSS growth, {_LIVE} live identities then {_REVISIONS[0]} records of revisions",
           "worker memory", f"RSS growth, {_LIVE} live identities then {_REVISIONS[0]} records of revisions",
           "MiB", "not measured", "bounded by the keys' live state, not the history",
           before=f"RSS growth, {_LIVE} live identities then {_REVISIONS[0]} records of revisions, "
           "every revision kept in memory", judge=_kept_in_memory),
    Target(f"6. worker RSS growth, {_LIVE} live identities then {_REVISIONS[1]} records of revisions",
           "worker memory", f"RSS growth, {_LIVE} live identities then {_REVISIONS[1]} records of revisions",
           "MiB", "not measured", "bounded by the keys' live state, not the history", judge=_live_state_bound),
    Target("7. simulator, checked schedules per minute (CI size)", "sim", "checked schedules (ci size)",
           "schedules/min", "per-step safety about 4x the cost", ">= 2x before",
           before="checked schedules, before (ci size)", judge=_sim_doubled),
)


def section(figures: Sequence[Figure]) -> list[str]:
    """Markdown lines of the targets table; empty when the run measured none of its figures."""
    find = finder(figures)
    if not any(find(t.group, t.now) is not None for t in TARGETS):
        return []
    return [
        "## Throughput targets (issue 16)",
        "",
        "Each target's figure from the table below, beside the same figure of the baseline checkout",
        "measured in the same run (before), the value the issue was filed with, and the goal. The",
        "per-stage profile of the durable worker is the 'durable profile' group.",
        "",
        "| target | now | before (same run) | when filed | goal | verdict |",
        "|---|---|---|---|---|---|",
        *(t.row(find) for t in TARGETS),
        "",
    ]

"""Oracle throughput: decode and compute records/s, against a pure-Python full recompute.

Generates N raw source records (many keys on several partitions; mostly new
movements, with amendments that move quantities and days, cancellations,
re-deliveries, a few same-revision rivals, malformed values and a share of
non-canonical JSON layouts), then measures in the same run:

The oracle's input is what verification hands it: each partition's offsets,
keys and values as columns (``oracle.Columns``, read straight from Kafka
messages), built from the generated records before timing. The same records
as ``Record`` values (the oracle's other input form) are timed too.

* decode:  coordinates checked, every value and transport key decoded and
           every record classified (``oracle.compute.classify``);
* compute: rejections, authority, conflicts, Int128 daily sums, closes and
           crossings (``oracle.compute.derive``);
* oracle:  ``oracle.compute`` end to end, over columns and over records;
* naive:   a straightforward pure-Python recompute (``fold.validate`` per
           record, dictionaries, sorting, a running sum), checked to give the
           same result as the oracle.

* peak RSS: ``oracle.compute`` over the largest size in a fresh child process
           (``run_in_tree``) that generates the history, notes its resident
           set, restarts its high-water mark (Linux ``clear_refs``), runs the
           oracle once and reports the peak since (input included); with a
           baseline checkout the same child runs that checkout's code too,
           and end to end records/s at the smallest size are compared there.

    python -m benchmarks.oracle_bench --sizes 1000000 --runs 3
    python -m benchmarks.oracle_bench --sizes 10000000 --runs 1 --naive-max 1000000
    python -m benchmarks.oracle_bench --sizes 1000000 --runs 3 --rss-records 10000000 \\
        --baseline-checkout /tmp/f6860fe
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amends_core import fold, timefmt
from amends_core.ledger import (
    AlertRow,
    BalanceRow,
    Config,
    Conflict,
    ConflictRef,
    Coordinates,
    KeyConfig,
    Projection,
    Record,
    Rejection,
    RejectReason,
    Status,
    StockKey,
    Transaction,
)
from amends_core.oracle import Columns
from amends_core.oracle import compute as oracle_compute
from amends_core.oracle.compute import classify, derive
from amends_core.oracle.decode import gc_paused
from amends_core.oracle.source import gather
from amends_core.result import ComputeResult, RejectionRef
from benchmarks.harness import Figure, figure, run_in_tree

ROOT = Path(__file__).resolve().parents[1]

SOURCE = "bench-oracle-v1"
ORIGIN = timefmt.parse_rfc3339("2025-01-01T00:00:00Z")
NS_PER_HOUR = 3600 * timefmt.NS_PER_SECOND


def bench_config(keys: int, partitions: int) -> Config:
    return Config(
        1,
        "bench-oracle",
        SOURCE,
        partitions,
        ORIGIN,
        tuple(
            KeyConfig(StockKey(f"ITEM-{i:05d}", f"DC-{i % 7}"), 5_000, 1_000, i % partitions)
            for i in range(keys)
        ),
    ).validate()


_DAY_TEXT: dict[int, str] = {}


def _instant_text(ns: int) -> str:
    """``format_instant`` for whole seconds, with the day's text cached."""
    day, rem = divmod(ns, timefmt.NS_PER_DAY)
    text = _DAY_TEXT.get(day)
    if text is None:
        text = _DAY_TEXT[day] = timefmt.format_day(day)
    secs = rem // timefmt.NS_PER_SECOND
    return f"{text}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}Z"


def _value(txn_id: str, rev: int, kind: str, key: StockKey, valid_ns: int, qty: int, spaced: bool) -> bytes:
    """Source bytes; identifiers are plain ASCII, so no JSON escaping is needed."""
    valid, source = _instant_text(valid_ns), _instant_text(valid_ns + NS_PER_HOUR)
    if spaced:  # another producer's layout: spaces, other member order
        return (
            f'{{"source_time": "{source}", "qty": {qty}, "valid_time": "{valid}", '
            f'"stock_key": {{"location": "{key.location}", "item": "{key.item}"}}, '
            f'"kind": "{kind}", "revision": {rev}, "txn_id": "{txn_id}"}}'
        ).encode()
    return (
        f'{{"txn_id":"{txn_id}","revision":{rev},"kind":"{kind}",'
        f'"stock_key":{{"item":"{key.item}","location":"{key.location}"}},'
        f'"valid_time":"{valid}","qty":{qty},"source_time":"{source}"}}'
    ).encode()


def generate(
    n: int, keys: int = 1_000, partitions: int = 4, days: int = 365, seed: int = 1
) -> tuple[Config, dict[int, list[Record]]]:
    """A deterministic history of ``n`` raw records."""
    rng = random.Random(seed)
    cfg = bench_config(keys, partitions)
    kcs = cfg.keys
    tkeys = {kc.key: kc.key.transport_key() for kc in kcs}
    by_partition: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    # live identities: [txn_id, revision, key index, valid_ns, qty]
    live: list[list[Any]] = []
    rivals = 0
    for j in range(n):
        roll = rng.random()
        spaced = rng.random() < 0.05
        if roll < 0.10 and live:  # amendment, sometimes moving the day
            ident = live[rng.randrange(len(live))]
            ident[1] += 1
            if rng.random() < 0.3:
                ident[3] = ORIGIN + rng.randrange(days * 86_400) * timefmt.NS_PER_SECOND
            ident[4] = rng.randint(-60, 40)
            kind, qty = "AMEND", ident[4]
        elif roll < 0.13 and live:  # cancellation
            ident = live[rng.randrange(len(live))]
            ident[1] += 1
            kind, qty = "CANCEL", 0
        elif roll < 0.145 and by_partition[0] and live:  # re-delivery of an earlier record
            p = rng.randrange(partitions)
            if by_partition[p]:
                old = by_partition[p][rng.randrange(len(by_partition[p]))]
                off = len(by_partition[p])
                by_partition[p].append(Record(old.value, old.key, Coordinates(SOURCE, p, off)))
                continue
            ident = live[-1]
            kind, qty = "NEW", ident[4]
        elif roll < 0.15:  # malformed
            kc = kcs[rng.randrange(len(kcs))]
            p = kc.partition
            raw = _value(f"M{j}", 1, "NEW", kc.key, ORIGIN, 1, False)[: rng.randrange(10, 60)]
            off = len(by_partition[p])
            by_partition[p].append(Record(raw, tkeys[kc.key], Coordinates(SOURCE, p, off)))
            continue
        else:
            valid = ORIGIN + rng.randrange(days * 86_400) * timefmt.NS_PER_SECOND
            ident = [f"T{j}", 1, rng.randrange(len(kcs)), valid, rng.randint(-60, 40)]
            live.append(ident)
            kind, qty = "NEW", ident[4]
        kc = kcs[ident[2]]
        p = kc.partition
        copies = [qty]
        if rivals < 25 and rng.random() < 0.0005:  # a same-revision rival: the key blocks
            rivals += 1
            copies.append(qty + 1)
        for q in copies:
            raw = _value(ident[0], ident[1], kind, kc.key, ident[3], q, spaced)
            off = len(by_partition[p])
            by_partition[p].append(Record(raw, tkeys[kc.key], Coordinates(SOURCE, p, off)))
    return cfg, by_partition


def as_columns(
    by_partition: dict[int, list[Record]], layout: Callable[[bytes], bytes] | None = None
) -> dict[int, Columns]:
    """The records as the columns verification reads from Kafka (offsets, keys, values, flags);
    ``layout`` rewrites every value first."""
    return {
        p: Columns.of(
            [r.coords.offset for r in recs], [r.key for r in recs],
            [r.value for r in recs] if layout is None else [layout(r.value) for r in recs],
            [r.reserved_header for r in recs],
        )
        for p, recs in by_partition.items()
    }


def other_producer(value: bytes) -> bytes:
    """The same document as another producer might write it: members in reverse order,
    a space after every colon and comma (values that are not a JSON object stay as they are)."""
    try:
        doc = json.loads(value)
    except ValueError:
        return value
    if not isinstance(doc, dict):
        return value
    return json.dumps(dict(reversed(doc.items())), separators=(", ", ": "), ensure_ascii=False).encode()


def lenient_validate(cfg: Config, r: Record) -> Transaction | Rejection:
    """Plain ``json.loads`` and the business rules, without the strict shape checks.

    Not a correct decoder (duplicates, floats, unknown members pass); it only
    shows what the simplest per-record Python route costs.
    """

    def reject(reason: RejectReason) -> Rejection:
        return Rejection(r, reason)

    try:
        d = json.loads(r.value)
        sk = d["stock_key"]
        t = Transaction(
            d["txn_id"],
            d["revision"],
            d["kind"],
            StockKey(sk["item"], sk["location"]),
            timefmt.parse_rfc3339(d["valid_time"]),
            d["qty"],
            timefmt.parse_rfc3339(d["source_time"]),
        )
    except (ValueError, KeyError, TypeError):
        return reject(RejectReason.MALFORMED)
    if not t.txn_id or not t.stock_key.item or not t.stock_key.location:
        return reject(RejectReason.IDENTITY)
    if t.revision < 1:
        return reject(RejectReason.REVISION)
    if t.kind not in ("NEW", "AMEND", "CANCEL"):
        return reject(RejectReason.KIND)
    if t.kind == "CANCEL" and t.qty != 0:
        return reject(RejectReason.CANCEL_QUANTITY)
    if not timefmt.day_in_range(t.day) or t.valid_ns < cfg.origin_ns:
        return reject(RejectReason.VALID_TIME)
    kc = cfg.key_config(t.stock_key)
    if kc is None:
        return reject(RejectReason.UNKNOWN_KEY)
    try:
        tk = json.loads(r.key) if r.key is not None else None
    except ValueError:
        tk = None
    if tk != [t.stock_key.item, t.stock_key.location]:
        return reject(RejectReason.KEY_MISMATCH)
    if r.coords.partition != kc.partition:
        return reject(RejectReason.ROUTING)
    return t


def naive_recompute(
    cfg: Config,
    by_partition: dict[int, list[Record]],
    validate: Callable[[Config, Record], Transaction | Rejection] = fold.validate,
) -> ComputeResult:
    """The straightforward way: validate each record, then dictionaries and a running sum."""
    rejections: list[Rejection] = []
    # (key, txn_id) -> revision -> set of canonical tuples
    evidence: dict[tuple[StockKey, str], dict[int, set[tuple[Any, ...]]]] = {}
    for p in sorted(by_partition):
        for r in by_partition[p]:
            v = validate(cfg, r)
            if isinstance(v, Rejection):
                rejections.append(v)
                continue
            revs = evidence.setdefault((v.stock_key, v.txn_id), {})
            revs.setdefault(v.revision, set()).add(v.canonical)
    conflicts: list[Conflict] = []
    blocked: dict[StockKey, list[ConflictRef]] = {}
    daily: dict[StockKey, dict[int, int]] = {}
    for (key, tid), revs in evidence.items():
        for rev, cands in revs.items():
            if len(cands) > 1:
                conflicts.append(Conflict(key, tid, rev))
        top = max(revs)
        if len(revs[top]) > 1:
            blocked.setdefault(key, []).append(ConflictRef(tid, top))
            continue
        (_, _, kind, valid_ns, qty) = next(iter(revs[top]))
        if kind != "CANCEL":
            days = daily.setdefault(key, {})
            d = valid_ns // timefmt.NS_PER_DAY
            days[d] = days.get(d, 0) + qty
    projections: dict[StockKey, Projection] = {}
    touched = {key for key, _ in evidence}
    for key in touched:
        if key in blocked:
            projections[key] = Projection(key, Status.BLOCKED, tuple(sorted(blocked[key])), (), ())
            continue
        kc = cfg.key_config(key)
        assert kc is not None
        before = kc.opening_balance
        balances, alerts = [], []
        for d, total in sorted(daily.get(key, {}).items()):
            close = before + total
            balances.append(BalanceRow(d, close))
            if before >= kc.reorder_threshold > close:
                alerts.append(AlertRow(d, kc.reorder_threshold, close))
            before = close
        projections[key] = Projection(key, Status.READY, (), tuple(balances), tuple(alerts))
    refs = [RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason) for r in rejections]
    return ComputeResult.build(cfg, projections, refs, conflicts)


def _time(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


REORDERED_MAX = 1_000_000
"""Largest size at which another producer's layout is timed too."""


def measure(size: int, runs: int, naive: bool) -> dict[str, Any]:
    cfg, by_partition = generate(size)
    columns = as_columns(by_partition)
    n = sum(len(recs) for recs in by_partition.values())  # rivals add a few records
    decode_s, compute_s, total_s, records_s = [], [], [], []
    result = None
    for _ in range(runs):
        gc.collect()
        with gc_paused():
            t0 = time.perf_counter()
            src = gather(cfg, columns)
            frame = classify(cfg, src)
            t1 = time.perf_counter()
            out = derive(cfg, src, frame)
            td, tc = t1 - t0, time.perf_counter() - t1
        del frame, src
        gc.collect()
        tt, result = _time(lambda: oracle_compute(cfg, columns))
        assert out == result
        gc.collect()
        tr, from_records = _time(lambda: oracle_compute(cfg, by_partition))
        assert from_records == result, "the oracle over records and over columns disagree"
        decode_s.append(td)
        compute_s.append(tc)
        total_s.append(tt)
        records_s.append(tr)
    reordered_s = []
    if size <= REORDERED_MAX and result is not None:
        columns = as_columns(by_partition, other_producer)
        for _ in range(runs):
            gc.collect()
            tl, reordered = _time(lambda: oracle_compute(cfg, columns))
            assert reordered.result == result.result, "another member order changed the oracle's result"
            reordered_s.append(tl)
    row: dict[str, Any] = {
        "records": n,
        "decode_rps": [n / t for t in decode_s],
        "compute_rps": [n / t for t in compute_s],
        "oracle_rps": [n / t for t in total_s],
        "records_rps": [n / t for t in records_s],
        "reordered_rps": [n / t for t in reordered_s],
        "rejections": len(result.rejections) if result else 0,
        "conflicts": len(result.conflicts) if result else 0,
        "blocked_keys": len(result.blocked) if result else 0,
    }
    if naive:
        gc.collect()
        tn, expected = _time(lambda: naive_recompute(cfg, by_partition))
        assert result is not None and expected == result.result, "naive and oracle disagree"
        row["naive_rps"] = [n / tn]
        gc.collect()
        tl, lenient = _time(lambda: naive_recompute(cfg, by_partition, lenient_validate))
        assert lenient == result.result, "lenient naive and oracle disagree"
        row["lenient_rps"] = [n / tl]
    return row


_CHILD = """
import gc, json, resource, time
import amends_core.oracle as _oracle
import benchmarks.oracle_bench as _bench
cfg, by_partition = _bench.generate({records})
n = sum(len(recs) for recs in by_partition.values())
as_columns = getattr(_bench, "as_columns", None)  # checkouts before it take Record values only
if as_columns is not None:  # as verification reads Kafka; the records themselves are dropped
    by_partition = as_columns(by_partition)
form = "records" if as_columns is None else "columns"
gc.collect()
generated_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with open("/proc/self/statm") as f:
        input_kib = int(f.read().split()[1]) * (resource.getpagesize() // 1024)
except OSError:
    input_kib = generated_kib
def _hwm_kib():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
try:  # Linux: restart the high-water mark, so the peak below is the oracle's, not the generator's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = _hwm_kib() <= input_kib + 64 * 1024
except (OSError, StopIteration):
    reset = False
seconds, cpu = [], []
for _ in range({runs}):
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    _oracle.compute(cfg, by_partition)
    seconds.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
peak_kib = _hwm_kib() if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(records=n, seconds=seconds, cpu=cpu, input_kib=input_kib,
                      generated_kib=generated_kib, peak_kib=peak_kib, reset=reset, form=form)))
"""


def child_run(tree: Path, records: int, runs: int) -> dict[str, Any]:
    """``oracle.compute`` of ``tree``'s own code over ``records`` generated records, ``runs``
    times, in a fresh interpreter: wall and CPU seconds, resident set after generating the
    input (``input_kib``), peak before the oracle ran (``generated_kib``) and the peak while the
    oracle ran (``peak_kib``: on Linux the high-water mark restarted after generating, ``reset``
    true; elsewhere ``ru_maxrss`` of the whole process, which the generator's peak may hide)."""
    out = run_in_tree(tree, _CHILD.format(records=records, runs=runs), f"oracle over {records:,} records")
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return row


def _mib(kib: float) -> float:
    return kib / 1024


_FORMS = {
    "columns": "input as columns per partition (offsets, keys, values: as verification reads Kafka)",
    "records": "input as Record values (that checkout's only input form)",
}


def _form(row: dict[str, Any]) -> str:
    return _FORMS[row.get("form", "records")]


def memory_figures(records: int, baseline: Path | None) -> list[Figure]:
    """Peak RSS of one oracle run over ``records`` records, now and (optionally) at ``baseline``."""
    cond = f"{records:,} raw records generated in the same process, 1,000 keys, 4 partitions; child process"
    trees = [("now", ROOT)] + ([("baseline", baseline)] if baseline is not None else [])
    rows = {label: child_run(tree, records, 1) for label, tree in trees}
    figures = []
    for label, tree in trees:
        r = rows[label]
        name = f"peak RSS, oracle over {records:,} records" + ("" if label == "now" else f" ({tree})")
        note = (
            f"{_mib(r['input_kib']):,.0f} MiB resident after generating the input (peak"
            f" {_mib(r['generated_kib']):,.0f} MiB), {_mib(r['peak_kib']):,.0f} MiB peak"
            + (" while the oracle ran (high-water mark restarted after generating)" if r.get("reset")
               else " of the whole process (the generator's peak included)")
            + f": {_mib(r['peak_kib'] - r['input_kib']):,.0f} MiB above its input;"
            f" {r['seconds'][0]:.0f} s; {_form(r)}"
        )
        if label == "baseline":
            now = rows["now"]
            note += (
                f"; now/baseline: peak {now['peak_kib'] / r['peak_kib']:.2f},"
                f" above the input {(now['peak_kib'] - now['input_kib']) / (r['peak_kib'] - r['input_kib']):.2f}"
            )
        figures.append(
            figure("oracle memory", name, [_mib(r["peak_kib"])], "MiB", cond, note=note)
        )
    return figures


def before_after(records: int, runs: int, baseline: Path) -> list[Figure]:
    """End to end records/s of this checkout and of ``baseline``, each in its own child."""
    cond = f"{records:,} raw records, 1,000 keys, 4 partitions, 5% non-canonical layout; child process"
    now, old = child_run(ROOT, records, runs), child_run(baseline, records, runs)
    n = now["records"]
    ratio = statistics.median(old["seconds"]) / statistics.median(now["seconds"])
    cpu_ratio = statistics.median(old["cpu"]) / statistics.median(now["cpu"])
    note = (
        f"now/baseline {ratio:.2f} (wall), {cpu_ratio:.2f} (CPU seconds of the process:"
        f" {statistics.median(now['cpu']):.2f} s now, {statistics.median(old['cpu']):.2f} s before)"
    )
    return [
        figure("oracle memory", f"end to end, {records:,} records, now", [n / t for t in now["seconds"]],
               "records/s", f"{cond}; {_form(now)}", note=note),
        figure("oracle memory", f"end to end, {records:,} records ({baseline})",
               [n / t for t in old["seconds"]], "records/s", f"{cond}; {_form(old)}"),
    ]


def run(
    sizes: Sequence[int] = (1_000_000,),
    runs: int = 3,
    naive_max: int = 1_000_000,
    rss_records: int | None = None,
    baseline: Path | None = None,
) -> list[Figure]:
    """Figures for ``benchmarks.run`` (groups ``oracle``, ``oracle memory``)."""
    figures: list[Figure] = []
    for n in sizes:
        row = measure(n, runs, naive=n <= naive_max)
        cond = f"{n:,} raw records, 1,000 keys, 4 partitions, 5% non-canonical layout"
        figures.append(
            figure("oracle", f"decode+classify, {n:,} records", row["decode_rps"], "records/s", cond)
        )
        figures.append(
            figure("oracle", f"authority+closes, {n:,} records", row["compute_rps"], "records/s", cond)
        )
        figures.append(
            figure("oracle", f"end to end, {n:,} records", row["oracle_rps"], "records/s", f"{cond}; {_FORMS['columns']}")
        )
        if row["reordered_rps"]:
            figures.append(
                figure(
                    "oracle", f"end to end, another producer's layout, {n:,} records", row["reordered_rps"],
                    "records/s",
                    f"{cond}; every value's members in reverse order with a space after each colon and comma,"
                    " as columns",
                    columns_ratio=statistics.median(row["reordered_rps"]) / statistics.median(row["oracle_rps"]),
                )
            )
        figures.append(
            figure(
                "oracle", f"end to end from Record values, {n:,} records", row["records_rps"], "records/s",
                f"{cond}; the same records as Record values (the oracle's other input form)",
                columns_ratio=statistics.median(row["records_rps"]) / statistics.median(row["oracle_rps"]),
            )
        )
        if "naive_rps" in row:
            figures.append(
                figure(
                    "oracle (naive baseline)",
                    f"pure-Python recompute, {n:,} records",
                    row["naive_rps"],
                    "records/s",
                    cond,
                    ratio=min(row["oracle_rps"]) / row["naive_rps"][0],
                )
            )
            figures.append(
                figure(
                    "oracle (naive baseline)",
                    f"plain json.loads recompute (not strict), {n:,} records",
                    row["lenient_rps"],
                    "records/s",
                    cond,
                    ratio=min(row["oracle_rps"]) / row["lenient_rps"][0],
                )
            )
    if rss_records is not None:
        figures += memory_figures(rss_records, baseline)
    if baseline is not None:
        figures += before_after(min(sizes), runs, baseline)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.oracle_bench", description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--naive-max", type=int, default=1_000_000, help="skip the baseline above this size")
    p.add_argument("--rss-records", type=int, default=None, help="peak RSS of one oracle run over N records")
    p.add_argument("--baseline-checkout", type=Path, default=None, help="compare with this checkout's oracle")
    a = p.parse_args(argv)
    if a.rss_records is not None or a.baseline_checkout is not None:
        extra = []
        if a.rss_records is not None:
            extra += memory_figures(a.rss_records, a.baseline_checkout)
        if a.baseline_checkout is not None:
            extra += before_after(min(a.sizes), a.runs, a.baseline_checkout)
        for f in extra:
            print(f.row())
            if f.extra.get("note"):
                print(f"  {f.extra['note']}")
        return 0
    for n in a.sizes:
        t0 = time.perf_counter()
        row = measure(n, a.runs, naive=n <= a.naive_max)

        def fmt(xs: list[float]) -> str:
            return f"{sorted(xs)[len(xs) // 2]:,.0f}/s (min {min(xs):,.0f}, max {max(xs):,.0f})"

        print(
            f"{n:,} records ({row['rejections']:,} rejected, {row['conflicts']} conflicts,"
            f" {row['blocked_keys']} blocked keys), {a.runs} runs:"
        )
        print(f"  decode+classify : {fmt(row['decode_rps'])}")
        print(f"  authority+closes: {fmt(row['compute_rps'])}")
        print(f"  oracle end to end: {fmt(row['oracle_rps'])}")
        print(f"  ... from Record values: {fmt(row['records_rps'])}")
        if row["reordered_rps"]:
            print(f"  ... another producer's layout: {fmt(row['reordered_rps'])}")
        if "naive_rps" in row:
            ratio = sorted(row["oracle_rps"])[len(row["oracle_rps"]) // 2] / row["naive_rps"][0]
            print(f"  naive, strict validate: {row['naive_rps'][0]:,.0f}/s -> oracle is {ratio:.1f}x")
            lenient_ratio = sorted(row["oracle_rps"])[len(row["oracle_rps"]) // 2] / row["lenient_rps"][0]
            print(
                f"  naive, plain json.loads: {row['lenient_rps'][0]:,.0f}/s -> oracle is {lenient_ratio:.1f}x"
            )
        print(f"  (wall time {time.perf_counter() - t0:.0f}s including generation)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

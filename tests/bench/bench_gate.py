"""Benchmark of the gate: decisions per second with 10,000 items waiting for 100 people, and ledger queries.

Run it from the repository root with the project's venv:

    /work/venv/bin/python tests/bench/bench_gate.py           # full run: 100 people, 10,000 waiting
    /work/venv/bin/python tests/bench/bench_gate.py --quick   # smoke run: 10 people, 1,000 waiting

It drives the real :class:`hive.sidecar.gate.engine.Gate` in this process on a real database (the
sidecar's own :class:`Store`: SQLite WAL, ``synchronous=FULL``) in a temporary folder under
/tmp, with a real config.toml, and removes the folder at the end. The gate's clock is a
variable the script moves, so every run decides the same way. Nothing is asserted on the
numbers: the machines that run this are small and noisy. Sections:

1. fill: 10,000 attention items offered (100 per person), all left waiting for a breakpoint.
2. decisions with 10,000 waiting: a mix of new attention items, duplicates, info items and a
   muted source, offered (a) in batches of 100 and of 1,000 (one commit each), (b) by 64 concurrent
   callers offering one item at a time (their commits shared), (c) by one caller, one item
   and one commit at a time (what a lone proposer pays: an fsync per decision); and (d) the
   decision procedure alone, in memory, without writing the ledger.
3. breakpoints: one per person, each delivering everything that waits for them.
4. wake-ups: the bound of every remaining wait passes; one wake decides them all.
5. ledger queries on the resulting ledger: the latest 500 rows, one person's rows, why for one
   item, one person's digest, the measures over everything (p50 and p99 of repeated calls).

Baselines, measured in the same run (before section 2 and again after it, the better of the two
kept, since a shared machine's load moves under a run): what this machine does per second of
(i) plain Python work of the size of one decision's bookkeeping (hash a key, encode a row as JSON,
a dict insert), and (ii) durable SQLite writes of the rows one decision writes (an item row and a
ledger row, 1,000 decisions per commit) through the same Store. The summary gives each figure
as a ratio to them, which holds still when the machine's load does not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from hive.sidecar.base.store import Store
from hive.sidecar.gate.engine import Evidence, Gate, Item
from hive.sidecar.gate.prefs import PrefsFile

SOURCES = ("overlap", "lesson", "review", "notify")
AIM = 10_000.0  # decisions per second, from issue 10
START = 1_772_438_400.0  # 2026-03-02 08:00 UTC: outside everyone's quiet hours


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def config(people: int) -> str:
    lines = [
        "[gate]",
        "window = 86400",
        "hold_attention = 3600",
        "budget = 1000",
        'timezone = "UTC"',
        'quiet = "22:00-07:00"',
        'live = ["overlap", "lesson", "review", "notify"]',
        'mute = ["mail"]',
        "",
        "[gate.shares]",
        "overlap = 0.3",
        "lesson = 0.3",
        "review = 0.3",
        "notify = 0.3",
        "",
    ]
    for n in range(0, people, 10):  # a tenth of the people have their own table, as people would
        lines += [f"[gate.people.p{n:03d}]", "budget = 900", 'timezone = "Europe/Berlin"', ""]
    return "\n".join(lines)


def item(person: int, n: int, kind: str, facts: int) -> Item:
    who = f"p{person:03d}"
    source = SOURCES[n % len(SOURCES)]
    if kind == "info":
        return Item(source=source, person=who, title=f"note {n} for {who}", key=f"info-{n}")
    if kind == "muted":
        return Item(
            source="mail",
            person=who,
            title=f"held mail {n}",
            key=f"mail-{n}",
            evidence=(Evidence("ci", f"repo{n % facts}@main"),),
        )
    return Item(
        source=source,
        person=who,
        title=f"{source} item {n} for {who}",
        key=f"{kind}-{n}",
        session=f"{who}/s{n % 3}",
        proposer=f"{who}/w{n % 5}",
        evidence=(Evidence("ci", f"repo{n % facts}@main"), Evidence("file", f"repo/src/f{n}.py")),
    )


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:>10,.0f}/s" if seconds > 0 else "       inf/s"


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def timed(calls: int, func: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await func()
        samples.append(time.perf_counter() - start)
    return percentiles(samples)


def python_baseline(count: int) -> float:
    """Decisions' worth of plain Python bookkeeping per second: no gate, no database."""
    seen: dict[str, tuple[str, ...]] = {}
    start = time.perf_counter()
    for n in range(count):
        key = hashlib.blake2b(f"overlap/p{n % 100:03d}/key-{n}".encode(), digest_size=8).hexdigest()
        seen[key] = (
            key,
            json.dumps([{"kind": "ci", "ref": f"repo{n % 50}@main"}], separators=(",", ":")),
            f"attention: ci repo{n % 50}@main is failing",
        )
    return count / (time.perf_counter() - start)


async def sqlite_baseline(store: Store, count: int) -> float:
    """Decisions' worth of durable rows per second: two rows each, 1,000 decisions to a commit."""
    db = store.db
    await db.execute(
        "CREATE TABLE IF NOT EXISTS bench_items (id TEXT PRIMARY KEY, person TEXT, state TEXT, evidence TEXT, at REAL)"
    )
    await db.execute(
        "CREATE TABLE IF NOT EXISTS bench_ledger (seq INTEGER PRIMARY KEY, item TEXT, person TEXT, "
        "at REAL, rule TEXT, reason TEXT)"
    )
    base = int(time.time() * 1e6)
    start = time.perf_counter()
    for k in range(0, count, 1000):
        rows = range(k, min(count, k + 1000))
        await db.executemany(
            "INSERT INTO bench_items VALUES (?, ?, ?, ?, ?)",
            [
                (f"{base}-{n}", f"p{n % 100:03d}", "pending", f'[{{"kind":"ci","ref":"repo{n % 50}@main"}}]', START)
                for n in rows
            ],
        )
        await db.executemany(
            "INSERT INTO bench_ledger (item, person, at, rule, reason) VALUES (?, ?, ?, ?, ?)",
            [(f"{base}-{n}", f"p{n % 100:03d}", START, "wait", "attention: ci failing") for n in rows],
        )
        await store.write([])  # the commit, as the gate's group commit does it
    took = time.perf_counter() - start
    await db.execute("DELETE FROM bench_items")
    await db.execute("DELETE FROM bench_ledger")
    await store.write([])
    return count / took


async def bench(quick: bool) -> None:
    people = 10 if quick else 100
    per_person = 100
    waiting = people * per_person
    mixed = 2_000 if quick else 20_000
    single = 200 if quick else 1_000
    facts = 50
    folder = Path(tempfile.mkdtemp(prefix="hive-bench-gate-", dir="/tmp"))
    summary: list[tuple[str, str]] = []
    ratios: list[tuple[str, float]] = []
    try:
        (folder / "config.toml").write_text(config(people), encoding="utf-8")
        store = await Store.open(folder / "hive.db")
        clock = Clock()
        delivered = 0

        async def deliver(item: Item, decision: Any) -> None:
            nonlocal delivered
            delivered += 1

        gate = Gate(store, PrefsFile(folder / "config.toml"), clock=clock, deliver=deliver)
        await gate.load()
        for f in range(facts):
            await gate.record("ci", f"repo{f}@main", "failing")
        print(
            f"gate benchmark: {people} people, {waiting:,} waiting items, python {sys.version.split()[0]}, "
            f"{os.cpu_count()} CPUs, database in {folder}"
        )

        print(f"\n== 1. fill: {waiting:,} attention items, all left waiting ==")
        n = 0
        start = time.perf_counter()
        for person in range(people):
            batch = [item(person, n + k, "new", facts) for k in range(per_person)]
            n += per_person
            await gate.offer_many(batch)
        fill = time.perf_counter() - start
        print(f"offered in batches of {per_person}: {rate(waiting, fill)}   waiting now: {len(gate.open):,}")
        summary.append(("fill, batches of 100", rate(waiting, fill)))

        py_first, sql_first = python_baseline(mixed), await sqlite_baseline(store, mixed)
        print(
            f"\n== baselines (before section 2): python bookkeeping {py_first:,.0f}/s, "
            f"durable SQLite rows for {sql_first:,.0f} decisions/s =="
        )

        print(f"\n== 2. decisions with {len(gate.open):,} waiting ==")
        rng = random.Random(7)

        def mix(count: int) -> list[Item]:
            nonlocal n
            out = []
            for _ in range(count):
                roll = rng.random()
                person = rng.randrange(people)
                if roll < 0.25:  # a duplicate of something already offered
                    old = rng.randrange(waiting)
                    out.append(item(old // per_person, old, "new", facts))
                    continue
                n += 1
                kind = "info" if roll < 0.5 else "muted" if roll < 0.6 else "new"
                out.append(item(person, n, kind, facts))
            return out

        items = mix(mixed)
        start = time.perf_counter()
        for k in range(0, len(items), 100):
            await gate.offer_many(items[k : k + 100])
        batched = time.perf_counter() - start
        print(f"(a) batches of 100:             {rate(len(items), batched)}")

        items = mix(mixed)
        start = time.perf_counter()
        for k in range(0, len(items), 1000):
            await gate.offer_many(items[k : k + 1000])
        batched_1000 = time.perf_counter() - start
        print(f"    batches of 1,000:           {rate(len(items), batched_1000)}")

        items = mix(mixed)
        start = time.perf_counter()

        async def caller(mine: list[Item]) -> None:
            for one in mine:
                await gate.offer(one)

        async with anyio.create_task_group() as tg:
            for c in range(64):
                tg.start_soon(caller, items[c::64])
        concurrent = time.perf_counter() - start
        print(f"(b) 64 concurrent callers:      {rate(len(items), concurrent)}")

        items = mix(single)
        start = time.perf_counter()
        for one in items:
            await gate.offer(one)
        sequential = time.perf_counter() - start
        print(f"(c) one caller, one at a time:  {rate(len(items), sequential)}   (one commit, one fsync each)")

        items = mix(mixed)
        start = time.perf_counter()
        for one in items:
            gate._offer(one, clock.now)  # the procedure alone; its rows are written below, untimed
        in_memory = time.perf_counter() - start
        await gate._commit()
        print(f"(d) the procedure, in memory:   {rate(len(items), in_memory)}")
        print(f"waiting now: {len(gate.open):,}")
        # (e) Interleaved with the baselines, round by round, so each ratio compares figures taken
        # within the same second of a shared machine's changing load.
        rounds = 5 if quick else 15
        gate_rates, to_sql, to_py = [], [], []
        for _ in range(rounds):
            py_rate = python_baseline(1000)
            sql_rate = await sqlite_baseline(store, 1000)
            batch = mix(1000)
            start = time.perf_counter()
            await gate.offer_many(batch)
            gate_rate = len(batch) / (time.perf_counter() - start)
            gate_rates.append(gate_rate)
            to_sql.append(gate_rate / sql_rate)
            to_py.append(gate_rate / py_rate)
        low, mid, high = (sorted(gate_rates)[i] for i in (0, len(gate_rates) // 2, -1))
        print(
            f"(e) {rounds} rounds of 1,000, each between its baselines: decisions/s min {low:,.0f}, "
            f"p50 {mid:,.0f}, max {high:,.0f}; per round / durable SQLite rows p50 {statistics.median(to_sql):.2f}, "
            f"/ python bookkeeping p50 {statistics.median(to_py):.2f}"
        )
        py_after, sql_after = python_baseline(mixed), await sqlite_baseline(store, mixed)
        py_base, sql_base = max(py_first, py_after), max(sql_first, sql_after)
        print(
            f"baselines again (after section 2): python {py_after:,.0f}/s, SQLite {sql_after:,.0f}/s; "
            f"kept: {py_base:,.0f}/s and {sql_base:,.0f}/s"
        )
        ratios = [
            ("interleaved rounds / durable SQLite rows (p50)", statistics.median(to_sql)),
            ("interleaved rounds / python bookkeeping (p50)", statistics.median(to_py)),
            ("batches of 1,000 / durable SQLite rows", (mixed / batched_1000) / sql_base),
            ("batches of 1,000 / python bookkeeping", (mixed / batched_1000) / py_base),
            ("procedure in memory / python bookkeeping", (mixed / in_memory) / py_base),
            ("64 concurrent callers / durable SQLite rows", (mixed / concurrent) / sql_base),
        ]
        summary += [
            ("decisions, interleaved rounds p50", f"{mid:>10,.0f}/s"),
            ("decisions, batches of 100", rate(mixed, batched)),
            ("decisions, batches of 1,000", rate(mixed, batched_1000)),
            ("decisions, 64 concurrent callers", rate(mixed, concurrent)),
            ("decisions, one at a time", rate(single, sequential)),
            ("decision procedure in memory", rate(mixed, in_memory)),
        ]

        print("\n== 3. breakpoints: one per person ==")
        clock.now += 120
        before = len(gate.open)
        start = time.perf_counter()
        released = 0
        for person in range(people):
            released += len(await gate.breakpoint(f"p{person:03d}", f"p{person:03d}/s{person % 3}", "commit"))
        took = time.perf_counter() - start
        print(
            f"{people} breakpoints released {released:,} of {before:,} waiting: {rate(released, took)} decisions, "
            f"{took / people * 1000:.2f} ms per breakpoint"
        )
        summary.append(("breakpoint releases", rate(released, took)))

        print("\n== 4. wake-ups: every remaining wait reaches its bound ==")
        due = len(gate.open)
        clock.now += 3 * 3600
        start = time.perf_counter()
        woken = await gate.wake()
        took = time.perf_counter() - start
        print(f"one wake decided {len(woken):,} of {due:,}: {rate(len(woken), took)}")
        summary.append(("wake at the bound", rate(len(woken), took)))

        print("\n== 5. ledger queries ==")
        rows = (await store.fetchone("SELECT COUNT(*) FROM gate_ledger"))[0]
        items_count = (await store.fetchone("SELECT COUNT(*) FROM gate_items"))[0]
        size = (folder / "hive.db").stat().st_size / 1e6
        print(f"ledger: {rows:,} rows for {items_count:,} items; database {size:.1f} MB")
        some = (await store.fetchone("SELECT id FROM gate_items ORDER BY offered_at LIMIT 1 OFFSET 500"))[0]
        queries: list[tuple[str, Callable[[], Awaitable[Any]], int]] = [
            ("ledger, latest 500", lambda: gate.ledger(limit=500), 50),
            ("ledger, since 1 h, one person", lambda: gate.ledger(since=clock.now - 3600, person="p007"), 50),
            ("why, one item", lambda: gate.why(some), 100),
            ("digest, one person", lambda: gate.digest("p007", since=START - 60, mark=False), 50),
            ("measures, everyone, everything", lambda: gate.measures(since=START - 60), 5 if not quick else 3),
        ]
        for name, func, calls in queries:
            p50, p99 = await timed(calls, func)
            print(f"{name:<34} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   ({calls} calls)")
            summary.append((name, f"p50 {p50:.2f} ms"))
        print(f"(delivered to the deliverer: {delivered:,})")
        await store.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print("\n== summary ==")
    for name, figure in summary:
        print(f"{name:<36} {figure}")
    print(f"aim: at least {AIM:,.0f} decisions/s")
    print("ratios to this run's baselines (1.0 = as fast as the baseline alone):")
    for name, ratio in ratios:
        print(f"  {name:<44} {ratio:.2f}")
    print(f"removed {folder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 people and 1,000 waiting items")
    anyio.run(bench, parser.parse_args().quick)


if __name__ == "__main__":
    main()

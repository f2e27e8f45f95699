"""Benchmark of lesson replication: 10,000 log entries (with their bodies) between two machines.

Run it from the repository root with the project's venv:

    python tests/bench/bench_lessons_sync.py            # 10,000 entries
    python tests/bench/bench_lessons_sync.py --quick    # 1,000 entries

Two real sidecars on loopback, each in its own HIVE_HOME, form a team. The entries are lessons
signed with machine A's own key (read from its state folder, ``HIVE_KEYRING=off``) and handed to
A through ``lesson_sync_ingest`` in batches, exactly as replicated entries arrive.

1. baseline, measured in the same run: A takes the entries and bodies locally (B is stopped), per
   batch: this is the store's own cost (verify, insert, index, commit), with no network.
2. catch-up: B starts, links, sends ``sync``; the time until B holds every entry and body.
3. live: with both up, a further fifth of the count is handed to A batch by batch; per batch, the
   lag from A's answer until B holds the whole batch (polled every 5 ms).

Nothing is asserted; the figures are for people (the machine that runs this is small and noisy).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import Client, start_detached
from hive.sidecar.lessons import records as L
from hive.sidecar.team.identity import Identity, load_identity

BATCH = 250


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    return ordered[max(math.ceil(pct / 100 * len(ordered)), 1) - 1]


def section(title: str) -> None:
    print(f"\n== {title}", flush=True)


class Machine:
    def __init__(self, root: Path, index: int) -> None:
        self.person = f"p{index}"
        self.home = root / f"m{index}"
        self.home.mkdir(mode=0o700)
        (self.home / "config.toml").write_text(
            f'person = "{self.person}"\nmachine = "m{index}"\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n',
            encoding="utf-8",
        )
        self.paths = StatePaths(self.home)

    def start(self) -> None:
        if not start_detached(self.paths, timeout=60):
            raise SystemExit(f"{self.person} did not start: {(self.home / 'sidecar.stderr').read_text()}")

    async def stop(self) -> None:
        pid = int(self.paths.lock.read_text().strip())
        await self.call("shutdown")
        with anyio.fail_after(60):
            while True:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                await anyio.sleep(0.05)

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        async with Client.open(self.paths, autostart=False) as client:
            return await client.call(op, **args)


async def wait_until(check: Callable[[], Awaitable[bool]], within: float, interval: float = 0.005) -> float:
    """Poll another process's state (there is no event to wait on across processes)."""
    start = time.perf_counter()
    with anyio.fail_after(within):
        while not await check():  # noqa: ASYNC110
            await anyio.sleep(interval)
    return time.perf_counter() - start


def make_batches(
    identity: Identity, person: str, team_id: str, first_seq: int, count: int
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    batches = []
    seq = first_seq
    for start in range(0, count, BATCH):
        entries, blobs = [], []
        for _ in range(start, min(start + BATCH, count)):
            body = L.new_lesson(
                kind="gotcha",
                scope="team",
                author_person=person,
                author_machine=identity.key_id,
                author_session=f"{person}/bench",
                created_at=1_700_000_000_000 + seq,
                text=f"Lesson {seq}: the integration suite needs the local queue running before the api starts; "
                "start it with make queue, or the first test times out after 30 seconds.",
                applicability="when running the integration tests",
                tags=("tests", f"t{seq % 50}"),
                evidence=[L.Evidence("file", f"tests/integration/test_{seq % 200}.py")],
            )
            entries.append(L.make_entry(identity, team_id, "team", seq, body).to_wire())
            blobs.append(body.blob())
            seq += 1
        batches.append((entries, blobs))
    return batches


async def holds(machine: Machine, author: str, seq: int, blobs: int) -> bool:
    status = await machine.call("lesson_sync_status")
    heads = {(h[0], h[1]): h[2] for h in status["heads"]}
    return heads.get((author, "team"), 0) >= seq and status["counts"]["lesson_blobs"] >= blobs


async def run(count: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="hive-bench-lessons-", dir="/tmp"))
    os.environ["HIVE_KEYRING"] = "off"  # each machine keeps its key in its state folder (read below)
    a, b = Machine(root, 0), Machine(root, 1)
    try:
        a.start()
        b.start()
        await a.call("team_init", team="bench", person=a.person)
        link = (await a.call("team_invite"))["link"]
        await b.call("team_join", link=link, person=b.person)

        async def linked() -> bool:
            return len((await a.call("mesh"))["links"]) == 1 and len((await b.call("mesh"))["links"]) == 1

        await wait_until(linked, 60, 0.05)
        status = await a.call("lesson_sync_status")
        team_id, author = status["team_id"], status["me"]
        identity = load_identity(a.home)
        assert identity.key_id == author
        t0 = time.perf_counter()
        batches = make_batches(identity, a.person, team_id, 1, count)
        live_count = max(count // 5, BATCH)
        live = make_batches(identity, a.person, team_id, count + 1, live_count)
        print(f"signed {count + live_count} entries in {time.perf_counter() - t0:.2f} s (in this process)")

        await b.stop()
        section(f"1. baseline: {count} entries and bodies taken locally on A (B stopped), batches of {BATCH}")
        per_batch = []
        t0 = time.perf_counter()
        for entries, blobs in batches:
            t1 = time.perf_counter()
            result = await a.call("lesson_sync_ingest", entries=entries, blobs=blobs)
            per_batch.append(time.perf_counter() - t1)
            assert set(result["entries"]) == {"added"} and set(result["blobs"]) == {"added"}, result
        local = time.perf_counter() - t0
        print(
            f"local: {local:.2f} s ({count / local:.0f} entries/s); per batch p50 "
            f"{percentile(per_batch, 50) * 1000:.1f} ms, p99 {percentile(per_batch, 99) * 1000:.1f} ms"
        )

        section(f"2. catch-up: B starts and syncs {count} entries and bodies from A")
        t0 = time.perf_counter()
        b.start()
        started = time.perf_counter() - t0

        async def b_linked() -> bool:
            return len((await b.call("mesh"))["links"]) == 1

        linked_at = await wait_until(b_linked, 120, 0.01) + started
        catch_up = await wait_until(lambda: holds(b, author, count, count), 900, 0.05) + linked_at
        moving = catch_up - linked_at
        print(
            f"catch-up: {catch_up:.2f} s from B's start (started {started:.2f} s, linked {linked_at:.2f} s, "
            f"then {moving:.2f} s moving entries: {count / moving:.0f} entries/s, "
            f"{moving / local:.2f}x the local baseline)"
        )

        section(f"3. live: {live_count} more entries on A in batches of {BATCH}, lag until B holds each batch")
        lags = []
        held = count
        t0 = time.perf_counter()
        for entries, blobs in live:
            await a.call("lesson_sync_ingest", entries=entries, blobs=blobs)
            sent = time.perf_counter()
            held += len(entries)
            await wait_until(lambda h=held: holds(b, author, h, h), 120)
            lags.append(time.perf_counter() - sent)
        total = time.perf_counter() - t0
        print(
            f"live: {live_count} entries in {total:.2f} s ({live_count / total:.0f} entries/s end to end); "
            f"lag per batch p50 {percentile(lags, 50) * 1000:.1f} ms, p99 {percentile(lags, 99) * 1000:.1f} ms"
        )

        section("summary")
        print(
            f"replication of {count} entries between two machines: {moving:.2f} s once linked, {catch_up:.2f} s "
            f"from a cold start (local insert of the same entries: {local:.2f} s; ratio {moving / local:.2f})"
        )
    finally:
        for machine in (a, b):
            try:
                await machine.call("shutdown")
            except Exception:  # already stopped
                pass
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 entries")
    parser.add_argument("--count", type=int, default=None)
    args = parser.parse_args()
    count = args.count or (1_000 if args.quick else 10_000)
    anyio.run(run, count)


if __name__ == "__main__":
    sys.exit(main())

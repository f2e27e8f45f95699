"""Benchmark of event ingest: normalized events per second, durable (committed before the answer).

Run it from the repository root with the project's venv:

    /work/venv/bin/python tests/bench/bench_events.py           # full run
    /work/venv/bin/python tests/bench/bench_events.py --quick   # smoke run
    /work/venv/bin/python tests/bench/bench_events.py --baseline 026662c   # hook op: this tree vs a commit
    /work/venv/bin/python tests/bench/bench_events.py --baseline=-a614b8f:sidecar/observe.py,sidecar/doing.py
                                                   # ... vs this tree without one commit's change to two files

1. store: recorded hook payloads (a Claude Code ``Edit`` and a Codex ``apply_patch``) normalized,
   redacted and appended through :func:`hive.sidecar.presence.observe.store_events` on a real database
   (SQLite WAL, ``synchronous=FULL``) by many concurrent writers, which share commits (group
   commit). Each write returns only once its events are on disk.
2. hook op: the same payloads sent as ``hook`` requests to a real sidecar over its unix socket
   with a bounded number in flight; the sidecar answers each hook only after its events are
   committed. Counted from the rows in the ``events`` table at the end.

3. presence latency: two machines (two state folders, one team formed with ``hive init``,
   ``invite`` and ``join`` on loopback). A hook on the first flips its session between busy and
   idle; the time runs until the second machine's ``who`` shows the new state. The second side is
   asked every 2 ms (the figure's resolution): a benchmark may poll, the sidecar never does.

Nothing is asserted: the figures are for people to read next to the aims (5,000 events/s, presence
under 100 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.base.store import Store
from hive.sidecar.client import Client, start_detached
from hive.sidecar.presence.events import store_events
from hive.sidecar.presence.normalize import normalize

AIM = 5000.0
REPO = Path(__file__).resolve().parents[2]
PATCH = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch\n"


def claude_edit(sid: str, n: int) -> dict[str, Any]:
    return {
        "session_id": sid,
        "cwd": "/tmp/app",
        "hook_event_name": "PostToolUse",
        "tool_name": "Edit",
        "tool_use_id": f"toolu_{n}",
        "tool_input": {"file_path": f"/tmp/app/src/f{n % 40}.py", "old_string": "a", "new_string": "b"},
        "transcript_path": f"/tmp/{sid}.jsonl",
    }


def codex_patch(sid: str, n: int) -> dict[str, Any]:
    return {
        "session_id": sid,
        "cwd": "/tmp/app",
        "hook_event_name": "PostToolUse",
        "tool_name": "apply_patch",
        "tool_use_id": f"call_{n}",
        "tool_input": {"command": ["apply_patch", PATCH]},
        "turn_id": "t",
    }


async def bench_store(folder: Path, calls: int, writers: int) -> float:
    store = await Store.open(folder / "bench.db")
    limit = anyio.Semaphore(writers)
    stored = 0

    async def one(n: int) -> None:
        nonlocal stored
        async with limit:
            payload = claude_edit("s1", n) if n % 2 else codex_patch("s2", n)
            events = normalize(
                "claude-code" if n % 2 else "codex", "tool.after", payload, payload["session_id"], "/tmp/app"
            )
            await store_events(store, events)
            stored += len(events)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for n in range(calls):
            tg.start_soon(one, n)
    elapsed = time.perf_counter() - start
    await store.close()
    rate = stored / elapsed
    print(f"store: {stored} events from {calls} calls, {writers} writers: {elapsed:.2f} s, {rate:,.0f} events/s")
    return rate


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def bench_hooks(paths: StatePaths, calls: int, in_flight: int, label: str = "hook op") -> tuple[float, float]:
    """Events/s through the hook op, and the sidecar's CPU milliseconds per hook."""
    limit = anyio.Semaphore(in_flight)
    pid = int(paths.lock.read_text().strip())
    latencies: list[float] = []
    async with Client.open(paths) as client:

        async def one(n: int) -> None:
            async with limit:
                # As the hook client sends it: with its parent's pid, the harness.
                sent = time.perf_counter()
                await client.call(
                    "hook",
                    harness="claude-code",
                    event="PostToolUse",
                    payload=claude_edit("h1", n),
                    env={"CLAUDECODE": "1"},
                    ppid=os.getppid(),
                )
                latencies.append((time.perf_counter() - sent) * 1000)

        await one(-1)  # registers the session, so the figure is the steady state
        latencies.clear()
        cpu = cpu_seconds(pid)
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for n in range(calls):
                tg.start_soon(one, n)
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(pid) - cpu
        with sqlite3.connect(paths.database) as db:
            rows = db.execute("SELECT COUNT(*) FROM events WHERE session = 'h1' AND call_id != 'toolu_-1'").fetchone()
        await client.call("shutdown")
    rate = rows[0] / elapsed
    per_hook = 1000 * cpu / calls
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"{label}: {rows[0]} events from {calls} hooks, {in_flight} in flight: {elapsed:.2f} s, "
        f"{rate:,.0f} events/s, sidecar CPU {per_hook:.3f} ms per hook; "
        f"hook round trip p50 {cuts[49]:.1f} ms, p90 {cuts[89]:.1f} ms, p99 {cuts[98]:.1f} ms"
    )
    return rate, per_hook


PARTS = ("sidecar", "integrations", "installer", "skills")


def checkout(ref: str, folder: Path) -> Path:
    """An importable ``hive`` package (put first on PYTHONPATH): the code at ``ref``, or, for
    ``-COMMIT[:path,…]``, this working tree without that one commit (or its change to those paths),
    so only that change is measured."""
    root = folder / "baseline"
    for part in PARTS:
        target = root / "hive" / part
        if ref.startswith("-"):
            shutil.copytree(REPO / part, target, ignore=shutil.ignore_patterns("__pycache__"))
            continue
        target.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", ref, part], check=True, capture_output=True, cwd=REPO).stdout
        subprocess.run(["tar", "-x", "-C", str(target), "--strip-components=1"], input=archive, check=True)
    if ref.startswith("-"):
        commit, _, only = ref[1:].partition(":")
        diff = subprocess.run(
            ["git", "show", "--format=", commit, "--", *(only.split(",") if only else PARTS)],
            check=True,
            capture_output=True,
            cwd=REPO,
        ).stdout
        subprocess.run(["patch", "-R", "-p1", "-s", "-d", str(root / "hive")], input=diff, check=True)
    return root


def hook_sidecar(folder: Path, name: str, pythonpath: str = "") -> StatePaths:
    home = folder / name
    home.mkdir(mode=0o700)
    paths = StatePaths(home)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        assert start_detached(paths), (home / "sidecar.stderr").read_text()
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    return paths


def compare_hooks(folder: Path, ref: str, calls: int, rounds: int) -> None:
    """This tree against ``ref``, interleaved round by round so both see the same machine load."""
    old = str(checkout(ref, folder))
    figures: dict[str, list[tuple[float, float]]] = {"baseline": [], "this tree": []}
    for n in range(rounds):
        for label, path in (("baseline", old), ("this tree", "")):
            paths = hook_sidecar(folder, f"{label.replace(' ', '-')}-{n}", path)
            figures[label].append(anyio.run(bench_hooks, paths, calls, 64, f"{label} ({ref if path else 'HEAD+'})"))
    base = statistics.median(r for r, _ in figures["baseline"])
    mine = statistics.median(r for r, _ in figures["this tree"])
    base_cpu = statistics.median(c for _, c in figures["baseline"])
    mine_cpu = statistics.median(c for _, c in figures["this tree"])
    print(
        f"hook op, median of {rounds}: baseline {ref} {base:,.0f} events/s ({base_cpu:.3f} ms CPU/hook), "
        f"this tree {mine:,.0f} events/s ({mine_cpu:.3f} ms CPU/hook): x{mine / base:.2f} events/s, "
        f"x{base_cpu / mine_cpu:.2f} less CPU per hook"
    )


MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'


def cli(home: Path, *args: str) -> str:
    env = dict(os.environ, HIVE_HOME=str(home), HIVE_KEYRING="off")
    done = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


async def bench_presence(folder: Path, samples: int) -> float:
    homes = []
    for n, person in enumerate(("alice", "bob")):
        home = folder / person
        home.mkdir(mode=0o700)
        (home / "config.toml").write_text(f'person = "{person}"\nmachine = "m{n}"\n{MESH}', encoding="utf-8")
        assert start_detached(StatePaths(home)), "a sidecar did not start"
        homes.append(home)
    alice, bob = homes
    cli(alice, "init", "acme", "--as", "alice")
    cli(bob, "join", json.loads(cli(alice, "invite", "--json"))["link"], "--as", "bob")
    latencies = []
    async with Client.open(StatePaths(alice)) as a, Client.open(StatePaths(bob)) as b:

        async def state_at_bob() -> str:
            sessions = (await b.call("who"))["sessions"]
            return next((s["state"] for s in sessions if s["person"] == "alice"), "")

        while (await b.call("mesh"))["links"] == []:  # noqa: ASYNC110  # the bench watches from outside
            await anyio.sleep(0.05)
        for n in range(samples + 1):
            event, state = ("UserPromptSubmit", "busy") if n % 2 == 0 else ("Stop", "idle")
            payload = {"session_id": "p1", "cwd": "/tmp", "hook_event_name": event}
            start = time.perf_counter()
            await a.call("hook", harness="claude-code", event=event, payload=payload, env={"CLAUDECODE": "1"})
            with anyio.fail_after(10):
                while await state_at_bob() != state:  # noqa: ASYNC110  # 2 ms resolution, see the docstring
                    await anyio.sleep(0.002)
            if n:  # the first one also waits for the session to appear at all
                latencies.append((time.perf_counter() - start) * 1000)
        for client in (a, b):
            await client.call("shutdown")
    p50 = statistics.median(latencies)
    print(f"presence hook -> peer who: p50 {p50:.1f} ms, max {max(latencies):.1f} ms over {samples} flips")
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="only the hook op, this tree against the code at REF (-COMMIT: this tree without that commit)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.baseline:
        folder = Path(tempfile.mkdtemp(prefix="hive-bench-events-", dir="/tmp"))
        try:
            compare_hooks(folder, args.baseline, 1000 if args.quick else 5000, args.rounds)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    calls = 2000 if args.quick else 20000
    folder = Path(tempfile.mkdtemp(prefix="hive-bench-events-", dir="/tmp"))
    try:
        print("== 1. store: normalized events, group commit")
        store_rate = anyio.run(bench_store, folder, calls, 128)
        print("== 2. hook op: real sidecar over its socket")
        home = folder / "home"
        home.mkdir(mode=0o700)
        os.environ["HIVE_HOME"] = str(home)
        paths = StatePaths(home)
        assert start_detached(paths), "the sidecar did not start"
        hook_rate = anyio.run(bench_hooks, paths, calls // 4, 64)[0]
        print("== 3. presence latency: hook on one machine -> who on a teammate's")
        presence_p50 = anyio.run(bench_presence, folder, 10 if args.quick else 50)
        print("== summary ==")
        print(
            f"events/s durable, store    {store_rate:>10,.0f}   aim {AIM:,.0f}   "
            f"{'met' if store_rate >= AIM else 'below'}"
        )
        print(
            f"events/s durable, hook op  {hook_rate:>10,.0f}   aim {AIM:,.0f}   "
            f"{'met' if hook_rate >= AIM else 'below'}"
        )
        print(
            f"presence latency p50 (ms)  {presence_p50:>10,.1f}   aim {100:,}   "
            f"{'met' if presence_p50 <= 100 else 'above'}"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed {folder}")


if __name__ == "__main__":
    main()

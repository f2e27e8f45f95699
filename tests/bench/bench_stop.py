"""Benchmark of ``hive stop``: how long a person (and every test, restart and upgrade) waits for it.

Run it from the repository root with the project's venv:

    .venv/bin/python tests/bench/bench_stop.py           # 12 start/stop cycles, about a minute
    .venv/bin/python tests/bench/bench_stop.py --quick   # 3 cycles, a smoke run

Each cycle starts a real sidecar on a fresh temporary ``HIVE_HOME`` (mesh on 127.0.0.1, no
mDNS) with a temporary ``HOME`` in which a Claude Code session runs: a running-session file
naming a live process and its transcript. So both file watchers run, discovery's (the harness
folders) and ``doing``'s (the transcript). The cycle waits until the session shows with what it
does, then a random time within one watcher period (watchfiles wakes every 5 s; 1 s with
--quick), so stops land at every phase of that period, and times, as separate processes:

- ``hive status``: the floor, what any CLI call costs here (interpreter start, imports, one
  round trip);
- ``hive stop``: the same plus the sidecar's shutdown, until its process is gone and its lock
  is free.

It prints p50, p90 and max of both and of their difference per cycle (the shutdown itself).
Nothing is asserted on the figures: the machines that run this are small and noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import start_detached

SID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
# What each watcher logs when the stopping event, not its 5 s wake-up, ended its wait.
WATCHERS = {"discovery": "stopped watching harnesses' folders", "doing": "stopped following what harnesses write"}
CONFIG = 'person = "alice"\nmachine = "m1"\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def cli(env: dict[str, str], *args: str) -> float:
    """Wall time of one ``hive`` CLI call, which must succeed."""
    began = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.perf_counter() - began
    if completed.returncode != 0:
        raise SystemExit(f"hive {' '.join(args)} exited {completed.returncode}: {completed.stderr}")
    return took


def harness_home(folder: Path, pid: int) -> None:
    """What Claude Code leaves on disk while a session runs: its running-session file and transcript."""
    sessions = folder / ".claude" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / f"{pid}.json").write_text(
        json.dumps({"pid": pid, "sessionId": SID, "cwd": str(folder), "status": "busy", "name": "stop benchmark"})
    )
    project = folder / ".claude" / "projects" / "bench"
    project.mkdir(parents=True)
    (project / f"{SID}.jsonl").write_text(
        json.dumps({"type": "user", "sessionId": SID, "cwd": str(folder), "message": {"content": "hi"}}) + "\n"
    )


def wait_for_session(env: dict[str, str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = subprocess.run(
            [sys.executable, "-m", "hive.sidecar.cli", "who", "--all", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if "stop benchmark" in listed.stdout:  # its title from the running-session file
            return
        time.sleep(0.1)
    raise SystemExit("the sidecar never listed the running Claude Code session")


def cycle(period: float) -> tuple[float, float, list[str]]:
    root = Path(tempfile.mkdtemp(prefix="hive-bstop-", dir="/tmp"))
    harness = subprocess.Popen(["sleep", "600"])
    try:
        home, state = root / "home", root / "h"
        harness_home(home, harness.pid)
        state.mkdir(mode=0o700)
        (state / "config.toml").write_text(CONFIG)
        env = {**os.environ, "HIVE_HOME": str(state), "HOME": str(home), "HIVE_KEYRING": "off"}
        saved = dict(os.environ)
        os.environ.update(env)  # start_detached passes this process's environment on
        try:
            if not start_detached(StatePaths(state)):
                raise SystemExit(f"the sidecar did not start: {(state / 'sidecar.stderr').read_text()}")
        finally:
            os.environ.clear()
            os.environ.update(saved)
        wait_for_session(env)
        time.sleep(random.uniform(0, period))
        floor = cli(env, "status")
        stop = cli(env, "stop")
        log = (state / "sidecar.log").read_text()
        woken = [name for name, line in WATCHERS.items() if line in log]
        return floor, stop, woken
    finally:
        harness.kill()
        harness.wait()
        with contextlib.suppress(OSError, ValueError):  # a cycle that failed leaves no sidecar behind
            os.kill(int((root / "h" / "sidecar.lock").read_text()), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def row(name: str, samples: list[float]) -> str:
    return (
        f"{name:<26} p50 {percentile(samples, 50) * 1000:7.0f} ms   p90 {percentile(samples, 90) * 1000:7.0f} ms"
        f"   max {max(samples) * 1000:7.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 cycles within a 1 s phase: a smoke run")
    parser.add_argument("--cycles", type=int, default=None)
    args = parser.parse_args()
    cycles = args.cycles or (3 if args.quick else 12)
    period = 1.0 if args.quick else 5.0
    floors, stops = [], []
    for number in range(cycles):
        floor, stop, woken = cycle(period)
        floors.append(floor)
        stops.append(stop)
        print(
            f"cycle {number + 1:2d}: hive status {floor * 1000:6.0f} ms, hive stop {stop * 1000:6.0f} ms, "
            f"watchers ended by the stopping event: {', '.join(woken) or 'none'}",
            flush=True,
        )
    print("== summary ==")
    print(row("hive status (floor)", floors))
    print(row("hive stop", stops))
    print(row("shutdown (stop - floor)", [s - f for f, s in zip(floors, stops, strict=True)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the sidecar's CPU while it follows 20 live transcripts (issue 7's third figure).

Run it from the repository root with the project's venv:

    .venv/bin/python tests/bench/bench_doing_cpu.py              # 60 s per phase
    .venv/bin/python tests/bench/bench_doing_cpu.py --seconds 10 # smoke run

Every phase runs a real sidecar (its own state folder, ``HOME`` set to a scratch home folder so
discovery and the task folders look there) and reads its CPU time (user + system, from
``/proc/<pid>/stat``) once a second. CPU % is CPU seconds over wall seconds, per second (p50, p95)
and over the whole phase.

- baseline, idle: a sidecar with no sessions and nothing to follow.
- baseline, busy: the same, while this process appends to 20 transcripts the sidecar does not
  follow (the same disk traffic, nothing for the sidecar to do).
- managed, idle: 20 sessions registered by their SessionStart hooks, each following its transcript
  (Claude Code's shape) and its task folder; nobody writes.
- managed, busy: the same while each transcript gets an entry every 500 ms (40 appends/s in all,
  with a todo list now and then, which changes ``doing``).
- unmanaged, busy: 20 Codex rollouts nobody hooked, found by discovery and followed, appended to
  at the same rate.

Nothing is asserted: the figures are for people to read next to the aim (idle CPU under 1 %).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import start_detached

SESSIONS = 20
INTERVAL = 0.5  # seconds between two entries of one transcript
TICK = os.sysconf("SC_CLK_TCK")
AIM_IDLE = 1.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def entry(n: int, sid: str) -> str:
    if n % 10 == 5:
        todos = {"todos": [{"content": f"step {n}", "status": "in_progress", "activeForm": f"doing step {n}"}]}
        return json.dumps(
            {
                "type": "assistant",
                "sessionId": sid,
                "message": {"content": [{"type": "tool_use", "name": "TodoWrite", "input": todos}]},
            }
        )
    return json.dumps(
        {
            "type": "assistant",
            "sessionId": sid,
            "message": {"content": [{"type": "text", "text": f"entry {n} " + "x" * 600}]},
        }
    )


class Appender:
    """Appends one entry to each file every INTERVAL seconds, in a thread of this process."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 0
        while not self.stop.wait(INTERVAL / len(self.files)):
            path = self.files[n % len(self.files)]
            with path.open("a", encoding="utf-8") as out:
                out.write(entry(n // len(self.files), path.stem) + "\n")
            n += 1

    def __enter__(self) -> Appender:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def measure(pid: int, seconds: float) -> dict[str, float]:
    samples = []
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    last_cpu, last = start_cpu, start
    while time.monotonic() - start < seconds:
        time.sleep(1.0)
        now_cpu, now = cpu_seconds(pid), time.monotonic()
        samples.append(100 * (now_cpu - last_cpu) / (now - last))
        last_cpu, last = now_cpu, now
    samples.sort()
    return {
        "total": 100 * (last_cpu - start_cpu) / (last - start),
        "p50": statistics.median(samples),
        "p95": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
    }


STARTED: list[int] = []  # sidecar pids, stopped at the end whatever happened


def sidecar(folder: Path, name: str) -> tuple[StatePaths, Path, int]:
    home, state = folder / name / "home", folder / name / "state"
    home.mkdir(parents=True)
    state.mkdir(mode=0o700)
    (state / "config.toml").write_text('[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n', encoding="utf-8")
    os.environ["HOME"] = str(home)
    paths = StatePaths(state)
    assert start_detached(paths), (state / "sidecar.stderr").read_text()
    STARTED.append(int(paths.lock.read_text().strip()))
    return paths, home, STARTED[-1]


def cli(paths: StatePaths, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, HIVE_HOME=str(paths.home))
    return subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def request(paths: StatePaths, op: str, **args: object) -> dict[str, object]:
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(paths.socket))
        sock.sendall(json.dumps({"id": 1, "op": op, **args}).encode() + b"\n")
        reply = json.loads(sock.makefile("rb").readline())
    assert reply["ok"], reply
    return dict(reply["result"])


def transcripts(home: Path) -> list[Path]:
    folder = home / ".claude" / "projects" / "-work-app"
    folder.mkdir(parents=True)
    files = []
    for n in range(SESSIONS):
        path = folder / f"sess-{n:02d}.jsonl"
        path.write_text(json.dumps({"type": "ai-title", "aiTitle": f"task {n}"}) + "\n", encoding="utf-8")
        files.append(path)
    return files


def rollouts(home: Path) -> list[Path]:
    folder = home / ".codex" / "sessions" / "2026" / "12" / "02"
    folder.mkdir(parents=True)
    files = []
    for n in range(SESSIONS):
        sid = f"0199a1b2-0000-7000-8000-{n:012d}"
        path = folder / f"rollout-2026-12-02T10-00-00-{sid}.jsonl"
        meta = {"type": "session_meta", "payload": {"id": sid, "cwd": "/work/app", "originator": "codex_cli_rs"}}
        path.write_text(json.dumps(meta) + "\n", encoding="utf-8")
        files.append(path)
    return files


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def phase(label: str, pid: int, seconds: float, results: dict[str, dict[str, float]]) -> None:
    results[label] = figures = measure(pid, seconds)
    print(
        f"{label:<18} CPU {figures['total']:6.2f} %   per second p50 {figures['p50']:6.2f} %  "
        f"p95 {figures['p95']:6.2f} %",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hive-bench-cpu-", dir="/tmp"))
    results: dict[str, dict[str, float]] = {}
    settle = min(5.0, args.seconds / 4)
    try:
        paths, home, pid = sidecar(folder, "baseline")
        files = transcripts(home.parent / "elsewhere")  # not followed by anyone
        time.sleep(settle)
        phase("baseline, idle", pid, args.seconds, results)
        with Appender(files):
            phase("baseline, busy", pid, args.seconds, results)
        cli(paths, "stop")

        paths, home, pid = sidecar(folder, "managed")
        files = transcripts(home)
        for path in files:
            payload = {
                "session_id": path.stem,
                "cwd": "/work/app",
                "hook_event_name": "SessionStart",
                "source": "startup",
                "transcript_path": str(path),
            }
            request(
                paths, "hook", harness="claude-code", event="SessionStart", payload=payload, env={"CLAUDECODE": "1"}
            )
        wait_until(
            lambda: (
                sum(
                    1
                    for s in request(paths, "who")["sessions"]  # type: ignore[union-attr]
                    if str(s["doing"]).startswith("task")
                )
                == SESSIONS
            ),
            "doing of all 20",
        )
        time.sleep(settle)
        phase("managed, idle", pid, args.seconds, results)
        with Appender(files):
            phase("managed, busy", pid, args.seconds, results)
        doing = {s["doing"] for s in request(paths, "who")["sessions"]}  # type: ignore[union-attr]
        print(f"  doing followed the appends: {sorted(doing)[:2]} …")
        cli(paths, "stop")

        paths, home, pid = sidecar(folder, "unmanaged")
        files = rollouts(home)
        wait_until(lambda: len(request(paths, "who")["sessions"]) == SESSIONS, "discovery of all 20")  # type: ignore[arg-type]
        time.sleep(settle)
        with Appender(files):
            phase("unmanaged, busy", pid, args.seconds, results)
        cli(paths, "stop")

        print("== summary ==")
        base_idle, base_busy = results["baseline, idle"]["total"], results["baseline, busy"]["total"]
        for label, figures in results.items():
            base = base_busy if "busy" in label else base_idle
            extra = figures["total"] - base
            print(f"{label:<18} {figures['total']:6.2f} %  ({extra:+.2f} points over the same-run baseline)")
        idle = results["managed, idle"]["total"]
        print(
            f"idle CPU with 20 followed transcripts: {idle:.2f} %   aim under {AIM_IDLE:.0f} %   "
            f"{'met' if idle < AIM_IDLE else 'above'}"
        )
    finally:
        for pid in STARTED:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed {folder}")


if __name__ == "__main__":
    main()

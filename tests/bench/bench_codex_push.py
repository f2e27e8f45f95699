"""Benchmark of the Codex push: what handing a message to a Codex thread through its app-server costs.

Run it from the repository root with the project's venv (the Codex CLI from .cache/npm):

    .venv/bin/python tests/bench/bench_codex_push.py           # full run, 100 pushes
    .venv/bin/python tests/bench/bench_codex_push.py --quick   # smoke run, 10 pushes

It starts a real ``codex app-server --listen unix://`` (the TUI's own daemon transport) in a fresh
CODEX_HOME under /tmp, pointed at the scripted model server of the end-to-end tests on 127.0.0.1,
and opens one thread on it as the TUI does. Pushes run one at a time into the idle thread; each
waits for its turn to finish (not timed) before the next. It prints p50 and p99 of:

- baseline: a fresh connection that only initializes and reads the thread (``thread/read``), the
  floor any client of the daemon pays, in the same run against the same daemon;
- push accepted: hive's ``send`` (connect, initialize, ``thread/read``, ``turn/start``) until Codex
  answered that it took the input, which is when the sidecar holds the mail for the TUI (read comes
  later, once the rollout shows a model answer after it);
- push to model: from the same start until the model server received the request carrying it;

and each one's ratio to the baseline. Nothing is asserted. The daemon is stopped and the folder removed.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hive.integrations.codex import app_server  # noqa: E402
from tests.e2e.model_server import ModelServer, Script  # noqa: E402
from tests.e2e.test_codex import CONFIG, PORT_PLACEHOLDER  # noqa: E402

CODEX = ROOT / ".cache" / "npm" / "node_modules" / ".bin" / "codex"
WARMUP = 3


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


async def read_only(socket: Path, thread: str) -> None:
    async with app_server.connect(socket, client="bench") as rpc:
        await rpc.call("thread/read", {"threadId": thread})


async def idle(socket: Path, thread: str) -> None:
    while True:
        async with app_server.connect(socket, client="bench") as rpc:
            read = await rpc.call("thread/read", {"threadId": thread})
        if read["thread"]["status"]["type"] == "idle":
            return
        await anyio.sleep(0.02)


def arrival(model: ModelServer, marker: str) -> list[int]:
    return model.wait_for(lambda: model.seen(marker), 60, marker)


async def measure(model: ModelServer, socket: Path, thread: str, count: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "thread/read on a fresh connection (baseline)": [],
        "push accepted": [],
        "push to model": [],
    }
    for n in range(WARMUP + count):
        start = time.perf_counter()
        await read_only(socket, thread)
        baseline = time.perf_counter() - start
        marker = f"PUSHMARK_bench_{n}_"
        start_mono, start = time.monotonic(), time.perf_counter()
        await app_server.send(socket, thread, f"{marker} a teammate asks")
        accepted = time.perf_counter() - start
        seen = await anyio.to_thread.run_sync(arrival, model, marker)
        arrived = model.requests[seen[0]].at - start_mono
        await idle(socket, thread)
        if n >= WARMUP:
            results["thread/read on a fresh connection (baseline)"].append(baseline)
            results["push accepted"].append(accepted)
            results["push to model"].append(arrived)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 pushes")
    args = parser.parse_args()
    count = 10 if args.quick else 100
    if not CODEX.exists():
        sys.exit(f"{CODEX} is missing: install the Codex CLI into .cache/npm (bash .ci/run)")
    root = Path(tempfile.mkdtemp(prefix="hive-bench-cx-", dir="/tmp"))
    home = root / ".codex"
    home.mkdir()
    process = None
    try:
        with ModelServer(Script()) as model:
            (home / "config.toml").write_text(CONFIG.replace(PORT_PLACEHOLDER, model.url), encoding="utf-8")
            env = {"HOME": str(root), "CODEX_HOME": str(home), "FAKE_OPENAI_KEY": "sk-fake", "PATH": "/usr/bin:/bin"}
            process = subprocess.Popen(
                [str(CODEX), "app-server", "--listen", "unix://"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            socket = home / app_server.SOCKET

            async def run() -> dict[str, list[float]]:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        async with app_server.connect(socket, client="bench") as rpc:
                            thread = (await rpc.call("thread/start", {"cwd": str(root)}))["thread"]["id"]
                        break
                    except app_server.PushFailed:
                        if time.monotonic() > deadline or process.poll() is not None:
                            raise
                        await anyio.sleep(0.1)
                return await measure(model, socket, thread, count)

            results = anyio.run(run)
        base = percentile(results["thread/read on a fresh connection (baseline)"], 50)
        print(f"codex app-server push, {count} pushes into an idle thread (turn/start), one at a time")
        print(f"{'figure':<48} {'p50 ms':>8} {'p99 ms':>8} {'p50 ratio':>10}")
        for name, samples in results.items():
            p50, p99 = percentile(samples, 50), percentile(samples, 99)
            print(f"{name:<48} {p50 * 1000:8.2f} {p99 * 1000:8.2f} {p50 / base:9.2f}x")
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
        print(f"daemon stopped, {root} removed")


if __name__ == "__main__":
    main()

"""Benchmark of how soon ``hive mcp`` answers ``initialize`` and ``tools/list`` after it is spawned.

Claude Code waits a few seconds for an MCP server before the first turn; a server that answers
later leaves that turn without hive's tools. Run it from the repository root with the venv:

    .venv/bin/python tests/bench/bench_mcp_start.py            # 20 samples per figure
    .venv/bin/python tests/bench/bench_mcp_start.py --quick    # 3 samples per figure

It makes a fresh ``HIVE_HOME`` under /tmp, starts a real sidecar there, then spawns each command
as a new process, the way a harness does, in round-robin order (so machine load hits every
figure alike):

- ``python -c pass``: a bare interpreter start, the floor;
- ``python -c "import mcp"``: the floor plus the MCP SDK's package;
- ``hive mcp`` (the console script) and ``python -m hive.sidecar.cli mcp``: each is sent
  ``initialize``, then ``notifications/initialized`` and ``tools/list`` as soon as the first
  reply is in, and the times from spawn to each reply are taken.

It prints p50 and p90 of each figure and each p50's ratio to both baselines. Nothing is
asserted. At the end the sidecar is stopped and the folder removed.

Measured on the loaded 2-core dev machine (8 samples, p50 initialize, ratio to ``import mcp``):
``hive mcp`` 3022 ms (1.21x) when it went through the CLI parser, 2556 ms (1.16x) once the
console script goes straight to the server; ``python -m hive.sidecar.cli mcp`` still loads the
CLI (1.3-2.0x). Module counts are steadier than times there: 748 imported before the server
answered, now 615, of which 594 are the SDK's own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from bench_hook import percentile, request  # this folder is on sys.path when a benchmark runs

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import start_detached

WARMUP = 1
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "bench"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _write(stream: IO[bytes], message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def _reply(stream: IO[bytes], wanted: int) -> dict[str, Any]:
    while line := stream.readline():
        message = json.loads(line)
        if message.get("id") == wanted:
            return message
    raise RuntimeError(f"the MCP server closed stdout before answering request {wanted}")


def time_mcp(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawn to the initialize reply and to the tools/list reply."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdin is not None and process.stdout is not None
    try:
        _write(process.stdin, INITIALIZE)
        first = _reply(process.stdout, 1)
        initialized = time.perf_counter() - start
        if "result" not in first:
            raise RuntimeError(f"initialize failed: {first}")
        _write(process.stdin, INITIALIZED)
        _write(process.stdin, TOOLS_LIST)
        listed = _reply(process.stdout, 2)
        tools_listed = time.perf_counter() - start
        if not listed.get("result", {}).get("tools"):
            raise RuntimeError(f"tools/list failed: {listed}")
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return initialized, tools_listed


def time_run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("-n", type=int, default=None, help="samples per figure (default 20, 3 with --quick)")
    args = parser.parse_args(argv)
    count = args.n or (3 if args.quick else 20)
    home = Path(tempfile.mkdtemp(prefix="hive-bench-", dir="/tmp"))
    (home / "config.toml").write_text(
        'person = "alice"\nmachine = "bench"\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n', encoding="utf-8"
    )
    paths = StatePaths(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVE_", "CLAUDE", "CODEX", "GEMINI", "CURSOR"))}
    env["HIVE_HOME"] = str(home)
    try:
        if not start_detached(paths):
            raise RuntimeError((home / "sidecar.stderr").read_text())
        return run(env, count)
    finally:
        try:
            pid = request(paths, {"op": "shutdown"})["pid"]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.02)
        except OSError:
            pass
        shutil.rmtree(home, ignore_errors=True)
        print(f"sidecar stopped, {home} removed")


def run(env: dict[str, str], count: int) -> int:
    python = sys.executable
    hive = shutil.which("hive", path=os.path.dirname(python)) or "hive"
    print(f"interpreter  {python} (Python {sys.version.split()[0]})")
    print(f"samples      {count} per figure, after {WARMUP} warm-up round, round-robin\n")
    plain = {"python -c pass": [python, "-c", "pass"], 'python -c "import mcp"': [python, "-c", "import mcp"]}
    servers = {"hive mcp": [hive, "mcp"], "python -m hive.sidecar.cli mcp": [python, "-m", "hive.sidecar.cli", "mcp"]}
    samples: dict[str, list[float]] = {name: [] for name in plain}
    for name in servers:
        samples[f"{name}: initialize"] = []
        samples[f"{name}: tools/list"] = []
    for round_number in range(WARMUP + count):
        keep = round_number >= WARMUP
        for name, cmd in plain.items():
            elapsed = time_run(cmd, env)
            if keep:
                samples[name].append(elapsed)
        for name, cmd in servers.items():
            initialized, listed = time_mcp(cmd, env)
            if keep:
                samples[f"{name}: initialize"].append(initialized)
                samples[f"{name}: tools/list"].append(listed)
    bare = percentile(samples["python -c pass"], 50)
    sdk = percentile(samples['python -c "import mcp"'], 50)
    print(f"{'figure':46} {'p50 ms':>8} {'p90 ms':>8} {'/ bare':>8} {'/ mcp':>8}")
    for name, values in samples.items():
        p50, p90 = percentile(values, 50), percentile(values, 90)
        print(f"{name:46} {p50 * 1000:8.0f} {p90 * 1000:8.0f} {p50 / bare:7.2f}x {p50 / sdk:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

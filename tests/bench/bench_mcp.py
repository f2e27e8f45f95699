"""Benchmark of ``hive mcp``: what a ``list_team`` call costs through the real MCP client.

Run it from the repository root with the project's venv:

    /work/venv/bin/python tests/bench/bench_mcp.py           # full run, 1000 calls per figure
    /work/venv/bin/python tests/bench/bench_mcp.py --quick   # smoke run, 50 calls per figure

It makes a fresh ``HIVE_HOME`` under /tmp, starts a real sidecar there, and starts ``hive mcp``
as a subprocess driven by the official MCP client over stdio (the legacy initialize handshake,
as the harnesses speak it). Calls run one at a time. It prints p50 and p99 of:

- baseline: the raw sidecar ``who`` op over the client library's unix socket connection, in
  the same run against the same sidecar: the floor no MCP server could beat;
- ``list_team`` with the session id in ``_meta`` (Codex, pi): one ``who`` plus one ``unread``
  for the notice, behind JSON-RPC over pipes and the SDK's dispatch;
- ``list_team`` with no id at all (Claude Code, Gemini without a stamping hook): an ``attach``
  by process ancestry comes first, so three sidecar round trips.

and each one's ratio to the baseline. An MCP ``ping`` shows what the SDK and the pipes cost
before hive does anything. The figures are for people to read; nothing is asserted.
At the end the sidecar is stopped with ``hive stop`` and the folder removed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import Implementation

from hive.sidecar.base.paths import StatePaths
from hive.sidecar.client import Client as SidecarClient
from hive.sidecar.client import start_detached

HIVE = [sys.executable, "-m", "hive.sidecar.cli"]
WARMUP = 20


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    rank = max(math.ceil(pct / 100 * len(ordered)) - 1, 0)
    return ordered[rank]


async def timed(count: int, once: Callable[[], Awaitable[object]]) -> list[float]:
    for _ in range(WARMUP):
        await once()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - start)
    return samples


async def measure(home: Path, count: int) -> dict[str, list[float]]:
    paths = StatePaths(home)
    results: dict[str, list[float]] = {}
    async with SidecarClient.open(paths, autostart=False) as raw:
        await raw.call("register", session={"key": "bench-baseline", "agent": "bench", "cwd": str(home)})
        results["sidecar who op (baseline)"] = await timed(count, lambda: raw.call("who", session="bench-baseline"))

    params = StdioServerParameters(command=HIVE[0], args=[*HIVE[1:], "mcp"], env={"HIVE_HOME": str(home)}, cwd=home)
    with open(home / "mcp.stderr", "a", encoding="utf-8") as errlog:  # noqa: ASYNC230 (set-up, not timed)
        client = Client(
            stdio_client(params, errlog=errlog),
            mode="legacy",
            client_info=Implementation(name="codex-mcp-client", version="bench"),
        )
        async with client:

            async def with_meta() -> object:
                result = await client.call_tool("list_team", {}, meta={"sessionId": "bench-codex"})
                assert not result.is_error, result
                return result

            async def by_ancestry() -> object:
                result = await client.call_tool("list_team", {})
                assert not result.is_error, result
                return result

            async def ping() -> object:
                # Deprecated from protocol 2026-07-28 on, but this connection speaks the legacy one.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    return await client.send_ping()

            results["MCP ping (SDK and pipe floor)"] = await timed(count, ping)
            results["MCP list_team, id in _meta"] = await timed(count, with_meta)
            results["MCP list_team, id by ancestry"] = await timed(count, by_ancestry)
    return results


def report(results: dict[str, list[float]]) -> None:
    baseline = results["sidecar who op (baseline)"]
    base50, base99 = percentile(baseline, 50), percentile(baseline, 99)
    print(f"{'round trip':32} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'p50 ratio':>10} {'p99 ratio':>10}")
    for name, samples in results.items():
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        print(
            f"{name:32} {len(samples):>6} {p50 * 1000:>8.3f} {p99 * 1000:>8.3f} "
            f"{p50 / base50:>9.1f}x {p99 / base99:>9.1f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (used by the test suite)")
    parser.add_argument("--calls", type=int, default=None, help="calls per figure (default 1000, quick 50)")
    args = parser.parse_args(argv)
    count = args.calls or (50 if args.quick else 1000)

    home = Path(tempfile.mkdtemp(prefix="hive-bench-mcp-", dir="/tmp"))
    (home / "config.toml").write_text(
        'person = "bench"\nmachine = "bench"\n[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n', encoding="utf-8"
    )
    env = {**os.environ, "HIVE_HOME": str(home)}
    try:
        if not start_detached(StatePaths(home)):
            print(f"the sidecar did not start; see {home / 'sidecar.stderr'}", file=sys.stderr)
            return 1
        print(f"hive mcp benchmark: {count} sequential calls per figure, Python {sys.version.split()[0]}")
        results = anyio.run(measure, home, count)
        report(results)
        return 0
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run([*HIVE, "stop"], env=env, capture_output=True, timeout=30, check=False)
        shutil.rmtree(home, ignore_errors=True)
        print(f"stopped the sidecar and removed {home}")


if __name__ == "__main__":
    sys.exit(main())

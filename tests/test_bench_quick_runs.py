"""Benchmarks that had no smoke run still run: each is started in its shortest mode.

``tests/bench`` is not collected, so a benchmark nobody runs rots unseen. Only that the script
finishes cleanly and prints its summary figures is checked; the figures themselves are for people
to read (each script's docstring says what they mean), never asserted on: CI machines are noisy.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench"

# script, its shortest arguments, the figure rows its summary must print with a number
RUNS = {
    "bench_stop.py": (["--quick", "--cycles", "1"], ["hive status (floor)", "hive stop", "shutdown (stop - floor)"]),
    "bench_mcp_start.py": (["--quick", "-n", "1"], ["python -c pass", "hive mcp"]),
    "bench_codex_push.py": (["--quick"], ["push to model"]),
    "bench_doing_cpu.py": (["--seconds", "2"], ["baseline, idle", "managed, busy", "unmanaged, busy"]),
    "bench_plugins.py": (
        ["--quick"],
        [
            "opencode tool.execute.after, sidecar running",
            "pi check_inbox wake-up",
            "opencode tool.execute.after, no sidecar",
        ],
    ),
}


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_benchmark_finishes_and_prints_its_figures(script: str) -> None:
    args, rows = RUNS[script]
    completed = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=BENCH.parents[1],
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for row in rows:
        line = next((line for line in completed.stdout.splitlines() if line.lstrip().startswith(row)), "")
        assert re.search(r"\d", line[len(row) :]) and "nan" not in line.lower(), f"no figure for {row!r}\n{report}"

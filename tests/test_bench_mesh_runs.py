"""The mesh benchmark still runs: ``tests/bench`` is not collected, so this runs it in smoke mode.

Only that it finishes cleanly and prints every section with a number is checked; its figures
are for people to read (see the script's docstring), never asserted on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_mesh.py"

SECTIONS = (
    "== 4. a 6-machine mesh on one host",
    "== 1. send -> inbox latency between two machines",
    "== 2. throughput between two machines",
    "== 3. presence propagation",
    "== summary ==",
)


def test_mesh_benchmark_quick_run() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300, check=False
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for heading in SECTIONS:
        assert heading in completed.stdout, f"missing {heading!r}\n{report}"
    for figure in ("send -> inbox p50", "throughput", "presence p50", "6-machine mesh converged", "RSS per sidecar"):
        row = next((line for line in completed.stdout.splitlines() if line.startswith(figure)), "")
        assert row and "nan" not in row.lower(), f"no figure for {figure!r}\n{report}"
    assert "removed" in completed.stdout.splitlines()[-1], report

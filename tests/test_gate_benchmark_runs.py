"""The gate benchmark still runs: ``tests/bench`` is not collected, so this runs it in smoke mode.

Only that it finishes and prints every section with a figure is checked; the figures are for
people to read (see the script's docstring), never asserted on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_gate.py"
SECTIONS = (
    "== 1. fill",
    "== 2. decisions with",
    "== 3. breakpoints",
    "== 4. wake-ups",
    "== 5. ledger queries",
    "== summary ==",
)


def test_gate_benchmark_quick_run() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=180, check=False
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for heading in SECTIONS:
        assert heading in completed.stdout, f"missing {heading!r}\n{report}"
    for figure in ("decisions, batches of 100", "decision procedure in memory", "ledger, latest 500", "why, one item"):
        row = next((line for line in completed.stdout.splitlines() if line.startswith(figure)), "")
        assert row and "nan" not in row.lower(), f"no figure for {figure!r}\n{report}"
    assert completed.stdout.splitlines()[-1].startswith("removed "), report

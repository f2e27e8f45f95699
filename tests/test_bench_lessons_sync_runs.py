"""The lesson replication benchmark still runs: ``tests/bench`` is not collected, so this runs it in
smoke mode (1,000 entries). Only that it finishes and prints every figure is checked; the figures
themselves are for people (see the script's docstring), never asserted on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_lessons_sync.py"


def test_lesson_sync_benchmark_quick_run() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for figure in ("local:", "catch-up:", "live:", "replication of 1000 entries between two machines:"):
        row = next((line for line in completed.stdout.splitlines() if line.startswith(figure)), "")
        assert row and "nan" not in row.lower(), f"no figure for {figure!r}\n{report}"
    assert "removed" in completed.stdout.splitlines()[-1], report

"""The event ingest benchmark still runs (``tests/bench`` is not collected): smoke mode, figures not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_events.py"


def test_events_benchmark_quick_run() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=180, check=False
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for figure in ("events/s durable, store", "events/s durable, hook op", "presence latency p50"):
        row = next((line for line in completed.stdout.splitlines() if line.startswith(figure)), "")
        assert row and "nan" not in row.lower(), report
    assert "removed" in completed.stdout.splitlines()[-1], report

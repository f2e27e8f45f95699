"""The anchor benchmark still runs: ``tests/bench`` is not collected, so this runs it in smoke mode.

Only that it finishes cleanly and prints every section with a number is checked; its figures are for
people to read (see the script's docstring), never asserted on. It builds network namespaces
(tests/reach/natsim.py), so it needs what the [reach] tests need: root and nftables.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent / "bench" / "bench_relay.py"

SECTIONS = (
    "== 1. send -> inbox: relayed through the anchor",
    "== 2. custody",
    "== 3. one anchor with",
    "== summary ==",
)
FIGURES = (
    "relayed send -> inbox p50",
    "relayed send -> inbox p99",
    "custody anchored, 1 in flight",
    "custody hand-over",
    "anchor idle CPU",
    "anchor VmRSS",
    "member RSS",
)


def test_relay_benchmark_quick_run() -> None:
    if shutil.which("nft") is None:
        pytest.fail("nft is missing: install the packages in .ci/apt-packages (nftables)", pytrace=False)
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        cwd=BENCH.parents[2],
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    for heading in SECTIONS:
        assert heading in completed.stdout, f"missing {heading!r}\n{report}"
    for figure in FIGURES:
        row = next((line for line in completed.stdout.splitlines() if line.startswith(figure)), "")
        assert re.search(r"\d", row[len(figure) :]) and "nan" not in row.lower(), f"no figure for {figure!r}\n{report}"
    assert "removed" in completed.stdout.splitlines()[-1], report

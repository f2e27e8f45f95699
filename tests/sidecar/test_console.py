"""The installed ``hive`` command: ``hive hook`` (what committed project files name) stays light."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HIVE = Path(sys.executable).parent / "hive"


def test_hive_hook_answers_without_loading_the_cli_the_mesh_or_the_gate(hive: Any) -> None:
    # PYTHONPROFILEIMPORTTIME makes the console script list every module it imported on stderr.
    result = subprocess.run(
        [str(HIVE), "hook", "claude-code", "PreToolUse"], input="{}", capture_output=True, text=True,
        env={**hive.env, "PYTHONPROFILEIMPORTTIME": "1"}, timeout=60,
    )
    assert result.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "hive.integrations.hook_client" in imported
    for heavy in ("hive.sidecar.cli", "hive.sidecar.mesh", "hive.sidecar.gate", "aioquic", "anyio"):
        assert heavy not in imported, heavy


def test_every_other_command_still_goes_to_the_cli(hive: Any) -> None:
    result = subprocess.run([str(HIVE), "hook", "--help"], capture_output=True, text=True,
                            env=hive.env, timeout=60)
    assert result.returncode == 0 and "--command" in result.stdout
    status = subprocess.run([str(HIVE), "status"], capture_output=True, text=True, env=hive.env, timeout=60)
    assert status.returncode == 0 and str(hive.pid()) in status.stdout + status.stderr
    assert os.path.exists(hive.paths.socket)

"""The distribution: one console script, everything under the hive.* namespace, skills as data."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import REPO


def test_the_wheel_installs_only_the_hive_namespace_with_its_skills_and_console_script(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(REPO)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("hive_agents-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.startswith("hive_agents-")}
    assert top_level == {"hive"}
    for expected in ("hive/sidecar/server.py", "hive/sidecar/cli.py", "hive/integrations/__init__.py",
                     "hive/installer/__init__.py", "hive/skills/hive/SKILL.md",
                     "hive/integrations/opencode/plugin_template.ts", "hive/integrations/pi/extension_template.ts"):
        assert expected in names, expected
    entry_points = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "hive = hive.sidecar.cli:main" in entry_points


def test_the_hive_command_runs_from_the_installed_environment() -> None:
    hive = Path(sys.executable).parent / "hive"
    result = subprocess.run([str(hive), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "who" in result.stdout and "send" in result.stdout

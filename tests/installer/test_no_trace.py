"""``hive setup --dry-run`` and ``hive doctor`` look without touching: not one file under HOME changes,
even with every real harness CLI on PATH (their ``--version`` and app-servers write into HOME)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.installer.conftest import CLIS, Machine, machine_context, plan_rows, require_cli


def listing(root: Path) -> dict[str, tuple[int, int] | str]:
    """Every file and folder under ``root``: (size, mtime) of each file, mtime of each folder."""
    found: dict[str, tuple[int, int] | str] = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (
                f"folder {info.st_mtime_ns}"
                if path.is_dir() and not path.is_symlink()
                else (info.st_size, info.st_mtime_ns)
            )
    return found


def differences(before: dict[str, tuple[int, int] | str], after: dict[str, tuple[int, int] | str]) -> list[str]:
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


@pytest.fixture
def cli_machine() -> Iterator[Machine]:
    for harness in CLIS:
        require_cli(harness)
    with machine_context(with_clis=True) as machine:
        yield machine


def test_dry_run_and_doctor_change_nothing_under_home_with_every_harness_cli_on_path(cli_machine: Machine) -> None:
    machine = cli_machine
    before = listing(machine.home)
    dry = machine.setup("--dry-run")
    assert differences(before, listing(machine.home)) == []
    # The versions still show: read from each CLI's npm package.json, not from running it.
    rows = plan_rows(dry)
    for harness, (_, _, version) in CLIS.items():
        assert f" {version} " in rows[harness], rows[harness]

    doctor = machine.hive("doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert differences(before, listing(machine.home)) == []

    # Wired, doctor asks Codex itself about hive's hooks (its app-server writes databases and
    # skills into its home on start): still nothing under HOME changes.
    machine.setup()
    wired = listing(machine.home)
    doctor = machine.hive("doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = {(c["area"], c["name"]): c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["codex", "hooks trusted"]["status"] == "todo", checks["codex", "hooks trusted"]
    assert checks["claude-code", "installed"]["detail"].startswith(f"{CLIS['claude-code'][2]} at ")
    assert differences(wired, listing(machine.home)) == []


def test_a_cli_without_package_metadata_is_asked_its_version_in_a_throwaway_home(
    machine: Machine, tmp_path: Path
) -> None:
    # A native install (no npm package.json around it) that, like the real CLIs, writes into HOME when run.
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    claude = bin_folder / "claude"
    claude.write_text(
        '#!/bin/sh\nmkdir -p "$HOME/.claude" && echo x > "$HOME/.claude/probe.tmp"\n'
        'mkdir -p "$XDG_STATE_HOME/claude"\necho "2.3.4 (Claude Code)"\n'
    )
    claude.chmod(0o755)
    before = listing(machine.home)
    done = machine.hive(
        "setup", "--dry-run", "--only", "claude", env=machine.env(PATH=f"{bin_folder}:/usr/local/bin:/usr/bin:/bin")
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("claude-code "))
    assert " 2.3.4 " in row
    assert differences(before, listing(machine.home)) == []

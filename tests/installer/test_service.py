"""``hive setup --service``: the unit file's content, and that ``--remove`` takes it away again.

The commands run with a PATH that holds no ``systemctl``, so no test can reach the service
manager of the machine running the tests; hive then writes the unit and prints the command
that enables it.
"""

from __future__ import annotations

import plistlib
import sys
from pathlib import Path

from hive.installer import service
from tests.installer.conftest import Machine


def test_the_systemd_unit_runs_the_sidecar_in_the_foreground_and_restarts_it() -> None:
    unit = service.systemd_unit(("/opt/my tools/bin/hive",), {"HIVE_HOME": "/srv/hive state"})
    assert unit == (
        "[Unit]\n"
        "Description=hive sidecar: your team's coding agents as one network\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        'ExecStart="/opt/my tools/bin/hive" sidecar\n'
        'Environment="HIVE_HOME=/srv/hive state"\n'
        "Restart=on-failure\n"
        "RestartSec=5\n"
        "\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def test_systemd_specials_in_paths_are_escaped() -> None:
    unit = service.systemd_unit(("/home/a%b/$HOME/hive",), {})
    assert 'ExecStart="/home/a%%b/$$HOME/hive" sidecar' in unit


def test_the_launchd_agent_runs_the_sidecar_at_login_and_again_if_it_fails() -> None:
    plist = plistlib.loads(service.launchd_plist(("/opt/hive/bin/hive",), {"HIVE_HOME": "/x"}, Path("/x/log")).encode())
    assert plist == {
        "Label": "dev.hive.sidecar",
        "ProgramArguments": ["/opt/hive/bin/hive", "sidecar"],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "StandardErrorPath": "/x/log",
        "EnvironmentVariables": {"HIVE_HOME": "/x"},
    }


def test_setup_service_writes_the_unit_and_remove_takes_it_away(machine: Machine, tmp_path: Path) -> None:
    env = machine.env(PATH=str(tmp_path))  # nothing on PATH: no systemctl, no harness CLI
    original = machine.snapshot()
    dry = machine.hive("setup", "--service", "--dry-run", "--diff", "--only", "claude", env=env)
    assert "+++ b/~/.config/systemd/user/hive-sidecar.service\n" in dry.stdout and "+ExecStart=" in dry.stdout
    assert machine.snapshot() == original
    done = machine.hive("setup", "--service", "--only", "claude", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    unit = machine.home / ".config" / "systemd" / "user" / "hive-sidecar.service"
    if sys.platform == "darwin":
        unit = machine.home / "Library" / "LaunchAgents" / "dev.hive.sidecar.plist"
    text = unit.read_text()
    hive = Path(sys.executable).parent / "hive"
    assert f"ExecStart={hive} sidecar\n" in text
    assert f"Environment=HIVE_HOME={machine.state}\n" in text
    assert (
        "no systemd user manager answers here; when one does, run: systemctl --user daemon-reload && "
        "systemctl --user enable --now hive-sidecar.service"
    ) in done.stdout
    assert machine.manifest["service"] == {"path": str(unit), "manager": "systemd"}

    # Idempotent, like every other file hive owns.
    wired = machine.snapshot()
    assert machine.hive("setup", "--service", "--only", "claude", env=env).returncode == 0
    assert machine.snapshot() == wired

    doctor = machine.hive("doctor", env=env)
    assert "unit file" in doctor.stdout and "hive-sidecar.service" in doctor.stdout

    # Removing only a harness keeps the service; a full removal takes it away with its folders.
    machine.hive("setup", "--remove", "--only", "claude", env=env)
    assert unit.exists()
    done = machine.hive("setup", "--remove", env=env)
    assert done.returncode == 0 and "hive-sidecar.service: service removed" in done.stdout
    assert machine.snapshot() == original
    assert not (machine.home / ".config" / "systemd").exists()

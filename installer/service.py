"""``hive setup --service``: run the sidecar as a login service instead of starting it on demand.

Linux gets a systemd user unit, macOS a launchd agent. The unit file is written like any other
file hive owns (backed up, recorded in the manifest, removed by ``--remove``); enabling it is
left to the service manager and done only when one is reachable, so a container or an SSH
session without a user manager still gets the file and the one command that turns it on.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from hive.sidecar.base.paths import state_home

from . import fileops
from .commands import hive_argv
from .errors import display
from .manifest import Backups, FileEntry, Manifest

UNIT_NAME = "hive-sidecar.service"
LAUNCHD_LABEL = "dev.hive.sidecar"
MANAGER_TIMEOUT = 10.0


def _systemd_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+:@=," for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def _environment() -> dict[str, str]:
    """The variables the service needs to reach the same state folder as this shell's hive."""
    keep = {"HIVE_HOME"} & os.environ.keys()
    return {name: os.environ[name] for name in sorted(keep)}


def systemd_unit(argv: tuple[str, ...], env: dict[str, str]) -> str:
    """The user unit text for a sidecar started as ``argv + ("sidecar",)``."""
    lines = [
        "[Unit]",
        "Description=hive sidecar: your team's coding agents as one network",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(_systemd_quote(arg) for arg in (*argv, "sidecar")),
        *(f"Environment={_systemd_quote(f'{k}={v}')}" for k, v in env.items()),
        # A sidecar already started on demand holds the lock; the unit retries until it is gone.
        "Restart=on-failure",
        "RestartSec=5",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def launchd_plist(argv: tuple[str, ...], env: dict[str, str], log: Path) -> str:
    payload: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": [*argv, "sidecar"],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "StandardErrorPath": str(log),
    }
    if env:
        payload["EnvironmentVariables"] = env
    return plistlib.dumps(payload).decode("utf-8")


def unit_path() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    config = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"
    return config / "systemd" / "user" / UNIT_NAME


def unit_text() -> str:
    if sys.platform == "darwin":
        return launchd_plist(hive_argv(), _environment(), state_home() / "sidecar.service.log")
    return systemd_unit(hive_argv(), _environment())


def _manager(*args: str) -> tuple[bool, str]:
    """Run the service manager; (succeeded, what it said)."""
    try:
        done = subprocess.run(
            list(args), capture_output=True, text=True, timeout=MANAGER_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return done.returncode == 0, (done.stderr or done.stdout).strip()


def systemd_available() -> bool:
    """Whether a systemd user manager answers (it does not in most containers and bare SSH logins)."""
    return shutil.which("systemctl") is not None and _manager("systemctl", "--user", "show-environment")[0]


def _activate(out: TextIO) -> None:
    if sys.platform == "darwin":
        domain = f"gui/{os.getuid()}"
        if shutil.which("launchctl") is None:
            print(f"  load it with: launchctl bootstrap {domain} {unit_path()}", file=out)
            return
        ok, said = _manager("launchctl", "bootstrap", domain, str(unit_path()))
        print(f"  {'loaded with launchctl' if ok else f'launchctl bootstrap failed: {said}'}", file=out)
        return
    enable = f"systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}"
    if not systemd_available():
        print(f"  no systemd user manager answers here; when one does, run: {enable}", file=out)
        return
    ok, said = _manager("systemctl", "--user", "daemon-reload")
    if ok:
        ok, said = _manager("systemctl", "--user", "enable", "--now", UNIT_NAME)
    print(f"  {'enabled and started' if ok else f'systemctl failed ({said}); run: {enable}'}", file=out)


def install(manifest: Manifest, backups: Backups, out: TextIO) -> None:
    """Write (or refresh) the unit file and turn it on where a service manager answers."""
    path = unit_path()
    text = unit_text().encode("utf-8")
    before = fileops.read_or_none(path)
    entry = manifest.files.get(path)
    if before != text:
        backup = backups.save(path, before) if before is not None else None
        dirs = fileops.write_atomic(path, text, mode=0o644)
        backups.note(path, "created" if before is None else "changed", backup, ["service"])
        if entry is None:
            entry = FileEntry(
                path=path,
                format="text",
                scope="user",
                harnesses=["service"],
                created=before is None,
                original=backup,
                restorable=True,
                written=None,
                dirs=[str(d) for d in dirs],
            )
            manifest.files[path] = entry
        elif entry.written != fileops.sha256(before):
            entry.restorable = False
        entry.written = fileops.sha256(text)
    elif entry is None:
        manifest.files[path] = FileEntry(
            path=path,
            format="text",
            scope="user",
            harnesses=["service"],
            created=False,
            original=None,
            restorable=False,
            written=fileops.sha256(text),
        )
    manifest.service = {"path": str(path), "manager": "launchd" if sys.platform == "darwin" else "systemd"}
    print(f"\nservice: {display(path)}", file=out)
    _activate(out)


def remove(manifest: Manifest, backups: Backups, out: TextIO) -> None:
    """Stop and disable the service, then remove its unit file (restoring one hive replaced)."""
    if manifest.service is None:
        return
    path = Path(manifest.service["path"])
    if manifest.service.get("manager") == "launchd":
        if shutil.which("launchctl"):
            _manager("launchctl", "bootout", f"gui/{os.getuid()}/{LAUNCHD_LABEL}")
    elif systemd_available():
        _manager("systemctl", "--user", "disable", "--now", UNIT_NAME)
    entry = manifest.files.pop(path, None)
    current = fileops.read_or_none(path)
    if current is not None:
        backup = backups.save(path, current)
        if entry is not None and entry.original is not None:
            fileops.write_atomic(path, (manifest.folder / entry.original).read_bytes())
        else:
            fileops.remove_file(path)
        backups.note(path, "removed", backup, ["service"])
    if entry is not None:
        fileops.remove_empty_dirs([Path(d) for d in entry.dirs])
    if sys.platform != "darwin" and systemd_available():
        _manager("systemctl", "--user", "daemon-reload")
    manifest.service = None
    print(f"  {display(path)}: service removed", file=out)

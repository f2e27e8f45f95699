"""Steps the lesson tests share: propose through the CLI, review as a person typing at a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..conftest import Hive
from .terminal import run_in_terminal_answering


def propose(
    hive: Hive,
    text: str,
    *,
    kind: str = "gotcha",
    scope: str = "team",
    evidence: tuple[str, ...] = (),
    cwd: Path | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    args = ["lessons", "propose", text, "--kind", kind, "--scope", scope, "--json", *extra]
    for item in evidence or ("file:src/app.py",):
        args += ["--evidence", item]
    result = run(hive, *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def run(hive: Hive, *args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI as a script or an agent's tool would run it: no terminal, no desktop."""
    env = {k: v for k, v in hive.env.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def run_json(hive: Hive, *args: str, cwd: Path | None = None) -> Any:
    result = run(hive, *args, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def at_terminal(hive: Hive, answer: str, *args: str, cwd: Path | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run ``hive ARGS`` with a pty as its controlling terminal; type ``answer`` at its question."""
    env = {k: v for k, v in hive.env.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY")}
    return run_in_terminal_answering(
        env, answer, *args, timeout=timeout, cwd=cwd, prompts=(b"to confirm:", b"leaves it pending):")
    )


def approve(hive: Hive, lesson_id: str, cwd: Path | None = None) -> None:
    """The reviewer approves at their terminal, typing the verdict."""
    code, output = at_terminal(hive, "approve", "lessons", "review", lesson_id, cwd=cwd)
    assert code == 0, output


def state(hive: Hive, lesson_id: str) -> str:
    return str(run_json(hive, "lessons", "show", lesson_id)["lesson"]["state"])


def git_repo(folder: Path, origin: str = "git@github.com:acme/api.git") -> Path:
    """A real repository with one commit and an origin."""
    folder.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "remote", "add", "origin", origin], check=True)
    (folder / "README.md").write_text("hi\n", encoding="utf-8")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    return folder

"""The Codex TUI a push goes through: which process is one, the CODEX_HOME it runs under, its rollouts.

Codex's app-server keeps a closed TUI's thread loaded for a few minutes, and a turn started
there would run with nobody watching; so a push first looks for a Codex TUI process running
under the same CODEX_HOME (psutil: the same on Linux and macOS), and counts none as a failed push.

A Codex TUI is told by its own arguments (:func:`is_tui`): ``argv[0]`` is ``codex`` and no
subcommand is another mode's. Its executable is not enough: ``codex exec`` runs its sandbox helper
as the same binary under ``argv[0]`` = ``codex-linux-sandbox``, which is no TUI.

:class:`CodexAppServer` is what the Codex plugin answers ``hive_app_server`` with
(:mod:`hive.integrations.push`); :mod:`hive.sidecar.mail.codex_push` drives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import psutil

from ..hook_client import start_time
from ..push import Delivery, NotRunning, RunningUi
from .app_server import codex_home, deliver

# Codex subcommands that are not an interactive TUI; any other `codex` process is one.
NOT_TUI = frozenset(
    {
        "app-server",
        "exec",
        "e",
        "queue",
        "mcp",
        "mcp-server",
        "login",
        "logout",
        "apply",
        "a",
        "sandbox",
        "debug",
        "completion",
        "cloud",
        "features",
        "responses-api-proxy",
        "stdio-to-uds",
        "help",
    }
)


def _home_of(environ: dict[str, str] | None) -> Path | None:
    if not environ:
        return None
    if environ.get("CODEX_HOME"):
        return Path(environ["CODEX_HOME"])
    return Path(environ["HOME"]) / ".codex" if environ.get("HOME") else None


def is_tui(argv: list[str]) -> bool:
    """Whether a process's own arguments are an interactive Codex TUI's: the program is ``codex``
    itself and no subcommand is one that is not the TUI.

    Only the arguments tell: Codex runs its sandbox helper as the same binary (``/proc/<pid>/exe``
    is codex) under ``argv[0]`` = ``codex-linux-sandbox`` while ``codex exec`` runs a command, and
    that helper, or any process whose program name is not ``codex``, is never a TUI."""
    if not argv or os.path.basename(argv[0]) != "codex":
        return False
    return not NOT_TUI & set(argv[1:])


def find_tui(home: Path) -> RunningUi | None:
    """The Codex TUI running under CODEX_HOME ``home`` (this user's processes), or None."""
    wanted = os.path.realpath(home)
    for process in psutil.process_iter(["cmdline", "environ"]):
        info = process.info
        argv = info.get("cmdline") or []
        if not is_tui(argv):
            continue
        found = _home_of(info.get("environ"))  # None for another user's process: not ours to push into
        if found is None or os.path.realpath(found) != wanted:
            continue
        binary: Path | None = None
        with contextlib.suppress(psutil.Error, OSError):
            binary = Path(process.exe()) if process.exe() else None
        return RunningUi(process.pid, start_time(process.pid), binary)
    return None


def tui_binary(home: Path) -> Path | bool | None:
    """The executable of a Codex TUI running under ``home`` (True when it runs and its executable
    is hidden); None if there is none."""
    tui = find_tui(home)
    if tui is None:
        return None
    return tui.binary or True


def _which_codex() -> Path | None:
    found = shutil.which("codex")
    return Path(found) if found else None


class CodexAppServer:
    """The TUI's app-server, as :class:`hive.integrations.push.AppServer` asks of it."""

    def home(self, transcript: str) -> Path:
        return codex_home(transcript)

    def running(self, home: Path) -> RunningUi:
        tui = find_tui(home)
        if tui is None:
            raise NotRunning(f"no Codex TUI runs under {home}")
        return tui

    def rollout(self, key: str, transcript: str, home: Path) -> Path | None:
        """The thread's rollout: the hook's transcript path, else found by the thread id under ``home``."""
        if transcript and os.path.basename(transcript).startswith("rollout-"):
            return Path(transcript)
        found = sorted((home / "sessions").glob(f"*/*/*/rollout-*-{key}.jsonl"))
        return found[-1] if found else None

    async def deliver(self, home: Path, key: str, text: str, ui: RunningUi) -> Delivery:
        return await deliver(home, key, text, ui.binary or _which_codex())

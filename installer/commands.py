"""The command lines hive writes into harness configs.

User files (``~/.claude.json``, ``~/.codex/hooks.json``, …) are this machine's own, and harnesses
start hive from their own environment (a GUI app, a different shell, a PATH without the venv),
so every command there is absolute: the ``hive`` console script next to this interpreter, or
this interpreter running the CLI module when there is no script (a source checkout), and the
hook client's script run by an absolute interpreter (no shim in front of it on every tool call).

Project files (``hive setup --project``) are committed and run on every teammate's machine, where
none of those paths exist: they name the ``hive`` command on PATH, which every install puts there
(pipx, uv tool, a venv's bin), and hooks go through ``hive hook``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hive.integrations.build import portable_hook_command
from hive.integrations.descriptor import InstallContext, Scope
from hive.integrations.hook_command import hook_command

PORTABLE_HIVE = ("hive",)


def hive_argv() -> tuple[str, ...]:
    """The argv that runs the ``hive`` CLI of this installation."""
    script = Path(sys.executable).parent / "hive"
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    # -P: agents start this in project folders, and a project's own "hive" folder must not shadow us.
    return (sys.executable, "-P", "-m", "hive.sidecar.cli")


def install_context(scope: Scope) -> InstallContext:
    if scope == "project":
        return InstallContext(
            scope=scope,
            hook_command=portable_hook_command,
            mcp_command=(*PORTABLE_HIVE, "mcp"),
            hive_command=PORTABLE_HIVE,
        )
    hive = hive_argv()
    # The hook command is the hook client's own: an absolute interpreter running its stdlib-only
    # script, which skips the start-up cost of the hive CLI on every tool call.
    return InstallContext(scope=scope, hook_command=hook_command, mcp_command=(*hive, "mcp"), hive_command=hive)

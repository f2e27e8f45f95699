"""The command lines hive writes into harness configs on this machine.

Harnesses start hive from their own environment (a GUI app, a different shell, a PATH without
the venv), so every command is absolute: the ``hive`` console script next to this interpreter,
or this interpreter running the CLI module when there is no script (a source checkout).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from hive.integrations.descriptor import InstallContext, Scope


def hive_argv() -> tuple[str, ...]:
    """The argv that runs the ``hive`` CLI of this installation."""
    script = Path(sys.executable).parent / "hive"
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-m", "hive.sidecar.cli")


def hook_command(harness: str, event: str) -> str:
    """The shell command line a harness runs for one hook event: the hook client's own, when present."""
    try:
        from hive.integrations.hook_command import hook_command as client_command
    except ImportError:  # an installation from before the stdlib-only hook client
        return shlex.join([*hive_argv(), "hook", harness, event])
    return client_command(harness, event)


def install_context(scope: Scope) -> InstallContext:
    hive = hive_argv()
    return InstallContext(scope=scope, hook_command=hook_command, mcp_command=(*hive, "mcp"), hive_command=hive)

"""The hook command line ``hive setup`` writes into harness configs, and ``hive hook`` for people.

``<python> -I -S <package>/hive_hook.py <harness> <NativeEvent> [<no-opinion>]``: an absolute
interpreter (a pyenv or mise shim in front of it costs about 50 ms per hook) started isolated
and without site-packages, which the hook client does not need. The no-opinion reply is passed
only where it is not empty (Cursor's prompt gate), so the client knows it with no sidecar.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from . import hook_client, registry

HOOK_SCRIPT = Path(__file__).resolve().with_name("hive_hook.py")


def interpreter() -> str:
    """This interpreter's absolute path, following symlinks only while they lead to the same
    interpreter: a link to another program (a shim multiplexer) is not followed, nor, inside a
    virtual environment, a link out of it (the detached sidecar needs the environment's packages)."""
    if not sys.executable:
        raise RuntimeError("this Python does not know its own executable; run hive setup with an absolute python")
    path = os.path.abspath(sys.executable)
    in_venv = sys.prefix != sys.base_prefix
    for _ in range(16):
        if not os.path.islink(path):
            break
        target = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        if not os.path.basename(target).startswith("python"):
            break
        if in_venv and os.path.dirname(target) != os.path.dirname(path):
            break
        path = target
    return path


def no_opinion(harness: str, event: str) -> str:
    """The exact no-opinion reply at ``event`` of ``harness`` ("" for the watcher and unknown events)."""
    point = registry.harness(harness).point(event)
    return point.no_opinion if point is not None else ""


def hook_command(harness: str, event: str) -> str:
    """The command line a harness config runs for native ``event``. Raises KeyError for an unknown harness."""
    name = registry.harness(harness).name
    argv = [interpreter(), "-I", "-S", str(HOOK_SCRIPT), name, event]
    reply = no_opinion(name, event)
    if reply:
        argv.append(reply)
    return shlex.join(argv)


def run_hook(harness: str, event: str) -> int:
    """``hive hook <harness> <event>``: the hook client's logic in this process, stdin to stdout."""
    try:
        reply = no_opinion(harness, event)
    except KeyError:
        reply = ""  # the sidecar answers an unknown harness with an error: no opinion either way
    return hook_client.run(["hive hook", harness, event, reply])

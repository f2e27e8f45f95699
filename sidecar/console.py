"""The ``hive`` console script.

``hive hook <harness> <event>`` is what committed project files name (they cannot hold this
machine's paths), and it runs on every tool call of every hooked session: it goes straight to
the standard-library hook client instead of loading the CLI, whose parser pulls in the mesh,
the gate and the lessons (about two seconds per call on a loaded machine). Everything else is
``hive.sidecar.cli``.
"""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) == 3 and argv[0] == "hook" and not any(arg.startswith("-") for arg in argv):
        from hive.integrations.hook_command import run_hook

        return run_hook(argv[1], argv[2])
    from .cli import main as cli_main

    return cli_main()

"""The ``hive`` console script.

Two commands are started by harnesses, which wait on them, and skip the CLI and its parser, which
they have no use for:

- ``hive hook <harness> <event>`` is what committed project files name (they cannot hold this
  machine's paths), and it runs on every tool call of every hooked session: it goes straight to
  the standard-library hook client.
- ``hive mcp`` is started once per session, and a harness gives it only a few seconds to answer
  ``initialize`` (Claude Code: 5 s before the first turn, or that turn has no hive tools): it
  goes straight to the MCP server.

Everything else (``hive mcp --help`` too) is ``hive.sidecar.cli``.
"""

from __future__ import annotations

import sys


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) == 3 and argv[0] == "hook" and not any(arg.startswith("-") for arg in argv):
        from hive.integrations.hook_command import run_hook

        return run_hook(argv[1], argv[2])
    if argv == ["mcp"]:
        from ..mcp.server import main as mcp_main

        return mcp_main()
    from .main import main as cli_main

    return cli_main()

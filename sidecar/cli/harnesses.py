"""``hive mcp``, ``hook``, ``integrations``, ``setup`` and ``doctor``: what connects coding agents to hive.

Each hands over to the part of hive that does the work (the MCP server, the hook client, the
harness registry, the installer), which only its own command imports.
"""

from __future__ import annotations

import argparse
import sys

from .main import AddCommand


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..mcp.server import main as mcp_main  # the MCP SDK is heavy; only this command needs it

    return mcp_main()


def cmd_hook(args: argparse.Namespace) -> int:
    from hive.integrations import hook_command  # the harness registry: only this command needs it

    if args.command_line:
        try:
            print(hook_command.hook_command(args.harness, args.event))
        except KeyError as exc:
            print(f"hive: {exc.args[0]}", file=sys.stderr)
            return 1
        return 0
    return hook_command.run_hook(args.harness, args.event)


def cmd_integrations(args: argparse.Namespace) -> int:
    from hive.integrations.build import build  # pluggy and every harness plugin: only this command needs them

    differing = build(check=args.check)
    for path in differing:
        print(path)
    return 1 if args.check and differing else 0


def cmd_setup(args: argparse.Namespace) -> int:
    from hive.installer.setup import main as setup_main  # the harness registry: only setup and doctor need it

    return setup_main(args)


def cmd_doctor(args: argparse.Namespace) -> int:
    from hive.installer.doctor import main as doctor_main

    return doctor_main(args)


def add_arguments(add: AddCommand) -> None:
    """``hive mcp``, ``hook``, ``integrations``, ``setup`` and ``doctor``, in the order the help lists them."""
    add("mcp", cmd_mcp, "serve hive's tools to an agent over MCP on stdin/stdout")
    p = add("hook", cmd_hook, "answer a harness hook: its JSON on standard input, the reply on standard output")
    p.add_argument(
        "--command",
        dest="command_line",
        action="store_true",
        help="print the command line `hive setup` writes for this hook on this machine",
    )
    p.add_argument("harness", help="claude-code, codex, cursor, gemini, ...")
    p.add_argument("event", help="the harness's own event name (PostToolUse, stop, ...), or watch")
    p = add("integrations", cmd_integrations, "regenerate the harnesses' reference files from their descriptors")
    p.add_argument("action", choices=["build"])
    p.add_argument("--check", action="store_true", help="change nothing; list files that differ and exit 1 if any")
    p = add("setup", cmd_setup, "wire every installed coding agent to hive (MCP, hooks, plugins, skills)")
    p.add_argument("--only", metavar="NAMES", help="comma-separated harnesses (aliases allowed), e.g. codex,gemini")
    p.add_argument(
        "--project",
        nargs="?",
        const=".",
        metavar="DIR",
        help="write the project-scoped files of DIR (default: this folder) instead of your user files",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would change, per harness; write nothing")
    p.add_argument("--diff", action="store_true", help="with --dry-run: print the full unified diffs")
    p.add_argument("--remove", action="store_true", help="undo setup: restore or clean every file hive changed")
    p.add_argument("--service", action="store_true", help="also run the sidecar as a login service (systemd/launchd)")
    p = add("doctor", cmd_doctor, "check the sidecar, the team and every harness; print the fix for each problem")
    p.add_argument("--json", action="store_true")

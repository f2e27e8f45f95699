"""``hive project …``: the project of the repository you are in, who is in it, and confirming members.

A member is confirmed by the project's owner in person: in a desktop pop-up, or, with no desktop,
by answering the question at this command's own terminal. Without either (an agent's tool call,
a script) the sidecar refuses, because membership decides who receives the project's lessons.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .main import _call, _print_json, add_actions, call_confirmed


def _where(args: argparse.Namespace) -> dict[str, Any]:
    return {"repo": args.repo} if args.repo else {"cwd": os.getcwd()}


def _print(args: argparse.Namespace, result: dict[str, Any]) -> int:
    if args.json:
        _print_json(result)
        return 0
    print(f"project {result.get('label') or result['project'][:19]}")
    print(f"  owner:    {result['owner'] or '(nobody yet)'}")
    print(f"  members:  {', '.join(result['members']) or '-'}")
    if result["proposed"]:
        print(f"  asking to join: {', '.join(result['proposed'])} (the owner runs `hive project confirm NAME`)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    return _print(args, _call("project_show", **_where(args)))


def cmd_join(args: argparse.Namespace) -> int:
    return _print(args, _call("project_join", **_where(args)))


def cmd_confirm(args: argparse.Namespace) -> int:
    result = call_confirmed("project_confirm", {**_where(args), "person": args.person})
    if result is None:
        print("hive: not confirmed", file=sys.stderr)
        return 1
    return _print(args, result)


def cmd_remove(args: argparse.Namespace) -> int:
    return _print(args, _call("project_remove", **_where(args), person=args.person))


def add_project_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hive project`` subcommands (``show`` when none is given)."""
    actions = add_actions(parser, "project", default=cmd_show)

    def add(name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
        p = actions(name, func, help_text)
        p.add_argument("--repo", help="a remote URL or host/org/repo (default: the repository you are in)")
        return p

    parser.set_defaults(repo=None, json=False)  # options are each action's: a subparser's defaults win
    add("show", cmd_show, "the project's owner, members and who asks to join")
    add("join", cmd_join, "ask to join the project (or own it, if nobody does yet)")
    p = add("confirm", cmd_confirm, "owner: let a person in (asks you to confirm)")
    p.add_argument("person")
    p = add("remove", cmd_remove, "owner: take a person out; anyone: leave")
    p.add_argument("person")

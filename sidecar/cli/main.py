"""The ``hive`` command line: its parser, put together from the command groups' modules, and ``main``.

It also holds what every group's commands use: calling the sidecar, asking the person at this
terminal, and printing for people.

Exit codes: 0 success (bare ``hive`` prints the help on stdout and exits 0), 1 a user error
(the one-line reason is printed; a usage error too), 2 the sidecar cannot be reached or started,
3 ``hive ask`` got no approval (denied, closed, expired or no answer yet).

What is printed for a person fits 100 columns: long cells are clipped with an ellipsis, never ids.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..base.errors import ConfirmOnTerminal, HiveError, Unreachable

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is for the type checker only: importing it costs a command ~5 ms
    from typing import Any, NoReturn

# Every command builds the whole parser, so at load time this module, the command groups and the
# sub-CLIs' argument builders import only the standard library: a command imports what it runs on
# (the sidecar client, psutil, the gate with aioquic and cryptography) when it runs, and calls the
# sidecar without an event loop. tests/sidecar/test_cli_imports.py holds `hive --help`, `send` and `inbox` to that.

Command = Callable[[argparse.Namespace], int]
AddCommand = Callable[[str, Command, str], argparse.ArgumentParser]  # a command group's add_arguments gets one


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


WIDTH = 100  # what a table may take, whatever the terminal: 100 columns read well everywhere
# MCP tool names the sidecar's messages give agents, and the command a person types instead.
TOOL_COMMANDS = {
    "list_team": "`hive who`",
    "check_inbox": "`hive inbox`",
    "send_message": "`hive send`",
    "whoami": "`hive status`",
    "ask_user": "`hive ask`",
    "search_memory": "`hive lessons search`",
    "propose_lesson": "`hive lessons propose`",
}  # only names no sentence uses as a word
_TOOL_NAME = re.compile(r"`?\b(" + "|".join(TOOL_COMMANDS) + r")\b(?:\(\))?`?")


def for_people(message: str) -> str:
    """A sidecar message with the MCP tools it names replaced by the commands a person types."""
    named = _TOOL_NAME.sub(lambda m: TOOL_COMMANDS[m.group(1)], message)
    return re.sub(r"(`hive [a-z ]+`) or \1", r"\1", named)  # "list_team or `hive who`" said it twice


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` columns; what is cut is marked with an ellipsis."""
    line = re.sub(r"\s*[\r\n\t]+\s*", " ", text)  # one line; spaces that align columns stay
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def table(rows: Sequence[tuple[str, ...]], limits: tuple[int, ...]) -> list[str]:
    """Aligned columns, each at most its limit wide; the last takes what is left of WIDTH."""
    cells = [[clip(cell, limit) for cell, limit in zip(row, limits, strict=False)] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(limits))]
    rest = WIDTH - sum(widths) - 2 * len(widths)
    return [
        ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "  " + clip(row[-1], rest)).rstrip()
        for r, row in zip(cells, rows, strict=True)
    ]


def _call(op: str, autostart: bool = True, **args: Any) -> dict[str, Any]:
    from ..client import BlockingClient

    with BlockingClient.open(autostart=autostart) as client:  # the state folder's: HIVE_HOME or the default
        return client.call(op, **args)


def ask_tty(text: str) -> str | None:
    """The line typed at the controlling terminal itself (standard input may be a pipe carrying the
    message), lowercased; None without a terminal."""
    try:
        with open("/dev/tty", "r+b", buffering=0) as tty:  # unbuffered: a terminal cannot seek
            tty.write(text.encode())
            return tty.readline().decode(errors="replace").strip().lower()
    except OSError:
        return None


def _confirm_on_terminal(question: str) -> bool:
    return ask_tty(f"{question} [y/N] ") in ("y", "yes")


def call_confirmed(
    op: str, request: dict[str, Any], ask: Callable[[str], bool] = _confirm_on_terminal
) -> dict[str, Any] | None:
    """Call ``op``. With no desktop the sidecar may want the person's yes at this command's own
    terminal (``confirm_on_terminal``): ``ask`` puts its question there, and a yes calls again with
    it. None: not confirmed."""
    try:
        return _call(op, **request)
    except ConfirmOnTerminal as exc:
        if not ask(exc.message):
            return None
        return _call(op, **request, confirmed_on_terminal=exc.message)


def print_note(args: argparse.Namespace, result: dict[str, Any] | None, refused: str) -> int:
    """A change's answer: its JSON with ``--json``, else its note. None (not confirmed): ``refused``, exit 1."""
    if result is None:
        print(f"hive: {refused}", file=sys.stderr)
        return 1
    if args.json:
        _print_json(result)
    else:
        print(result["note"])
    return 0


def add_actions(parser: argparse.ArgumentParser, group: str, default: Command | None = None) -> AddCommand:
    """The ACTION subcommands of a command group (``hive gate ledger``): the returned ``add`` gives
    each a parser of its own with ``--json``. ``args.<group>_command`` names the one given; with a
    ``default`` the group runs it when none is."""
    if default is not None:
        parser.set_defaults(action=default, json=False)
    sub = parser.add_subparsers(dest=f"{group}_command", required=default is None, metavar="ACTION")

    def add(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(action=func)
        p.add_argument("--json", action="store_true")
        return p

    return add


def run_action(args: argparse.Namespace) -> int:
    """A command group's action (see add_actions); its module was imported when its parser was built."""
    return int(args.action(args))


def cmd_digest(args: argparse.Namespace) -> int:
    from .gate import cmd_digest as digest

    return digest(args)


def cmd_why(args: argparse.Namespace) -> int:
    from .gate import cmd_why as why

    return why(args)


# Metavars that read as words where the option's own name would not (``--as NAME``, not ``AS_``).
METAVARS = {
    "--as": "NAME",
    "--from": "NAME",
    "--reply-to": "ID",
    "--about": "ID",
    "--wait": "SECONDS",
    "--limit": "N",
    "--since": "WHEN",
    "--session": "SESSION",
}
PLUMBING = ("sidecar", "mcp", "hook", "integrations")


class Parser(argparse.ArgumentParser):
    """argparse with hive's conventions: a usage error exits 1 (2 means the sidecar), word metavars."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: {message} (see `{self.prog} --help`)\n")

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.metavar is None and action.nargs != 0 and action.choices is None:
            named = next((METAVARS[o] for o in action.option_strings if o in METAVARS), None)
            action.metavar = named or action.dest.strip("_").replace("_", "-").upper()
        return action

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument added, and one with no width imports shutil
        # (and the compression modules shutil loads) to ask the terminal's: given here, the same width.
        # (typeshed knows formatter classes as called with prog only; argparse's all take width)
        return self.formatter_class(prog=self.prog, width=_terminal_columns() - 2)  # type: ignore[call-arg]


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns`` without importing shutil: $COLUMNS, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def _command_list(commands: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in commands) + 2
    return "\n".join(clip(f"  {name:<{width}}{what}", WIDTH) for name, what in commands)


class _Unbuilt:
    """Stands in for the parser of a command this run does not parse: what is added to it is dropped."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *args, **kwargs: self


_UNBUILT: argparse.ArgumentParser = _Unbuilt()  # type: ignore[assignment]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """hive's parser; with ``only``, the parser of that one command and the top level's help.

    Each command's parser costs argparse time (the whole set is most of what ``hive --help``
    spent), and parsing ``hive send ...`` needs only send's. ``only=""`` builds no command's
    parser: enough for ``hive``, ``--help`` and ``--version``. A name that is no command gives the
    whole parser, whose error lists the commands.
    """
    parser = Parser(
        prog="hive",
        usage="hive [-h] [-V] COMMAND ...",
        description="Your team's coding agents, as one network.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"hive {__version__}")
    # The list of commands is written into the help below, in two groups: the automatic one is hidden.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS, prog="hive")
    everyday: list[tuple[str, str]] = []
    plumbing: list[tuple[str, str]] = []

    def add(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        (plumbing if name in PLUMBING else everyday).append((name, help_text))
        if only is not None and name != only:
            return _UNBUILT
        p = sub.add_parser(name, description=help_text)
        p.set_defaults(func=func)
        return p

    # The command groups import their helpers from this module: they are imported once it has loaded.
    from . import harnesses, lifecycle, mail, sessions, team

    lifecycle.add_arguments(add)  # the groups in the order the help lists them
    sessions.add_arguments(add)
    mail.add_arguments(add)
    harnesses.add_arguments(add)
    team.add_arguments(add)
    p = add("gate", run_action, "the gate: its ledger, why it told you (or not), your preferences, shadow sources")
    if p is not _UNBUILT:
        from .gate import add_gate_arguments

        add_gate_arguments(p)
    p = add(
        "lessons",
        run_action,
        "the team's reviewed lessons: propose, search, review, retract, promote to skills, import",
    )
    if p is not _UNBUILT:
        from .lessons import add_lessons_arguments

        add_lessons_arguments(p)
    p = add("project", run_action, "the project of this repository: its owner and members, who receives its lessons")
    if p is not _UNBUILT:
        from .projects import add_project_arguments

        add_project_arguments(p)
    p = add("history", run_action, "your mail archived on the team's anchor, opt-in: on, off, search")
    if p is not _UNBUILT:
        from .history import add_history_arguments

        add_history_arguments(p)
    p = add("digest", cmd_digest, "what the gate held for you, what it checked and how much it silenced")
    p.add_argument("--since", help="2h, 30m, 7d or an ISO date or time (default: since your last digest)")
    p.add_argument("--peek", action="store_true", help="do not count this as your last digest")
    p.add_argument("--person", help="another person's digest")
    p.add_argument("--json", action="store_true")
    p = add("why", cmd_why, "why a message was held and who let it through, or why the gate told you")
    p.add_argument("item", help="a message id (from `hive held` or `hive sent`), or an item id from `hive gate ledger`")
    p.add_argument("--json", action="store_true")
    parser.epilog = (
        f"commands:\n{_command_list(everyday)}\n\n"
        f"plumbing (what harnesses and `hive setup` run; rarely typed):\n{_command_list(plumbing)}\n\n"
        "`hive COMMAND --help` tells more. Exit codes: 0 done, 1 a user error,\n"
        "2 the sidecar cannot be reached or started, 3 `hive ask` not approved."
    )
    if only and only not in sub.choices:
        return build_parser()
    return parser


def _only(argv: list[str]) -> str | None:
    """The one command whose parser parsing ``argv`` needs ("" none, None maybe all of them)."""
    if not argv or argv[0] in ("-h", "--help", "-V", "--version"):
        return ""  # argparse acts on the first option at once: the help or the version
    return None if argv[0].startswith("-") else argv[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_only(argv))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()  # bare `hive`: what it can do, on stdout like any asked-for help
        return 0
    try:
        return int(args.func(args))
    except Unreachable as exc:
        print(f"hive: {exc.message}", file=sys.stderr)
        return 2
    except HiveError as exc:
        print(f"hive: {for_people(exc.message)} [{exc.code}]", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())

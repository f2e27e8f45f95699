"""The ``hive`` command line.

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
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

from . import __version__
from .errors import ConfirmOnTerminal, HiveError, UnknownOp, Unreachable

# Every command builds the whole parser, so at load time this module and the sub-CLIs' argument
# builders import only the standard library: a command imports what it runs on (the sidecar client,
# psutil, the gate with aioquic and cryptography) when it runs, and calls the sidecar without an
# event loop. tests/sidecar/test_cli_imports.py holds `hive --help`, `send` and `inbox` to that.

LISTEN_WAIT = 600  # the sidecar's longest wait per request; listen asks again until mail comes

Command = Callable[[argparse.Namespace], int]


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


WIDTH = 100  # what a table may take, whatever the terminal: 100 columns read well everywhere
# MCP tool names the sidecar's messages give agents, and the command a person types instead.
TOOL_COMMANDS = {"list_team": "`hive who`", "check_inbox": "`hive inbox`", "send_message": "`hive send`",
                 "whoami": "`hive status`", "ask_user": "`hive ask`", "search_memory": "`hive lessons search`",
                 "propose_lesson": "`hive lessons propose`"}  # only names no sentence uses as a word
_TOOL_NAME = re.compile(r"`?\b(" + "|".join(TOOL_COMMANDS) + r")\b(?:\(\))?`?")


def for_people(message: str) -> str:
    """A sidecar message with the MCP tools it names replaced by the commands a person types."""
    named = _TOOL_NAME.sub(lambda m: TOOL_COMMANDS[m.group(1)], message)
    return re.sub(r"(`hive [a-z ]+`) or \1", r"\1", named)  # "list_team or `hive who`" said it twice


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` columns; what is cut is marked with an ellipsis."""
    line = re.sub(r"\s*[\r\n\t]+\s*", " ", text)  # one line; spaces that align columns stay
    return line if len(line) <= width else line[:max(width - 1, 0)] + "…"


def table(rows: Sequence[tuple[str, ...]], limits: tuple[int, ...]) -> list[str]:
    """Aligned columns, each at most its limit wide; the last takes what is left of WIDTH."""
    cells = [[clip(cell, limit) for cell, limit in zip(row, limits, strict=False)] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(limits))]
    rest = WIDTH - sum(widths) - 2 * len(widths)
    return [("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + "  " + clip(row[-1], rest)).rstrip()
            for r, row in zip(cells, rows, strict=True)]


def _call(op: str, autostart: bool = True, **args: Any) -> dict[str, Any]:
    from .client import BlockingClient
    from .paths import state_paths

    with BlockingClient.open(state_paths(), autostart=autostart) as client:
        return client.call(op, **args)


def _desktop() -> dict[str, str]:
    """This process's desktop variables, for an op that may ask the person in a pop-up there."""
    from .dialog import desktop_env  # defang and subprocess: only commands that may ask load them

    return desktop_env(os.environ)


def cmd_sidecar(args: argparse.Namespace) -> int:
    from .__main__ import main as sidecar_main

    return sidecar_main([])


def cmd_stop(args: argparse.Namespace) -> int:
    from .client import lock_held
    from .paths import state_paths

    paths = state_paths()
    try:
        result = _call("shutdown", autostart=False)
    except Unreachable:
        print("no sidecar is running")
        return 0
    pid = int(result.get("pid") or 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _process_gone(pid) and not lock_held(paths.lock):
            print(f"stopped the sidecar (pid {pid})")
            return 0
        time.sleep(0.02)
    print(f"asked the sidecar (pid {pid}) to stop, but it is still running", file=sys.stderr)
    return 2


def _process_gone(pid: int) -> bool:
    from . import procs  # psutil: only `hive stop` looks at processes

    return not procs.alive(pid, None)  # a zombie has finished too


def cmd_status(args: argparse.Namespace) -> int:
    status = _call("status")
    if args.json:
        _print_json(status)
        return 0
    print(f"sidecar {status['version']} running (pid {status['pid']}, up {status['uptime']:.0f}s)")
    print(f"  state folder  {status['home']}")
    print(f"  socket        {status['socket']}")
    print(f"  you           {status['person']} on {status['machine']}")
    print(f"  team          {status['team'] or 'none (this machine only)'}")
    print(f"  sessions      {status['sessions_live']} live, {status['sessions_known']} known")
    unread = status["terminal_unread"]
    if unread:
        print(f"  your inbox    {unread} unread from {', '.join(status['terminal_unread_from'])}: `hive inbox`")
    return 0


def cmd_who(args: argparse.Namespace) -> int:
    result = _call("who", all=args.all, filter=args.filter)
    if args.json:
        _print_json(result)
        return 0
    sessions = result["sessions"]
    if not sessions:
        print("no live sessions" + ("" if args.all else " (add --all for recent ones)"))
        return 0
    # Sorted by person, then machine (the sidecar's order): teammates' sessions group together.
    rows = [("ADDRESS", "MACHINE", "AGENT", "REPO@BRANCH", "TIER", "STATE", "DOING")]
    for s in sessions:
        where = s["repo"] or s["folder"]
        if s["branch"]:
            where = f"{where}@{s['branch']}"
        # busy / idle / waiting from what the harness does; "unmanaged": found on disk, no hive hooks or tools
        state = (s.get("state") or "live").replace("waiting_approval", "waiting") if s["live"] else "gone"
        state += ", unmanaged" if s.get("unmanaged") else ""
        rows.append((s["address"], s["machine"], s["agent"], where, s["tier"], state, s["doing"]))
    # ADDRESS, MACHINE, AGENT, REPO@BRANCH, TIER, STATE; DOING takes the rest of the line.
    print("\n".join(table(rows, (28, 10, 11, 17, 4, 15))))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    result = _call("events", session=args.session, limit=args.limit)
    if args.json:
        _print_json(result)
        return 0
    for e in result["events"]:
        when = time.strftime("%H:%M:%S", time.localtime(e["at"]))
        what = e["path"] or e["command"] or e["tool"]
        print(clip(f"{when}  {e['session'][:12]:12}  {e['harness']:11}  {e['action']:20}  {what}", WIDTH))
    return 0


def cmd_folder(args: argparse.Namespace) -> int:
    path = os.path.abspath(os.path.expanduser(args.path)) if args.path else None
    result = _call("folder", path=path, state=args.state)
    if args.json:
        _print_json(result)
    elif args.state:
        print(f"hive is {args.state} in {path}")
    else:
        print("\n".join(result["off"]) or "hive is on everywhere")
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    text = " ".join(args.text)
    if text == "-":
        text = sys.stdin.read()
    request: dict[str, Any] = {"to": args.to, "body": text, "fyi": args.fyi}
    if args.sender:
        request["from"] = args.sender
    if args.reply_to:
        request["reply_to"] = args.reply_to
    if args.notify:
        request["notify"] = True
    if args.file:
        request["files"] = [os.path.abspath(path) for path in args.file]
        request["cwd"] = os.getcwd()
    request["desktop"] = _desktop()  # a group send is confirmed in a pop-up on this desktop
    try:
        result = _call("send", **request)
    except ConfirmOnTerminal as exc:
        # No desktop: the sidecar lets the person confirm here, at this process's own terminal.
        if not _confirm_on_terminal(exc.message):
            print("hive: not sent", file=sys.stderr)
            return 1
        result = _call("send", **request, confirmed_on_terminal=exc.message)
    if args.json:
        _print_json(result)
        return 0
    for r in result["results"]:
        print(f"{r['to']}: {r['note']} (id {r['id']})")
    if args.notify:
        print(result.get("notify_note") or "no desktop notification was shown")
    return 0


def _confirm_on_terminal(question: str) -> bool:
    """Ask on the controlling terminal itself: standard input may be a pipe carrying the message."""
    try:
        with open("/dev/tty", "r+b", buffering=0) as tty:  # unbuffered: a terminal cannot seek
            tty.write(f"{question} [y/N] ".encode())
            return tty.readline().decode(errors="replace").strip().lower() in ("y", "yes")
    except OSError:
        return False


def cmd_ask(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"question": " ".join(args.question), "desktop": _desktop()}
    if args.about:
        request["about"] = args.about
    if args.as_:
        request["session"] = args.as_
    result = _call("ask", **request)
    if args.json:
        _print_json(result)
    else:
        print(result["note"])
    return 0 if result["answer"] == "approved" else 3


def cmd_inbox(args: argparse.Namespace, until_mail: bool = False) -> int:
    from .client import BlockingClient
    from .paths import state_paths

    # At a terminal a person reads the mail; piped (an agent's shell, a script) it stays in frames.
    human = not args.json and not args.raw and sys.stdout.isatty()
    with BlockingClient.open(state_paths()) as client:
        mailbox = {"as": args.as_} if args.as_ else {}
        result = client.call("inbox", wait=0, peek=args.peek, **mailbox)
        if not result["messages"] and (args.wait > 0 or until_mail):
            if sys.stderr.isatty() and not args.json:
                how_long = "" if until_mail else f" up to {args.wait:g} s"
                print(f"waiting{how_long} for mail to {result['to']} (Ctrl-C stops)…",
                      file=sys.stderr, flush=True)
            result = client.call("inbox", wait=args.wait or LISTEN_WAIT, peek=args.peek, **mailbox)
            while until_mail and not result["messages"]:
                result = client.call("inbox", wait=LISTEN_WAIT, peek=args.peek, **mailbox)
        if not result["messages"]:
            if not args.json:
                print(f"no unread messages for {result['to']}")
            else:
                _print_json(result)
            return 0
        try:
            if args.json:
                _print_json(result)
            elif human:
                from .render import for_person

                print(for_person(result["messages"]))
            else:
                print(result["text"])
            sys.stdout.flush()
        except OSError:
            client.call("undelivered", ids=result["ids"])
            raise
        if not args.peek:
            client.call("delivered", ids=result["ids"], **mailbox)
        return 0


def cmd_listen(args: argparse.Namespace) -> int:
    """Wait for the next mail to one of your mailboxes (``--as ci``: ``you/ci``, opened if new)."""
    args.wait, args.peek, args.raw = 0, False, False
    return cmd_inbox(args, until_mail=True)


def cmd_policy(args: argparse.Namespace) -> int:
    words = list(args.words)
    if len(words) > 2:
        raise SystemExit("hive policy: at most a person and a policy, e.g. `hive policy bob hold`")
    request: dict[str, Any] = {}
    if words:
        request["value"] = words[-1]
    if len(words) == 2:
        request["person"] = words[0]
    result = _call("policy", **request)
    if args.json:
        _print_json(result)
        return 0
    print(f"everyone: {result['default']}")
    for person, value in result["people"].items():
        print(f"{person}: {value}")
    return 0


def cmd_sent(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"ids": args.ids}
    if args.sender:
        request["from"] = args.sender
    result = _call("sent", **request)
    if args.json:
        _print_json(result)
        return 0
    if not result["messages"]:
        print(f"no messages sent {'by ' + args.sender if args.sender else 'from this terminal'} yet"
              if not args.ids else "no message with those ids was sent by you")
        return 0
    for m in result["messages"]:
        when = time.strftime("%H:%M:%S", time.localtime(m["read_at"])) if m["read_at"] else ""
        # The id is never clipped: it is what `hive sent ID` and `--reply-to` take.
        print(f"{m['id']}  {clip(m['to'], WIDTH - len(m['id']) - 18)}  {m['state']} {when}".rstrip())
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from .mcp_server import main as mcp_main  # the MCP SDK is heavy; only this command needs it

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


def _print_invite(invite: dict[str, Any] | None) -> None:
    if invite:
        print(invite["line"])


def cmd_init(args: argparse.Namespace) -> int:
    result = _call("team_init", team=args.team, person=args.as_, **({"machine": args.machine} if args.machine else {}))
    if args.json:
        _print_json(result)
        return 0
    me = result["me"]
    print(f"founded team {result['team']['name']}: you are {me['person']} on {me['machine']}")
    print("invite teammates with this line (anyone who has it can join; `hive link --new` replaces it):")
    _print_invite(result.get("invite"))
    return 0


def cmd_invite(args: argparse.Namespace) -> int:
    result = _call("team_invite", own_machine=args.own_machine, once=args.once)
    if args.json:
        _print_json(result)
        return 0
    _print_invite(result)
    return 0


def cmd_team(args: argparse.Namespace) -> int:
    result = _call("team_show")
    if args.json:
        _print_json(result)
        return 0
    team = result["team"]
    if team is None:
        if result.get("problem"):
            print(f"hive: {result['problem']}", file=sys.stderr)
            return 1
        print("this machine is in no team: `hive init <team> --as <you>` or `hive join '<invite>' --as <you>`")
        return 0
    machines = sum(len(p["machines"]) for p in result["people"])
    people = len(result["people"])
    print(f"team {team['name']}: {people} {'person' if people == 1 else 'people'}, "
          f"{machines} machine{'' if machines == 1 else 's'}"
          + ("" if team["link"] else " (no team link: `hive link --new`)"))
    for person in result["people"]:
        for i, m in enumerate(person["machines"]):
            if m["me"]:
                state = "this machine"
            elif m["online"]:
                state = f"online, {m['path']}" if m["path"] else "online"
            elif m["last_seen"]:
                state = "last seen " + time.strftime("%Y-%m-%d %H:%M", time.localtime(m["last_seen"]))
            else:
                state = "offline" if m["online"] is False else ""
            role = "" if m["role"] == "member" else m["role"]
            print(clip(f"  {person['person'] if i == 0 else '':<16} {m['machine']:<20} {role:<7} {state}", WIDTH))
    if result["departed"]:
        print("departed: " + ", ".join(f"{d['person']}@{d['machine']}" for d in result["departed"]))
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    result = _call("team_remove", target=args.target, desktop=_desktop())
    if args.json:
        _print_json(result)
        return 0
    print(f"removed {', '.join(result['removed'])}; the team link was replaced:")
    _print_invite(result.get("invite"))
    return 0


def cmd_leave(args: argparse.Namespace) -> int:
    result = _call("team_leave", force=args.force, desktop=_desktop())
    if args.json:
        _print_json(result)
        return 0
    print(f"left team {result['left']}; this machine is on its own again")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    result = _call("team_link_new", desktop=_desktop()) if args.new else _call("team_invite")
    if args.json:
        _print_json(result)
        return 0
    if args.new:
        print("the old team link no longer works; the new one:")
    _print_invite(result)
    return 0


def cmd_join(args: argparse.Namespace) -> int:
    # Asked of an agent's shell, the join waits for its person's click on this desktop.
    request: dict[str, Any] = {"link": args.link, "desktop": _desktop()}
    if args.as_:
        request["person"] = args.as_
    if args.machine:
        request["machine"] = args.machine
    try:
        result = _call("team_join", **request)
    except UnknownOp:
        print("hive: joining needs the mesh transport (the team_join op), which this sidecar does not serve yet",
              file=sys.stderr)
        return 1
    if args.json:
        _print_json(result)
        return 0
    me = result["me"]
    print(f"joined team {result['team']['name']}: you are {me['person']} on {me['machine']}")
    _print_invite(result.get("invite"))
    return 0


def cmd_held(args: argparse.Namespace) -> int:
    result = _call("held")
    if args.json:
        _print_json(result)
        return 0
    if not result["held"]:
        print("no held messages")
        return 0
    for m in result["held"]:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(m["received_at"]))
        first = (m["body"].splitlines() or [""])[0][:100]
        print(m["id"] + "  " + clip(f"{when}  {m['from']} -> {m['to']}: {first}", WIDTH - len(m["id"]) - 2))
        if m.get("files"):
            print(f"    with files: {', '.join(m['files'])}")
    print("approve with `hive approve <id>...`, or drop with `hive drop <id>...`")
    return 0


def _settle(op: str, args: argparse.Namespace) -> int:
    result = _call(op, ids=args.ids)
    if args.json:
        _print_json(result)
        return 0
    for r in result["settled"]:
        print(f"{r['id']}: {r['state'].replace('_', ' ')}" + (f" ({r['note']})" if r.get("note") else ""))
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    return _settle("approve", args)


def cmd_drop(args: argparse.Namespace) -> int:
    return _settle("drop", args)


def cmd_gate(args: argparse.Namespace) -> int:
    from .gate_cli import run  # the gate's commands live in their own module

    return run(args)


def cmd_digest(args: argparse.Namespace) -> int:
    from .gate_cli import cmd_digest as digest

    return digest(args)


def cmd_lessons(args: argparse.Namespace) -> int:
    from .lessons_cli import run  # the lessons' commands live in their own module

    return run(args)


def cmd_project(args: argparse.Namespace) -> int:
    from .projects_cli import run  # the project commands live in their own module

    return run(args)


# Metavars that read as words where the option's own name would not (``--as NAME``, not ``AS_``).
METAVARS = {"--as": "NAME", "--from": "NAME", "--reply-to": "ID", "--about": "ID", "--wait": "SECONDS",
            "--limit": "N", "--since": "WHEN", "--session": "SESSION"}
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


def _command_list(commands: list[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in commands) + 2
    return "\n".join(clip(f"  {name:<{width}}{what}", WIDTH) for name, what in commands)


class _Unbuilt:
    """Stands in for the parser of a command this run does not parse: what is added to it is dropped."""

    def __getattr__(self, name: str) -> Callable[..., _Unbuilt]:
        return lambda *args, **kwargs: self


_UNBUILT = cast(argparse.ArgumentParser, _Unbuilt())


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """hive's parser; with ``only``, the parser of that one command and the top level's help.

    Each command's parser costs argparse time (the whole set is most of what ``hive --help``
    spent), and parsing ``hive send ...`` needs only send's. ``only=""`` builds no command's
    parser: enough for ``hive``, ``--help`` and ``--version``. A name that is no command gives the
    whole parser, whose error lists the commands.
    """
    parser = Parser(prog="hive", usage="hive [-h] [-V] COMMAND ...",
                    description="Your team's coding agents, as one network.",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
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

    add("sidecar", cmd_sidecar, "run the sidecar in the foreground")
    add("stop", cmd_stop, "stop this machine's sidecar")
    p = add("status", cmd_status, "show the sidecar and your inbox")
    p.add_argument("--json", action="store_true")
    p = add("who", cmd_who, "list the sessions hive knows")
    p.add_argument("--all", action="store_true", help="include sessions gone in the last day")
    p.add_argument("--json", action="store_true")
    p.add_argument("filter", nargs="?", default=None, help="only sessions whose fields contain this text")
    p = add("events", cmd_events, "show the normalized events hooks recorded (secrets redacted)")
    p.add_argument("--session", help="only this session (key, name or address)")
    p.add_argument("--limit", type=int, default=100, help="the newest N (default 100)")
    p.add_argument("--json", action="store_true")
    p = add("folder", cmd_folder, "turn hive off (or back on) for sessions working in a folder")
    p.add_argument("path", nargs="?", help="the folder (default: list the folders that are off)")
    p.add_argument("state", nargs="?", choices=["off", "on"])
    p.add_argument("--json", action="store_true")
    p = add("send", cmd_send, "send a message to a session (or, from a terminal, a group)")
    p.add_argument("to", help="person/session, a session name, person/*, repo:NAME or *")
    p.add_argument("text", nargs="+", help="the message; - reads it from standard input")
    p.add_argument("--from", dest="sender", help="send as this session of yours (name or key)")
    p.add_argument("--fyi", action="store_true", help="do not wake the recipient; it sees it at its next pause")
    p.add_argument("--reply-to", help="the id of the message this answers")
    p.add_argument("--notify", action="store_true", help="also show it as a desktop notification to its person")
    p.add_argument("--file", action="append", metavar="PATH",
                   help="attach a text file (up to 10, 256 KB each, 512 KB in all); repeat for more")
    p.add_argument("--json", action="store_true")
    p = add("ask", cmd_ask, "ask your person a yes/no question in a desktop pop-up; exits 0 only if approved")
    p.add_argument("question", nargs="+", help="the question, shown with Approve and Deny")
    p.add_argument("--about", help="the id of the teammate's message this is about; they get the answer, signed")
    p.add_argument("--as", dest="as_", help="ask as this session of yours (name or key)")
    p.add_argument("--json", action="store_true")
    p = add("inbox", cmd_inbox, "show unread messages (yours, or a session's with --as) and mark them read")
    p.add_argument("--wait", type=float, default=0, help="wait up to N seconds (at most 600) for mail")
    p.add_argument("--as", dest="as_", help="read a session's mailbox, or a named mailbox of yours "
                   "(you/NAME, opened on first use, for a script or notes), instead of your terminal's")
    p.add_argument("--peek", action="store_true", help="show without marking anything read")
    p.add_argument("--raw", action="store_true", help="print the framed messages an agent sees, even at a terminal")
    p.add_argument("--json", action="store_true")
    p = add("listen", cmd_listen, "wait for the next message to your terminal, or to a named mailbox with --as")
    p.add_argument("--as", dest="as_", help="a named mailbox of yours (you/NAME), opened on first use")
    p.add_argument("--json", action="store_true")
    p = add("sent", cmd_sent, "what you (or a session, with --from) sent, and whether it was read")
    p.add_argument("ids", nargs="*", help="message ids (default: the last 50)")
    p.add_argument("--from", dest="sender")
    p.add_argument("--json", action="store_true")
    add("mcp", cmd_mcp, "serve hive's tools to an agent over MCP on stdin/stdout")
    p = add("hook", cmd_hook, "answer a harness hook: its JSON on standard input, the reply on standard output")
    p.add_argument("--command", dest="command_line", action="store_true",
                   help="print the command line `hive setup` writes for this hook on this machine")
    p.add_argument("harness", help="claude-code, codex, cursor, gemini, ...")
    p.add_argument("event", help="the harness's own event name (PostToolUse, stop, ...), or watch")
    p = add("integrations", cmd_integrations, "regenerate the harnesses' reference files from their descriptors")
    p.add_argument("action", choices=["build"])
    p.add_argument("--check", action="store_true", help="change nothing; list files that differ and exit 1 if any")
    p = add("setup", cmd_setup, "wire every installed coding agent to hive (MCP, hooks, plugins, skills)")
    p.add_argument("--only", metavar="NAMES", help="comma-separated harnesses (aliases allowed), e.g. codex,gemini")
    p.add_argument("--project", nargs="?", const=".", metavar="DIR",
                   help="write the project-scoped files of DIR (default: this folder) instead of your user files")
    p.add_argument("--dry-run", action="store_true", help="say what would change, per harness; write nothing")
    p.add_argument("--diff", action="store_true", help="with --dry-run: print the full unified diffs")
    p.add_argument("--remove", action="store_true", help="undo setup: restore or clean every file hive changed")
    p.add_argument("--service", action="store_true", help="also run the sidecar as a login service (systemd/launchd)")
    p = add("doctor", cmd_doctor, "check the sidecar, the team and every harness; print the fix for each problem")
    p.add_argument("--json", action="store_true")
    p = add("init", cmd_init, "found a team with this machine as its first member")
    p.add_argument("team", help="the team's name: a-z, 0-9 and -")
    p.add_argument("--as", dest="as_", required=True, help="your name in the team: a-z, 0-9 and -")
    p.add_argument("--machine", help="this machine's name in the team (default: from config.toml or the hostname)")
    p.add_argument("--json", action="store_true")
    p = add("invite", cmd_invite, "print the invite line with the team link")
    p.add_argument("--own-machine", action="store_true", help="a one-time invite for another machine of yours")
    p.add_argument("--once", action="store_true", help="a one-time invite instead of the reusable team link")
    p.add_argument("--json", action="store_true")
    p = add("join", cmd_join, "join a team with an invite link")
    p.add_argument("link", help="the invite (hive1:…), or the whole invite line")
    p.add_argument("--as", dest="as_", help="your name in the team (an own-machine invite sets it)")
    p.add_argument("--machine", help="this machine's name in the team")
    p.add_argument("--json", action="store_true")
    p = add("policy", cmd_policy, "what this machine does with teammates' mail: accept, hold or refuse, per person")
    p.add_argument("words", nargs="*", metavar="[PERSON] POLICY",
                   help="`hive policy hold` for everyone, `hive policy bob accept` for bob, "
                        "`hive policy bob default` to drop bob's own; none to list")
    p.add_argument("--json", action="store_true")
    p = add("held", cmd_held, "messages from teammates held by your inbound policy, waiting for you")
    p.add_argument("--json", action="store_true")
    for name, func, what in (("approve", cmd_approve, "deliver held messages to their sessions"),
                             ("drop", cmd_drop, "drop held messages; their senders are told")):
        p = add(name, func, what)
        p.add_argument("ids", nargs="+", help="message ids from `hive held`")
        p.add_argument("--json", action="store_true")
    p = add("team", cmd_team, "the team: people, machines, roles, online or last seen")
    p.add_argument("--json", action="store_true")
    p = add("remove", cmd_remove, "remove a person (all their machines) or a machine from the team")
    p.add_argument("target", help="a person, a machine, or person@machine")
    p.add_argument("--json", action="store_true")
    p = add("leave", cmd_leave, "leave the team on this machine")
    p.add_argument("--force", action="store_true", help="even if no teammate is online to hear it")
    p.add_argument("--json", action="store_true")
    p = add("link", cmd_link, "show the team link, or replace it with --new")
    p.add_argument("--new", action="store_true", help="replace the team link; the old one stops working")
    p.add_argument("--json", action="store_true")
    p = add("gate", cmd_gate, "the gate: its ledger, why it told you (or not), your preferences, shadow sources")
    if p is not _UNBUILT:
        from .gate_cli import add_gate_arguments

        add_gate_arguments(p)
    p = add("lessons", cmd_lessons, "the team's reviewed lessons: propose, search, review, retract, promote to "
                                    "skills, import")
    if p is not _UNBUILT:
        from .lessons_cli import add_lessons_arguments

        add_lessons_arguments(p)
    p = add("project", cmd_project, "the project of this repository: its owner and members, who receives its "
                                    "lessons")
    if p is not _UNBUILT:
        from .projects_cli import add_project_arguments

        add_project_arguments(p)
    p = add("digest", cmd_digest, "what the gate held for you, what it checked and how much it silenced")
    p.add_argument("--since", help="2h, 30m, 7d or an ISO date or time (default: since your last digest)")
    p.add_argument("--peek", action="store_true", help="do not count this as your last digest")
    p.add_argument("--person", help="another person's digest")
    p.add_argument("--json", action="store_true")
    parser.epilog = (f"commands:\n{_command_list(everyday)}\n\n"
                     f"plumbing (what harnesses and `hive setup` run; rarely typed):\n{_command_list(plumbing)}\n\n"
                     "`hive COMMAND --help` tells more. Exit codes: 0 done, 1 a user error,\n"
                     "2 the sidecar cannot be reached or started, 3 `hive ask` not approved.")
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

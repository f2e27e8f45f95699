"""The team from a terminal: found, invite, join, show, remove, leave, the team link, and teammates' mail.

``hive policy`` says what this machine does with teammates' mail (accept, hold or refuse, per
person); ``hive held``, ``approve`` and ``drop`` settle what the policy held.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..base.errors import UnknownOp
from .main import WIDTH, AddCommand, _call, _print_json, clip

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the type checker only, as in .main
    from typing import Any


def _print_invite(invite: dict[str, Any] | None) -> None:
    if invite:
        print(invite["line"])


def cmd_init(args: argparse.Namespace) -> int:
    extra: dict[str, Any] = {"machine": args.machine} if args.machine else {}
    if args.anchor:
        extra["anchor"] = True
    if args.address:
        extra["addresses"] = args.address
    result = _call("team_init", team=args.team, person=args.as_, **extra)
    if args.json:
        _print_json(result)
        return 0
    me = result["me"]
    print(
        f"founded team {result['team']['name']}: you are {me['person']} on {me['machine']}"
        + (", the team's anchor" if me.get("role") == "anchor" else "")
    )
    if args.address:
        print(f"teammates dial this machine at {', '.join(args.address)}")
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


def cmd_join(args: argparse.Namespace) -> int:
    # Asked of an agent's shell, the join waits for its person's click on this desktop.
    request: dict[str, Any] = {"link": args.link}
    if args.as_:
        request["person"] = args.as_
    if args.machine:
        request["machine"] = args.machine
    if args.anchor:
        request["anchor"] = True
    if args.address:
        request["addresses"] = args.address
    try:
        result = _call("team_join", **request)
    except UnknownOp:
        print(
            "hive: joining needs the mesh transport (the team_join op), which this sidecar does not serve yet",
            file=sys.stderr,
        )
        return 1
    if args.json:
        _print_json(result)
        return 0
    me = result["me"]
    print(
        f"joined team {result['team']['name']}: you are {me['person']} on {me['machine']}"
        + (", the team's anchor" if me.get("role") == "anchor" else "")
    )
    _print_invite(result.get("invite"))
    return 0


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


def cmd_held(args: argparse.Namespace) -> int:
    if args.allowed or args.screen_again:
        return _allowed(args)
    result = _call("held", outbound=args.outbound)
    if args.json:
        _print_json(result)
        return 0
    if not result["held"]:
        print("no messages held before they leave" if args.outbound else "no held messages")
        return 0
    for m in result["held"]:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(m["received_at"]))
        first = (m["body"].splitlines() or [""])[0][:100]
        print(m["id"] + "  " + clip(f"{when}  {m['from']} -> {m['to']}: {first}", WIDTH - len(m["id"]) - 2))
        if m.get("files"):
            print(f"    with files: {', '.join(m['files'])}")
        if m.get("why"):
            print(clip(f"    why: {m['why']}", WIDTH))
    print("approve with `hive approve <id>...`, or drop with `hive drop <id>...`")
    return 0


def _allowed(args: argparse.Namespace) -> int:
    result = _call("screening_allowed", revoke=args.screen_again or [])
    if args.json:
        _print_json(result)
        return 0
    for sender in result["revoked"]:
        print(f"{sender}: screened again")
    for sender in sorted(set(args.screen_again or []) - set(result["revoked"])):
        print(f"{sender}: was not let past screening")
    if args.allowed:
        if not result["allowed"]:
            print("screening holds messages from every sender")
        for a in result["allowed"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(a["since"]))
            print(f"{a['sender']}  let past screening {when}")
        if result["allowed"]:
            print("screen one again with `hive held --screen-again <sender>`")
    return 0


def _settle(op: str, args: argparse.Namespace) -> int:
    extra = {"allow_sender": True} if getattr(args, "allow_sender", False) else {}
    result = _call(op, ids=args.ids, **extra)
    if args.json:
        _print_json(result)
        return 0
    for r in result["settled"]:
        print(f"{r['id']}: {r['state'].replace('_', ' ')}" + (f" ({r['note']})" if r.get("note") else ""))
    if result.get("allowed"):
        print(f"screening holds nothing more from {', '.join(result['allowed'])}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    return _settle("approve", args)


def cmd_drop(args: argparse.Namespace) -> int:
    return _settle("drop", args)


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
    print(
        f"team {team['name']}: {people} {'person' if people == 1 else 'people'}, "
        f"{machines} machine{'' if machines == 1 else 's'}"
        + ("" if team["link"] else " (no team link: `hive link --new`)")
    )
    for person in result["people"]:
        for i, m in enumerate(person["machines"]):
            if m["me"]:
                state = "this machine"
            elif m["online"] and m["path"] not in (None, "direct"):
                state = f"online, {m['path']} (unreachable directly)"
            elif m["online"]:
                state = f"online, {m['path']}" if m["path"] else "online"
            elif m.get("unreachable"):
                state = f"unreachable from here (up: linked to {', '.join(m['linked_by'])})"
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
    result = _call("team_remove", target=args.target)
    if args.json:
        _print_json(result)
        return 0
    print(f"removed {', '.join(result['removed'])}; the team link was replaced:")
    _print_invite(result.get("invite"))
    return 0


def cmd_leave(args: argparse.Namespace) -> int:
    result = _call("team_leave", force=args.force)
    if args.json:
        _print_json(result)
        return 0
    print(f"left team {result['left']}; this machine is on its own again")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    result = _call("team_link_new") if args.new else _call("team_invite")
    if args.json:
        _print_json(result)
        return 0
    if args.new:
        print("the old team link no longer works; the new one:")
    _print_invite(result)
    return 0


def _add_anchor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--anchor",
        action="store_true",
        help="this is an always-on machine (a VPS, a Pi) that holds mail for offline teammates and relays for them",
    )
    p.add_argument(
        "--address",
        action="append",
        metavar="HOST:PORT",
        help="where teammates dial this machine (its public address); it listens there. Repeatable",
    )


def add_arguments(add: AddCommand) -> None:
    """The team's commands and those of teammates' mail, in the order the help lists them."""
    p = add("init", cmd_init, "found a team with this machine as its first member")
    p.add_argument("team", help="the team's name: a-z, 0-9 and -")
    p.add_argument("--as", dest="as_", required=True, help="your name in the team: a-z, 0-9 and -")
    p.add_argument("--machine", help="this machine's name in the team (default: from config.toml or the hostname)")
    _add_anchor_arguments(p)
    p.add_argument("--json", action="store_true")
    p = add("invite", cmd_invite, "print the invite line with the team link")
    p.add_argument("--own-machine", action="store_true", help="a one-time invite for another machine of yours")
    p.add_argument("--once", action="store_true", help="a one-time invite instead of the reusable team link")
    p.add_argument("--json", action="store_true")
    p = add("join", cmd_join, "join a team with an invite link")
    p.add_argument("link", help="the invite (hive1:…), or the whole invite line")
    p.add_argument("--as", dest="as_", help="your name in the team (an own-machine invite sets it)")
    p.add_argument("--machine", help="this machine's name in the team")
    _add_anchor_arguments(p)
    p.add_argument("--json", action="store_true")
    p = add("policy", cmd_policy, "what this machine does with teammates' mail: accept, hold or refuse, per person")
    p.add_argument(
        "words",
        nargs="*",
        metavar="[PERSON] POLICY",
        help="`hive policy hold` for everyone, `hive policy bob accept` for bob, "
        "`hive policy bob default` to drop bob's own; none to list",
    )
    p.add_argument("--json", action="store_true")
    p = add("held", cmd_held, "messages held for you: teammates' (your inbound policy, screening), or your own")
    p.add_argument("--outbound", action="store_true", help="your sessions' messages held before they leave")
    p.add_argument(
        "--allowed", action="store_true", help="the senders you let past screening (`hive approve --allow-sender`)"
    )
    p.add_argument("--screen-again", nargs="+", metavar="SENDER", help="screen these senders' messages again")
    p.add_argument("--json", action="store_true")
    for name, func, what in (
        ("approve", cmd_approve, "deliver held messages to their sessions"),
        ("drop", cmd_drop, "drop held messages; their senders are told"),
    ):
        p = add(name, func, what)
        p.add_argument("ids", nargs="+", help="message ids from `hive held`")
        p.add_argument("--json", action="store_true")
        if name == "approve":
            p.add_argument(
                "--allow-sender", action="store_true", help="screening holds nothing more from their senders"
            )
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

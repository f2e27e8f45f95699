"""``hive history …``: the team's history on its anchor, opt-in per person.

``on`` archives the mail you send and receive on this machine on the team's anchor, ``off`` stops
it (``--forget`` also deletes what the anchor keeps of yours), ``search`` finds what you sent or
received there. When an agent runs ``on`` or ``off --forget``, your confirmation is asked for in a
pop-up, or, with no desktop, at this command's own terminal; without either it is refused.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .main import WIDTH, _call, _print_json, add_actions, call_confirmed, clip, print_note


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "-"


def _print_status(result: dict[str, Any]) -> None:
    anchors = ", ".join(f"{a['anchor']} ({'online' if a['online'] else 'offline'})" for a in result["anchors"])
    if result["is_anchor"]:
        anchors = "this machine" + (f", {anchors}" if anchors else "")
    if result["on"]:
        print(f"history: on since {_when(result['since'])}: your mail on this machine is archived on the anchor")
    else:
        print("history: off (`hive history on` archives your mail on this machine on the team's anchor)")
    print(f"  anchor:   {anchors or 'none in the team'}")
    if result["queued"]:
        full = " (full: new mail is not archived until the anchor takes some)" if result["queue_full"] else ""
        print(f"  waiting:  {result['queued']} entries for the anchor{full}")
    if result["forget_pending"]:
        print(f"  to forget your entries: {', '.join(result['forget_pending'])} (asked when online)")
    if result.get("kept"):
        kept = ", ".join(f"{owner} {count}" for owner, count in result["kept"].items())
        print(f"  kept here: {kept}")


def cmd_status(args: argparse.Namespace) -> int:
    result = _call("history")
    if args.json:
        _print_json(result)
    else:
        _print_status(result)
    return 0


def _change(args: argparse.Namespace, **request: Any) -> int:
    return print_note(args, call_confirmed("history", request), "not confirmed")


def cmd_on(args: argparse.Namespace) -> int:
    return _change(args, set="on")


def cmd_off(args: argparse.Namespace) -> int:
    return _change(args, set="off", forget=args.forget)


def cmd_search(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"q": " ".join(args.words)}
    if args.limit is not None:
        request["limit"] = args.limit
    result = _call("history_search", **request)
    if args.json:
        _print_json(result)
        return 0
    if not sys.stdout.isatty():  # piped (an agent's shell, a script): the framed text an agent reads
        print(result["text"] or "nothing in your team's history matches")
        return 0
    if not result["hits"]:
        print("nothing in your team's history matches (it holds only mail of people who turned `hive history on`)")
        return 0
    for hit in result["hits"]:
        print(clip(f"{_when(hit['at'])}  {hit['from']} → {hit['to']}  {hit['id']}", WIDTH))
        for line in hit["body"].splitlines()[:6] or [""]:
            print(clip(f"    {line}", WIDTH))
        print()
    return 0


def add_history_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hive history`` subcommands (``status`` when none is given)."""
    add = add_actions(parser, "history", default=cmd_status)
    add("status", cmd_status, "whether your mail is archived, what waits, the team's anchor")
    add("on", cmd_on, "archive the mail you send and receive on this machine on the team's anchor")
    p = add("off", cmd_off, "stop archiving; what the anchor keeps stays unless --forget")
    p.add_argument("--forget", action="store_true", help="also delete everything of yours the anchor keeps")
    p = add("search", cmd_search, "search what you sent and received (stemmed: migrating finds migration)")
    p.add_argument("words", nargs="+", help="the words to look for")
    p.add_argument("--limit", type=int, help="at most this many hits (1-50, default 10)")

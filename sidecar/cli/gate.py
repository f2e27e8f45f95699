"""``hive gate …`` and ``hive digest``: the gate's ledger, answers, preferences and digest for a person.

``hive gate prefs KEY=VALUE …`` changes preferences only once the person confirms: in a desktop
pop-up, or with no desktop at this command's own terminal (the rule group sends follow).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from typing import Any

from ..base.errors import BadRequest
from .main import _call, _print_json, add_actions, call_confirmed

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``2h``, ``30m``, ``7d`` (ago), an ISO date or time (local), or seconds since the epoch."""
    if not text:
        return None
    now = time.time() if now is None else now
    text = text.strip()
    if match := _SPAN.match(text):
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise BadRequest(f"--since takes 2h, 30m, 7d, an ISO date or time, or epoch seconds; not {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a time without a zone is this machine's local time
    return moment.timestamp()


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def _window(args: argparse.Namespace, **request: Any) -> dict[str, Any]:
    """A request for a person's items over a time: ``--since`` (when given) and ``--person`` added."""
    if args.since:
        request["since"] = parse_since(args.since)
    if args.person:
        request["person"] = args.person
    return request


# ---- commands ------------------------------------------------------------------------------


def cmd_ledger(args: argparse.Namespace) -> int:
    result = _call("gate_ledger", **_window(args, limit=args.limit))
    if args.json:
        _print_json(result)
        return 0
    if not result["rows"]:
        print("the ledger has no decisions" + (" in that time" if args.since else " yet"))
        return 0
    for row in result["rows"]:
        title = row["title"] if len(row["title"]) <= 50 else row["title"][:49] + "…"
        print(
            f"{_when(row['at'])}  {row['item']}  {row['person']}  {row['source']}  {row['outcome']}  "
            f"{row['rule']}  “{title}”: {row['reason']}"
        )
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    result = _call("gate_why", item=args.item)
    if args.json:
        _print_json(result)
        return 0
    for entry in result["items"]:
        item = entry["item"]
        print(
            f"{item['id']}  {item['source']} for {item['person']}"
            + (f" in {item['session']}" if item["session"] else "")
            + f": “{item['title']}”"
        )
        print(f"  {entry['answer']}")
        for row in entry["decisions"]:
            print(f"  {_when(row['at'])}  {row['outcome']:<8} {row['rule']:<18} {row['reason']}")
        for signal in entry["signals"]:
            print(
                f"  {_when(signal['at'])}  signal   {signal['kind']}"
                + (f": {signal['detail']}" if signal["detail"] else "")
            )
    return 0


def _print_prefs(prefs: dict[str, Any]) -> None:
    quiet = f"{prefs['quiet']} ({prefs['timezone']})" if prefs["quiet"] else f"none (time zone {prefs['timezone']})"
    shares = ", ".join(f"{s} {v:g} ({prefs['caps'][s]}/day)" for s, v in prefs["shares"].items())
    print(f"gate preferences for {prefs['person']}")
    print(f"  budget          {prefs['budget']} attention items a day")
    print(f"  quiet hours     {quiet}")
    print(f"  alarms          {'on' if prefs['alarms'] else 'off'}, on {prefs['alarm_channel']}")
    print(f"  channel         {prefs['channel']}")
    print(f"  shares          {shares}; any other source {prefs['default_share']:g}")
    print(f"  proposer share  {prefs['proposer_share']:g} of its source's share")
    print(f"  muted           {', '.join(prefs['mute']) or 'nothing'}")
    print(f"  live            {', '.join(prefs['live']) or 'nothing'} (every other source is in shadow)")
    for problem in prefs["problems"]:
        print(f"  problem in config.toml: {problem}")


def cmd_prefs(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {}
    if args.person:
        request["person"] = args.person
    if args.changes:
        changes: dict[str, str] = {}
        for change in args.changes:
            key, sep, value = change.partition("=")
            if not sep or not key.strip():
                print(
                    f"hive: {change!r}: write a change as KEY=VALUE (such as budget=8 or mute.lesson=on)",
                    file=sys.stderr,
                )
                return 1
            changes[key.strip()] = value.strip()
        result = call_confirmed("gate_prefs", {**request, "set": changes})
        if result is None:
            print("hive: not changed", file=sys.stderr)
            return 1
    else:
        result = _call("gate_prefs", **request)
    if args.json:
        _print_json(result)
        return 0
    if result["changed"]:
        print("changed: " + "; ".join(result["changed"]))
    _print_prefs(result["prefs"])
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    result = call_confirmed("gate_promote", {"source": args.source, "demote": args.demote})
    if result is None:
        print("hive: not changed", file=sys.stderr)
        return 1
    if args.json:
        _print_json(result)
        return 0
    state = "in shadow again" if args.demote else "live: its items can reach you"
    print(f"{args.source} is {state}")
    return 0


def cmd_shadow(args: argparse.Namespace) -> int:
    result = _call("gate_shadow", **({"person": args.person} if args.person else {}))
    if args.json:
        _print_json(result)
        return 0
    sources = [s for s in result["sources"] if not s["live"]]
    if not sources:
        print("no source is in shadow with a record yet; live: " + (", ".join(result["live"]) or "none"))
        return 0
    for s in sources:
        would = ", ".join(f"{n} {what}" for what, n in sorted(s["would"].items())) or "nothing"
        print(
            f"{s['source']}: {s['offered']} offered; would have: {would}; silenced {s['silenced']}; "
            f"you wanted {s['wanted_when_delivered']} of those it would deliver, and {s['missed']} it would have "
            "held (missed)"
        )
        for item in s["recent"][:5]:
            print(f"  {_when(item['offered_at'])}  {item['id']}  would {item['would']}: “{item['title']}”")
    print("promote a source with `hive gate promote <source>`")
    return 0


def cmd_measures(args: argparse.Namespace) -> int:
    result = _call("gate_measures", **_window(args, since=parse_since("7d")))
    if args.json:
        _print_json(result)
        return 0

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    print(f"since {_when(result['since'])}")
    for person, days in result["delivered_per_day"].items():
        print(f"  {person}: delivered " + ", ".join(f"{d} {n}" for d, n in days.items()))
    print(f"  acted on: {result['acted_on']} of {result['delivered']} delivered ({share(result['acted_share'])})")
    print(
        f"  held that mattered: {result['held_mattered']} of {result['held']} "
        f"({share(result['held_mattered_share'])}); silenced that mattered: {result['silenced_mattered']} of "
        f"{result['silenced']} ({share(result['silenced_mattered_share'])})"
    )
    return 0


def cmd_acted(args: argparse.Namespace) -> int:
    result = _call("gate_acted", item=args.item, how=args.how)
    if args.json:
        _print_json(result)
    else:
        print(f"recorded {args.how} for {', '.join(result['items'])}")
    return 0


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hive gate`` subcommands."""
    add = add_actions(parser, "gate")
    p = add("ledger", cmd_ledger, "every decision the gate made: the item, the rule that decided, the time")
    p.add_argument("--since", help="2h, 30m, 7d, an ISO date or time, or epoch seconds")
    p.add_argument("--person", help="only this person's items")
    p.add_argument("--limit", type=int, default=500, help="the latest N decisions (default 500)")
    p = add("why", cmd_why, "why the gate told you about an item, or why it did not (also `hive why`)")
    p.add_argument("item", help="an item id or fingerprint from `hive gate ledger`, or a message id")
    p = add("prefs", cmd_prefs, "show your gate preferences; KEY=VALUE changes them once you confirm")
    p.add_argument(
        "changes",
        nargs="*",
        metavar="KEY=VALUE",
        help="budget, quiet (22:00-08:00 or off), timezone, alarms (on/off), channel "
        "(session/popup/digest), alarm_channel, proposer_share, share.SOURCE, mute.SOURCE, "
        "live.SOURCE; VALUE default removes your own setting",
    )
    p.add_argument("--person", help="another person's preferences (read only)")
    p = add("shadow", cmd_shadow, "what sources in shadow would have delivered, and what you wanted")
    p.add_argument("--person", help="another person's record")
    p = add("promote", cmd_promote, "take a source out of shadow, so its items can reach you")
    p.add_argument("source")
    p.add_argument("--demote", action="store_true", help="put the source back in shadow")
    p = add("measures", cmd_measures, "delivered per day, the share acted on, the held items that mattered")
    p.add_argument("--since", help="default 7d")
    p.add_argument("--person")
    p = add("acted", cmd_acted, "record that you acted on an item (counts for the measures)")
    p.add_argument("item")
    p.add_argument("--how", default="cited", choices=("cited", "replied", "changed", "asked", "wanted"))


def cmd_digest(args: argparse.Namespace) -> int:
    result = _call("digest", **_window(args, peek=args.peek))
    if args.json:
        _print_json(result)
        return 0
    from ..gate.engine import digest_text  # the gate pulls in the mesh transport (aioquic, cryptography)

    print(digest_text(result, _when))
    return 0

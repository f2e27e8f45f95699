"""``hive who``, ``hive events`` and ``hive folder``: the sessions hive knows, what they did, where hive is off."""

from __future__ import annotations

import argparse
import os
import time

from .main import WIDTH, AddCommand, _call, _print_json, clip, table


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


def add_arguments(add: AddCommand) -> None:
    """``hive who``, ``events`` and ``folder``, in the order the help lists them."""
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

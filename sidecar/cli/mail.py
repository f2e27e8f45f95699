"""``hive send``, ``ask``, ``inbox``, ``listen`` and ``sent``: mail to and from sessions, and a question to your person.

A group send is confirmed by the person in a desktop pop-up, or with no desktop at this command's
own terminal; ``hive ask`` waits for their Approve or Deny in a pop-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .main import WIDTH, AddCommand, _call, _print_json, call_confirmed, clip

TYPE_CHECKING = False
if TYPE_CHECKING:  # for the type checker only, as in .main
    from typing import Any

LISTEN_WAIT = 600  # the sidecar's longest wait per request; listen asks again until mail comes


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
    result = call_confirmed("send", request)  # a group send, with no desktop: confirmed at this terminal
    if result is None:
        print("hive: not sent", file=sys.stderr)
        return 1
    if args.json:
        _print_json(result)
        return 0
    for r in result["results"]:
        print(f"{r['to']}: {r['note']} (id {r['id']})")
    if args.notify:
        print(result.get("notify_note") or "no desktop notification was shown")
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"question": " ".join(args.question)}
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
    from ..client import BlockingClient

    # At a terminal a person reads the mail; piped (an agent's shell, a script) it stays in frames.
    human = not args.json and not args.raw and sys.stdout.isatty()
    with BlockingClient.open() as client:
        mailbox = {"as": args.as_} if args.as_ else {}
        result = client.call("inbox", wait=0, peek=args.peek, **mailbox)
        if not result["messages"] and (args.wait > 0 or until_mail):
            if sys.stderr.isatty() and not args.json:
                how_long = "" if until_mail else f" up to {args.wait:g} s"
                print(f"waiting{how_long} for mail to {result['to']} (Ctrl-C stops)…", file=sys.stderr, flush=True)
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
                from ..mail.render import for_person

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


def cmd_sent(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"ids": args.ids}
    if args.sender:
        request["from"] = args.sender
    result = _call("sent", **request)
    if args.json:
        _print_json(result)
        return 0
    if not result["messages"]:
        print(
            f"no messages sent {'by ' + args.sender if args.sender else 'from this terminal'} yet"
            if not args.ids
            else "no message with those ids was sent by you"
        )
        return 0
    for m in result["messages"]:
        when = time.strftime("%H:%M:%S", time.localtime(m["read_at"])) if m["read_at"] else ""
        # The id is never clipped: it is what `hive sent ID` and `--reply-to` take.
        print(f"{m['id']}  {clip(m['to'], WIDTH - len(m['id']) - 18)}  {m['state']} {when}".rstrip())
    return 0


def add_arguments(add: AddCommand) -> None:
    """``hive send``, ``ask``, ``inbox``, ``listen`` and ``sent``, in the order the help lists them."""
    p = add("send", cmd_send, "send a message to a session (or, from a terminal, a group)")
    p.add_argument("to", help="person/session, a session name, person/*, repo:NAME or *")
    p.add_argument("text", nargs="+", help="the message; - reads it from standard input")
    p.add_argument("--from", dest="sender", help="send as this session of yours (name or key)")
    p.add_argument("--fyi", action="store_true", help="do not wake the recipient; it sees it at its next pause")
    p.add_argument("--reply-to", help="the id of the message this answers")
    p.add_argument("--notify", action="store_true", help="also show it as a desktop notification to its person")
    p.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="attach a text file (up to 10, 256 KB each, 512 KB in all); repeat for more",
    )
    p.add_argument("--json", action="store_true")
    p = add("ask", cmd_ask, "ask your person a yes/no question in a desktop pop-up; exits 0 only if approved")
    p.add_argument("question", nargs="+", help="the question, shown with Approve and Deny")
    p.add_argument("--about", help="the id of the teammate's message this is about; they get the answer, signed")
    p.add_argument("--as", dest="as_", help="ask as this session of yours (name or key)")
    p.add_argument("--json", action="store_true")
    p = add("inbox", cmd_inbox, "show unread messages (yours, or a session's with --as) and mark them read")
    p.add_argument("--wait", type=float, default=0, help="wait up to N seconds (at most 600) for mail")
    p.add_argument(
        "--as",
        dest="as_",
        help="read a session's mailbox, or a named mailbox of yours "
        "(you/NAME, opened on first use, for a script or notes), instead of your terminal's",
    )
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

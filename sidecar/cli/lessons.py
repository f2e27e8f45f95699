"""``hive lessons …``: propose, find, review, retract and promote the team's lessons from a terminal.

A verdict (``review``, ``approve``, ``reject``, ``edit``) is recorded only once the person confirms
it: in a desktop pop-up, or, with no desktop, by typing the verdict word at this command's own
terminal. Without either (an agent's tool call, a script) the sidecar refuses it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ..base.errors import BadRequest, Refused
from .main import _call, _print_json, add_actions, ask_tty, call_confirmed, print_note


def _typed(question: str, word: str) -> bool:
    """Only the verdict word, typed at the terminal, confirms."""
    return ask_tty(f"{question} Type {word} to confirm: ") == word


def _verdict_call(verdict: str, request: dict[str, Any]) -> dict[str, Any] | None:
    """Call ``lesson_review``; at this terminal only the verdict word, typed, confirms. None: declined."""
    return call_confirmed("lesson_review", {**request, "verdict": verdict}, lambda question: _typed(question, verdict))


def _short(text: str, limit: int = 70) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _when(ms: int | float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000)) if ms else "-"


def _print_lesson(view: dict[str, Any]) -> None:
    print(f"lesson {view['id']}")
    print(f"  state       {view['state']}" + (" (hypothesis here)" if view.get("hypothesis") else ""))
    print(
        f"  kind        {view['kind']}, scope {view['scope']}" + (f" {view['project']}" if view.get("project") else "")
    )
    print(f"  author      {view.get('author', '')} on {_when(view.get('created_at'))}")
    print(
        f"  reviewer    {view.get('reviewer') or '-'}"
        + (f" (suggested: {view['suggested_reviewer']})" if view.get("suggested_reviewer") else "")
    )
    if view.get("applicability"):
        print(f"  applies     {view['applicability']}")
    if view.get("tags"):
        print(f"  tags        {', '.join(view['tags'])}")
    for item in view.get("evidence", []):
        print(f"  evidence    {item.get('kind')}: {item.get('ref')}")
    if view.get("quote"):
        print(f"  quote       {view['quote'].get('speaker')}: “{view['quote'].get('words')}”")
    if view.get("supersedes"):
        print(f"  supersedes  {view['supersedes']}")
    if view.get("screening"):
        found = view["screening"]
        print(f"  screening   matches {found['rule']} (“{found['excerpt']}”): it is never recalled, even approved")
    print(f"  outcome     cited {view.get('citations', 0)}, worked {view.get('successes', 0)}")
    print()
    print(view.get("text", "(text deleted: retracted)"))


def _print_rows(rows: list[dict[str, Any]], empty: str) -> None:
    if not rows:
        print(empty)
        return
    for r in rows:
        print(
            f"{r['id'][:12]}  {r['state']:<10} {r['kind']:<17} {r['scope']:<8} "
            f"{(r.get('reviewer') or r.get('suggested_reviewer') or '-'):<10} {_short(r.get('text', ''))}"
        )


# ---- commands ------------------------------------------------------------------------------


def _proposal(args: argparse.Namespace) -> dict[str, Any]:
    text = " ".join(args.text)
    if text == "-":
        text = sys.stdin.read()
    request: dict[str, Any] = {
        "kind": args.kind,
        "text": text,
        "applicability": args.applicability or "",
        "scope": args.scope,
        "evidence": args.evidence or [],
        "tags": args.tag or [],
        "cwd": os.getcwd(),
    }
    if args.quote:
        speaker, sep, words = args.quote.partition(":")
        if not sep:
            raise BadRequest("--quote takes PERSON:WORDS, the person's own words")
        request["quote"] = {"speaker": speaker.strip(), "words": words.strip()}
    if args.as_:
        request["session"] = args.as_
    return request


def cmd_propose(args: argparse.Namespace) -> int:
    result = _call("lesson_propose", **_proposal(args))
    if args.json:
        _print_json(result)
    else:
        print(f"proposed {result['id']}: {result['note']}")
    return 0


def cmd_supersede(args: argparse.Namespace) -> int:
    result = _call("lesson_propose", **_proposal(args), supersedes=args.id)
    if args.json:
        _print_json(result)
    else:
        print(f"proposed {result['id']} to supersede {args.id}: {result['note']}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"limit": args.limit}
    if args.state:
        request["state"] = args.state
    result = _call("lesson_list", **request)
    if args.json:
        _print_json(result)
    else:
        _print_rows(result["lessons"], "no lessons" + (f" in state {args.state}" if args.state else ""))
    return 0


def cmd_pending(args: argparse.Namespace) -> int:
    result = _call("lesson_pending")
    if args.json:
        _print_json(result)
        return 0
    _print_rows(result["lessons"], "no lesson waits for your review")
    if result["lessons"]:
        print("review one with `hive lessons review <id>`")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    result = _call("lesson_show", lesson=args.id)
    if args.json:
        _print_json(result)
    else:
        _print_lesson(result["lesson"])
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {
        "q": " ".join(args.query),
        "files": args.file or [],
        "limit": args.limit,
        "cwd": os.getcwd(),
    }
    result = _call("lesson_search", **request)
    if args.json:
        _print_json(result)
        return 0
    if not result["lessons"]:
        print("no verified lesson matches")
    for r in result["lessons"]:
        mark = "hypothesis" if r["hypothesis"] else "verified"
        print(
            f"{r['id'][:12]}  {r['score']:.3f}  {r['kind']:<17} {r['scope']:<8} reviewed by {r['reviewer']}, "
            f"{r['age_days']:g}d, {mark}"
        )
        print(f"    {_short(r['text'], 110)}")
    return 0


def cmd_review(args: argparse.Namespace) -> int:
    view = _call("lesson_show", lesson=args.id)["lesson"]
    if not args.json:
        _print_lesson(view)
        print()
    if view["state"] not in ("proposed", "held"):
        raise Refused(f"lesson {view['id'][:12]} is {view['state']}: only a proposed or held lesson is reviewed")
    typed = ask_tty("Type approve or reject (anything else leaves it pending): ")
    if typed in ("approve", "reject"):
        from ..lessons.review import question

        request = {"lesson": view["id"], "verdict": typed, "confirmed_on_terminal": question(typed, view["id"])}
        if args.note:
            request["note"] = args.note
        result: dict[str, Any] | None = _call("lesson_review", **request)
    elif typed is None:
        # No terminal: the person decides in a pop-up (Approve approves; Deny leaves it pending).
        result = _verdict_call("approve", {"lesson": view["id"], "note": args.note or ""})
    else:
        result = None
    return _report(args, result)


def _report(args: argparse.Namespace, result: dict[str, Any] | None) -> int:
    return print_note(args, result, "nothing recorded; the lesson is still pending")


def cmd_verdict(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"lesson": args.id, "note": args.note or ""}
    verdict = args.lessons_command
    if verdict == "edit":
        request["text"] = " ".join(args.text)
    if getattr(args, "scope", None):
        request["scope"] = args.scope
    return _report(args, _verdict_call(verdict, request))


def cmd_retract(args: argparse.Namespace) -> int:
    result = _call("lesson_retract", lesson=args.id, reason=args.reason or "", cwd=os.getcwd())
    if args.json:
        _print_json(result)
    else:
        print(result["note"])
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    result = _call("lesson_promote", lesson=args.id, force=args.force, cwd=os.path.abspath(args.dir or os.getcwd()))
    if args.json:
        _print_json(result)
        return 0
    from hive.integrations import registry  # only here: the plugins load for this one command

    mirrored = "".join(
        f" ({harness.identity.title}: {result[link.key]})"
        for harness in registry.harnesses().values()
        if (link := harness.identity.project_skills) is not None and result.get(link.key)
    )
    print(f"wrote {result['path']}" + mirrored)
    for note in result.get("notes", []):
        print(f"  {note}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"cwd": os.getcwd()}
    if args.db:
        request["path"] = os.path.abspath(args.db)
    result = _call("lesson_import", **request)
    if args.json:
        _print_json(result)
        return 0
    print(
        f"imported {len(result['proposed'])} Beacon lessons as proposals from {result['path']}"
        + (f"; {len(result['skipped'])} left out" if result["skipped"] else "")
    )
    for item in result["skipped"]:
        print(f"  {item['id']}: {item['reason']}")
    return 0


# lessons.KINDS, spelled out: every `hive` command builds this parser, and lessons.py is not light.
LESSON_KINDS = (
    "convention",
    "correction",
    "gotcha",
    "decision",
    "routing",
    "preference",
    "workflow",
    "debugging_pattern",
)


def _add_proposal_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", nargs="+", help="the lesson in plain language (at most 1,200 characters); - reads stdin")
    # A metavar: argparse would print all eight choices on one unwrappable line.
    p.add_argument(
        "--kind",
        required=True,
        metavar="KIND",
        choices=LESSON_KINDS,
        help=f"what sort of lesson: {', '.join(LESSON_KINDS[:-1])} or {LESSON_KINDS[-1]}",
    )
    p.add_argument("--applicability", help="when it applies")
    p.add_argument("--scope", default="project", choices=("personal", "project", "team"))
    p.add_argument(
        "--evidence",
        action="append",
        metavar="KIND:REF",
        help="what it rests on: file:PATH, commit:SHA, command:LINE, url:URL, message:ID (repeat)",
    )
    p.add_argument("--tag", action="append", help="a tag (repeat)")
    p.add_argument("--quote", metavar="PERSON:WORDS", help="required for a preference or decision: their words")
    p.add_argument("--as", dest="as_", help="propose as this session of yours (name or key)")


def add_lessons_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``hive lessons`` subcommands."""
    add = add_actions(parser, "lessons")

    _add_proposal_arguments(add("propose", cmd_propose, "propose a lesson; its reviewer is asked"))
    p = add("list", cmd_list, "the lessons this machine holds, newest first")
    p.add_argument("--state", choices=("proposed", "held", "verified", "rejected", "superseded", "retracted"))
    p.add_argument("--limit", type=int, default=100)
    p = add("show", cmd_show, "one lesson with its evidence, reviewer and outcome")
    p.add_argument("id", help="a lesson id or its first characters")
    p = add("search", cmd_search, "verified lessons for a query, ranked as agents get them")
    p.add_argument("query", nargs="*", default=[])
    p.add_argument("--file", action="append", help="a file you are working on (repeat)")
    p.add_argument("--limit", type=int, default=10)
    p = add("review", cmd_review, "show a proposed lesson and decide it, typed at this terminal")
    p.add_argument("id")
    p.add_argument("--note", help="a note for the author")
    for name, what in (
        ("approve", "approve a proposed lesson (confirmed in a pop-up or typed here)"),
        ("reject", "reject a proposed lesson (confirmed in a pop-up or typed here)"),
    ):
        p = add(name, cmd_verdict, what)
        p.add_argument("id")
        p.add_argument("--note")
        if name == "approve":
            p.add_argument("--scope", choices=("personal", "project", "team"), help="share it more narrowly")
    p = add("edit", cmd_verdict, "approve a proposed lesson with your replacement text")
    p.add_argument("id")
    p.add_argument("text", nargs="+")
    p.add_argument("--scope", choices=("personal", "project", "team"))
    p.add_argument("--note")
    p = add("retract", cmd_retract, "retract a lesson: its text is deleted on every machine and its skill removed")
    p.add_argument("id")
    p.add_argument("--reason")
    p = add("supersede", cmd_supersede, "propose a lesson that replaces another once it is verified")
    p.add_argument("id", help="the lesson it replaces")
    _add_proposal_arguments(p)
    p = add("promote", cmd_promote, "write a verified lesson as .agents/skills/hive-<slug>/SKILL.md in this project")
    p.add_argument("id")
    p.add_argument("--force", action="store_true", help="overwrite a skill file someone edited")
    p.add_argument("--dir", help="the project folder (default: this one)")
    add("pending", cmd_pending, "proposals waiting for your review, held ones included")
    p = add("import", cmd_import, "import lessons from a Beacon memory.db as proposals")
    p.add_argument("--db", help="the memory.db (default: ~/.beacon/endpoint/memory.db)")

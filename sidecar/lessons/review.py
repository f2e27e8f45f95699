"""Review: who reviews a proposed lesson, and how a person's verdict is confirmed before it is signed.

Choosing the reviewer (seed Part 3 §5) is a question about the lesson's evidence files:

- a personal lesson goes to the session's own person;
- a project (or team) lesson goes to the owners of its evidence files by the repository's
  CODEOWNERS (:mod:`hive.sidecar.team.codeowners`), the first owner that is a roster person;
- else to the person whose sessions touched those files most in the last 30 days, by the
  ``events`` table (:mod:`hive.sidecar.presence.observe`: a modification counts 2, a read 1); this
  machine's events are its own person's sessions, so a teammate is chosen this way only when
  their presence shows them on those files now;
- else to the proposing person.

A verdict becomes a signed ``Review`` only after the person confirmed it, never on an agent's
word: in a desktop pop-up (the ``ask_user`` machinery of :mod:`hive.sidecar.person.dialog`, showing the
text, an evidence summary and the scope), or, with no desktop, by typing the verdict at the
terminal of the ``hive lessons`` command itself (``confirm_on_terminal``). A client with neither,
which is what an agent's tool call is, is refused (``refused``). No MCP tool asks for a verdict.

The pop-up that asks a reviewer about a fresh proposal (:func:`ask_reviewer`) is a proactive item:
:mod:`hive.sidecar.lessons.ops` offers it to the reviewer's gate first, which may hold it back.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import NoDesktop, Refused
from ..mail.screen import screened
from ..person.confirm import confirm_by_person
from ..person.dialog import Answer, Prompt, backend_for, clean, clip, find_desktop
from ..team import codeowners

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..mail.host import MailHost

WINDOW_DAYS = 30
TOUCH_WEIGHTS = {"file.modified": 2, "file.read": 1}
POPUP_TIME = 3600.0  # a review pop-up stays up an hour; unanswered, the proposal waits in `hive lessons pending`
SETTLE_TIME = 5.0  # the preflight (2 s) plus putting the pop-up up; past this, its delivery failed
CONFIRM_TIME = 300.0  # a `hive lessons approve` confirmation
TEXT_LIMIT = 600
EVIDENCE_LIMIT = 5

_LINE = re.compile(r":\d+(?:-\d+)?$")  # path:12 or path:12-30


@dataclass(frozen=True)
class Choice:
    person: str
    why: str  # personal | codeowners | touches | presence | proposer


# ---- who reviews ------------------------------------------------------------------------------


def file_refs(evidence: Iterable[Mapping[str, Any]]) -> list[str]:
    """The repository paths among a lesson's evidence pointers."""
    out = []
    for item in evidence:
        if item.get("kind") == "file" and isinstance(item.get("ref"), str):
            path = _LINE.sub("", item["ref"].split("#", 1)[0].strip()).removeprefix("./")
            if path and path not in out:
                out.append(path)
    return out


def _matches(event_path: str, files: list[str]) -> str | None:
    path = event_path.replace("\\", "/")
    for f in files:
        if path == f or path.endswith("/" + f.lstrip("/")):
            return f
    return None


async def touches(sidecar: MailHost, files: list[str], now: float | None = None) -> Counter[str]:
    """Per person: how much their sessions touched ``files`` in the last 30 days (events here, presence there)."""
    now = time.time() if now is None else now
    counts: Counter[str] = Counter()
    if not files:
        return counts
    rows = await sidecar.store.fetchall(
        "SELECT action, path FROM events WHERE at >= ? AND action IN ('file.modified', 'file.read') AND path != ''",
        (now - WINDOW_DAYS * 86400,),
    )
    for row in rows:
        if _matches(str(row[1]), files):
            counts[sidecar.settings.person] += TOUCH_WEIGHTS[str(row[0])]
    mesh = getattr(sidecar, "mesh", None)
    if mesh is not None:
        for peer, presence in mesh.presence.items():
            member = mesh.team.member(peer)
            if member is None or not member.active:
                continue
            for s in presence.get("sessions", []):
                for f in s.get("files", []) if isinstance(s.get("files"), list) else []:
                    if isinstance(f, dict) and isinstance(f.get("path"), str) and _matches(f["path"], files):
                        counts[member.person] += TOUCH_WEIGHTS["file.modified" if f.get("edit") else "file.read"]
    return counts


def people(sidecar: MailHost) -> set[str]:
    mesh = getattr(sidecar, "mesh", None)
    found = set(mesh.people()) if mesh is not None else set()
    return found | {sidecar.settings.person}


async def choose_reviewer(
    sidecar: MailHost, *, scope: str, author_person: str, files: list[str], repo_root: str = ""
) -> Choice:
    """The person who should review a lesson with these evidence files."""
    if scope == "personal":
        return Choice(author_person, "personal")
    known = people(sidecar)
    if repo_root and files:
        aliases = codeowners.aliases_from_config(sidecar.paths.config)
        for owner in codeowners.owners_of(repo_root, files, people=known, aliases=aliases):
            if owner in known:
                return Choice(owner, "codeowners")
    counts = await touches(sidecar, files)
    if counts:
        # Most touches; a tie goes to the proposer, then by name, so the choice is stable.
        person = min(counts, key=lambda p: (-counts[p], p != author_person, p))
        return Choice(person, "touches")
    return Choice(author_person, "proposer")


# ---- confirming a verdict ---------------------------------------------------------------------


def evidence_summary(evidence: Iterable[Mapping[str, Any]]) -> str:
    items = [f"{clean(str(e.get('kind', '')))}: {clip(clean(str(e.get('ref', ''))), 120)}" for e in evidence]
    more = f" (+{len(items) - EVIDENCE_LIMIT} more)" if len(items) > EVIDENCE_LIMIT else ""
    return "; ".join(items[:EVIDENCE_LIMIT]) + more


def question(verdict: str, lesson_id: str) -> str:
    """What the person confirms; the terminal path has them type the verdict word itself."""
    return f"{verdict.capitalize()} lesson {lesson_id[:12]}?"


def prompt(
    view: Mapping[str, Any],
    verdict: str,
    *,
    text: str | None = None,
    scope: str | None = None,
    timeout: float = CONFIRM_TIME,
) -> Prompt:
    """The pop-up: the lesson's text (or the replacement), its evidence and the scope it would be shared at."""
    shown = clip(clean(text if text is not None else str(view.get("text", ""))), TEXT_LIMIT)
    where = scope or str(view.get("scope", ""))
    lines = [
        f"{clean(str(view.get('kind', 'lesson')))} proposed by {clean(str(view.get('author', '?')))}:",
        f"“{shown}”",
        "",
        f"Evidence: {evidence_summary(view.get('evidence') or [])}",
        f"Shared with: {where}" + (" (only you)" if where == "personal" else ""),
    ]
    found = screened(text if text is not None else str(view.get("text", "")))
    if found:
        lines += ["", f"Screening holds this text ({found[0].rule}): approved, it would never be recalled."]
    if verdict == "edit":
        lines.insert(0, "Approve this lesson with your edited text?")
    elif verdict == "reject":
        lines.insert(0, "Reject this lesson? (Approve here confirms the rejection.)")
    return Prompt(
        title=f"hive · review a lesson ({question(verdict, str(view.get('id', '')))})",
        body="\n".join(lines),
        timeout=timeout,
    )


async def confirm(
    sidecar: MailHost,
    conn: Connection,
    request: Mapping[str, Any],
    view: Mapping[str, Any],
    verdict: str,
    *,
    text: str | None = None,
    scope: str | None = None,
) -> str:
    """How the person confirmed ``verdict`` on the lesson ("desktop" or "terminal"), or raise.

    Refused when they declined, or when there is neither a desktop nor a terminal to ask on: the
    one check every person-only change goes through (``person.confirm_by_person``).
    """
    return await confirm_by_person(
        conn,
        request,
        question(verdict, str(view.get("id", ""))),
        title="hive · review a lesson",
        outcome="not recorded",
        refused=Refused,
        prompt=prompt(view, verdict, text=text, scope=scope),
        hint="A lesson is reviewed by a person, with `hive lessons review` typed at a "
        "terminal; an agent cannot review lessons.",
    )


async def desktop_available() -> bool:
    """Whether a review pop-up could be shown now (the 2 s preflight; at once when there is no bus)."""
    try:
        await backend_for(find_desktop()).available()
    except NoDesktop:
        return False
    return True


async def ask_reviewer(sidecar: MailHost, view: Mapping[str, Any], on_screen: anyio.Event | None = None) -> Answer:
    """Show a fresh proposal to this machine's person, who is its reviewer: Approve or Deny.

    ``on_screen`` is set once the pop-up is up (the gate's deliverer returns then, not at the answer).

    Raises:
        NoDesktop: there is no desktop to ask on.
    """
    shown = prompt(view, "approve", timeout=POPUP_TIME)
    body = shown.body.replace("Shared with:", "Deny rejects it; closing it leaves it pending.\nShared with:", 1)
    shown = Prompt(
        title=f"hive · {clean(str(view.get('author', 'an agent')))} proposes a lesson", body=body, timeout=POPUP_TIME
    )
    async with backend_for(find_desktop()).show(shown) as popup:
        if on_screen is not None:
            on_screen.set()
        return await popup.answer()

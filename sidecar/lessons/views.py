"""A lesson as this machine holds it now (:class:`LessonView`): how it is read from the store's tables,
and how it is shown to a client.

:func:`read_views` is the one query behind every lookup of :class:`~hive.sidecar.lessons.store.LessonStore`.
A view carries peer-written text as it arrived; :func:`view_dict` is the form the ops hand to a
client, with where the lesson came from (:func:`origins`) and, for anything an agent may read,
every peer-written string defanged.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.defang import defang, one_line
from ..base.store import Store
from . import records as L

if TYPE_CHECKING:
    from ..mail.host import MailHost


@dataclass(frozen=True)
class LessonView:
    """A lesson as this machine holds it now, for L2's surfaces (peer text is *not* defanged here)."""

    id: str
    state: str  # proposed | held | verified | rejected | superseded | retracted
    kind: str
    text: str  # the effective text: the reviewer's edit if one decided, else the author's ("" once retracted)
    original_text: str
    applicability: str
    quote: dict[str, Any] | None
    tags: tuple[str, ...]
    evidence: tuple[dict[str, str], ...]
    scope: str  # as proposed
    project: str
    effective_scope: str  # the reviewer's approved scope once decided, else as proposed
    effective_project: str
    author_person: str
    author_machine: str  # key id
    author_session: str
    created_at: int  # ms
    supersedes: str
    superseded_by: str
    reviewer: str  # the person whose review decided, "" while undecided
    reviews: tuple[dict[str, Any], ...]
    retracted_by: str
    retract_reason: str
    local: bool  # written on this machine
    has_body: bool
    received_at: float  # s
    asked_at: float  # s: when its review was last asked for (held a day after)
    citations: int
    successes: int

    @property
    def verified(self) -> bool:
        return self.state == "verified"

    @property
    def outcome_rate(self) -> float:
        return (self.successes + 1) / (self.citations + 2)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["verified"] = self.verified
        out["outcome_rate"] = self.outcome_rate
        return out


async def read_views(
    store: Store,
    where: str,
    params: Sequence[Any],
    *,
    me: Callable[[], Awaitable[str]],
    now: float | None = None,
    order: str = "l.created_at",
    limit: int = 1000,
) -> list[LessonView]:
    """The lessons matching ``where`` (over ``lessons l``), in ``order``; ``me`` is this machine's key id,
    asked for only when a lesson was found."""
    now = time.time() if now is None else now
    rows = await store.fetchall(
        "SELECT l.*, b.blob AS body_blob, e.blob AS edit_blob, t.person AS t_person, t.reason AS t_reason, "
        "(SELECT s.id FROM lessons s WHERE s.supersedes = l.id AND s.supersedes != '' "
        " AND s.state IN ('verified', 'superseded') "
        " LIMIT 1) AS successor "
        "FROM lessons l LEFT JOIN lesson_blobs b ON b.hash = l.body_hash "
        "LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != '' "
        f"LEFT JOIN lesson_tombstones t ON t.lesson = l.id WHERE {where} ORDER BY {order} LIMIT ?",
        (*params, limit),
    )
    mine = await me() if rows else ""
    views = []
    for r in rows:
        header = json.loads(r["header"])
        body = json.loads(r["body_blob"]) if r["body_blob"] else {}
        edit = json.loads(r["edit_blob"]) if r["edit_blob"] else {}
        reviews = await store.fetchall(
            "SELECT reviewer, verdict, scope, project, note, at, text_hash FROM lesson_reviews WHERE lesson = ? "
            "ORDER BY at, sig",
            (r["id"],),
        )
        state = r["state"]
        if state == "proposed" and (now - r["asked_at"]) * 1000 >= L.HELD_AFTER_MS:
            state = "held"
        original = body.get("text", "")
        views.append(
            LessonView(
                id=r["id"],
                state=state,
                kind=r["kind"],
                text=edit.get("text", original) if r["text_hash"] else original,
                original_text=original,
                applicability=body.get("applicability", ""),
                quote=body.get("quote"),
                tags=tuple(header.get("tags", ())),
                evidence=tuple(header.get("evidence", ())),
                scope=r["scope"],
                project=r["project"],
                effective_scope=r["eff_scope"],
                effective_project=r["eff_project"],
                author_person=r["author_person"],
                author_machine=r["author"],
                author_session=header.get("author_session", ""),
                created_at=r["created_at"],
                supersedes=r["supersedes"],
                superseded_by=r["successor"] or "",
                reviewer=r["reviewer"],
                reviews=tuple(dict(x) for x in reviews),
                retracted_by=r["t_person"] or "",
                retract_reason=r["t_reason"] or "",
                local=r["author"] == mine,
                has_body=bool(body),
                received_at=r["received_at"],
                asked_at=r["asked_at"],
                citations=r["citations"],
                successes=r["successes"],
            )
        )
    return views


def origins(sidecar: MailHost) -> dict[str, str]:
    """Machine key id -> person@machine, for showing where a lesson came from."""
    from ..team.membership import team_of

    team = team_of(sidecar)
    found = {m.key: f"{m.person}@{m.machine}" for m in team.members()}
    try:
        found.setdefault(team.my_key(), f"{sidecar.settings.person}@{sidecar.settings.machine}")
    except Exception:  # no readable machine key yet: nothing of this machine's is stored either
        pass
    return found


def view_dict(view: LessonView, origin: dict[str, str], *, agent: bool = False) -> dict[str, Any]:
    """A lesson for a client; with ``agent`` every peer-written string is defanged (a person's terminal
    may be an agent's shell, so the ops that print lessons always ask for it)."""
    out = view.to_dict()
    out["author"] = view.author_session
    out["origin"] = origin.get(view.author_machine, view.author_person)
    if agent:
        for key in ("text", "original_text", "applicability", "retract_reason", "author", "origin"):
            out[key] = defang(str(out[key] or ""))
        out["tags"] = [one_line(t, 40) for t in view.tags]
        out["evidence"] = [{k: one_line(v, 400) for k, v in e.items()} for e in view.evidence]
        if view.quote:
            out["quote"] = {k: defang(str(v)) if isinstance(v, str) else v for k, v in view.quote.items()}
    return out

"""The skills this machine promoted, kept in line with their lessons.

A skill written by ``lesson_promote`` (:mod:`hive.sidecar.lessons.promote` renders it) is remembered
in ``kv`` (``lesson.skill.<root>.<lesson>``) and follows its lesson: the skill of a lesson a verified
successor superseded is re-rendered from the successor, and that of a retracted one removed
(:func:`follow_skills`), as soon as the store reports the change, whether it was made here or
arrived from a teammate.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ..base.host import PerSidecar
from . import promote
from . import store as lesson_store
from .views import LessonView, origins

if TYPE_CHECKING:
    from ..mail.host import MailHost

log = logging.getLogger("hive.sidecar.lessons.promoted")

SKILL_KEY = "lesson.skill."


def _skill_key(root: Path, lesson_id: str) -> str:
    return f"{SKILL_KEY}{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.{lesson_id}"


def skill_source(view: LessonView, origin: dict[str, str]) -> promote.SkillSource:
    return promote.SkillSource(
        id=view.id,
        kind=view.kind,
        text=view.text,
        applicability=view.applicability,
        scope=view.effective_scope,
        reviewer=view.reviewer,
        author=view.author_session or view.author_person,
        tags=view.tags,
        project=view.effective_project,
        quote=str((view.quote or {}).get("words", "")),
        evidence=tuple(f"{e.get('kind')}: {e.get('ref')}" for e in view.evidence),
        supersedes=view.supersedes,
    )


async def skills_of(sidecar: MailHost, lesson_id: str) -> list[Path]:
    """The skill folders this machine wrote for a lesson."""
    rows = await sidecar.store.fetchall(
        "SELECT value FROM kv WHERE key >= ? AND key < ?", (SKILL_KEY, SKILL_KEY[:-1] + "/")
    )
    records = [json.loads(r[0]) for r in rows]
    return [Path(r["root"]) / promote.SKILLS_DIR / r["folder"] for r in records if r["lesson"] == lesson_id]


async def skill_record(sidecar: MailHost, root: Path, lesson_id: str) -> str | None:
    """The folder of the skill this machine wrote for a lesson into ``root``, if it wrote one."""
    raw = await sidecar.store.get_kv(_skill_key(root, lesson_id))
    return json.loads(raw)["folder"] if raw else None


async def remember_skill(sidecar: MailHost, root: Path, lesson_id: str, folder: str) -> None:
    await sidecar.store.set_kv(
        _skill_key(root, lesson_id), json.dumps({"root": str(root), "folder": folder, "lesson": lesson_id})
    )


_skill_locks: PerSidecar[anyio.Lock] = PerSidecar(lambda sidecar: anyio.Lock())


async def follow_skills(sidecar: MailHost) -> list[str]:
    """Bring every skill this machine promoted in line with its lesson; returns the folders removed.

    One pass at a time: the store's listener and the op that made the change both call this, and
    a pass that read the records before a retraction must not re-render a skill the other removed.
    """
    async with _skill_locks.of(sidecar):
        return await _follow_skills(sidecar)


async def _follow_skills(sidecar: MailHost) -> list[str]:
    rows = await sidecar.store.fetchall(
        "SELECT key, value FROM kv WHERE key >= ? AND key < ?", (SKILL_KEY, SKILL_KEY[:-1] + "/")
    )
    if not rows:
        return []
    store = lesson_store.of(sidecar)
    removed: list[str] = []
    origin: dict[str, str] | None = None
    for row in rows:
        record = json.loads(row[1])
        root, folder, lesson_id = Path(record["root"]), record["folder"], record["lesson"]
        view = await store.get(lesson_id)
        if view is None or view.state == "retracted":
            promote.remove_skill(root, folder, (lesson_id,))
            await sidecar.store.write([("DELETE FROM kv WHERE key = ?", (row[0],))])
            removed.append(str(root / promote.SKILLS_DIR / folder))
            continue
        if view.state != "superseded" or not view.superseded_by:
            continue
        successor = await store.get(view.superseded_by)
        if successor is None or successor.state != "verified":
            continue
        origin = origin if origin is not None else origins(sidecar)
        try:
            promote.write_skill(root, skill_source(successor, origin), folder=folder, replaces=lesson_id)
        except Exception as exc:  # a hand-edited file, or a folder gone: say so in the log, keep the record
            log.warning("could not re-render %s for lesson %s: %s", folder, successor.id[:12], exc)
            continue
        await sidecar.store.write([("DELETE FROM kv WHERE key = ?", (row[0],))])
        await remember_skill(sidecar, root, successor.id, folder)
    return removed

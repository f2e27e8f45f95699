"""The lesson store: this machine's copy of every lesson log it may hold, and what is read from them.

One :class:`LessonStore` per sidecar (:func:`of`). Local writes (:meth:`LessonStore.propose`,
:meth:`~LessonStore.review`, :meth:`~LessonStore.retract`, :meth:`~LessonStore.supersede`)
append a signed entry to this machine's log for the lesson's scope and tell the listeners (the
replication in :mod:`hive.sidecar.lesson_sync`) and the state listeners. Entries and blobs from
peers come in through :meth:`~LessonStore.ingest_many` and :meth:`~LessonStore.ingest_blobs`.
Every write runs as plain sqlite3 on the database's thread in one hop (:meth:`Store.run`) and is
committed once per entry or batch: a replicated batch costs one fsync, not a round trip per
statement (measured: ~250 entries/s one query at a time, thousands per second this way).

What a person may be shown is decided by the *effective* scope (:class:`hive.sidecar.recall.Viewer`):
a reviewer may narrow a lesson after its entry travelled, and the machines it reached keep it.

Tables (migration "lessons" in :mod:`hive.sidecar.store`)
    ``lesson_log``         every entry, by (author machine, log scope, seq), gap-free. An entry
                           that is signed by a member but whose record does not hold is kept as
                           ``void`` (so the log has no gap) and has no effect.
    ``lessons``            one row per lesson header, with its materialized state, effective
                           scope (the reviewer's approved scope once decided), deciding reviewer
                           and local citation counters.
    ``lesson_reviews``, ``lesson_tombstones``     read from the logs.
    ``lesson_blobs``       bodies and edit texts by hash; deleted by a tombstone, and a late copy
                           of a retracted lesson's blob is refused.
    ``lesson_fts``         FTS5 (porter stemmer) over the effective text, applicability and tags of
                           verified lessons, what recall may show; an FTS row's rowid is its
                           lesson's (``id`` is UNINDEXED there).
    ``lesson_drafts``      local drafts, never replicated.

``held`` is not stored: a ``proposed`` lesson whose ``asked_at`` is a day old reads as held
(:meth:`LessonStore.pending`, :meth:`~LessonStore.get`), so no timer is needed.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import logging
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from . import lessons as L
from . import recall
from .errors import (
    HiveError,
    LessonInvalid,
    LessonRetracted,
    LessonState,
    LessonTooLong,
    NotFound,
    NotMember,
    Refused,
)
from .identity import Identity
from .projects import projects_of
from .roster import Roster, Signed, canonical, sign
from .store import Store

if TYPE_CHECKING:
    from .server import Sidecar

log = logging.getLogger("hive.sidecar.lesson_store")


@dataclass(frozen=True)
class Context:
    """Who this machine is, for signing and checking: read fresh for every operation."""

    team_id: str  # "" in no team: lessons stay on this machine
    identity: Identity
    person: str
    roster: Roster | None


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


Listener = Callable[[str, int], Awaitable[None]]  # (log scope, seq) of an entry written here
StateListener = Callable[[str, str], Awaitable[None]]  # (lesson id, new stored state), local or replicated

def _now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(value: Any) -> str:
    return canonical(value).decode("utf-8")


class LessonStore:
    # Signatures here spell the builtin ``builtins.list``: inside this class body the name ``list``
    # is the method below, which a type checker would take for the annotation.

    def __init__(self, store: Store, context: Callable[[], Awaitable[Context]]) -> None:
        self.store = store
        self._context = context
        self._lock = anyio.Lock()  # one writer allocates sequence numbers at a time
        self.listeners: list[Listener] = []
        self.state_listeners: list[StateListener] = []
        self._changed: list[tuple[str, str]] = []

    # ---- writing here ----------------------------------------------------------------

    async def _append(self, ctx: Context, scope: str, record: L.LessonBody | L.Review | L.Tombstone,
                      extra: Iterable[tuple[str, Sequence[Any]]] = ()) -> int:
        async with self._lock:
            seq = await self.store.run(lambda conn: _append_sync(conn, ctx, scope, record, list(extra), self._changed))
            await self.store.write([])  # one commit for the entry and everything read from it
        await self._notify_states()
        for listener in list(self.listeners):
            await listener(scope, seq)
        return seq

    async def save_draft(self, body: L.LessonBody) -> str:
        """Keep a draft on this machine only; returns its id."""
        L.check_lesson(body)
        await self.store.write([("INSERT OR REPLACE INTO lesson_drafts (id, body, created_at) VALUES (?, ?, ?)",
                                 (body.id, _dumps(dataclasses.asdict(body)), time.time()))])
        return body.id

    async def drafts(self) -> builtins.list[L.LessonBody]:
        rows = await self.store.fetchall("SELECT body FROM lesson_drafts ORDER BY created_at")
        return [_body_from_plain(json.loads(r[0])) for r in rows]

    async def discard_draft(self, lesson_id: str) -> None:
        await self.store.write([("DELETE FROM lesson_drafts WHERE id = ?", (lesson_id,))])

    async def propose_draft(self, lesson_id: str) -> LessonView:
        row = await self.store.fetchone("SELECT body FROM lesson_drafts WHERE id = ?", (lesson_id,))
        if row is None:
            raise NotFound(f"no draft {lesson_id[:12]}")
        return await self.propose(_body_from_plain(json.loads(row[0])))

    async def propose(self, body: L.LessonBody) -> LessonView:
        """File a lesson (made with :func:`hive.sidecar.lessons.new_lesson` by this machine) for review.

        Raises ``lesson_*`` codes for an invalid body, ``not_member`` when the author is not this
        machine and its person, ``lesson_state`` when it supersedes a lesson that is not verified,
        ``lesson_retracted`` when that id was retracted. Proposing the same lesson twice returns it.
        """
        ctx = await self._context()
        L.check_lesson(body)
        if not body.id:
            raise LessonInvalid("make the lesson with new_lesson so it has its id")
        if body.author_machine != ctx.identity.key_id or body.author_person != ctx.person:
            raise NotMember("a lesson is proposed by its author's machine, as its person")
        if await self.store.fetchone("SELECT 1 FROM lesson_tombstones WHERE lesson = ?", (body.id,)):
            raise LessonRetracted("that lesson was retracted")
        existing = await self.get(body.id)
        if existing is not None:
            return existing
        if body.supersedes:
            old = await self.get(body.supersedes)
            if old is None:
                raise NotFound(f"no lesson {body.supersedes[:12]} to supersede")
            if old.state != "verified":
                raise LessonState(f"only a verified lesson can be superseded; {body.supersedes[:12]} is {old.state}")
        blob = body.blob()
        await self._append(ctx, body.log_scope, body, [
            ("DELETE FROM lesson_drafts WHERE id = ?", (body.id,)),
            ("INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
             (L.blob_hash(blob), body.id, _dumps(blob))),
        ])
        view = await self.get(body.id)
        assert view is not None
        return view

    async def supersede(self, old_id: str, body: L.LessonBody) -> LessonView:
        """Propose ``body`` as the replacement of verified lesson ``old_id``; the old one reads as
        superseded once the new one is verified."""
        if body.supersedes != old_id:
            raise LessonInvalid("make the replacement with supersedes=<the old lesson's id>")
        return await self.propose(body)

    async def review(self, lesson_id: str, verdict: str, *, scope: str | None = None, project: str | None = None,
                     text: str | None = None, note: str = "", at: int | None = None) -> LessonView:
        """Record this machine's person's verdict on a proposed or held lesson.

        Call this only from a person's confirmed answer (a TTY confirmation or a pop-up); it signs
        with this machine's key. Raises ``not_member`` (this machine's person is not an active
        member), ``not_found``, ``lesson_state`` (already decided, superseded or retracted),
        ``lesson_too_long`` / ``lesson_invalid`` for a bad edit text, ``lesson_bad_scope``.
        """
        ctx = await self._context()
        if ctx.roster is not None:
            member = ctx.roster.members.get(ctx.identity.key_id)
            if member is None or not member.active or member.person != ctx.person:
                raise NotMember("only an active member of the team can review a lesson")
        view = await self.get(lesson_id)
        if view is None:
            raise NotFound(f"no lesson {lesson_id[:12]}")
        if view.state not in ("proposed", "held"):
            raise LessonState(f"lesson {lesson_id[:12]} is {view.state}; only a proposed or held lesson is reviewed")
        if view.scope == "personal" and view.author_person != ctx.person:
            raise NotMember("a personal lesson is reviewed by its own person")
        approved_scope = scope or view.scope
        approved_project = (project if project is not None else view.project) if approved_scope == "project" else ""
        if approved_scope == "personal" and view.author_person != ctx.person:
            approved_scope, approved_project = "personal", ""
        extra: list[tuple[str, Sequence[Any]]] = []
        text_hash = ""
        if verdict == "edit":
            if not isinstance(text, str) or not text.strip():
                raise LessonInvalid("an edit needs the replacement text")
            if len(text) > L.MAX_TEXT:
                raise LessonTooLong(f"the replacement text is {len(text)} characters; at most {L.MAX_TEXT}")
            blob = L.edit_blob(lesson_id, text)
            text_hash = L.blob_hash(blob)
            extra.append(("INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
                          (text_hash, lesson_id, _dumps(blob))))
        elif text:
            raise LessonInvalid("only an edit carries replacement text")
        rev = L.Review(lesson=lesson_id, verdict=verdict, reviewer=ctx.person, scope=approved_scope,
                       project=approved_project, text_hash=text_hash, note=note, at=at if at is not None else _now_ms())
        L.check_review(rev)
        await self._append(ctx, L.log_scope(view.scope, view.project), rev, extra)
        after = await self.get(lesson_id)
        assert after is not None
        return after

    async def retract(self, lesson_id: str, reason: str = "") -> LessonView:
        """Retract a lesson everywhere it went: its author's person or a reviewer of it may.

        The text is deleted from this store now and from each machine's as the tombstone reaches
        it; a copy someone saved outside hive is not. Raises ``not_found``, ``not_member``,
        ``lesson_state`` (already retracted).
        """
        ctx = await self._context()
        view = await self.get(lesson_id)
        if view is None:
            raise NotFound(f"no lesson {lesson_id[:12]}")
        if view.state == "retracted":
            raise LessonState(f"lesson {lesson_id[:12]} is already retracted")
        if ctx.person != view.author_person and ctx.person not in {r["reviewer"] for r in view.reviews}:
            raise NotMember("only the lesson's author or one of its reviewers can retract it")
        tomb = L.Tombstone(lesson=lesson_id, person=ctx.person, at=_now_ms(), reason=reason)
        L.check_tombstone(tomb)
        await self._append(ctx, L.log_scope(view.scope, view.project), tomb)
        after = await self.get(lesson_id)
        assert after is not None
        return after

    async def mark_asked(self, lesson_id: str, at: float | None = None) -> None:
        """The review was asked (again) now: a held lesson reads as proposed for another day."""
        await self.store.write([("UPDATE lessons SET asked_at = ? WHERE id = ?",
                                 (time.time() if at is None else at, lesson_id))])

    async def cite(self, lesson_id: str, success: bool | None = None) -> LessonView:
        """Count a citation (and a success, when the outcome is known to be one). Local counters."""
        row = await self.store.fetchone("SELECT 1 FROM lessons WHERE id = ?", (lesson_id,))
        if row is None:
            raise NotFound(f"no lesson {lesson_id[:12]}")
        await self.store.write([("UPDATE lessons SET citations = citations + 1, successes = successes + ? "
                                 "WHERE id = ?", (1 if success else 0, lesson_id))])
        view = await self.get(lesson_id)
        assert view is not None
        return view

    # ---- reading ---------------------------------------------------------------------

    async def get(self, lesson_id: str, now: float | None = None) -> LessonView | None:
        rows = await self._views("l.id = ?", (lesson_id,), now=now)
        return rows[0] if rows else None

    async def find(self, prefix: str) -> LessonView:
        """A lesson by its id or an unambiguous prefix of at least 6 hex digits."""
        if not re.fullmatch(r"[0-9a-f]{6,64}", prefix or ""):
            raise NotFound("a lesson id is hex (at least its first 6 digits)")
        rows = await self.store.fetchall("SELECT id FROM lessons WHERE id >= ? AND id < ? LIMIT 2",
                                         (prefix, prefix + "g"))
        if not rows:
            raise NotFound(f"no lesson {prefix}")
        if len(rows) > 1:
            raise NotFound(f"several lessons start with {prefix}; give more of the id")
        view = await self.get(rows[0][0])
        assert view is not None
        return view

    async def pending(self, *, reviewer: str | None = None, now: float | None = None) -> builtins.list[LessonView]:
        """Proposed and held lessons, oldest first (``reviewer`` is informational: L2 picks reviewers)."""
        return await self._views("l.state = 'proposed'", (), now=now, order="l.received_at")

    async def list(self, *, states: Sequence[str] | None = None, scope: str | None = None,
                   project: str | None = None, limit: int = 200, now: float | None = None) -> builtins.list[LessonView]:
        """Lessons newest first; ``states`` may include ``held`` (read from proposed)."""
        where, params = ["1"], []
        if states:
            stored = {"proposed" if s == "held" else s for s in states}
            where.append(f"l.state IN ({','.join('?' * len(stored))})")
            params += sorted(stored)
        if scope:
            where.append("l.eff_scope = ?")
            params.append(scope)
        if project:
            where.append("l.eff_project = ?")
            params.append(project)
        views = await self._views(" AND ".join(where), params, now=now, order="l.created_at DESC", limit=limit)
        if states:
            views = [v for v in views if v.state in states]
        return views

    async def viewer(self) -> recall.Viewer:
        """Whom this machine's searches are for: its person, and the projects they are a member of."""
        ctx = await self._context()
        return recall.Viewer(ctx.person, tuple(dict.fromkeys(projects_of(ctx.roster, ctx.person))))

    async def _views(self, where: str, params: Sequence[Any], *, now: float | None = None,
                     order: str = "l.created_at", limit: int = 1000) -> builtins.list[LessonView]:
        now = time.time() if now is None else now
        rows = await self.store.fetchall(
            "SELECT l.*, b.blob AS body_blob, e.blob AS edit_blob, t.person AS t_person, t.reason AS t_reason, "
            "(SELECT s.id FROM lessons s WHERE s.supersedes = l.id AND s.supersedes != '' "
            " AND s.state IN ('verified', 'superseded') "
            " LIMIT 1) AS successor "
            "FROM lessons l LEFT JOIN lesson_blobs b ON b.hash = l.body_hash "
            "LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != '' "
            f"LEFT JOIN lesson_tombstones t ON t.lesson = l.id WHERE {where} ORDER BY {order} LIMIT ?",
            (*params, limit))
        me = (await self._context()).identity.key_id if rows else ""
        views = []
        for r in rows:
            header = json.loads(r["header"])
            body = json.loads(r["body_blob"]) if r["body_blob"] else {}
            edit = json.loads(r["edit_blob"]) if r["edit_blob"] else {}
            reviews = await self.store.fetchall(
                "SELECT reviewer, verdict, scope, project, note, at, text_hash FROM lesson_reviews WHERE lesson = ? "
                "ORDER BY at, sig", (r["id"],))
            state = r["state"]
            if state == "proposed" and (now - r["asked_at"]) * 1000 >= L.HELD_AFTER_MS:
                state = "held"
            original = body.get("text", "")
            views.append(LessonView(
                id=r["id"], state=state, kind=r["kind"],
                text=edit.get("text", original) if r["text_hash"] else original,
                original_text=original, applicability=body.get("applicability", ""), quote=body.get("quote"),
                tags=tuple(header.get("tags", ())), evidence=tuple(header.get("evidence", ())),
                scope=r["scope"], project=r["project"], effective_scope=r["eff_scope"],
                effective_project=r["eff_project"], author_person=r["author_person"], author_machine=r["author"],
                author_session=header.get("author_session", ""), created_at=r["created_at"],
                supersedes=r["supersedes"], superseded_by=r["successor"] or "", reviewer=r["reviewer"],
                reviews=tuple(dict(x) for x in reviews), retracted_by=r["t_person"] or "",
                retract_reason=r["t_reason"] or "", local=r["author"] == me, has_body=bool(body),
                received_at=r["received_at"], asked_at=r["asked_at"], citations=r["citations"],
                successes=r["successes"],
            ))
        return views

    # ---- replication -----------------------------------------------------------------

    async def adopt_team(self) -> int:
        """Re-sign this machine's entries written before it was in a team (signed for no team) for
        the team it is in now, so lessons proposed on a lone machine travel once it joins one.
        Nobody else can hold them yet, so the logs stay the same entries. Returns how many."""
        ctx = await self._context()
        if not ctx.team_id:
            return 0

        def work(conn: sqlite3.Connection) -> int:
            changed = 0
            rows = conn.execute("SELECT scope, seq, entry FROM lesson_log WHERE author = ?", (ctx.identity.key_id,))
            for scope, seq, text in rows.fetchall():
                signed = L.entry_from_wire(json.loads(text))
                if L.verify(ctx.team_id, L.ENTRY_KIND, signed) or not L.verify("", L.ENTRY_KIND, signed):
                    continue
                again = sign(ctx.identity, ctx.team_id, L.ENTRY_KIND, signed.raw)
                conn.execute("UPDATE lesson_log SET entry = ? WHERE author = ? AND scope = ? AND seq = ?",
                             (_dumps({"body": again.raw, "by": again.by, "sig": again.sig}), ctx.identity.key_id,
                              scope, seq))
                changed += 1
            return changed

        async with self._lock:
            changed = await self.store.run(work)
            await self.store.write([])
        if changed:
            log.info("re-signed %d lesson entries written before this machine joined team %s", changed,
                     ctx.team_id[:8])
        return changed

    async def heads(self) -> dict[tuple[str, str], int]:
        """The highest sequence held per (author machine, log scope)."""
        rows = await self.store.fetchall("SELECT author, scope, MAX(seq) FROM lesson_log GROUP BY author, scope")
        return {(r[0], r[1]): r[2] for r in rows}

    async def entries_after(self, author: str, scope: str, seq: int, limit: int = 500) -> builtins.list[dict[str, Any]]:
        """Entries of one log after ``seq``, as wire objects, in order."""
        rows = await self.store.fetchall(
            "SELECT entry FROM lesson_log WHERE author = ? AND scope = ? AND seq > ? ORDER BY seq LIMIT ?",
            (author, scope, seq, limit))
        return [json.loads(r[0]) for r in rows]

    async def entry(self, author: str, scope: str, seq: int) -> dict[str, Any] | None:
        row = await self.store.fetchone("SELECT entry FROM lesson_log WHERE author = ? AND scope = ? AND seq = ?",
                                        (author, scope, seq))
        return None if row is None else json.loads(row[0])

    async def blob(self, blob_hash: str) -> dict[str, Any] | None:
        row = await self.store.fetchone("SELECT blob FROM lesson_blobs WHERE hash = ?", (blob_hash,))
        return None if row is None else json.loads(row[0])

    async def has_blob(self, blob_hash: str) -> bool:
        return await self.store.fetchone("SELECT 1 FROM lesson_blobs WHERE hash = ?", (blob_hash,)) is not None

    async def blob_hashes_of(self, lesson_id: str) -> builtins.list[str]:
        """The blobs an entry about ``lesson_id`` refers to (its body, edit texts) that this machine holds."""
        rows = await self.store.fetchall("SELECT hash FROM lesson_blobs WHERE lesson = ?", (lesson_id,))
        return [r[0] for r in rows]

    async def blobs_with_logs(self, *, lessons: Sequence[str] = (), hashes: Sequence[str] = ()
                              ) -> builtins.list[tuple[dict[str, Any], str, str]]:
        """Held blobs of ``lessons`` and by ``hashes``, each with the author machine and log scope of
        its lesson (what decides who may receive it), read in one hop."""
        def work(conn: sqlite3.Connection) -> list[tuple[dict[str, Any], str, str]]:
            out = []
            sql = ("SELECT b.blob, l.author, l.scope, l.project FROM lesson_blobs b JOIN lessons l ON l.id = b.lesson "
                   "WHERE ")
            for column, values in (("b.lesson", lessons), ("b.hash", hashes)):
                for value in dict.fromkeys(values):
                    for row in conn.execute(sql + f"{column} = ?", (value,)):
                        out.append((json.loads(row[0]), row[1], L.log_scope(row[2], row[3])))
            return out

        return await self.store.run(work)

    async def missing_blobs(self, limit: int = 1000) -> builtins.list[str]:
        """Hashes of bodies and edit texts named by held entries but not held, for lessons not retracted."""
        rows = await self.store.fetchall(
            "SELECT h FROM (SELECT l.body_hash AS h, l.id AS lesson FROM lessons l UNION "
            "SELECT r.text_hash, r.lesson FROM lesson_reviews r WHERE r.text_hash != '') "
            "WHERE h NOT IN (SELECT hash FROM lesson_blobs) "
            "AND lesson NOT IN (SELECT lesson FROM lesson_tombstones) LIMIT ?", (limit,))
        return [r[0] for r in rows]

    async def ingest(self, obj: Any, *, via: str = "") -> str:
        """Keep an entry from a peer. Returns ``added``, ``duplicate`` or ``gap`` (an earlier
        entry of that log is missing: ask for it with a sync).

        Raises ``lesson_forged`` or ``not_member`` for an entry whose signer cannot be checked,
        ``lesson_invalid`` for one that is not an entry, ``refused`` for a log this machine must
        not hold (another person's personal log). An entry signed by a member whose record does
        not hold is kept as void, so its log has no gap, and changes nothing.
        """
        result = (await self._ingest([obj], via, entries=True))[0]
        if isinstance(result, HiveError):
            raise result
        return result

    async def ingest_many(self, objs: Sequence[Any], *, via: str = "") -> builtins.list[str]:
        """:meth:`ingest` for a batch, in order, with one commit: per entry its result or error code."""
        return [r.code if isinstance(r, HiveError) else r for r in await self._ingest(objs, via, entries=True)]

    async def ingest_blob(self, blob: Any) -> str:
        """Keep a body or edit text from a peer. Returns ``added`` or ``duplicate``.

        Raises ``lesson_retracted`` for a blob of a retracted lesson (a late copy), and
        ``lesson_invalid`` for one no held entry names or whose content does not match.
        """
        result = (await self._ingest([blob], "", entries=False))[0]
        if isinstance(result, HiveError):
            raise result
        return result

    async def ingest_blobs(self, blobs: Sequence[Any]) -> builtins.list[str]:
        """:meth:`ingest_blob` for a batch with one commit: per blob its result or error code."""
        return [r.code if isinstance(r, HiveError) else r for r in await self._ingest(blobs, "", entries=False)]

    async def _ingest(self, items: Sequence[Any], via: str, *, entries: bool) -> builtins.list[str | HiveError]:
        """Take a batch on the database's thread in one hop, then commit once: a replicated batch
        costs one fsync and no per-statement round trips."""
        ctx = await self._context() if entries else None

        def work(conn: sqlite3.Connection) -> list[str | HiveError]:
            results: list[str | HiveError] = []
            for item in items:
                try:
                    if ctx is not None:
                        results.append(_ingest_entry_sync(conn, ctx, item, via, self._changed))
                    else:
                        results.append(_ingest_blob_sync(conn, item, self._changed))
                except HiveError as exc:
                    results.append(exc)
            return results

        async with self._lock:
            try:
                results = await self.store.run(work)
            finally:
                await self.store.write([])
        await self._notify_states()
        return results

    async def _notify_states(self) -> None:
        """Tell the state listeners, outside the write lock, so they may write in turn."""
        changed, self._changed = self._changed, []
        for lesson_id, state in changed:
            for listener in list(self.state_listeners):
                try:
                    await listener(lesson_id, state)
                except Exception:  # a surface's bug must not stop replication
                    log.exception("a lesson state listener failed on %s", lesson_id[:12])


# ---- the write core: plain sqlite3 on the database's thread (LessonStore runs it in one hop) ----------------------

Statements = list[tuple[str, Sequence[Any]]]


def _exec_sync(conn: sqlite3.Connection, statements: Iterable[tuple[str, Sequence[Any]]]) -> None:
    for sql, params in statements:
        conn.execute(sql, params)


def _one(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> Any:
    return conn.execute(sql, params).fetchone()


def _head_sync(conn: sqlite3.Connection, author: str, scope: str) -> int:
    row = _one(conn, "SELECT MAX(seq) FROM lesson_log WHERE author = ? AND scope = ?", (author, scope))
    return row[0] or 0


def _tombstoned_sync(conn: sqlite3.Connection, lesson_id: str) -> bool:
    return _one(conn, "SELECT 1 FROM lesson_tombstones WHERE lesson = ?", (lesson_id,)) is not None


def _blob_sync(conn: sqlite3.Connection, digest: str) -> dict[str, Any] | None:
    row = _one(conn, "SELECT blob FROM lesson_blobs WHERE hash = ?", (digest,))
    return None if row is None else json.loads(row[0])


def _log_statements(checked: L.Checked, *, void: str) -> Statements:
    e = checked.entry
    return [("INSERT INTO lesson_log (author, scope, seq, type, lesson, entry, void, received_at) "
             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
             (checked.signed.by, e.scope, e.seq, e.type, e.lesson, _dumps(checked.signed.to_wire()), void,
              time.time()))]


def _append_sync(conn: sqlite3.Connection, ctx: Context, scope: str, record: L.LessonBody | L.Review | L.Tombstone,
                 extra: Statements, changed: list[tuple[str, str]]) -> int:
    seq = _head_sync(conn, ctx.identity.key_id, scope) + 1
    signed = L.make_entry(ctx.identity, ctx.team_id, scope, seq, record)
    checked = L.Checked(signed=signed, signer_person=ctx.person, record=_record_of(signed.body))
    _exec_sync(conn, extra + _log_statements(checked, void="") + _apply_sync(conn, checked))
    _refresh_sync(conn, checked.entry.lesson, changed, fresh=checked.entry.type == "lesson")
    return seq


def _ingest_entry_sync(conn: sqlite3.Connection, ctx: Context, obj: Any, via: str,
                       changed: list[tuple[str, str]]) -> str:
    if ctx.roster is None:
        raise NotMember("this machine is in no team, so it cannot check a teammate's signature")
    signed = L.entry_from_wire(obj)
    entry = signed.body
    if not L.valid_log_scope(entry.scope) or not isinstance(entry.seq, int) or entry.seq < 1:
        raise LessonInvalid("an entry names a log scope and a sequence number from 1")
    signer = ctx.roster.members.get(signed.by)
    if entry.scope == "personal" and (signer is None or signer.person != ctx.person):
        raise Refused("another person's personal lessons never come to this machine")
    head = _head_sync(conn, signed.by, entry.scope)
    if entry.seq <= head:
        return "duplicate"
    if entry.seq > head + 1:
        return "gap"
    try:
        checked = L.check_entry(signed, team_id=ctx.team_id, roster=ctx.roster)
    except (LessonInvalid, NotMember) as exc:
        if not L.verify(ctx.team_id, L.ENTRY_KIND, signed) or signer is None:
            raise
        log.warning("void lesson entry %s/%s/%d from %s: %s", signed.by[:8], entry.scope, entry.seq,
                    via[:8], exc.message)
        checked = L.Checked(signed=signed, signer_person=signer.person, record={})
        _exec_sync(conn, _log_statements(checked, void=f"{exc.code}: {exc.message}"[:300]))
        return "added"
    _exec_sync(conn, _log_statements(checked, void="") + _apply_sync(conn, checked))
    _refresh_sync(conn, entry.lesson, changed, fresh=entry.type == "lesson")
    return "added"


def _ingest_blob_sync(conn: sqlite3.Connection, blob: Any, changed: list[tuple[str, str]]) -> str:
    if not isinstance(blob, dict) or not isinstance(blob.get("lesson"), str):
        raise LessonInvalid("a blob is an object naming its lesson")
    try:
        digest = L.blob_hash(blob)
    except (TypeError, ValueError) as exc:
        raise LessonInvalid("a blob is plain JSON") from exc
    lesson_id = blob["lesson"]
    if _tombstoned_sync(conn, lesson_id):
        raise LessonRetracted("that lesson was retracted; its text is not kept")
    if _one(conn, "SELECT 1 FROM lesson_blobs WHERE hash = ?", (digest,)) is not None:
        return "duplicate"
    if blob.get("role") == "body":
        row = _one(conn, "SELECT header, body_hash FROM lessons WHERE id = ?", (lesson_id,))
        if row is None or row["body_hash"] != digest:
            raise LessonInvalid("no held lesson names that body")
        L.lesson_from(json.loads(row["header"]), blob)  # the id must cover this text
    elif blob.get("role") == "edit":
        named = _one(conn, "SELECT 1 FROM lesson_reviews WHERE lesson = ? AND text_hash = ?", (lesson_id, digest))
        if named is None or not isinstance(blob.get("text"), str) or len(blob["text"]) > L.MAX_TEXT:
            raise LessonInvalid("no held review names that text")
    else:
        raise LessonInvalid("a blob is a body or an edit")
    conn.execute("INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
                 (digest, lesson_id, _dumps(blob)))
    _refresh_sync(conn, lesson_id, changed)
    return "added"


def _apply_sync(conn: sqlite3.Connection, checked: L.Checked) -> Statements:
    """The table changes an entry that holds makes (blobs come separately)."""
    e, rec = checked.entry, checked.record
    now = time.time()
    if e.type == "lesson" and isinstance(rec, dict):
        state = "retracted" if _tombstoned_sync(conn, e.lesson) else "proposed"
        return [("INSERT OR IGNORE INTO lessons (id, author, author_person, scope, project, kind, header, "
                 "body_hash, supersedes, created_at, received_at, asked_at, state, eff_scope, eff_project) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (e.lesson, checked.signed.by, rec["author_person"], rec["scope"], rec.get("project", ""),
                  rec["kind"], _dumps(rec), rec["body_hash"], rec.get("supersedes", ""), rec["created_at"],
                  now, now, state, rec["scope"], rec.get("project", "")))]
    if e.type == "review" and isinstance(rec, L.Review):
        return [("INSERT OR IGNORE INTO lesson_reviews (lesson, author, sig, reviewer, verdict, scope, project, "
                 "text_hash, note, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (rec.lesson, checked.signed.by, checked.signed.sig, rec.reviewer, rec.verdict, rec.scope,
                  rec.project, rec.text_hash, rec.note, rec.at))]
    if e.type == "tombstone" and isinstance(rec, L.Tombstone):
        row = _one(conn, "SELECT author_person FROM lessons WHERE id = ?", (rec.lesson,))
        if row is not None and row[0] != rec.person:
            reviewers = {r[0] for r in conn.execute("SELECT reviewer FROM lesson_reviews WHERE lesson = ?",
                                                    (rec.lesson,))}
            if rec.person not in reviewers:
                log.warning("ignored a tombstone of %s by %s: neither its author nor a reviewer",
                            rec.lesson[:12], rec.person)
                return []
        return [("INSERT OR IGNORE INTO lesson_tombstones (lesson, person, reason, at) VALUES (?, ?, ?, ?)",
                 (rec.lesson, rec.person, rec.reason, rec.at)),
                ("DELETE FROM lesson_blobs WHERE lesson = ?", (rec.lesson,)),
                (_FTS_DELETE, (rec.lesson,))]
    return []


def _refresh_sync(conn: sqlite3.Connection, lesson_id: str, changed: list[tuple[str, str]], *,
                  fresh: bool = False) -> None:
    """Recompute a lesson's materialized state, effective scope, reviewer and FTS row, and those
    of the lesson it supersedes (whose state depends on this one's)."""
    row = _one(conn, "SELECT rowid, * FROM lessons WHERE id = ?", (lesson_id,))
    if row is None:
        return
    reviews = [(L.Review(lesson=r["lesson"], verdict=r["verdict"], reviewer=r["reviewer"], scope=r["scope"],
                         at=r["at"], project=r["project"], text_hash=r["text_hash"], note=r["note"]), r["sig"])
               for r in conn.execute("SELECT * FROM lesson_reviews WHERE lesson = ?", (lesson_id,))]
    retracted = _tombstoned_sync(conn, lesson_id)
    successor = _one(conn, "SELECT 1 FROM lessons WHERE supersedes = ? AND supersedes != '' "
                           "AND state IN ('verified', 'superseded')", (lesson_id,))
    state = L.derive_state(reviews=reviews, retracted=retracted, superseded=successor is not None,
                           asked_at_ms=0, now_ms=0)
    if state == "held":
        state = "proposed"  # held is read from asked_at, never stored
    decision = L.deciding_review(reviews)
    eff_scope, eff_project, reviewer, text_hash = row["scope"], row["project"], "", ""
    if decision is not None:
        rev = decision[0]
        reviewer = rev.reviewer
        if rev.verdict != "reject":
            eff_scope, eff_project = _narrower(row["scope"], row["project"], rev.scope, rev.project)
            text_hash = rev.text_hash
    conn.execute("UPDATE lessons SET state = ?, eff_scope = ?, eff_project = ?, reviewer = ?, text_hash = ? "
                 "WHERE id = ?", (state, eff_scope, eff_project, reviewer, text_hash, lesson_id))
    conn.execute("DELETE FROM lesson_fts WHERE rowid = ?", (row["rowid"],))
    if state == "verified":  # recall's index holds only what recall may show (hive.sidecar.recall)
        body = _blob_sync(conn, row["body_hash"])
        edit = _blob_sync(conn, text_hash) if text_hash else None
        if body is not None:
            header = json.loads(row["header"])
            text = edit["text"] if edit is not None else body.get("text", "")
            conn.execute("INSERT INTO lesson_fts (rowid, id, text, applicability, tags) VALUES (?, ?, ?, ?, ?)",
                         (row["rowid"], lesson_id, text, body.get("applicability", ""),
                          " ".join(header.get("tags", ()))))
    if row["supersedes"] and row["state"] != state:
        _refresh_sync(conn, row["supersedes"], changed)
    if row["state"] != state or fresh:
        changed.append((lesson_id, state))


# An FTS row shares its lesson's rowid: ``id`` is UNINDEXED, so deleting by it would scan the index.
_FTS_DELETE = "DELETE FROM lesson_fts WHERE rowid = (SELECT rowid FROM lessons WHERE id = ?)"

_SCOPE_WIDTH = {"personal": 0, "project": 1, "team": 2}


def _narrower(scope: str, project: str, approved: str, approved_project: str) -> tuple[str, str]:
    """A reviewer may narrow a lesson's scope, never widen it past where its entries travel."""
    if _SCOPE_WIDTH.get(approved, 2) < _SCOPE_WIDTH.get(scope, 2):
        return approved, approved_project if approved == "project" else ""
    if approved == scope == "project" and approved_project and approved_project != project:
        return scope, project  # another project would need the lesson filed there
    return scope, project


def _record_of(entry: L.LogEntry) -> dict[str, Any] | L.Review | L.Tombstone:
    if entry.type == "review":
        return L.review_from(entry.record)
    if entry.type == "tombstone":
        return L.tombstone_from(entry.record)
    return entry.record


def _body_from_plain(plain: dict[str, Any]) -> L.LessonBody:
    header = {k: v for k, v in plain.items() if k not in ("text", "applicability", "quote")}
    body = L.LessonBody(
        kind=header["kind"], text=plain["text"], applicability=plain["applicability"], scope=header["scope"],
        evidence=tuple(L.evidence_from(e) for e in header["evidence"]), author_person=header["author_person"],
        author_machine=header["author_machine"], author_session=header["author_session"],
        created_at=header["created_at"], project=header.get("project", ""), tags=tuple(header.get("tags", ())),
        quote=L.quote_from(plain.get("quote")), supersedes=header.get("supersedes", ""), id=header.get("id", ""),
    )
    L.check_lesson(body)
    return body


async def _sidecar_context(sidecar: Sidecar) -> Context:
    team = sidecar.team  # type: ignore[attr-defined]
    identity = await team.ensure_identity()
    return Context(team_id=team.team_id() or "", identity=identity, person=sidecar.settings.person,
                   roster=team.roster)


# Called with (sidecar, store) when a sidecar's lesson store is made, so a surface can listen to it from the
# start (hive.sidecar.lesson_ops: promoted skills follow a replicated retraction or supersession).
ON_OPEN: list[Callable[[Sidecar, LessonStore], None]] = []


def of(sidecar: Sidecar) -> LessonStore:
    """The sidecar's lesson store, made on first use."""
    existing = sidecar.__dict__.get("lesson_store")
    if existing is None:
        async def context() -> Context:
            return await _sidecar_context(sidecar)

        existing = sidecar.__dict__["lesson_store"] = LessonStore(sidecar.store, context)
        for setup in ON_OPEN:
            setup(sidecar, existing)
    return existing


def new_lesson_here(ctx: Context, request: dict[str, Any], *, session: str) -> L.LessonBody:
    """A lesson from a client's request, authored by this machine's person in ``session``."""
    return L.lesson_from_request(request, author_person=ctx.person, author_machine=ctx.identity.key_id,
                                 author_session=session, created_at=_now_ms())


async def context_of(sidecar: Sidecar) -> Context:
    return await _sidecar_context(sidecar)


def signed_entry(obj: Any) -> Signed[L.LogEntry]:
    return L.entry_from_wire(obj)

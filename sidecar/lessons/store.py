"""The lesson store: this machine's copy of every lesson log it may hold, and what is read from them.

One :class:`LessonStore` per sidecar (:func:`of`). Local writes (:meth:`LessonStore.propose`,
:meth:`~LessonStore.review`, :meth:`~LessonStore.retract`, :meth:`~LessonStore.supersede`)
append a signed entry to this machine's log for the lesson's scope and tell the listeners (the
replication in :mod:`hive.sidecar.lessons.sync`) and the state listeners. Entries and blobs from
peers come in through :meth:`~LessonStore.ingest_many` and :meth:`~LessonStore.ingest_blobs`.
Every write runs as plain sqlite3 on the database's thread in one hop (:meth:`Store.run`, with the
statements of :mod:`hive.sidecar.lessons.materialize`) and is committed once per entry or batch: a
replicated batch costs one fsync, not a round trip per statement (measured: ~250 entries/s one query
at a time, thousands per second this way).

What a person may be shown is decided by the *effective* scope (:class:`hive.sidecar.lessons.recall.Viewer`):
a reviewer may narrow a lesson after its entry travelled, and the machines it reached keep it.

Tables (migration "lessons" in :mod:`hive.sidecar.base.store`)
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
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import HiveError, LessonInvalid, LessonRetracted, LessonState, LessonTooLong, NotFound, NotMember
from ..base.host import PerSidecar
from ..base.store import Store
from ..team.projects import projects_of
from ..team.roster import Signed, sign
from . import recall
from . import records as L
from .materialize import Context as Context
from .materialize import append_sync, dumps, ingest_blob_sync, ingest_entry_sync, now_ms
from .views import LessonView as LessonView
from .views import read_views

if TYPE_CHECKING:
    from ..mail.host import MailHost

log = logging.getLogger("hive.sidecar.lessons.store")


Listener = Callable[[str, int], Awaitable[None]]  # (log scope, seq) of an entry written here
StateListener = Callable[[str, str], Awaitable[None]]  # (lesson id, new stored state), local or replicated


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

    async def _append(
        self,
        ctx: Context,
        scope: str,
        record: L.LessonBody | L.Review | L.Tombstone,
        extra: Iterable[tuple[str, Sequence[Any]]] = (),
    ) -> int:
        async with self._lock:
            seq = await self.store.run(lambda conn: append_sync(conn, ctx, scope, record, list(extra), self._changed))
            await self.store.write([])  # one commit for the entry and everything read from it
        await self._notify_states()
        for listener in list(self.listeners):
            await listener(scope, seq)
        return seq

    async def save_draft(self, body: L.LessonBody) -> str:
        """Keep a draft on this machine only; returns its id."""
        L.check_lesson(body)
        await self.store.write(
            [
                (
                    "INSERT OR REPLACE INTO lesson_drafts (id, body, created_at) VALUES (?, ?, ?)",
                    (body.id, dumps(dataclasses.asdict(body)), time.time()),
                )
            ]
        )
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
        """File a lesson (made with :func:`hive.sidecar.lessons.records.new_lesson` by this machine) for review.

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
        await self._append(
            ctx,
            body.log_scope,
            body,
            [
                ("DELETE FROM lesson_drafts WHERE id = ?", (body.id,)),
                (
                    "INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
                    (L.blob_hash(blob), body.id, dumps(blob)),
                ),
            ],
        )
        view = await self.get(body.id)
        assert view is not None
        return view

    async def supersede(self, old_id: str, body: L.LessonBody) -> LessonView:
        """Propose ``body`` as the replacement of verified lesson ``old_id``; the old one reads as
        superseded once the new one is verified."""
        if body.supersedes != old_id:
            raise LessonInvalid("make the replacement with supersedes=<the old lesson's id>")
        return await self.propose(body)

    async def review(
        self,
        lesson_id: str,
        verdict: str,
        *,
        scope: str | None = None,
        project: str | None = None,
        text: str | None = None,
        note: str = "",
        at: int | None = None,
    ) -> LessonView:
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
            extra.append(
                (
                    "INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
                    (text_hash, lesson_id, dumps(blob)),
                )
            )
        elif text:
            raise LessonInvalid("only an edit carries replacement text")
        rev = L.Review(
            lesson=lesson_id,
            verdict=verdict,
            reviewer=ctx.person,
            scope=approved_scope,
            project=approved_project,
            text_hash=text_hash,
            note=note,
            at=at if at is not None else now_ms(),
        )
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
        tomb = L.Tombstone(lesson=lesson_id, person=ctx.person, at=now_ms(), reason=reason)
        L.check_tombstone(tomb)
        await self._append(ctx, L.log_scope(view.scope, view.project), tomb)
        after = await self.get(lesson_id)
        assert after is not None
        return after

    async def mark_asked(self, lesson_id: str, at: float | None = None) -> None:
        """The review was asked (again) now: a held lesson reads as proposed for another day."""
        await self.store.write(
            [("UPDATE lessons SET asked_at = ? WHERE id = ?", (time.time() if at is None else at, lesson_id))]
        )

    async def cite(self, lesson_id: str, success: bool | None = None) -> LessonView:
        """Count a citation (and a success, when the outcome is known to be one). Local counters."""
        row = await self.store.fetchone("SELECT 1 FROM lessons WHERE id = ?", (lesson_id,))
        if row is None:
            raise NotFound(f"no lesson {lesson_id[:12]}")
        await self.store.write(
            [
                (
                    "UPDATE lessons SET citations = citations + 1, successes = successes + ? WHERE id = ?",
                    (1 if success else 0, lesson_id),
                )
            ]
        )
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
        rows = await self.store.fetchall(
            "SELECT id FROM lessons WHERE id >= ? AND id < ? LIMIT 2", (prefix, prefix + "g")
        )
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

    async def list(
        self,
        *,
        states: Sequence[str] | None = None,
        scope: str | None = None,
        project: str | None = None,
        limit: int = 200,
        now: float | None = None,
    ) -> builtins.list[LessonView]:
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

    async def _views(
        self,
        where: str,
        params: Sequence[Any],
        *,
        now: float | None = None,
        order: str = "l.created_at",
        limit: int = 1000,
    ) -> builtins.list[LessonView]:
        async def me() -> str:
            return (await self._context()).identity.key_id

        return await read_views(self.store, where, params, me=me, now=now, order=order, limit=limit)

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
                conn.execute(
                    "UPDATE lesson_log SET entry = ? WHERE author = ? AND scope = ? AND seq = ?",
                    (dumps({"body": again.raw, "by": again.by, "sig": again.sig}), ctx.identity.key_id, scope, seq),
                )
                changed += 1
            return changed

        async with self._lock:
            changed = await self.store.run(work)
            await self.store.write([])
        if changed:
            log.info("re-signed %d lesson entries written before this machine joined team %s", changed, ctx.team_id[:8])
        return changed

    async def heads(self) -> dict[tuple[str, str], int]:
        """The highest sequence held per (author machine, log scope)."""
        rows = await self.store.fetchall("SELECT author, scope, MAX(seq) FROM lesson_log GROUP BY author, scope")
        return {(r[0], r[1]): r[2] for r in rows}

    async def entries_after(self, author: str, scope: str, seq: int, limit: int = 500) -> builtins.list[dict[str, Any]]:
        """Entries of one log after ``seq``, as wire objects, in order."""
        rows = await self.store.fetchall(
            "SELECT entry FROM lesson_log WHERE author = ? AND scope = ? AND seq > ? ORDER BY seq LIMIT ?",
            (author, scope, seq, limit),
        )
        return [json.loads(r[0]) for r in rows]

    async def entry(self, author: str, scope: str, seq: int) -> dict[str, Any] | None:
        row = await self.store.fetchone(
            "SELECT entry FROM lesson_log WHERE author = ? AND scope = ? AND seq = ?", (author, scope, seq)
        )
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

    async def blobs_with_logs(
        self, *, lessons: Sequence[str] = (), hashes: Sequence[str] = ()
    ) -> builtins.list[tuple[dict[str, Any], str, str]]:
        """Held blobs of ``lessons`` and by ``hashes``, each with the author machine and log scope of
        its lesson (what decides who may receive it), read in one hop."""

        def work(conn: sqlite3.Connection) -> list[tuple[dict[str, Any], str, str]]:
            out = []
            sql = (
                "SELECT b.blob, l.author, l.scope, l.project FROM lesson_blobs b JOIN lessons l ON l.id = b.lesson "
                "WHERE "
            )
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
            "AND lesson NOT IN (SELECT lesson FROM lesson_tombstones) LIMIT ?",
            (limit,),
        )
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
                        results.append(ingest_entry_sync(conn, ctx, item, via, self._changed))
                    else:
                        results.append(ingest_blob_sync(conn, item, self._changed))
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


def _body_from_plain(plain: dict[str, Any]) -> L.LessonBody:
    header = {k: v for k, v in plain.items() if k not in ("text", "applicability", "quote")}
    body = L.LessonBody(
        kind=header["kind"],
        text=plain["text"],
        applicability=plain["applicability"],
        scope=header["scope"],
        evidence=tuple(L.evidence_from(e) for e in header["evidence"]),
        author_person=header["author_person"],
        author_machine=header["author_machine"],
        author_session=header["author_session"],
        created_at=header["created_at"],
        project=header.get("project", ""),
        tags=tuple(header.get("tags", ())),
        quote=L.quote_from(plain.get("quote")),
        supersedes=header.get("supersedes", ""),
        id=header.get("id", ""),
    )
    L.check_lesson(body)
    return body


async def _sidecar_context(sidecar: MailHost) -> Context:
    team = sidecar.team
    identity = await team.ensure_identity()
    return Context(team_id=team.team_id() or "", identity=identity, person=sidecar.settings.person, roster=team.roster)


def _open(sidecar: MailHost) -> LessonStore:
    async def context() -> Context:
        return await _sidecar_context(sidecar)

    return LessonStore(sidecar.store, context)


STORES: PerSidecar[LessonStore] = PerSidecar(_open)


def of(sidecar: MailHost) -> LessonStore:
    """The sidecar's lesson store, made on first use."""
    return STORES.of(sidecar)


def new_lesson_here(ctx: Context, request: dict[str, Any], *, session: str) -> L.LessonBody:
    """A lesson from a client's request, authored by this machine's person in ``session``."""
    return L.lesson_from_request(
        request,
        author_person=ctx.person,
        author_machine=ctx.identity.key_id,
        author_session=session,
        created_at=now_ms(),
    )


async def context_of(sidecar: MailHost) -> Context:
    return await _sidecar_context(sidecar)


def signed_entry(obj: Any) -> Signed[L.LogEntry]:
    return L.entry_from_wire(obj)

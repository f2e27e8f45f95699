"""How a lesson log's entries become rows: the write core of :mod:`hive.sidecar.lessons.store`.

Plain sqlite3 on the database's thread, run by :class:`~hive.sidecar.lessons.store.LessonStore`
in one hop per entry or batch. Appending signs this machine's next entry of a log; ingesting checks
a peer's entry against the roster (gap-free per log, a member's entry that does not hold kept as
``void``) and a peer's blob against the entries that name it. Each entry that holds is applied to
the tables, and the lesson it touches is refreshed: its materialized state, effective scope,
deciding reviewer and recall's FTS row (verified lessons only), and the state of the lesson it
supersedes. A lesson whose stored state changed is added to the caller's ``changed`` list, for the
store to tell its state listeners once the write is committed.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..base.errors import LessonInvalid, LessonRetracted, NotMember, Refused
from ..team.identity import Identity
from ..team.roster import Roster, canonical
from . import records as L

log = logging.getLogger("hive.sidecar.lessons.materialize")


@dataclass(frozen=True)
class Context:
    """Who this machine is, for signing and checking: read fresh for every operation."""

    team_id: str  # "" in no team: lessons stay on this machine
    identity: Identity
    person: str
    roster: Roster | None


def now_ms() -> int:
    return int(time.time() * 1000)


def dumps(value: Any) -> str:
    return canonical(value).decode("utf-8")


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
    return [
        (
            "INSERT INTO lesson_log (author, scope, seq, type, lesson, entry, void, received_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (checked.signed.by, e.scope, e.seq, e.type, e.lesson, dumps(checked.signed.to_wire()), void, time.time()),
        )
    ]


def append_sync(
    conn: sqlite3.Connection,
    ctx: Context,
    scope: str,
    record: L.LessonBody | L.Review | L.Tombstone,
    extra: Statements,
    changed: list[tuple[str, str]],
) -> int:
    seq = _head_sync(conn, ctx.identity.key_id, scope) + 1
    signed = L.make_entry(ctx.identity, ctx.team_id, scope, seq, record)
    checked = L.Checked(signed=signed, signer_person=ctx.person, record=_record_of(signed.body))
    _exec_sync(conn, extra + _log_statements(checked, void="") + _apply_sync(conn, checked))
    _refresh_sync(conn, checked.entry.lesson, changed, fresh=checked.entry.type == "lesson")
    return seq


def ingest_entry_sync(
    conn: sqlite3.Connection, ctx: Context, obj: Any, via: str, changed: list[tuple[str, str]]
) -> str:
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
        log.warning(
            "void lesson entry %s/%s/%d from %s: %s", signed.by[:8], entry.scope, entry.seq, via[:8], exc.message
        )
        checked = L.Checked(signed=signed, signer_person=signer.person, record={})
        _exec_sync(conn, _log_statements(checked, void=f"{exc.code}: {exc.message}"[:300]))
        return "added"
    _exec_sync(conn, _log_statements(checked, void="") + _apply_sync(conn, checked))
    _refresh_sync(conn, entry.lesson, changed, fresh=entry.type == "lesson")
    return "added"


def ingest_blob_sync(conn: sqlite3.Connection, blob: Any, changed: list[tuple[str, str]]) -> str:
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
    conn.execute(
        "INSERT OR IGNORE INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)", (digest, lesson_id, dumps(blob))
    )
    _refresh_sync(conn, lesson_id, changed)
    return "added"


def _apply_sync(conn: sqlite3.Connection, checked: L.Checked) -> Statements:
    """The table changes an entry that holds makes (blobs come separately)."""
    e, rec = checked.entry, checked.record
    now = time.time()
    if e.type == "lesson" and isinstance(rec, dict):
        state = "retracted" if _tombstoned_sync(conn, e.lesson) else "proposed"
        return [
            (
                "INSERT OR IGNORE INTO lessons (id, author, author_person, scope, project, kind, header, "
                "body_hash, supersedes, created_at, received_at, asked_at, state, eff_scope, eff_project) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.lesson,
                    checked.signed.by,
                    rec["author_person"],
                    rec["scope"],
                    rec.get("project", ""),
                    rec["kind"],
                    dumps(rec),
                    rec["body_hash"],
                    rec.get("supersedes", ""),
                    rec["created_at"],
                    now,
                    now,
                    state,
                    rec["scope"],
                    rec.get("project", ""),
                ),
            )
        ]
    if e.type == "review" and isinstance(rec, L.Review):
        return [
            (
                "INSERT OR IGNORE INTO lesson_reviews (lesson, author, sig, reviewer, verdict, scope, project, "
                "text_hash, note, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.lesson,
                    checked.signed.by,
                    checked.signed.sig,
                    rec.reviewer,
                    rec.verdict,
                    rec.scope,
                    rec.project,
                    rec.text_hash,
                    rec.note,
                    rec.at,
                ),
            )
        ]
    if e.type == "tombstone" and isinstance(rec, L.Tombstone):
        row = _one(conn, "SELECT author_person FROM lessons WHERE id = ?", (rec.lesson,))
        if row is not None and row[0] != rec.person:
            reviewers = {
                r[0] for r in conn.execute("SELECT reviewer FROM lesson_reviews WHERE lesson = ?", (rec.lesson,))
            }
            if rec.person not in reviewers:
                log.warning(
                    "ignored a tombstone of %s by %s: neither its author nor a reviewer", rec.lesson[:12], rec.person
                )
                return []
        return [
            (
                "INSERT OR IGNORE INTO lesson_tombstones (lesson, person, reason, at) VALUES (?, ?, ?, ?)",
                (rec.lesson, rec.person, rec.reason, rec.at),
            ),
            ("DELETE FROM lesson_blobs WHERE lesson = ?", (rec.lesson,)),
            (_FTS_DELETE, (rec.lesson,)),
        ]
    return []


def _refresh_sync(
    conn: sqlite3.Connection, lesson_id: str, changed: list[tuple[str, str]], *, fresh: bool = False
) -> None:
    """Recompute a lesson's materialized state, effective scope, reviewer and FTS row, and those
    of the lesson it supersedes (whose state depends on this one's)."""
    row = _one(conn, "SELECT rowid, * FROM lessons WHERE id = ?", (lesson_id,))
    if row is None:
        return
    reviews = [
        (
            L.Review(
                lesson=r["lesson"],
                verdict=r["verdict"],
                reviewer=r["reviewer"],
                scope=r["scope"],
                at=r["at"],
                project=r["project"],
                text_hash=r["text_hash"],
                note=r["note"],
            ),
            r["sig"],
        )
        for r in conn.execute("SELECT * FROM lesson_reviews WHERE lesson = ?", (lesson_id,))
    ]
    retracted = _tombstoned_sync(conn, lesson_id)
    successor = _one(
        conn,
        "SELECT 1 FROM lessons WHERE supersedes = ? AND supersedes != '' AND state IN ('verified', 'superseded')",
        (lesson_id,),
    )
    state = L.derive_state(
        reviews=reviews, retracted=retracted, superseded=successor is not None, asked_at_ms=0, now_ms=0
    )
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
    conn.execute(
        "UPDATE lessons SET state = ?, eff_scope = ?, eff_project = ?, reviewer = ?, text_hash = ? WHERE id = ?",
        (state, eff_scope, eff_project, reviewer, text_hash, lesson_id),
    )
    conn.execute("DELETE FROM lesson_fts WHERE rowid = ?", (row["rowid"],))
    if state == "verified":  # recall's index holds only what recall may show (hive.sidecar.lessons.recall)
        body = _blob_sync(conn, row["body_hash"])
        edit = _blob_sync(conn, text_hash) if text_hash else None
        if body is not None:
            header = json.loads(row["header"])
            text = edit["text"] if edit is not None else body.get("text", "")
            conn.execute(
                "INSERT INTO lesson_fts (rowid, id, text, applicability, tags) VALUES (?, ?, ?, ?, ?)",
                (row["rowid"], lesson_id, text, body.get("applicability", ""), " ".join(header.get("tags", ()))),
            )
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

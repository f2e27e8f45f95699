"""The anchor's side of team history: the entries members archive, their search, and forgetting.

Only a machine whose roster role is ``anchor`` keeps history; any other answers ``history_put``
and ``history_query`` with ``code: not_anchor`` and stores nothing (a request to forget is
honoured anywhere: a machine that stopped being an anchor may still hold entries). An anchor keeps
an entry only from a machine of the entry's owner (its roster person), one per (owner, message
id): an entry sent twice is kept once, and one archived by both people of a message once for
each. Each owner keeps at most :data:`MAX_PER_OWNER` entries; past that, their oldest go.

A search answers only with entries the asking machine's person may see: those where that person
is the sender's or the recipient's person (``alice`` of ``alice/web-codex``), whoever archived
them, and never anyone else's. Each hit names who archived it (``archived_by``): an entry is what
that person's machine said was sent, which the anchor cannot check. Words are matched through
the porter stemmer, so "migrating" finds "migration"; every word must be there, and only when no
entry holds them all does any one do. Forgetting deletes every entry the asking person owns, and
none of the copies other people archived of the same messages.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .asking import answer, is_anchor
from .entries import from_wire, person_of

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..mesh.team_view import Member
    from ..mesh.transport import Link

log = logging.getLogger("hive.sidecar.history.keeper")

MAX_PER_OWNER = 200_000  # entries an anchor keeps for one person; the oldest go first
MAX_BATCH = 200  # entries taken from one history_put frame
MAX_HITS = 50
MAX_TERMS = 12
HIT_BODY = 2_000  # characters of an entry's text a hit carries
_WORD = re.compile(r"\w+")


def terms(query: str) -> list[str]:
    """The words a search looks for, each once, at most :data:`MAX_TERMS` (longer words cut to 64)."""
    words: list[str] = []
    for word in _WORD.findall(query.lower()):
        word = word[:64]
        if word not in words:
            words.append(word)
    return words[:MAX_TERMS]


def not_anchor_note(sidecar: MailHost) -> str:
    return (
        f"{sidecar.settings.person}'s machine {sidecar.settings.machine} is not the team's anchor: it keeps no history"
    )


async def keep(sidecar: MailHost, person: str, machine: str, raw_entries: Sequence[Any]) -> tuple[list[str], int]:
    """Store the entries ``person``'s machine ``machine`` (its key) sent; returns the ids this
    anchor is done with (stored, already here, or refused for good) and how many it stored new.

    An entry owned by anyone but ``person`` is refused, as is a malformed one: its machine may
    drop it, since it would be refused again."""
    done: list[str] = []
    rows: list[tuple[Any, ...]] = []
    refused = 0
    now = time.time()
    for raw in raw_entries[:MAX_BATCH]:
        entry = from_wire(raw)
        if entry is None or entry["owner"] != person:
            refused += 1
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            if isinstance(raw_id, str) and len(raw_id) <= 64:
                done.append(raw_id)
            continue
        done.append(entry["id"])
        rows.append(
            (
                person,
                entry["id"],
                entry["from"],
                entry["to"],
                person_of(entry["from"]),
                person_of(entry["to"]),
                entry["kind"],
                entry["at"],
                entry["reply_to"],
                entry["body"],
                int(entry["cut"]),
                machine,
                now,
            )
        )
    if refused:
        log.warning("refused %d history entries from %s's machine %s", refused, person, machine[:12])

    def insert(conn: sqlite3.Connection) -> int:
        stored = conn.executemany(  # rowcount: the rows it inserted itself, not the index trigger's
            "INSERT OR IGNORE INTO history (owner, id, sender, recipient, sender_person, recipient_person, kind, "
            "at, reply_to, body, cut, machine, stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        ).rowcount
        if stored:
            # Past the owner's allowance, their oldest entries go (the trigger takes them out of the index).
            conn.execute(
                "DELETE FROM history WHERE seq IN (SELECT seq FROM history WHERE owner = ? "
                "ORDER BY at DESC LIMIT -1 OFFSET ?)",
                (person, MAX_PER_OWNER),
            )
        return stored

    stored = await sidecar.store.run(insert) if rows else 0
    if rows:
        await sidecar.store.write([])  # committed before the machine hears it may let them go
    return done, stored


async def search(sidecar: MailHost, person: str, query: str, limit: int) -> list[dict[str, Any]]:
    """The entries ``person`` may see that match ``query``, best first (newest first among equals),
    one per message (``archived_by`` names every owner of a copy)."""
    words = terms(query)
    if not words:
        return []
    limit = max(1, min(limit, MAX_HITS))
    quoted = [f'"{w}"' for w in words]

    def run(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        for match in (" ".join(quoted), " OR ".join(quoted)) if len(quoted) > 1 else (quoted[0],):
            rows = conn.execute(
                "SELECT h.id, h.sender, h.recipient, h.kind, h.at, h.reply_to, h.body, h.cut, h.owner "
                "FROM history_fts JOIN history h ON h.seq = history_fts.rowid "
                "WHERE history_fts MATCH ? AND (h.sender_person = ? OR h.recipient_person = ?) "
                "ORDER BY history_fts.rank, h.at DESC LIMIT ?",
                (match, person, person, limit * 4),
            ).fetchall()
            if rows:
                return _hits(rows, limit)
        return []

    return await sidecar.store.run(run)


def _hits(rows: Sequence[Sequence[Any]], limit: int) -> list[dict[str, Any]]:
    hits: dict[str, dict[str, Any]] = {}
    for message_id, sender, recipient, kind, at, reply_to, body, cut, owner in rows:
        hit = hits.get(message_id)
        if hit is not None:
            if owner not in hit["archived_by"]:
                hit["archived_by"].append(owner)
            continue
        if len(hits) == limit:
            continue
        text = body if len(body) <= HIT_BODY else body[: HIT_BODY - 1] + "…"
        hits[message_id] = {
            "id": message_id,
            "from": sender,
            "to": recipient,
            "kind": kind,
            "at": at,
            "reply_to": reply_to,
            "body": text,
            "cut": bool(cut) or len(body) > HIT_BODY,
            "archived_by": [owner],
        }
    return list(hits.values())


async def forget(sidecar: MailHost, person: str) -> int:
    """Delete every entry ``person`` owns here; returns how many."""

    def delete(conn: sqlite3.Connection) -> int:
        return conn.execute("DELETE FROM history WHERE owner = ?", (person,)).rowcount

    deleted = await sidecar.store.run(delete)
    await sidecar.store.write([])
    return int(deleted)


async def kept(sidecar: MailHost) -> dict[str, int]:
    """How many entries this machine keeps, by owner."""
    rows = await sidecar.store.fetchall("SELECT owner, COUNT(*) FROM history GROUP BY owner ORDER BY owner")
    return {str(owner): int(count) for owner, count in rows}


# ---- frames ------------------------------------------------------------------------------------


async def on_put(sidecar: MailHost, link: Link, member: Member, frame: dict[str, Any]) -> None:
    """``history_put {id, entries}`` from a member's machine -> ``history_ack {id, ids, stored}``."""
    reply: dict[str, Any] = {"t": "history_ack", "id": frame.get("id")}
    if not is_anchor(sidecar):
        reply.update(code="not_anchor", note=not_anchor_note(sidecar))
    else:
        ids, stored = await keep(sidecar, member.person, member.key, frame.get("entries") or [])
        reply.update(ids=ids, stored=stored)
    await answer(link, reply)


async def on_query(sidecar: MailHost, link: Link, member: Member, frame: dict[str, Any]) -> None:
    """``history_query {id, q, limit}`` -> ``history_result {id, hits}``: only what ``member``'s person may see."""
    reply: dict[str, Any] = {"t": "history_result", "id": frame.get("id")}
    if not is_anchor(sidecar):
        reply.update(code="not_anchor", note=not_anchor_note(sidecar))
    else:
        query = frame.get("q") if isinstance(frame.get("q"), str) else ""
        limit = frame.get("limit") if isinstance(frame.get("limit"), int) else 10
        reply["hits"] = await search(sidecar, member.person, str(query)[:1000], int(limit or 10))
    await answer(link, reply)


async def on_forget(sidecar: MailHost, link: Link, member: Member, frame: dict[str, Any]) -> None:
    """``history_forget {id}`` -> ``history_forgot {id, deleted}``: every entry ``member``'s person owns.

    Honoured by any machine, anchor or not: one that stopped being an anchor may still hold entries,
    and deleting a person's own entries at their request gives nobody anything."""
    deleted = await forget(sidecar, member.person)
    if deleted:
        log.info(
            "forgot %d history entries of %s at their machine %s's request", deleted, member.person, member.machine
        )
    await answer(link, {"t": "history_forgot", "id": frame.get("id"), "deleted": deleted})

"""The team-history ops: what ``hive history`` and the MCP tool ``search_history`` ask the sidecar.

``history``         {set?: "on" | "off", forget?, confirmed_on_terminal?}: the setting, or a change
``history_search``  {q, limit?}: what this person sent or received, from the anchors' archive

Turning history on shares the person's mail with the anchor, and ``--forget`` deletes their
archive: an agent asking for either waits for its person's confirmation (a pop-up, or the question
at the person's own terminal). Turning it off, which only shares less, does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest, NoAnchor
from ..person.confirm import asks_person, confirm_by_person
from . import keeper
from .archive import ARCHIVES, MAX_QUEUE
from .asking import anchors, is_anchor, label, linked
from .search import frames, search

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..mail.host import MailHost

DEFAULT_LIMIT = 10
FORGET_WAIT = 10.0  # seconds `off --forget` waits for each linked anchor's answer before leaving it pending


def _anchor_names(sidecar: MailHost) -> list[str]:
    names = [label(m) for m in anchors(sidecar)]
    if is_anchor(sidecar):
        names.insert(0, f"{sidecar.settings.person}@{sidecar.settings.machine} (this machine)")
    return names


def _the_anchor(names: list[str]) -> str:
    if not names:
        return "no anchor"
    return f"the team's anchor {names[0]}" if len(names) == 1 else f"the team's anchors {', '.join(names)}"


async def status(sidecar: MailHost) -> dict[str, Any]:
    """This machine's history setting, its queue, the team's anchors and (on an anchor) what it keeps."""
    archive = ARCHIVES.of(sidecar)
    await archive.load()
    online = {m.key for m, _ in linked(sidecar)}
    here = is_anchor(sidecar)
    result: dict[str, Any] = {
        "on": archive.is_on(),
        "since": archive.on_since if archive.is_on() else None,
        "person": sidecar.settings.person,
        "queued": archive.queued,
        "queue_full": archive.queued >= MAX_QUEUE,
        "anchors": [{"anchor": label(m), "online": m.key in online} for m in anchors(sidecar)],
        "is_anchor": here,
        "forget_pending": archive.pending_forgets(),
    }
    if here:
        result["kept"] = await keeper.kept(sidecar)
    return result


async def _confirm(conn: Connection, request: dict[str, Any], question: str, command: str) -> None:
    """An agent's change waits for its person (``needs_person`` or ``confirm_on_terminal`` without one);
    the person's own command goes ahead."""
    await confirm_by_person(
        conn,
        request,
        question,
        title="hive · confirm team history",
        outcome="not changed",
        hint=f"Ask your person to run `{command}` in a terminal.",
        agents_only=True,
    )


@asks_person
async def op_history(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show this machine's team-history setting for its person, or turn it on or off.

    Request: ``set`` (str, optional): ``on`` or ``off``; without it, the setting is shown.
    ``forget`` (bool, optional, with ``off``): also ask the anchors to delete every entry this
    person owns (asked again whenever one links, until each answers). Returns ``{"on", "since",
    "person", "queued", "queue_full", "anchors": [{"anchor", "online"}], "is_anchor",
    "forget_pending"}`` (plus ``kept``, entries by owner, on an anchor); after ``set``, also
    ``changed`` (bool) and ``note`` (what happened and what stays), with ``off`` ``dropped`` (queued
    entries that never left this machine) and with ``forget`` ``forgot`` (``{"deleted", "asked",
    "pending"}``). Raises ``bad_request`` for another ``set``, ``no_anchor`` to turn it on in a team
    without an anchor (or in none), ``needs_person`` or ``confirm_on_terminal`` when an agent turns
    it on or asks to forget unconfirmed.
    """
    wanted = request.get("set")
    forget = bool(request.get("forget"))
    if wanted is None and not forget:
        return await status(sidecar)
    if wanted not in ("on", "off"):
        raise BadRequest("history's set is on or off (forget goes with off)")
    if forget and wanted != "off":
        raise BadRequest("forget goes with off: `hive history off --forget`")
    names = _anchor_names(sidecar)
    archive = ARCHIVES.of(sidecar)
    if wanted == "on":
        if not names:
            where = "this machine is in no team" if sidecar.mesh.team.team_id is None else "the team has no anchor"
            raise NoAnchor(
                f"history is kept on the team's anchor, and {where}: an always-on machine of the team "
                "becomes one with `hive join LINK --anchor`"
            )
        await _confirm(
            conn,
            request,
            f"Archive the messages you send and receive on this machine on {_the_anchor(names)}? You, and the "
            "other person of each message, can search them there; whoever runs the anchor can read them.",
            "hive history on",
        )
        changed = await archive.turn_on()
        offline = not is_anchor(sidecar) and not linked(sidecar)
        note = (
            f"History is on: what you send and receive on this machine from now on is archived on "
            f"{_the_anchor(names)}"
            + (" (not online now: it waits here until the anchor is)" if offline else "")
            + ". Search it with `hive history search WORDS`; `hive history off` stops it."
        )
        if not changed:
            note = "History was already on. " + note
        return {**await status(sidecar), "changed": changed, "note": note}
    if forget:
        await _confirm(
            conn,
            request,
            f"Turn team history off and delete everything of yours {_the_anchor(names)} keeps? It cannot be undone.",
            "hive history off --forget",
        )
    was_on = archive.is_on()
    dropped = await archive.turn_off([m.key for m in anchors(sidecar)] if forget else ())
    result: dict[str, Any] = {"changed": was_on, "dropped": dropped}
    parts = ["History is off: nothing more of yours is archived from this machine."]
    if dropped:
        parts.append(
            f"{dropped} {'entry' if dropped == 1 else 'entries'} not yet sent to the anchor "
            f"{'was' if dropped == 1 else 'were'} dropped here."
        )
    if forget:
        deleted, told = await archive.send_forgets(FORGET_WAIT)
        if is_anchor(sidecar):
            deleted += await keeper.forget(sidecar, sidecar.settings.person)
            told.insert(0, names[0])
        pending = archive.pending_forgets()
        result["forgot"] = {"deleted": deleted, "asked": told, "pending": pending}
        if told:
            who = _the_anchor(told)
            parts.append(f"{who[0].upper()}{who[1:]} deleted {deleted} of your entries.")
        if pending:
            parts.append(f"{', '.join(pending)} is not online: it is asked to forget them as soon as it is.")
        if not told and not pending:
            parts.append("The team has no anchor to ask.")
        parts.append(
            "What stays: copies the other person of a message archived themselves are theirs, and any other "
            "machine of yours with history on keeps archiving."
        )
    else:
        parts.append(
            f"What stays: what {_the_anchor(names)} already keeps stays there, searchable by you and by the "
            "other person of each message, until you run `hive history off --forget`."
        )
    result["note"] = " ".join(parts)
    return {**await status(sidecar), **result}


async def op_history_search(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Search the team's history for messages this machine's person sent or received.

    Request: ``q`` (str, required): words, matched stemmed ("migrating" finds "migration"), all of
    them where any entry holds them all, else any; ``limit`` (int, optional): at most this many hits
    (1-50, default 10). Returns ``{"hits": [{"id", "from", "to", "kind", "at", "reply_to", "body",
    "cut", "archived_by"}], "text", "anchors"}``: hits best first, one per message, every string
    defanged; ``text``, the hits framed as ``<hive-history>`` for an agent ("" for none);
    ``anchors``, those that answered. Raises ``bad_request`` (no words, a bad limit), ``no_anchor``
    (no anchor in the team, or no team), ``anchor_offline`` (none linked, or none answered in time).
    """
    query = request.get("q")
    if not isinstance(query, str) or not keeper.terms(query):
        raise BadRequest("history_search needs 'q': the words to look for")
    limit = request.get("limit")
    if limit is None:
        limit = DEFAULT_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= keeper.MAX_HITS:
        raise BadRequest(f"limit is a whole number from 1 to {keeper.MAX_HITS}")
    hits, asked = await search(sidecar, query[:1000], limit)
    return {"hits": hits, "text": frames(hits), "anchors": asked}


OPS = {"history": op_history, "history_search": op_history_search}

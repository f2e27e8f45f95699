"""The gate's ops on the sidecar's socket: offers, breakpoints, facts and signals from sessions and
watchers; the ledger, why, preferences, shadow, digest and measures for people.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..base.config import slug
from ..base.errors import BadRequest, NeedsPerson, NotFound
from ..person.confirm import asks_person, confirm_by_person
from .model import Item
from .prefs import parse_change, valid_source, write_changes
from .running import gate_of

if TYPE_CHECKING:
    from ..base.host import Connection
    from .host import GateHost

log = logging.getLogger("hive.sidecar.gate.ops")


def _person(sidecar: GateHost, request: Mapping[str, Any]) -> str:
    person = request.get("person") or sidecar.settings.person
    if not isinstance(person, str) or not slug(person):
        raise BadRequest("person is a person's name")
    return slug(person)


def _session_address(sidecar: GateHost, ref: Any) -> str:
    """A session named by key, name or address -> its address; an address on another machine as is."""
    if ref in (None, ""):
        return ""
    if not isinstance(ref, str):
        raise BadRequest("session is a session's address, name or key")
    with contextlib.suppress(NotFound):
        return sidecar.sessions.address(sidecar.sessions.find(ref))
    if "/" in ref:
        return ref
    raise NotFound(f"no session {ref!r} on this machine; see `hive who`")


def _since(value: Any) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest("since is a time in seconds since the epoch")
    return float(value)


async def op_offer(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Offer a proactive item to the gate, which decides whether, when and how it reaches its person.

    Request: ``item`` (object, required): ``source`` and ``title`` (required), ``person`` (default
    this machine's), ``session`` (key, name or address), ``body``, ``evidence`` (``[{kind, ref,
    note?}]``), ``key``, ``proposer``, ``data``; an ``urgency`` in it is ignored. Returns the decision
    ``{"item", "fingerprint", "source", "person", "outcome", "rule", "reason", "urgency", "at", "due",
    "channel", "session", "would"}``, plus ``note`` when the item carried an urgency. Raises
    ``bad_request`` for an invalid item, ``not_found`` for a session named without its person.
    """
    raw = request.get("item")
    item = Item.from_wire(raw, sidecar.settings.person)
    if item.session:
        item = dataclasses.replace(item, session=_session_address(sidecar, item.session))
    decision = await gate_of(sidecar).offer(item)
    result = decision.public()
    if isinstance(raw, Mapping) and "urgency" in raw:
        result["note"] = "the item's own urgency was ignored: the gate computes urgency from facts it can check"
    return result


async def op_breakpoint(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Report a natural pause in a session: the gate delivers what waited for it there.

    Request: ``kind`` (str, required): commit, test, idle, turn or pr. ``session`` (str, optional):
    key, name or address. ``person`` (str, optional): whose items (default the session's person,
    else this machine's). Returns ``{"person", "session", "delivered": [decision]}``. Raises
    ``bad_request`` for another kind, ``not_found`` for a session named without its person.
    """
    session = _session_address(sidecar, request.get("session"))
    person = (
        _person(sidecar, request)
        if request.get("person")
        else (session.split("/", 1)[0] if session else sidecar.settings.person)
    )
    decisions = await gate_of(sidecar).breakpoint(person, session, str(request.get("kind")))
    return {"person": person, "session": session, "delivered": [d.public() for d in decisions]}


async def op_fact(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record a checkable fact the gate computes urgency from (a test run's result, a deadline, a block).

    Request: ``kind`` (str, required): test, ci, deadline, blocked, security or overlap. ``ref``
    (str, required): what it is about. ``state`` (str, required): one the kind has. ``due`` (number,
    epoch seconds): required for an open deadline. ``detail`` (str, optional). Returns the fact
    ``{"kind", "ref", "state", "since", "at", "runs", "due", "detail"}``. Raises ``bad_request``.
    """
    due = request.get("due")
    if due is not None and (isinstance(due, bool) or not isinstance(due, int | float)):
        raise BadRequest("due is a time in seconds since the epoch")
    detail = request.get("detail") or ""
    if not isinstance(detail, str):
        raise BadRequest("detail is a string")
    fact = await gate_of(sidecar).record(
        str(request.get("kind")),
        request.get("ref"),  # type: ignore[arg-type]
        str(request.get("state")),
        due=due,
        detail=detail,
    )
    return fact.public()


async def op_acted(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record that the person or their session acted on an item, for the gate's measures.

    Request: ``item`` (str, required): an item id or fingerprint. ``how`` (str, optional): cited
    (default), replied, changed, asked or wanted. Returns ``{"items": [id], "how"}``. Raises
    ``bad_request``, ``not_found`` for an item the gate does not have.
    """
    return await gate_of(sidecar).acted(request.get("item"), str(request.get("how") or "cited"))  # type: ignore[arg-type]


async def op_ledger(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read the gate's ledger: every decision, with the rule and reason that made it.

    Request: ``since`` (number, optional): epoch seconds. ``person`` (str, optional): only theirs.
    ``limit`` (int, optional): the latest this many rows (default 500, at most 5000). Returns
    ``{"rows": [{"seq", "item", "person", "source", "at", "outcome", "rule", "reason", "channel",
    "title", "urgency", "fingerprint"}]}``, oldest first. Raises ``bad_request`` for ill-typed fields.
    """
    limit = request.get("limit") or 500
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise BadRequest("limit is a whole number")
    person = request.get("person")
    who = slug(person) if isinstance(person, str) and person else None
    rows = await gate_of(sidecar).ledger(_since(request.get("since")), who, limit)
    return {"rows": rows}


async def op_why(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Explain in a sentence why the person was (or was not yet) told about an item.

    Request: ``item`` (str, required): an item id or fingerprint. Asked from a person's terminal,
    an item they were not told about counts as having mattered. Returns ``{"items": [{"item",
    "decisions", "answer", "signals"}]}``. Raises ``bad_request``, ``not_found``.
    """
    return await gate_of(sidecar).why(request.get("item"), asked=conn.at_terminal)  # type: ignore[arg-type]


@asks_person
async def op_prefs(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read a person's preferences; with ``set`` (``{"key": value}``), change them once the person confirms.

    Request: ``person`` (str, optional): default this machine's; only theirs change. ``set``
    (object, optional): changes such as ``{"budget": 8, "mute.lesson": true}``. Returns ``{"prefs",
    "changed"}``, plus ``confirmed`` (how the person confirmed) after a change. Raises
    ``bad_request``, ``needs_person`` (another person's, or not confirmed), ``confirm_on_terminal``.
    """
    gate = gate_of(sidecar)
    person = _person(sidecar, request)
    changes_raw = request.get("set")
    if not changes_raw:
        return {"prefs": gate.prefs(person).public(), "changed": []}
    if not isinstance(changes_raw, Mapping):
        raise BadRequest('set is an object of preference changes, such as {"budget": 8, "mute.lesson": true}')
    changes = [parse_change(str(k), v) for k, v in changes_raw.items()]
    return await _change_prefs(sidecar, conn, request, person, changes)


async def _change_prefs(
    sidecar: GateHost, conn: Connection, request: Mapping[str, Any], person: str, changes: list[Any]
) -> dict[str, Any]:
    if person != sidecar.settings.person:
        raise NeedsPerson(f"{person}'s preferences are theirs to change, on their own machine")
    described = "; ".join(c.describe() for c in changes)
    how = await confirm_by_person(
        conn,
        request,
        f"Change your hive gate preferences: {described}?",
        title="hive · confirm a change",
        outcome="not changed",
        hint="An agent can read the gate's preferences; only its person changes them, "
        "with `hive gate prefs` in a terminal.",
    )
    gate = gate_of(sidecar)
    write_changes(sidecar.paths.config, person, changes, gate.prefs(person))
    gate.prefs_file.reload()
    return {"prefs": gate.prefs(person).public(), "changed": [c.describe() for c in changes], "confirmed": how}


async def op_promote(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Make a source live (its items reach the person) or put it back in shadow, once the person confirms.

    Request: ``source`` (str, required): a source name. ``demote`` (bool, optional): back to shadow.
    ``person`` (str, optional): must be this machine's. Returns ``{"prefs", "changed", "confirmed"}``
    as ``gate_prefs`` does. Raises ``bad_request``, ``needs_person`` (another person's, or not
    confirmed), ``confirm_on_terminal``.
    """
    source = request.get("source")
    if not valid_source(source):
        raise BadRequest("name the source to promote (a-z, 0-9 and -)")
    change = parse_change(f"live.{source}", not request.get("demote"))
    return await _change_prefs(sidecar, conn, request, _person(sidecar, request), [change])


async def op_shadow(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show, per source of a person's items, what it would have done in shadow and what they wanted.

    Request: ``person`` (str, optional): default this machine's. Returns ``{"person", "live",
    "sources": [{"source", "live", "offered", "would", "silenced", "wanted_when_delivered", "missed",
    "recent"}]}``. Raises ``bad_request`` for a bad person name.
    """
    return await gate_of(sidecar).shadow(_person(sidecar, request))


async def op_digest(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A person's digest: what the gate held for them, grouped by what it unblocks, and what it checked.

    Request: ``person`` (str, optional): default this machine's. ``since`` (number, optional): epoch
    seconds; default the last digest read (or a day ago). ``peek`` (bool, optional): do not mark it
    read. Returns ``{"person", "since", "until", "groups", "held", "checked", "delivered",
    "silenced", "silenced_by", "shadow"}``. Raises ``bad_request`` for ill-typed fields.
    """
    person = _person(sidecar, request)
    # Sources whose items fall due with no event to offer them at (a lesson proposal nobody answered
    # for a day reads as held) offer them now: each feature's ``before_digest`` (daemon.features).
    for offer_due in sidecar.before_digest:
        try:
            await offer_due(sidecar, person)
        except Exception:  # one source's trouble must not cost the person the rest of their digest
            log.exception("offering due items before %s's digest failed", person)
    return await gate_of(sidecar).digest(person, _since(request.get("since")), mark=not request.get("peek"))


async def op_measures(sidecar: GateHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Measure the gate from its ledger: deliveries per day, and the shares acted on or that mattered.

    Request: ``person`` (str, optional): only theirs. ``since`` (number, optional): epoch seconds,
    default a week ago. Returns ``{"since", "until", "person", "delivered_per_day", "delivered",
    "acted_on", "acted_share", "held", "held_mattered", "held_mattered_share", "silenced",
    "silenced_mattered", "silenced_mattered_share"}``. Raises ``bad_request`` for a bad ``since``.
    """
    person = request.get("person")
    return await gate_of(sidecar).measures(
        slug(person) if isinstance(person, str) and person else None, _since(request.get("since"))
    )


OPS = {
    "gate_offer": op_offer,
    "gate_breakpoint": op_breakpoint,
    "gate_fact": op_fact,
    "gate_acted": op_acted,
    "gate_ledger": op_ledger,
    "gate_why": op_why,
    "gate_prefs": op_prefs,
    "gate_promote": op_promote,
    "gate_shadow": op_shadow,
    "gate_measures": op_measures,
    "digest": op_digest,
}

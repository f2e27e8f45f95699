"""Held mail, and the ``held``, ``approve`` and ``drop`` ops: teammates' messages held here for the
person (by the inbound policy, or by screening: hive.sidecar.mail.screen), and this machine's own
messages outbound screening holds before they leave (``held_here`` in the outbox)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base.defang import defang
from ..base.errors import BadRequest, HiveError
from ..person.confirm import asks_person, confirm_by_person
from . import attachments
from .remote import REMOTE
from .render import Message
from .screen import LOCAL, Held, allow, allowed, allowed_senders, ask_person, disallow, screened_inbound, settled

if TYPE_CHECKING:
    from ..base.host import Connection
    from .addresses import Target
    from .host import MailHost
    from .remote import RemoteMail


async def held(sidecar: MailHost, outbound: bool = False) -> list[dict[str, Any]]:
    """The held messages, oldest first: teammates' held here (their text defanged), or with
    ``outbound`` this machine's own that outbound screening holds before they leave."""
    query = (
        "SELECT id, sender, recipient, frame, created_at, note FROM outbox WHERE state = 'held_here' ORDER BY id"
        if outbound
        else "SELECT id, sender, recipient, frame, received_at, note FROM inbound WHERE state = 'held' ORDER BY id"
    )
    shown = str if outbound else defang  # a peer's text is defanged; this machine's own is as it was written
    out = []
    for message_id, sender, recipient, frame, at, note in await sidecar.store.fetchall(query):
        body, files = "", []
        with contextlib.suppress(ValueError, TypeError, AttributeError, HiveError):
            raw = json.loads(frame)
            body = raw.get("body", "")
            files = [f.name for f in attachments.from_wire(raw.get("files"))]  # saved only once approved
        out.append(
            {
                "id": message_id,
                "from": shown(sender),
                "to": recipient,
                "body": shown(str(body)),
                "received_at": at,
                "files": files,
                "why": note,
            }
        )
    return out


async def release(remote: RemoteMail, message_id: str, approve: bool) -> dict[str, Any] | None:
    """Let a message outbound screening held here go (it is queued as any other), or drop it; None
    when ``message_id`` is not held here."""
    sidecar = remote.sc
    row = await sidecar.store.fetchone("SELECT peer FROM outbox WHERE id = ? AND state = 'held_here'", (message_id,))
    if row is None:
        return None
    person = sidecar.settings.person
    if not approve:
        note = f"dropped by {person} before it left this machine"
        await sidecar.store.write(
            [
                (
                    "UPDATE outbox SET state = 'dropped', note = ?, updated_at = ? WHERE id = ?",
                    (note, time.time(), message_id),
                )
            ]
        )
        return {"id": message_id, "state": "dropped", "note": note}
    note = f"approved by {person}: queued in the outbox"
    await sidecar.store.write(
        [
            (
                "UPDATE outbox SET state = 'queued', pending = 1, note = ?, updated_at = ? WHERE id = ?",
                (note, time.time(), message_id),
            )
        ]
    )
    remote.mesh.spawn(remote.replay, row[0])  # a linked peer gets it now; another on its next link
    return {"id": message_id, "state": "queued", "note": note}


async def settle(remote: RemoteMail, ids: Sequence[str], approve: bool, by: str) -> list[dict[str, Any]]:
    """Approve (deposit now) or drop held messages; a teammate sender hears which with a receipt.

    ``by``: who settled them and how ("alice, with `hive approve`"), for the record that says why
    each was held (:func:`hive.sidecar.mail.screen.settled`)."""
    sidecar = remote.sc
    results = []
    for message_id in ids:
        row = await sidecar.store.fetchone(
            "SELECT frame, recipient, peer FROM inbound WHERE id = ? AND state = 'held'", (message_id,)
        )
        if row is None:
            result = await release(remote, message_id, approve)
            results.append(result or {"id": message_id, "state": "not_held"})
            if result is not None:
                await settled(sidecar, message_id, approve, by)
            continue
        local = row[2] == LOCAL
        if not approve:
            await sidecar.store.write(
                [
                    (
                        "UPDATE inbound SET state = 'refused', due = ?, frame = NULL, note = ? WHERE id = ?",
                        ("" if local else "refused", f"dropped by {by}", message_id),
                    )
                ]
            )
            results.append({"id": message_id, "state": "dropped"})
            await settled(sidecar, message_id, False, by)
            continue
        raw = json.loads(row[0])
        recipient = row[1]
        name = recipient.split("/", 1)[1]
        entry = next((e for e in sidecar.directory() if e.key is not None and e.name == name), None)
        if local:  # one of this machine's sessions wrote it: no signed approval rides with it
            approval, body = None, raw["body"]
        else:
            approval, body = remote.approval(raw, row[2], recipient, raw["body"])  # checked again: time passed
        message = Message(
            id=message_id,
            sender=raw["from"],
            sender_kind=raw.get("kind", "agent"),
            sender_agent=raw.get("agent", ""),
            sender_repo=raw.get("repo", ""),
            recipient=recipient,
            reply_to=raw.get("reply_to"),
            body=body,
            wake=not raw.get("fyi"),
            sent_at=time.time(),
            approval=approval,
            carried=attachments.from_wire(raw.get("files")),
        )
        state, note = await remote.deposit(message, entry, sender_key=raw.get("sender_key") if local else None)
        await sidecar.store.write(
            [
                (
                    "UPDATE inbound SET state = 'accepted', due = ?, frame = NULL, note = ? WHERE id = ?",
                    ("" if local else "delivered", note, message_id),
                )
            ]
        )
        results.append({"id": message_id, "state": state, "note": note})
        await settled(sidecar, message_id, True, by)
    remote.open_inbound += len(results)
    remote.mesh.poke()
    return results


async def hold_local(
    sidecar: MailHost, pairs: Sequence[tuple[Target, Message]], sender_key: str | None
) -> dict[str, dict[str, Any]]:
    """Hold what one of this machine's sessions (or a script) writes to another session or mailbox
    here when inbound screening matches it, as a teammate's message would be held: the text of a
    page an agent read can travel on in its words. The person's own terminal mailbox is theirs to
    read and is not held. Returns each held message's result for its sender, keyed by message id."""
    terminal = sidecar.terminal
    pairs = [(t, m) for t, m in pairs if t.address != terminal]
    if not pairs:
        return {}
    message = pairs[0][1]  # one body and one set of files, to every recipient
    if await allowed(sidecar, message.sender):
        return {}
    why = await screened_inbound(message.body, message.carried)
    if why is None:
        return {}
    payload = REMOTE.of(sidecar).msg_payload
    now = time.time()
    await sidecar.store.write(
        [
            (
                "INSERT INTO inbound (id, peer, sender, recipient, state, note, frame, received_at) "
                "VALUES (?, ?, ?, ?, 'held', ?, ?, ?)",
                (m.id, LOCAL, m.sender, t.address, why, json.dumps({**payload(m), "sender_key": sender_key}), now),
            )
            for t, m in pairs
        ]
    )
    for target, m in pairs:
        ask_person(sidecar, Held(m.id, m.sender, target.address, why))
    return {m.id: {"to": t.address, "id": m.id, "state": "held", "note": why} for t, m in pairs}


def _ids(request: dict[str, Any]) -> list[str]:
    ids = request.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise BadRequest("name the held messages by id (see `hive held`)")
    return ids


async def op_held(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """List the messages held for the person to approve or drop.

    Request: ``outbound`` (bool, optional): this machine's own messages outbound screening holds,
    instead of teammates' held here. Returns ``{"held": [{"id", "from", "to", "body",
    "received_at", "files", "why"}]}``, peer-written text defanged; ``files`` are the names of
    attachments, saved only once approved; ``why`` says what held it. An agent asking gets no
    ``body`` of a teammate's message: it was held so that no agent reads it before the person.
    """
    if request.get("outbound"):
        return {"held": await held(sidecar, outbound=True)}
    found = await held(sidecar)
    if conn.by_agent:
        for item in found:
            item["body"] = ""
            item["why"] = "held for your person: ask them to look at it (`hive held`)"
    return {"held": found}


@asks_person
async def op_approve(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Deliver held messages to their sessions, once the person confirms it when an agent asks.

    Request: ``ids`` (list of str, required, not empty): the held messages. ``allow_sender`` (bool,
    optional): screening holds nothing more from their senders. Returns ``{"settled": [{"id",
    "state", "note"}]}``, ``state`` ``not_held`` for an id that is not held; each sender hears the
    outcome by receipt. Raises ``bad_request`` without ``ids``, ``needs_person`` or
    ``confirm_on_terminal`` when an agent asks and the person does not confirm.
    """
    ids = _ids(request)
    senders = []
    if request.get("allow_sender"):
        marks = ", ".join("?" for _ in ids)
        rows = await sidecar.store.fetchall(
            f"SELECT DISTINCT sender FROM inbound WHERE state = 'held' AND id IN ({marks})", tuple(ids)
        )
        senders = [row[0] for row in rows]
    # Mail is held for the person to judge; the agent it would reach must not wave it through.
    how = await confirm_by_person(
        conn,
        request,
        f"Deliver {len(ids)} held message(s) to your sessions?"
        + (f" And let everything from {', '.join(senders)} past screening from now on?" if senders else ""),
        title="hive · release held mail",
        outcome="not delivered",
        hint="Ask your person to run `hive approve` in a terminal.",
        agents_only=True,
    )
    if senders:
        await allow(sidecar, senders)
    return {"settled": await settle(REMOTE.of(sidecar), ids, True, _by(sidecar, "approve", how)), "allowed": senders}


async def op_drop(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Refuse held messages: they are never delivered, and each sender hears so by receipt.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state": "dropped" | "not_held"}]}``. Raises ``bad_request`` without ``ids``.
    """
    how = "agent" if conn.by_agent else "person"
    return {"settled": await settle(REMOTE.of(sidecar), _ids(request), False, _by(sidecar, "drop", how))}


def _by(sidecar: MailHost, command: str, how: str) -> str:
    """Who settled held mail, for its record: the person's own command, or an agent's they confirmed."""
    person = sidecar.settings.person
    return {
        "person": f"{person}, with `hive {command}`",
        "terminal": f"{person}, confirming at the terminal where an agent ran `hive {command}`",
        "desktop": f"{person}, confirming in a pop-up when an agent asked to {command} it",
        "agent": f"an agent of {person}'s, with `hive {command}`",
    }[how]


async def op_allowed(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The senders the person let past inbound screening (``hive approve --allow-sender``); with
    ``revoke``, screen some of them again.

    Request: ``revoke`` (list of str, optional): senders' addresses to screen again. Returns
    ``{"allowed": [{"sender", "since"}], "revoked": [str]}``: those still allowed, and those of
    ``revoke`` that had been. Raises ``bad_request`` for a ``revoke`` that is not a list of addresses.
    """
    revoke = request.get("revoke") or []
    if not isinstance(revoke, list) or not all(isinstance(s, str) and s for s in revoke):
        raise BadRequest("revoke is a list of senders' addresses, as `hive held --allowed` lists them")
    revoked = await disallow(sidecar, revoke) if revoke else []
    return {"allowed": await allowed_senders(sidecar), "revoked": revoked}


OPS = {"held": op_held, "approve": op_approve, "drop": op_drop, "screening_allowed": op_allowed}

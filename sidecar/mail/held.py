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
from .screen import allow

if TYPE_CHECKING:
    from ..base.host import Connection
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


async def settle(remote: RemoteMail, ids: Sequence[str], approve: bool) -> list[dict[str, Any]]:
    """Approve (deposit now) or drop held messages; the sender hears which with a receipt."""
    sidecar = remote.sc
    results = []
    for message_id in ids:
        row = await sidecar.store.fetchone(
            "SELECT frame, recipient, peer FROM inbound WHERE id = ? AND state = 'held'", (message_id,)
        )
        if row is None:
            results.append(await release(remote, message_id, approve) or {"id": message_id, "state": "not_held"})
            continue
        if not approve:
            await sidecar.store.write(
                [
                    (
                        "UPDATE inbound SET state = 'refused', due = 'refused', frame = NULL, note = ? WHERE id = ?",
                        (f"dropped by {sidecar.settings.person}", message_id),
                    )
                ]
            )
            results.append({"id": message_id, "state": "dropped"})
            continue
        raw = json.loads(row[0])
        recipient = row[1]
        name = recipient.split("/", 1)[1]
        entry = next((e for e in sidecar.directory() if e.key is not None and e.name == name), None)
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
        state, note = await remote.deposit(message, entry)
        await sidecar.store.write(
            [
                (
                    "UPDATE inbound SET state = 'accepted', due = 'delivered', frame = NULL, note = ? WHERE id = ?",
                    (note, message_id),
                )
            ]
        )
        results.append({"id": message_id, "state": state, "note": note})
    remote.open_inbound += len(results)
    remote.mesh.poke()
    return results


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
    await confirm_by_person(
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
    return {"settled": await settle(REMOTE.of(sidecar), ids, approve=True), "allowed": senders}


async def op_drop(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Refuse held messages: they are never delivered, and each sender hears so by receipt.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state": "dropped" | "not_held"}]}``. Raises ``bad_request`` without ``ids``.
    """
    return {"settled": await settle(REMOTE.of(sidecar), _ids(request), approve=False)}


OPS = {"held": op_held, "approve": op_approve, "drop": op_drop}

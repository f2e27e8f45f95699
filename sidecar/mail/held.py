"""Held mail: teammates' messages the inbound policy holds until the person approves or drops them,
and the ``held``, ``approve`` and ``drop`` ops."""

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

if TYPE_CHECKING:
    from ..base.host import Connection
    from .host import MailHost
    from .remote import RemoteMail


async def held(sidecar: MailHost) -> list[dict[str, Any]]:
    """The held messages, oldest first, peer-written text defanged."""
    rows = await sidecar.store.fetchall(
        "SELECT id, sender, recipient, frame, received_at FROM inbound WHERE state = 'held' ORDER BY id"
    )
    out = []
    for message_id, sender, recipient, frame, received_at in rows:
        body, files = "", []
        with contextlib.suppress(ValueError, TypeError, AttributeError, HiveError):
            raw = json.loads(frame)
            body = raw.get("body", "")
            files = [f.name for f in attachments.from_wire(raw.get("files"))]  # saved only once approved
        out.append(
            {
                "id": message_id,
                "from": defang(sender),
                "to": recipient,
                "body": defang(str(body)),
                "received_at": received_at,
                "files": files,
            }
        )
    return out


async def settle(remote: RemoteMail, ids: Sequence[str], approve: bool) -> list[dict[str, Any]]:
    """Approve (deposit now) or drop held messages; the sender hears which with a receipt."""
    sidecar = remote.sc
    results = []
    for message_id in ids:
        row = await sidecar.store.fetchone(
            "SELECT frame, recipient, peer FROM inbound WHERE id = ? AND state = 'held'", (message_id,)
        )
        if row is None:
            results.append({"id": message_id, "state": "not_held"})
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
    """List teammates' messages the inbound policy holds for the person to approve or drop.

    Reads no fields. Returns ``{"held": [{"id", "from", "to", "body", "received_at", "files"}]}``,
    peer-written text defanged; ``files`` are the names of attachments, saved only once approved.
    """
    return {"held": await held(sidecar)}


@asks_person
async def op_approve(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Deliver held messages to their sessions, once the person confirms it when an agent asks.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state", "note"}]}``, ``state`` ``not_held`` for an id that is not held; each sender
    hears the outcome by receipt. Raises ``bad_request`` without ``ids``, ``needs_person`` or
    ``confirm_on_terminal`` when an agent asks and the person does not confirm.
    """
    ids = _ids(request)
    # Mail is held for the person to judge; the agent it would reach must not wave it through.
    await confirm_by_person(
        conn,
        request,
        f"Deliver {len(ids)} held message(s) to your sessions?",
        title="hive · release held mail",
        outcome="not delivered",
        hint="Ask your person to run `hive approve` in a terminal.",
        agents_only=True,
    )
    return {"settled": await settle(REMOTE.of(sidecar), ids, approve=True)}


async def op_drop(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Refuse held messages: they are never delivered, and each sender hears so by receipt.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state": "dropped" | "not_held"}]}``. Raises ``bad_request`` without ``ids``.
    """
    return {"settled": await settle(REMOTE.of(sidecar), _ids(request), approve=False)}


OPS = {"held": op_held, "approve": op_approve, "drop": op_drop}

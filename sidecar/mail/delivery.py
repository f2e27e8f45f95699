"""Delivery after a message is deposited: what its sender is told, and the push into a running session.

One path for every sender: a local ``send``, mail from a teammate's machine, ``ask`` and the gate.
A session whose harness keeps a push channel open (a plugin, Codex's app-server) gets waking mail
at once; otherwise it waits for the session's next hook or inbox check, and the sender's note says so.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import anyio

from ..base.host import Connection
from ..base.ulid import new_ulid
from ..sessions.registry import Session
from . import codex_push, mailboxes
from .addresses import Target
from .injection import fit
from .render import Message

if TYPE_CHECKING:
    from .host import MailHost

TIER_NOTES = {
    "push": "pushed into the session now (it wakes if idle); read once its model has had it",
    "turn": "queued: it sees this at its next tool call or when its turn ends",
    "pull": "queued: it sees this when it checks its inbox",
}


async def after_deposit(sidecar: MailHost, target: Target, wake: bool, waiting: bool) -> tuple[str, str]:
    if target.entry is None:
        person, name = target.address.split("/", 1)
        command = "hive inbox" if name == mailboxes.TERMINAL else f"hive inbox --as {name}"
        return "queued", f"queued: {person} sees it with `{command}` on {sidecar.settings.machine}"
    session = sidecar.sessions.by_key.get(target.entry.key or "")
    if session is None or not sidecar.sessions.is_live(session):
        return "queued", "queued: that session is offline; it sees this when it comes back"
    if sidecar.sessions.is_unmanaged(session):
        return "queued", (
            "queued: that session runs without hive's hooks or tools (hive found it on disk), so "
            "it cannot read this until its harness loads hive; tell its person if it is urgent"
        )
    if not wake:
        return "queued", "queued (fyi): shown at its next natural pause; it does not wake the session"
    if waiting:
        return "delivered", "delivered: the session was waiting in check_inbox"
    if session.tier == "push" and await push(sidecar, session):
        return "pushed", TIER_NOTES["push"]
    tier = "turn" if session.tier == "push" else session.tier
    return "queued", TIER_NOTES[tier]


def push_connection(sidecar: MailHost, session: Session) -> Connection | None:
    for conn in sidecar.connections.values():
        if session.key in conn.push_sessions and not conn.closed:
            return conn
    return None


async def push(sidecar: MailHost, session: Session) -> bool:
    """Hand waking mail to the connection that delivers into this session, if any."""
    if codex_push.serves(session):  # no connection: the sidecar itself drives Codex's app-server
        return await codex_push.push(sidecar, session)
    conn = push_connection(sidecar, session)
    address = sidecar.sessions.address(session)
    if conn is None or sidecar.parked[address] > 0:
        return False  # nobody to push to, or a reader is already long-polling for it
    messages, text = fit(sidecar, session, [m for m in await sidecar.mailbox.unread(address) if m.wake])
    if not messages:
        return False  # none, or past what may be injected now: it waits for a pull
    sidecar.mailbox.mark_shown(messages)
    try:
        await conn.send({"event": "deliver", "session": session.key, "ids": [m.id for m in messages], "text": text})
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        sidecar.mailbox.unshow([m.id for m in messages])
        return False
    return True


async def deliver_local(sidecar: MailHost, message: Message, sender_key: str | None) -> tuple[str, str]:
    """Deposit one message for a mailbox on this machine and wake its session as ``send`` would."""
    waiting = sidecar.parked[message.recipient] > 0
    await sidecar.mailbox.deposit([message], sender_key)
    entry = next((e for e in sidecar.directory() if e.address == message.recipient), None)
    return await after_deposit(sidecar, Target(message.recipient, entry), message.wake, waiting)


async def deliver_note(
    sidecar: MailHost, address: str, body: str, *, sender: str, kind: str = "hive", agent: str = ""
) -> tuple[str, str]:
    """A new waking message from hive itself (the gate, an overlap) or the person's terminal, not from
    a session, to a mailbox on this machine: deposited and delivered as :func:`deliver_local` does."""
    message = Message(
        id=new_ulid(),
        sender=sender,
        sender_kind=kind,
        sender_agent=agent,
        sender_repo="",
        recipient=address,
        reply_to=None,
        body=body,
        wake=True,
        sent_at=time.time(),
    )
    return await deliver_local(sidecar, message, None)

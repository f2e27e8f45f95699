"""Taking teammates' mail in: the checks a ``msg`` frame passes on the receiving machine, and its answer.

A message is answered once and recorded in ``inbound`` (a replay gets the same answer again). It
must come from a session of the sending machine's person, fit the size limit and the rate limit
for one machine (``[mesh] rate_limit`` per ``rate_window``), and name a session or mailbox of
this machine's person; the person's inbound policy then accepts it (deposited at once), holds it
for the person (:mod:`hive.sidecar.mail.held`) or refuses it. One it would accept is still held
when its text matches a screening rule (:mod:`hive.sidecar.mail.screen`). Between two sessions,
the loop guard counts it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ..base.config import slug
from ..base.defang import one_line
from ..base.errors import HiveError, LoopGuard
from ..base.ulid import is_ulid
from ..mesh.transport import Link
from . import attachments, mailboxes
from .addresses import Entry
from .guards import Guards
from .notify import notify_received
from .policy import INBOUND
from .render import Message
from .screen import Held, allowed, ask_person, screened_inbound

if TYPE_CHECKING:
    from ..mesh.team_view import Member
    from .remote import RemoteMail

log = logging.getLogger("hive.sidecar.mail.incoming")


class IncomingMail:
    """The receiving side of one mesh's remote mail (:class:`~hive.sidecar.mail.remote.RemoteMail`)."""

    def __init__(self, remote: RemoteMail) -> None:
        self.remote = remote
        self.mesh = remote.mesh
        self.sc = remote.sc
        self._rates: dict[str, deque[float]] = {}

    def _rate_ok(self, peer: str) -> float:
        """0 when a message from ``peer`` may pass now, else seconds until one may."""
        now = time.monotonic()
        window = self._rates.setdefault(peer, deque())
        while window and now - window[0] >= self.mesh.config.rate_window:
            window.popleft()
        if len(window) >= self.mesh.config.rate_limit:
            return self.mesh.config.rate_window - (now - window[0]) + 0.05
        window.append(now)
        return 0.0

    async def receive_msg(self, link: Link, member: Member, raw: Any) -> None:
        if not isinstance(raw, dict) or not is_ulid(raw.get("id")):
            log.warning("a malformed msg frame from %s; ignored", link.peer[:12])
            return
        message_id: str = raw["id"]

        def look(conn: sqlite3.Connection) -> tuple[str, str] | None:  # one hop to the database thread
            row = conn.execute("SELECT state, note FROM inbound WHERE id = ?", (message_id,)).fetchone()
            if row is None and conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone():
                return "message", ""
            return None if row is None else (row[0], row[1])

        seen = await self.sc.store.run(look)
        if seen is not None and seen[0] == "message":
            await self.remote.ack(link, message_id, "queued", "already received")
            return
        if seen is not None:
            state = {"accepted": "queued", "held": "held", "refused": "refused"}.get(seen[0], "queued")
            await self.remote.ack(link, message_id, state, f"already received: {seen[1]}"[:300])
            return
        sender, recipient, body = raw.get("from"), raw.get("to"), raw.get("body")
        claimed = raw.get("kind")
        kind = claimed if claimed in ("agent", "person", "script") else "agent"
        reply_to = raw.get("reply_to") if is_ulid(raw.get("reply_to")) else None
        local_person = self.sc.settings.person
        if (
            not isinstance(sender, str)
            or not isinstance(recipient, str)
            or not isinstance(body, str)
            or "/" not in sender
            or "/" not in recipient
        ):
            await self._refuse(link, message_id, str(sender), str(recipient), "refused: a malformed message")
            return
        sender = f"{slug(sender.split('/', 1)[0])}/{slug(sender.split('/', 1)[1]) or 'terminal'}"
        if sender.split("/", 1)[0] != member.person:
            await self._refuse(
                link,
                message_id,
                sender,
                recipient,
                f"refused: a machine of {member.person}'s speaks only for {member.person}",
            )
            return
        if len(body.encode("utf-8")) > self.sc.settings.max_body:
            await self._refuse(link, message_id, sender, recipient, "refused: the message is over the size limit")
            return
        try:
            carried = attachments.from_wire(raw.get("files"))
        except HiveError as exc:
            await self._refuse(link, message_id, sender, recipient, attachments.refusal_note(exc))
            return
        wait = self._rate_ok(link.peer)
        if wait:
            await self.remote.ack(
                link,
                message_id,
                "retry",
                f"retry: {local_person}'s machine takes at most {self.mesh.config.rate_limit} "
                "messages a minute from one machine",
                retry_after=round(wait, 2),
            )
            return
        policy = INBOUND.of(self.sc).of(member.person)
        if policy == "refuse":
            await self._refuse(
                link,
                message_id,
                sender,
                recipient,
                f"refused: {local_person} does not take messages from {member.person} right now",
            )
            return
        to_person, to_name = recipient.split("/", 1)
        entry: Entry | None = None
        if to_person != local_person:
            await self._refuse(link, message_id, sender, recipient, f"refused: no {to_person} on this machine")
            return
        if not mailboxes.is_own(self.sc, recipient):  # the person's own mailboxes take mail from the team
            entry = next((e for e in self.sc.directory() if e.key is not None and e.name == to_name), None)
            if entry is None:
                await self._refuse(
                    link,
                    message_id,
                    sender,
                    recipient,
                    f"refused: no session or mailbox called {to_name} on {local_person}'s machine",
                )
                return
        if policy != "hold":  # a held message's files are saved (and counted) once it is approved
            wait = await attachments.quota_wait(self.sc, member.person, carried)
            if wait:
                await self.remote.ack(
                    link,
                    message_id,
                    "retry",
                    f"retry: {local_person}'s machine keeps no more of {member.person}'s files for now",
                    retry_after=round(wait, 2),
                )
                return
        if kind == "person":
            thread = Guards.human_input(recipient)
        elif kind == "agent" and entry is not None:  # between two sessions: the loop guard's to count
            try:
                thread = (await self.sc.guards.step(sender, recipient, claimed=raw.get("run"))).statements
            except LoopGuard as exc:
                await self._refuse(link, message_id, sender, recipient, exc.message, code=exc.code)
                return
        else:
            thread = []
        approval, body = self.remote.approval(raw, link.peer, recipient, body)
        message = Message(
            id=message_id,
            sender=sender,
            sender_kind=kind,
            sender_agent=one_line(raw.get("agent"), 32),
            sender_repo=one_line(raw.get("repo"), 200),
            recipient=recipient,
            reply_to=reply_to,
            body=body,
            wake=not raw.get("fyi"),
            sent_at=time.time(),
            approval=approval,
            carried=carried,
        )
        now = time.time()
        screened = None
        if policy != "hold" and not await allowed(self.sc, sender):
            screened = await screened_inbound(body, carried, approval)
        if policy == "hold" or screened is not None:
            note = screened or f"held: {local_person} sees it and approves it before any session does"
            await self.sc.store.write(
                [
                    *thread,
                    (
                        "INSERT INTO inbound (id, peer, sender, recipient, state, note, frame, received_at) "
                        "VALUES (?, ?, ?, ?, 'held', ?, ?, ?)",
                        (
                            message_id,
                            link.peer,
                            sender,
                            recipient,
                            note,
                            json.dumps(self.remote.msg_payload(message)),
                            now,
                        ),
                    ),
                ]
            )
            await self.remote.ack(link, message_id, "held", note)
            if screened is not None:
                ask_person(self.sc, Held(message_id, sender, recipient, screened))
            return
        # The message, its inbound record and its thread step share one commit, made before the ack
        # (a second commit for the record would hold up both the ack and the recipient's read).
        state, note = await self.remote.deposit(
            message,
            entry,
            also=[
                *thread,
                *mailboxes.record_copies(message_id, raw.get("copies")),
                (
                    "INSERT OR IGNORE INTO inbound (id, peer, sender, recipient, state, note, received_at) "
                    "VALUES (?, ?, ?, ?, 'accepted', 'accepted', ?)",
                    (message_id, link.peer, sender, recipient, now),
                ),
            ],
        )
        if raw.get("notify") is True:
            notify_received(self.sc, message, raw.get("sent_at"))
        self.remote.open_inbound += 1
        await self.remote.ack(link, message_id, state, note)

    async def _refuse(
        self, link: Link, message_id: str, sender: str, recipient: str, note: str, code: str = "refused"
    ) -> None:
        await self.sc.store.write(
            [
                (
                    "INSERT OR IGNORE INTO inbound (id, peer, sender, recipient, state, note, received_at) "
                    "VALUES (?, ?, ?, ?, 'refused', ?, ?)",
                    (message_id, link.peer, sender[:200], recipient[:200], note, time.time()),
                )
            ]
        )
        await self.remote.ack(link, message_id, "refused", note, code=code)

"""Mail between machines: the outbox, ``msg``/``ack``/``receipt`` frames, and what they update.

Frames on the mesh's links (:mod:`hive.sidecar.mesh.links`), spoken by :class:`RemoteMail`, the
mesh's speaker for mail (:func:`attach`):

- ``msg {msg}`` → ``ack {id, state, note, retry_after?}``: one message for one session. States:
  ``delivered``, ``queued``, ``held``, ``refused``, ``retry`` (the sender keeps it and tries
  again later).
- ``receipt {receipts: [{id, state, at}]}`` → ``ack {receipts: [[id, state], ...]}``: later news
  about a message (``delivered`` once a held message is approved, ``refused`` if dropped,
  ``read`` once its recipient confirmed it).

Mail is at-least-once and deduplicated by id: the sender stores each message in its outbox
before ``send`` answers and replays the outbox on every (re)connect until the recipient
acknowledges it; it gives up after seven days and says so in ``sent``. The receiver records
every message it answered (``inbound``), so a replay is answered again and never deposited
twice. It takes a machine's messages at a limited rate, as the person's inbound policy says
(accept, hold for the person: :mod:`hive.sidecar.mail.held`, or refuse): the receiving side's
checks are :mod:`hive.sidecar.mail.incoming`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.config import DAY
from ..base.defang import one_line
from ..base.host import PerSidecar
from ..mesh.config import BACKOFF_MAX, BACKOFF_START
from ..mesh.frames import Speaker
from ..mesh.transport import CLOSE_NORMAL, FrameError, Link, LinkClosed
from ..team.approvals import receive_approval, wire_of
from . import attachments
from .addresses import Entry, Target, peer_of
from .archivers import archived
from .delivery import after_deposit
from .incoming import IncomingMail
from .render import Message

if TYPE_CHECKING:
    from ..mesh.team_view import Member
    from .host import MailHost

log = logging.getLogger("hive.sidecar.mail.remote")

WINDOW = 128  # messages in flight per link, unacknowledged (aioquic's drain() never pushes back)
PROBE_TIMEOUT = 5.0  # a peer that does not answer a ping in this long is taken for gone
# "anchored": the team's anchor holds it until its recipient's machine is back (mesh.relay); the
# recipient's own answer updates it later.
ACK_STATES = ("delivered", "queued", "held", "refused", "retry", "anchored")
# What a machine that speaks remote mail announces in hello and presence (a peer without "files"
# gets attachments inlined; the others name behaviour older hives lacked).
FEATURES = ("receipts", "hold", "loop-guard", "files")

REMOTE: PerSidecar[RemoteMail] = PerSidecar(lambda sidecar: RemoteMail(sidecar))
"""Each sidecar's remote mail (:func:`attach` makes it its mesh's speaker)."""


@dataclass
class _AckWait:
    event: anyio.Event = field(default_factory=anyio.Event)
    state: str = ""
    note: str = ""
    code: str = ""  # a refusal's error code (loop_guard, …)


@dataclass
class _Flow:
    """Per-link bookkeeping: the in-flight window and what is in it."""

    window: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(WINDOW))
    inflight: set[str] = field(default_factory=set)
    receipts: set[tuple[str, str]] = field(default_factory=set)


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): remote mail speaks ``msg``, ``ack`` and ``receipt``."""
    remote = REMOTE.of(sidecar)

    async def on_msg(link: Link, member: Member, frame: dict[str, Any]) -> None:
        await remote.incoming.receive_msg(link, member, frame.get("msg"))

    async def on_ack(link: Link, member: Member, frame: dict[str, Any]) -> None:
        await remote.receive_ack(link, frame)

    async def on_receipt(link: Link, member: Member, frame: dict[str, Any]) -> None:
        await remote.receive_receipts(link, frame)

    sidecar.mesh.add_speaker(remote, FEATURES, {"msg": on_msg, "ack": on_ack, "receipt": on_receipt})


class RemoteMail(Speaker):
    """Remote mail for one sidecar: sends through its mesh's links, answers the frames it routes here."""

    def __init__(self, sidecar: MailHost) -> None:
        self.sc = sidecar
        self.mesh = sidecar.mesh
        self.flows: dict[int, _Flow] = {}  # by id() of an established link
        self._acks: dict[str, _AckWait] = {}
        self._retrying: set[str] = set()
        self._probing: set[int] = set()
        # Inbound messages that may still owe their sender a receipt: while none do, a poke (one
        # per local request) costs no query.
        self.open_inbound = 0
        self.staged = False  # statements staged (acks' outbox updates) await the mesh flusher's commit
        self.incoming = IncomingMail(self)

    def link_adopted(self, link: Link) -> None:
        self.flows[id(link)] = _Flow()

    async def link_up(self, link: Link) -> None:
        self.mesh.spawn(self.replay, link.peer)
        self.mesh.spawn(self.flush_receipts, link.peer)
        member = self.mesh.team.member(link.peer)
        if member is not None and member.role == "anchor" and not link.relayed:
            self.mesh.spawn(self.hand_to_anchor)

    async def hand_to_anchor(self) -> None:
        """An anchor linked: what waits in the outbox for machines that have no link goes to it."""
        rows = await self.sc.store.fetchall("SELECT DISTINCT peer FROM outbox WHERE pending = 1")
        for (peer,) in rows:
            if peer not in self.mesh.links:
                await self.replay(peer)

    def link_down(self, link: Link) -> None:
        # Unacknowledged messages stay pending in the outbox and go again on the next link.
        self.flows.pop(id(link), None)

    async def unreachable(self, peer: str) -> None:
        await self.expire_outbox(peer)

    async def refused(self, link: Link, kind: str, frame_id: str) -> None:
        if kind == "msg":
            await self.refuse_unreadable(link, frame_id)

    async def flush(self, linked: bool) -> None:
        """Commit what acks staged; send owed receipts."""
        if self.staged:
            self.staged = False
            await self.sc.store.write([])
        if linked:
            await self.flush_receipts(None)

    async def load(self) -> None:
        await self.count_open_inbound()

    async def count_open_inbound(self) -> None:
        """Count the inbound messages that may still owe their sender a receipt."""
        row = await self.sc.store.fetchone(
            "SELECT COUNT(*) FROM inbound WHERE peer != '' AND ((state = 'accepted' AND reported != 'read') "
            "OR (due != '' AND due != reported AND reported != 'read'))"
        )
        self.open_inbound = int(row[0]) if row else 0

    def receipts_owed(self, count: int) -> None:
        """``count`` messages from teammates were read other than through this machine's mailbox
        (another machine of the person read their copies): send their receipts at the next flush."""
        self.open_inbound += count
        self.mesh.poke()

    async def refuse_unreadable(self, link: Link, message_id: str) -> None:
        """Answer a msg frame the transport refused for its text, so its sender stops replaying it
        and tells its author why."""
        await self.ack(
            link,
            message_id,
            "refused",
            "refused: the message holds text that is not proper Unicode (a lone UTF-16 "
            "surrogate), so it was not stored; send it again as proper UTF-8 text",
        )

    # ---- sending -------------------------------------------------------------------------

    def msg_payload(self, message: Message) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": message.id,
            "from": message.sender,
            "to": message.recipient,
            "kind": message.sender_kind,
            "agent": message.sender_agent,
            "repo": message.sender_repo,
            "reply_to": message.reply_to,
            "body": message.body,
            "fyi": not message.wake,
            "sent_at": message.sent_at,
        }
        approval = wire_of(message.approval)
        if approval is not None:
            payload["approval"] = approval  # signed by this machine (approvals.py)
        if message.carried:
            payload["files"] = attachments.to_wire(message.carried)
        return payload

    def approval(self, raw: dict[str, Any], peer: str, recipient: str, body: str) -> tuple[str | None, str]:
        """An approval that came with a message: kept if it verifies, else stripped and noted in the body."""
        roster = getattr(getattr(self.sc, "team", None), "roster", None)
        approval, body, why = receive_approval(
            raw.get("approval"), roster=roster, delivered_by=peer, arrived_at=recipient, body=body
        )
        if why is not None:
            log.info("stripped an approval from %s for %s: %s", peer[:12], recipient, why)
        return approval, body

    async def send(
        self,
        pairs: Sequence[tuple[Target, Message]],
        sender_key: str | None,
        notify: bool = False,
        copies: Mapping[str, Sequence[str]] | None = None,
        runs: Mapping[str, int] | None = None,
        held: str | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Queue messages for teammates' sessions and mailboxes; returns each one's result keyed by message id.

        ``notify``: the recipient's machine also shows each as a notification to its person (ask.py).
        ``copies``: for a message sent to one person's mailbox on several machines, the ids of
        its other copies (hive.sidecar.mail.mailboxes marks them read together). ``runs``: the loop
        guard's count of each agent message to a session, by id, which its frame carries
        (hive.sidecar.mail.guards: the recipient's machine decides). ``held``: outbound screening
        holds them here, and says why (hive.sidecar.mail.screen): each is stored in the outbox as
        ``held_here`` and goes nowhere until the person approves it (:func:`release`).

        Each message is in the durable outbox before this returns. A linked recipient usually
        answers within milliseconds; after ``ack_wait`` seconds the answer is ``queued``.
        """
        results: dict[str, dict[str, Any]] = {}
        statements: list[tuple[str, Sequence[Any]]] = []
        queued: list[tuple[str, str, dict[str, Any]]] = []
        now = time.time()
        for target, message in pairs:
            peer = peer_of(self.sc, target.entry)
            if peer is None:
                results[message.id] = {
                    "to": target.address,
                    "id": message.id,
                    "state": "refused",
                    "note": "refused: that machine is no longer in the team",
                }
                continue
            if message.carried and peer in self.mesh.peer_features and not self.mesh.peer_has(peer, "files"):
                # An older hive would drop the files without a word: they go in the text, or not at all.
                inlined = attachments.inline(message, self.sc.settings.max_body)
                if inlined is None:
                    results[message.id] = {
                        "to": target.address,
                        "id": message.id,
                        "state": "refused",
                        "note": "refused: that machine's hive takes no attached files, and "
                        "these do not fit in the message's text",
                    }
                    continue
                message = inlined
            payload = self.msg_payload(message)
            if runs and message.id in runs:
                payload["run"] = runs[message.id]
            if notify:
                payload["notify"] = True
            if copies and copies.get(message.id):
                payload["copies"] = list(copies[message.id])
            pending, state = (0, "held_here") if held is not None else (1, "queued")
            statements.append(
                (
                    "INSERT OR IGNORE INTO outbox (id, peer, recipient, sender, sender_key, frame, created_at, "
                    "updated_at, pending, state, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        message.id,
                        peer,
                        message.recipient,
                        message.sender,
                        sender_key,
                        json.dumps(payload),
                        now,
                        now,
                        pending,
                        state,
                        held or "",
                    ),
                )
            )
            if held is not None:
                results[message.id] = {"to": target.address, "id": message.id, "state": "held", "note": held}
                continue
            queued.append((message.id, peer, payload))
        # The outbox rows commit while the messages travel: the caller hears back only once both
        # are done, and the round trip no longer waits for this machine's fsync first.
        await self.sc.store.stage(statements)
        waiters = {message_id: self._acks.setdefault(message_id, _AckWait()) for message_id, _, _ in queued}
        try:
            async with anyio.create_task_group() as committing:
                if statements:
                    committing.start_soon(self.sc.store.write, [])
                with anyio.move_on_after(self.mesh.config.ack_wait):
                    async with anyio.create_task_group() as tg:
                        for message_id, peer, payload in queued:
                            tg.start_soon(self._send_and_wait, peer, payload, waiters[message_id])
        finally:
            for message_id in waiters:
                self._acks.pop(message_id, None)
        for message_id, peer, payload in queued:
            waiter = waiters[message_id]
            if waiter.event.is_set() and waiter.state != "retry":
                state, note = waiter.state, waiter.note
            elif waiter.event.is_set():
                state, note = "queued", f"{waiter.note}; it stays in the outbox and goes again shortly"
            else:
                self._probe(peer)
                member = self.mesh.team.member(peer)
                who = f"{member.person}'s machine {member.machine}" if member else "that machine"
                state = "queued"
                note = (
                    f"queued in the outbox: {who} is not reachable right now; it goes out when it is"
                    if peer not in self.mesh.links
                    else f"queued in the outbox: {who} has not answered yet"
                )
            results[message_id] = {"to": payload["to"], "id": message_id, "state": state, "note": note}
            if waiter.event.is_set() and waiter.code:
                results[message_id]["code"] = waiter.code
            member = self.mesh.team.member(peer)
            if member is not None:
                results[message_id]["machine"] = member.machine
        return results

    async def _send_and_wait(self, peer: str, payload: dict[str, Any], waiter: _AckWait) -> None:
        link = self.mesh.route(peer, custody=True)
        if link is None or not await self._send_msg(link, payload):
            return
        async with anyio.create_task_group() as tg:  # the ack, or the link's end, whichever is first

            async def on_close() -> None:
                await link.closed.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(on_close)
            await waiter.event.wait()
            tg.cancel_scope.cancel()

    def _probe(self, peer: str) -> None:
        """A linked peer did not acknowledge in time: ping it now rather than at the next keepalive,
        so a dead link is dropped (and its outbox waits for the next one) within seconds."""
        link = self.mesh.links.get(peer)
        if link is None or id(link) in self._probing:
            return

        async def probe() -> None:
            try:
                with anyio.move_on_after(PROBE_TIMEOUT) as scope:
                    await link.protocol.ping()
                if scope.cancelled_caught:
                    link.close(CLOSE_NORMAL, "no answer to a probe")
            except ConnectionError:
                link.close(CLOSE_NORMAL, "the connection is gone")
            finally:
                self._probing.discard(id(link))

        if self.mesh.spawn(probe):
            self._probing.add(id(link))

    async def _send_msg(self, link: Link, payload: dict[str, Any]) -> bool:
        flow = self.flows.get(id(link))
        if flow is None:
            return False
        if payload["id"] in flow.inflight:
            return True  # already on this link (a replay raced a send): its ack will come
        await flow.window.acquire()
        flow.inflight.add(payload["id"])
        try:
            await link.send({"t": "msg", "msg": payload})
        except (LinkClosed, FrameError) as exc:
            flow.inflight.discard(payload["id"])
            flow.window.release()
            log.info("message %s not sent to %s: %s", payload["id"], link.peer[:12], exc)
            return False
        return True

    async def replay(self, peer: str) -> None:
        """Send everything still pending for ``peer``, oldest first."""
        await self.expire_outbox(peer)
        rows = await self.sc.store.fetchall(
            "SELECT id, frame FROM outbox WHERE pending = 1 AND peer = ? ORDER BY id", (peer,)
        )
        for row in rows:
            link = self.mesh.route(peer, custody=True)
            if link is None:
                return
            with contextlib.suppress(ValueError):
                await self._send_msg(link, json.loads(row[1]))

    async def _retry_later(self, peer: str, delay: float) -> None:
        try:
            await anyio.sleep(delay)
            await self.replay(peer)
        finally:
            self._retrying.discard(peer)

    async def expire_outbox(self, peer: str) -> None:
        """Give up on messages a week old, or for a machine that left the team."""
        now = time.time()
        member = self.mesh.team.member(peer)
        if member is None or not member.active:
            cutoff, note = now + 1, "failed: that machine is no longer in the team"
        else:
            days = self.mesh.config.outbox_give_up / DAY
            cutoff = now - self.mesh.config.outbox_give_up
            note = f"failed: gave up after {days:g} days; the machine was never reachable"
        await self.sc.store.write(
            [
                (
                    "UPDATE outbox SET pending = 0, state = 'failed', note = ?, updated_at = ? "
                    "WHERE pending = 1 AND peer = ? AND created_at < ?",
                    (note, now, peer, cutoff),
                )
            ]
        )

    async def receive_ack(self, link: Link, frame: dict[str, Any]) -> None:
        if isinstance(frame.get("receipts"), list):
            statements = []
            for item in frame["receipts"]:
                if isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item):
                    statements.append(
                        ("UPDATE inbound SET reported = ? WHERE id = ? AND peer = ?", (item[1], item[0], link.peer))
                    )
                    flow = self.flows.get(id(link))
                    if flow is not None:
                        flow.receipts.discard((item[0], item[1]))
            if statements:
                # Staged, committed by the flusher (a lost update only sends the receipt again): an
                # fsync here would hold up the next message's commit on this machine.
                await self.sc.store.stage(statements)
                self.staged = True
                self.mesh.poke()
                # Counted again, not decremented: a receipt may be acked twice (a flush between
                # the discard above and this write sends it again), which would leave later
                # receipts unsent behind a count that reached zero too early.
                await self.count_open_inbound()
            return
        message_id, state = frame.get("id"), frame.get("state")
        if not isinstance(message_id, str) or state not in ACK_STATES:
            return
        note = one_line(frame.get("note"), 300)
        flow = self.flows.get(id(link))
        if flow is not None and message_id in flow.inflight:
            flow.inflight.discard(message_id)
            flow.window.release()
        now = time.time()
        # The waiting sender hears the answer first: if the update below is lost to a crash, the
        # row stays pending and is replayed, and the recipient answers the duplicate again.
        waiter = self._acks.get(message_id)
        if waiter is not None:
            waiter.state, waiter.note = state, note
            waiter.code = one_line(frame.get("code"), 40) if state == "refused" else ""
            waiter.event.set()
        # Staged, committed by the flusher: the link's next frame does not wait for an fsync. A
        # crash before that commit leaves the row pending; it is replayed and answered again.
        if state == "retry":
            await self.sc.store.stage(
                [
                    (
                        "UPDATE outbox SET state = 'retry', note = ?, updated_at = ? "
                        "WHERE id = ? AND peer = ? AND pending = 1",
                        (note, now, message_id, link.peer),
                    )
                ]
            )
            try:
                delay = min(max(float(frame.get("retry_after") or BACKOFF_START), 1.0), BACKOFF_MAX)
            except (TypeError, ValueError):
                delay = BACKOFF_START
            if link.peer not in self._retrying and self.mesh.spawn(self._retry_later, link.peer, delay):
                self._retrying.add(link.peer)
        else:
            await self.sc.store.stage(
                [
                    (
                        "UPDATE outbox SET pending = 0, state = ?, note = ?, updated_at = ? "
                        "WHERE id = ? AND peer = ? AND (pending = 1 OR state = 'anchored')",
                        (state, note, now, message_id, link.peer),
                    )
                ]
            )
        self.staged = True
        self.mesh.poke()

    async def receive_receipts(self, link: Link, frame: dict[str, Any]) -> None:
        items = frame.get("receipts")
        if not isinstance(items, list):
            return
        statements: list[tuple[str, Sequence[Any]]] = []
        answered = []
        now = time.time()
        for item in items[:1000]:
            if not isinstance(item, dict):
                continue
            message_id, state = item.get("id"), item.get("state")
            if not isinstance(message_id, str) or state not in ("delivered", "read", "refused"):
                continue
            at = item.get("at") if isinstance(item.get("at"), int | float) else now
            if state == "read":
                statements.append(
                    (
                        "UPDATE outbox SET pending = 0, state = 'read', read_at = ?, updated_at = ? "
                        "WHERE id = ? AND peer = ?",
                        (at, now, message_id, link.peer),
                    )
                )
            else:
                # A later receipt never undoes a read one.
                statements.append(
                    (
                        "UPDATE outbox SET pending = 0, state = ?, updated_at = ? "
                        "WHERE id = ? AND peer = ? AND state != 'read'",
                        (state, now, message_id, link.peer),
                    )
                )
            answered.append([message_id, state])
        if statements:
            await self.sc.store.write(statements)
        if answered:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "ack", "receipts": answered})

    async def sent_by(self, sender_key: str | None, sender: str, ids: Sequence[str] = ()) -> list[dict[str, Any]]:
        """What was sent to teammates' machines, with the latest state each recipient reported."""
        columns = "id, recipient, created_at, read_at, state, note, pending"
        if ids:
            marks = ", ".join("?" for _ in ids)
            rows = await self.sc.store.fetchall(f"SELECT {columns} FROM outbox WHERE id IN ({marks})", tuple(ids))
        elif sender_key:
            rows = await self.sc.store.fetchall(
                f"SELECT {columns} FROM outbox WHERE sender_key = ? ORDER BY id DESC LIMIT 50", (sender_key,)
            )
        else:
            rows = await self.sc.store.fetchall(
                f"SELECT {columns} FROM outbox WHERE sender = ? AND sender_key IS NULL ORDER BY id DESC LIMIT 50",
                (sender,),
            )
        # in_outbox: the recipient's machine has not acknowledged it yet (or asked to retry later).
        return [
            {
                "id": r[0],
                "to": r[1],
                "sent_at": r[2],
                "read_at": r[3],
                "state": r[4],
                "note": r[5],
                "remote": True,
                "in_outbox": bool(r[6]),
            }
            for r in rows
        ]

    # ---- receiving mail ------------------------------------------------------------------

    async def ack(self, link: Link, message_id: str, state: str, note: str, **extra: Any) -> None:
        """Answer a ``msg`` frame (best effort: an unanswered message is replayed and answered again)."""
        with contextlib.suppress(LinkClosed, FrameError):
            await link.send({"t": "ack", "id": message_id, "state": state, "note": note, **extra})

    async def deposit(
        self,
        message: Message,
        entry: Entry | None,
        also: Sequence[tuple[str, Sequence[Any]]] = (),
        sender_key: str | None = None,
    ) -> tuple[str, str]:
        """Put an accepted (or approved) message in the mailbox; the state and note its sender hears.

        ``sender_key``: the session that sent it, when it is one of this machine's (a message screening
        held, now approved), so it reads its receipts as for any local message."""
        message = await attachments.keep(self.sc, message)
        waiting = self.sc.parked[message.recipient] > 0
        also = [*also, *await archived(self.sc, [message])]  # the person's archive, in the same commit
        await self.sc.mailbox.deposit([message], sender_key, also)
        state, note = await after_deposit(self.sc, Target(message.recipient, entry), message.wake, waiting)
        return ("delivered" if state == "pushed" else state), note

    async def flush_receipts(self, peer: str | None) -> None:
        """Tell senders what became of their messages: read, approved (delivered) or dropped."""
        if peer is None and self.open_inbound <= 0:
            return
        where = "" if peer is None else "AND i.peer = ?"
        params: tuple[Any, ...] = () if peer is None else (peer,)
        rows = await self.sc.store.fetchall(
            "SELECT i.id, i.peer, m.read_at FROM inbound i JOIN messages m ON m.id = i.id "
            f"WHERE i.state = 'accepted' AND i.reported != 'read' AND m.read_at IS NOT NULL AND i.peer != '' {where}",
            params,
        )
        owed: dict[str, list[dict[str, Any]]] = {}
        for message_id, sender_peer, read_at in rows:
            owed.setdefault(sender_peer, []).append({"id": message_id, "state": "read", "at": read_at})
        rows = await self.sc.store.fetchall(
            f"SELECT i.id, i.peer, i.due FROM inbound i WHERE i.due != '' AND i.due != i.reported "
            f"AND i.reported != 'read' {where}",
            params,
        )
        for message_id, sender_peer, due in rows:
            if not any(r["id"] == message_id for r in owed.get(sender_peer, [])):
                owed.setdefault(sender_peer, []).append({"id": message_id, "state": due, "at": time.time()})
        for sender_peer, receipts in owed.items():
            link = self.mesh.route(sender_peer, custody=True)
            flow = self.flows.get(id(link)) if link is not None else None
            if link is None or flow is None:
                continue
            fresh = [r for r in receipts if (r["id"], r["state"]) not in flow.receipts]
            if not fresh:
                continue
            flow.receipts.update((r["id"], r["state"]) for r in fresh)
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "receipt", "receipts": fresh})

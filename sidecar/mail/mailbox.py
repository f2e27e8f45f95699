"""Mail on this machine: durable deposit, at-least-once showing, confirmation and long polls.

A message stays unread until whoever showed it to an agent confirms it (``delivered``). Once
shown it is *in flight*: hidden from other readers for ``inflight_timeout`` seconds, then
visible again if nobody confirmed. In-flight state lives in memory on purpose: after a crash
the reader that was shown a message is gone too, so everything unconfirmed is visible at once.

Mail a hook showed is *held* instead (:class:`Holder`): the hook's text is still on its way to
the model when the hook exits, so nothing is confirmed yet. It stays hidden while the harness
process that got it lives, and is confirmed by proof that the model saw it (the session's next
hook after a model call, or its ``check_inbox``: :meth:`Mailbox.confirm_held`). If that process
dies first, the mail is visible again at the next read, and a long poll on that mailbox wakes
(a pidfd where the system has them). Until the hook says its reply is written, the hold is tied
to the hook's connection: a hook that dies before printing releases the mail when it closes.
Mail the sidecar itself pushed into a harness (``Holder.pushed``: Codex, :mod:`hive.sidecar.mail.codex_push`)
is held the same way, but only that harness's record of a model call that carried it confirms it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sqlite3
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from hive.integrations.hook_client import process_alive

from ..base.config import Settings
from ..base.store import Store
from .render import Message

log = logging.getLogger(__name__)

_COLUMNS = (
    "id, sender, sender_kind, sender_agent, sender_repo, recipient, reply_to, body, wake, sent_at, read_at, approval, "
    "files"
)


def _message(row: Any) -> Message:
    data = dict(row)
    data["wake"] = bool(data["wake"])
    return Message(**data)


@dataclass(frozen=True)
class Holder:
    """The harness process a hook showed mail to: the mail is its own, unconfirmed, while it lives."""

    session: str  # the session key whose next hook after a model call confirms the mail
    pid: int  # the harness process; 0 when unknown (then the in-flight timeout applies)
    started: str = ""  # its start time, telling a reused pid apart ("" where the system hides it)
    # Pushed by the sidecar (codex_push), not shown by a hook: only the harness's own record that a
    # model call had it confirms it, never the session's next hook or check_inbox (their model call
    # may have begun before the push).
    pushed: bool = False

    def alive(self) -> bool:
        return self.pid <= 0 or process_alive(self.pid, self.started)


@dataclass
class Showing:
    """One message in flight: shown to a reader, not yet confirmed."""

    recipient: str
    wake: bool
    until: float  # visible again at, unless confirmed first (never, while a live holder has it)
    holder: Holder | None = None
    connection: int | None = None  # the hook's connection, until it says its reply is written


class Mailbox:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.inflight: dict[str, Showing] = {}  # message id -> how it is in flight
        self._arrivals: dict[str, anyio.Event] = {}
        # Recipients whose unread query found nothing since: every hook of every session asks, and
        # most have no mail. Kept exact by a trigger on the connection (:meth:`_follow_mail`), so
        # any writer of the table, not only this class, makes the next query run again.
        self._no_mail: set[str] = set()
        self._mail_changes = 0
        self._following = False

    async def deposit(
        self, messages: Sequence[Message], sender_key: str | None, also: Sequence[tuple[str, Sequence[Any]]] = ()
    ) -> None:
        """Store messages (and ``also``, in the same commit); returns once they are on disk, then
        wakes waiting readers."""
        if not messages and not also:
            return  # nothing to commit: do not queue behind another writer's fsync
        await self.store.write(
            [
                *(
                    (
                        f"INSERT OR IGNORE INTO messages ({_COLUMNS}, sender_key) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            m.id,
                            m.sender,
                            m.sender_kind,
                            m.sender_agent,
                            m.sender_repo,
                            m.recipient,
                            m.reply_to,
                            m.body,
                            int(m.wake),
                            m.sent_at,
                            None,
                            m.approval,
                            m.files,
                            sender_key,
                        ),
                    )
                    for m in messages
                ),
                *also,
            ]
        )
        for m in messages:
            if m.wake:
                self.notify(m.recipient)

    def notify(self, recipient: str) -> None:
        event = self._arrivals.pop(recipient, None)
        if event is not None:
            event.set()

    def _mail_changed(self, recipient: str) -> None:
        """A row of ``messages`` was written (on the database thread, inside the statement)."""
        self._mail_changes += 1
        self._no_mail.discard(recipient)

    def _follow_mail(self, conn: sqlite3.Connection) -> None:
        name = f"hive_mail_changed_{id(self)}"  # one per mailbox, should two share a connection
        conn.create_function(name, 1, self._mail_changed)
        for event in ("INSERT", "UPDATE"):  # a DELETE only takes mail away
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS {name}_{event.lower()} AFTER {event} ON "
                f"main.messages BEGIN SELECT {name}(NEW.recipient); END"
            )

    async def unread(self, recipient: str, *, include_inflight: bool = False) -> list[Message]:
        if recipient in self._no_mail:
            return []
        following, changes = self._following, self._mail_changes
        if not following:
            await self.store.run(self._follow_mail)
            self._following = True
        rows = await self.store.fetchall(
            f"SELECT {_COLUMNS} FROM messages WHERE recipient = ? AND read_at IS NULL ORDER BY id", (recipient,)
        )
        if not rows and following and self._mail_changes == changes:  # no write crossed the query
            self._no_mail.add(recipient)
        now = time.time()
        messages = [_message(r) for r in rows]
        if include_inflight:
            return messages
        return [m for m in messages if self._visible(m.id, now)]

    def _visible(self, message_id: str, now: float) -> bool:
        showing = self.inflight.get(message_id)
        if showing is None:
            return True
        holder = showing.holder
        if holder is not None and showing.connection is None and holder.pid > 0:
            # Held: hidden exactly as long as the harness that got it lives (its death is seen here).
            if holder.alive():
                return False
            del self.inflight[message_id]
            return True
        if showing.until <= now:
            del self.inflight[message_id]
            return True
        return False

    def mark_shown(
        self, messages: Sequence[Message], holder: Holder | None = None, connection: int | None = None
    ) -> None:
        """Hide ``messages`` from other readers until confirmed: for ``inflight_timeout`` seconds,
        or, with a ``holder``, while that harness lives (and ``connection``, the hook's, stays open
        until it says its reply is written: :meth:`written`)."""
        until = time.time() + self.settings.inflight_timeout
        for m in messages:
            self.inflight[m.id] = Showing(m.recipient, m.wake, until, holder, connection)

    def written(self, ids: Sequence[str], connection: int) -> int:
        """The hook on ``connection`` wrote its reply: its mail is now only the harness's to lose."""
        count = 0
        for message_id in ids:
            showing = self.inflight.get(message_id) if isinstance(message_id, str) else None
            if showing is not None and showing.connection == connection:
                showing.connection = None
                count += 1
        return count

    def hold(self, ids: Sequence[str], holder: Holder) -> int:
        """A plugin put these (shown to ``holder.session``) into its harness: the harness holds them now."""
        count = 0
        for message_id in ids:
            showing = self.inflight.get(message_id) if isinstance(message_id, str) else None
            if showing is not None:
                showing.holder, showing.connection = holder, None
                count += 1
        return count

    def connection_closed(self, connection: int) -> None:
        """A hook's connection closed before it said its reply was written: it never printed it."""
        ids = [i for i, s in self.inflight.items() if s.connection == connection]
        if ids:  # most often a hook past its deadline (HIVE_HOOK_DEADLINE_MS) on a loaded machine
            log.info("a hook left before printing its reply: %d message(s) visible again", len(ids))
        self.unshow(ids)

    def unshow(self, ids: Sequence[str]) -> None:
        """A reader gave up before showing these: make them visible again now."""
        for message_id in ids:
            showing = self.inflight.pop(message_id, None)
            if showing is not None and showing.wake:
                self.notify(showing.recipient)

    def is_pushed(self, message_id: str) -> bool:
        """Whether this message is held by a living harness the sidecar pushed it into."""
        showing = self.inflight.get(message_id)
        return showing is not None and showing.holder is not None and showing.holder.pushed and showing.holder.alive()

    def _held_by(self, session: str) -> list[tuple[str, Showing]]:
        return [
            (i, s)
            for i, s in self.inflight.items()
            if s.holder is not None and s.holder.session == session and s.connection is None
        ]

    async def confirm_held(self, session: str) -> int:
        """Proof came that ``session``'s model saw what its hooks showed: confirm what its living
        harness holds. Mail whose harness died meanwhile is not confirmed (it is visible again)."""
        by_recipient: dict[str, list[str]] = {}
        for message_id, showing in self._held_by(session):
            if showing.holder is not None and showing.holder.pushed:
                continue  # proven by its harness's record, not by this
            if showing.holder is not None and showing.holder.alive():
                by_recipient.setdefault(showing.recipient, []).append(message_id)
            else:
                self.unshow([message_id])
        confirmed = 0
        for recipient, ids in by_recipient.items():
            confirmed += await self.confirm(recipient, ids)
        return confirmed

    def release_held(self, session: str) -> None:
        """``session`` ended with mail shown and never proven seen: visible again for the next reader."""
        self.unshow([i for i, _ in self._held_by(session)])

    def _held_ids(self, recipient: str) -> set[str]:
        """Mail for ``recipient`` a living harness has in its context, awaiting proof it was seen."""
        return {
            i
            for i, s in self.inflight.items()
            if s.recipient == recipient
            and s.holder is not None
            and s.connection is None
            and s.holder.pid > 0
            and s.holder.alive()
        }

    async def confirm(self, recipient: str, ids: Sequence[str]) -> int:
        """Mark messages read; only those addressed to ``recipient`` and still unread count."""
        ids = [i for i in ids if isinstance(i, str)]
        if not ids:
            return 0
        marks = ", ".join("?" for _ in ids)
        rows = await self.store.fetchall(
            f"SELECT id FROM messages WHERE recipient = ? AND read_at IS NULL AND id IN ({marks})", (recipient, *ids)
        )
        found = [r[0] for r in rows]
        if found:
            now = time.time()
            marks = ", ".join("?" for _ in found)
            await self.store.write([(f"UPDATE messages SET read_at = ? WHERE id IN ({marks})", (now, *found))])
        for message_id in ids:
            self.inflight.pop(message_id, None)
        return len(found)

    def watch(self, recipient: str) -> anyio.Event:
        """An event set when waking mail arrives for ``recipient``; take it before reading unread."""
        return self._arrivals.setdefault(recipient, anyio.Event())

    async def wait(self, recipient: str, arrival: anyio.Event, seconds: float) -> None:
        """Wait for ``arrival`` or ``seconds``, whichever is first.

        The wait also ends when an in-flight message for this recipient becomes visible again:
        its timeout passes, or the harness holding it exits.
        """
        now = time.time()
        showings = [s for s in self.inflight.values() if s.recipient == recipient]
        holders = {s.holder for s in showings if s.holder is not None and s.holder.pid > 0 and s.connection is None}
        expiries = [
            s.until
            for s in showings
            if s.until > now and (s.holder is None or s.holder.pid <= 0 or s.connection is not None)
        ]
        if expiries:
            seconds = min(seconds, min(expiries) - now + 0.01)
        with anyio.move_on_after(max(seconds, 0)):
            if not holders:
                await arrival.wait()
                return
            async with anyio.create_task_group() as tg:

                async def first(waiting: Awaitable[None]) -> None:
                    await waiting
                    tg.cancel_scope.cancel()

                tg.start_soon(first, arrival.wait())
                for holder in holders:
                    tg.start_soon(first, _exited(holder))

    async def counts(self, recipient: str) -> tuple[int, list[str]]:
        """Unread mail still waiting to be shown: what a harness holds is in its context already."""
        held = self._held_ids(recipient)
        if held:
            rows = await self.store.fetchall(
                "SELECT id, sender FROM messages WHERE recipient = ? AND read_at IS NULL", (recipient,)
            )
            senders = [r[1] for r in rows if r[0] not in held]
            return len(senders), sorted(set(senders))
        rows = await self.store.fetchall(
            "SELECT sender, COUNT(*) FROM messages WHERE recipient = ? AND read_at IS NULL GROUP BY sender",
            (recipient,),
        )
        return sum(r[1] for r in rows), sorted(r[0] for r in rows)

    async def sent_by(self, sender_key: str | None, sender: str, ids: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Receipts for what a session (or the person's terminal) sent: queued, or read and when."""
        if ids:
            marks = ", ".join("?" for _ in ids)
            rows = await self.store.fetchall(
                f"SELECT id, recipient, sent_at, read_at FROM messages WHERE id IN ({marks}) ORDER BY id", tuple(ids)
            )
        elif sender_key:
            rows = await self.store.fetchall(
                "SELECT id, recipient, sent_at, read_at FROM messages WHERE sender_key = ? ORDER BY id DESC LIMIT 50",
                (sender_key,),
            )
        else:
            rows = await self.store.fetchall(
                "SELECT id, recipient, sent_at, read_at FROM messages WHERE sender = ? AND sender_key IS NULL "
                "ORDER BY id DESC LIMIT 50",
                (sender,),
            )
        return [
            {
                "id": r[0],
                "to": r[1],
                "sent_at": r[2],
                "read_at": r[3],
                "state": "read" if r[3] is not None else "queued",
            }
            for r in rows
        ]


async def _exited(holder: Holder) -> None:
    """Return when ``holder``'s process exits: a pidfd turns readable then (Linux); elsewhere its
    death is noticed at the next read of the mailbox instead."""
    try:
        fd = os.pidfd_open(holder.pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        await anyio.sleep(math.inf)
        return
    try:
        if not holder.alive():  # the pid was reused before we opened it
            return
        await anyio.wait_readable(fd)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)

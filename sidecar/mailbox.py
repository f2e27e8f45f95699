"""Mail on this machine: durable deposit, at-least-once showing, confirmation and long polls.

A message stays unread until whoever showed it to an agent confirms it (``delivered``). Once
shown it is *in flight*: hidden from other readers for ``inflight_timeout`` seconds, then
visible again if nobody confirmed. In-flight state lives in memory on purpose: after a crash
the reader that was shown a message is gone too, so everything unconfirmed is visible at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio

from .config import Settings
from .render import Message
from .store import Store

_COLUMNS = (
    "id, sender, sender_kind, sender_agent, sender_repo, recipient, reply_to, body, wake, sent_at, read_at, approval"
)


def _message(row: Any) -> Message:
    data = dict(row)
    data["wake"] = bool(data["wake"])
    return Message(**data)


class Mailbox:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.inflight: dict[str, tuple[str, float]] = {}  # id -> (recipient, visible again at)
        self._arrivals: dict[str, anyio.Event] = {}

    async def deposit(self, messages: Sequence[Message], sender_key: str | None) -> None:
        """Store messages; returns once they are on disk, then wakes waiting readers."""
        await self.store.write(
            (
                f"INSERT OR IGNORE INTO messages ({_COLUMNS}, sender_key) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (m.id, m.sender, m.sender_kind, m.sender_agent, m.sender_repo, m.recipient,
                 m.reply_to, m.body, int(m.wake), m.sent_at, None, m.approval, sender_key),
            )
            for m in messages
        )
        for m in messages:
            if m.wake:
                self.notify(m.recipient)

    def notify(self, recipient: str) -> None:
        event = self._arrivals.pop(recipient, None)
        if event is not None:
            event.set()

    async def unread(self, recipient: str, *, include_inflight: bool = False) -> list[Message]:
        rows = await self.store.fetchall(
            f"SELECT {_COLUMNS} FROM messages WHERE recipient = ? AND read_at IS NULL ORDER BY id",
            (recipient,),
        )
        now = time.time()
        messages = [_message(r) for r in rows]
        if include_inflight:
            return messages
        return [m for m in messages if self._visible(m.id, now)]

    def _visible(self, message_id: str, now: float) -> bool:
        held = self.inflight.get(message_id)
        if held is None:
            return True
        if held[1] <= now:
            del self.inflight[message_id]
            return True
        return False

    def mark_shown(self, messages: Sequence[Message]) -> None:
        until = time.time() + self.settings.inflight_timeout
        for m in messages:
            self.inflight[m.id] = (m.recipient, until)

    def unshow(self, ids: Sequence[str]) -> None:
        """A reader gave up before showing these: make them visible again now."""
        for message_id in ids:
            self.inflight.pop(message_id, None)

    async def confirm(self, recipient: str, ids: Sequence[str]) -> int:
        """Mark messages read; only those addressed to ``recipient`` and still unread count."""
        ids = [i for i in ids if isinstance(i, str)]
        if not ids:
            return 0
        marks = ", ".join("?" for _ in ids)
        rows = await self.store.fetchall(
            f"SELECT id FROM messages WHERE recipient = ? AND read_at IS NULL AND id IN ({marks})",
            (recipient, *ids),
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

        The wait also ends when an in-flight message for this recipient becomes visible again.
        """
        now = time.time()
        expiries = [until for (to, until) in self.inflight.values() if to == recipient and until > now]
        if expiries:
            seconds = min(seconds, min(expiries) - now + 0.01)
        with anyio.move_on_after(max(seconds, 0)):
            await arrival.wait()

    async def counts(self, recipient: str) -> tuple[int, list[str]]:
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
                f"SELECT id, recipient, sent_at, read_at FROM messages WHERE id IN ({marks}) ORDER BY id",
                tuple(ids),
            )
        elif sender_key:
            rows = await self.store.fetchall(
                "SELECT id, recipient, sent_at, read_at FROM messages WHERE sender_key = ? "
                "ORDER BY id DESC LIMIT 50", (sender_key,),
            )
        else:
            rows = await self.store.fetchall(
                "SELECT id, recipient, sent_at, read_at FROM messages WHERE sender = ? AND sender_key IS NULL "
                "ORDER BY id DESC LIMIT 50", (sender,),
            )
        return [
            {"id": r[0], "to": r[1], "sent_at": r[2], "read_at": r[3],
             "state": "read" if r[3] is not None else "queued"}
            for r in rows
        ]

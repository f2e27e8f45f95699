"""The ``events`` table's records: :class:`Event`, one normalized record as stored, and appending them.

Every string is redacted before it is stored and capped after (:mod:`hive.sidecar.presence.redaction`).
The same tool call reported twice is stored once: a unique index over (session, action, call id,
path) for records that carry a call id, with ``INSERT OR IGNORE``. :func:`store_events` groups
the inserts and commits of a burst of hooks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..mesh.links import MeshHost
from .redaction import DETAIL_CAP, clean, detail_json

if TYPE_CHECKING:
    from ..base.store import Store
    from ..sessions.registry import Session

log = logging.getLogger("hive.sidecar.presence.events")

COLUMNS = (
    "at",
    "session",
    "harness",
    "action",
    "tool",
    "call_id",
    "path",
    "command",
    "exit_code",
    "cwd",
    "method",
    "fidelity",
    "detail",
)


MAX_ROWS = 32766 // len(COLUMNS)  # SQLite's bound on parameters in one statement


@dataclass(frozen=True)
class Event:
    """One normalized record, as stored."""

    at: float
    session: str
    harness: str
    action: str
    tool: str = ""
    call_id: str = ""
    path: str = ""
    command: str = ""
    exit_code: int | None = None
    cwd: str = ""
    method: str = "hook"
    fidelity: str = "observed"
    detail: str = ""

    def row(self) -> tuple[Any, ...]:
        return (
            self.at,
            self.session,
            self.harness,
            self.action,
            clean(self.tool, 200),
            clean(self.call_id, 200),
            clean(self.path, 1024),
            clean(self.command),
            self.exit_code,
            clean(self.cwd, 1024),
            self.method,
            self.fidelity,
            _stored_detail(self.detail),
        )


def _stored_detail(detail: str) -> str:
    """A detail as stored: JSON is scrubbed value by value (redacting its text would break its escapes)."""
    if not detail:
        return detail
    try:
        value = json.loads(detail)
    except ValueError:
        return clean(detail, DETAIL_CAP)
    return detail_json(value)


@dataclass
class _Batch:
    events: list[Event]
    done: anyio.Event
    error: BaseException | None = None


class _Writer:
    """Group insert: whoever writes while no write runs becomes the flusher, and every event that
    arrives meanwhile goes into the next single multi-row insert and commit, so a burst of hooks
    costs a few statements and fsyncs, not one each. No task of its own, so nothing polls."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.next = _Batch([], anyio.Event())
        self.flushing = False

    async def add(self, events: Sequence[Event]) -> None:
        mine = self.next
        mine.events.extend(events)
        if not self.flushing:
            self.flushing = True
            try:
                while self.next.events:
                    batch, self.next = self.next, _Batch([], anyio.Event())
                    try:
                        await self._insert(batch.events)
                    except Exception as exc:
                        batch.error = exc
                    finally:
                        batch.done.set()
            finally:
                self.flushing = False
        await mine.done.wait()
        if mine.error is not None:
            raise mine.error

    async def _insert(self, events: list[Event]) -> None:
        statements = []
        for start in range(0, len(events), MAX_ROWS):
            chunk = events[start : start + MAX_ROWS]
            marks = ", ".join(["(" + ", ".join("?" * len(COLUMNS)) + ")"] * len(chunk))
            params = [value for e in chunk for value in e.row()]
            # A call already stored under the same (session, action, call id, path) is ignored: dedupe.
            statements.append((f"INSERT OR IGNORE INTO events ({', '.join(COLUMNS)}) VALUES {marks}", params))
        await self.store.write(statements)


_writers: dict[int, _Writer] = {}


async def store_events(store: Store, events: Sequence[Event]) -> None:
    """Append ``events``; committed (group insert and group commit) when this returns."""
    if not events:
        return
    writer = _writers.get(id(store))
    if writer is None or writer.store is not store:
        writer = _writers[id(store)] = _Writer(store)
    await writer.add(events)


EventListener = Callable[[Any, "Session", Sequence[Event]], Awaitable[None]]
"""A feature's ``on_events`` (daemon/features.py): called with the sidecar, a session and the events
just recorded for it, after they are stored."""


class PresenceHost(MeshHost, Protocol):
    """What presence uses of the daemon: the mesh's host (the team, the links), and the features
    that act on what it observes (the gate takes test runs, commits and overlaps from them), so
    presence never imports them."""

    @property
    def on_events(self) -> Sequence[EventListener]:
        """Each feature's ``on_events``, in the order features.py lists them."""
        ...


async def tell(sidecar: PresenceHost, session: Session, events: Sequence[Event]) -> None:
    """Hand recorded events to the features that act on them; one's failure costs the others
    nothing, and never the hook its reply."""
    for listener in sidecar.on_events:
        try:
            await listener(sidecar, session, events)
        except Exception:
            log.exception("a feature could not take the events of %s", session.key)

"""``doing``: a session's title plus its in-progress task, read from what its harness writes anyway.

Agents never report what they do (seed Part 1 §14). Two sources, both passive:

- todo- and plan-shaped tool calls seen by the hooks (Claude Code ``TodoWrite``, Codex
  ``update_plan``, Gemini ``write_todos``, Cursor ``todo_write``): the in-progress item is the task.
- the session's transcript (its path comes with the hooks): title entries (Claude Code's
  ``ai-title``, ``summary``) give the title, and todo or plan arrays inside it the task.
  Transcripts are tailed incrementally, driven by watchfiles rather than a timer: the first read
  takes at most the last 2 MiB, later reads only the bytes appended since; a file that is one
  JSON document (not JSON lines) is reread whole when it changes.

The line is ``title · task``, clipped to 120 characters, and stored with the session (``doing``),
so ``who`` and presence carry it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import watchfiles

from .defang import one_line

if TYPE_CHECKING:
    from .server import Sidecar
    from .sessions import Session

log = logging.getLogger("hive.sidecar.doing")

FIRST_READ = 2 * 1024 * 1024
MAX_DOING = 120
IN_PROGRESS = {"in_progress", "in-progress", "inprogress", "active", "doing"}
TITLE_TYPES = {"ai-title", "summary", "title"}
_TEXT_KEYS = ("activeForm", "content", "step", "description", "title", "text", "task")
_TITLE_KEYS = ("aiTitle", "title", "summary", "name")


def line(title: str, task: str) -> str:
    """``title · task`` on one line, at most 120 characters."""
    text = " · ".join(one_line(p, MAX_DOING) for p in (title, task) if p)
    return text if len(text) <= MAX_DOING else text[:MAX_DOING - 1] + "…"


def in_progress(value: Any) -> str | None:
    """The in-progress item of the first ``todos`` or ``plan`` array anywhere in ``value``.

    Returns "" when such an array exists with nothing in progress (the task is done), None when
    there is no such array at all (nothing said).
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in ("todos", "plan"):
                todos = item.get(key)
                if isinstance(todos, list) and todos and all(isinstance(t, dict) for t in todos):
                    for todo in todos:
                        if str(todo.get("status", "")).lower() in IN_PROGRESS:
                            return next((str(todo[k]) for k in _TEXT_KEYS if isinstance(todo.get(k), str)), "")
                    return ""
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return None


def title_of(entry: dict[str, Any]) -> str | None:
    if str(entry.get("type", "")).lower() in TITLE_TYPES:
        return next((str(entry[k]) for k in _TITLE_KEYS if isinstance(entry.get(k), str) and entry[k]), None)
    return None


@dataclass
class Tail:
    """One transcript being followed."""

    path: Path
    offset: int = -1  # -1: not read yet
    rest: bytes = b""
    title: str = ""
    task: str = ""
    keys: set[str] = field(default_factory=set)

    def read(self) -> bool:
        """Read what is new; True when title or task changed."""
        before = (self.title, self.task)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                whole = self.path.suffix == ".json"
                if whole or size < self.offset:  # one document, or the file was replaced: all again
                    self.offset, self.rest = -1, b""
                if self.offset < 0:
                    start = 0 if whole else max(0, size - FIRST_READ)
                    f.seek(start)
                    data = f.read()
                    if start > 0:  # started mid-line: skip to the first whole line
                        data = data.partition(b"\n")[2]
                else:
                    f.seek(self.offset)
                    data = f.read()
                self.offset = size
        except OSError:
            return False
        if whole:
            with contextlib.suppress(ValueError):
                self._take(json.loads(data))
        else:
            data = self.rest + data
            lines = data.split(b"\n")
            self.rest = lines.pop()  # an unfinished last line waits for the rest of it
            for raw in lines:
                with contextlib.suppress(ValueError):
                    self._take(json.loads(raw))
        return (self.title, self.task) != before

    def _take(self, entry: Any) -> None:
        if not isinstance(entry, dict):
            return
        title = title_of(entry)
        if title is not None:
            self.title = title
        task = in_progress(entry)
        if task is not None:
            self.task = task


class Doing:
    """The watcher of one sidecar: which transcript belongs to which session, and their tails."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.tails: dict[Path, Tail] = {}
        self.changed = anyio.Event()
        self.running = False

    def follow(self, session: Session) -> None:
        """Start following the session's transcript (a no-op if known or missing)."""
        if not session.transcript:
            return
        path = Path(session.transcript)
        tail = self.tails.get(path)
        if tail is None:
            if not path.is_file():
                return
            tail = self.tails[path] = Tail(path)
            self.changed.set()  # the watcher restarts with the new file in its set
        tail.keys.add(session.key)
        if not self.running:
            self.running = True
            self.sidecar.tasks.start_soon(self._run)

    async def _update(self, tail: Tail) -> None:
        for key in list(tail.keys):
            session = self.sidecar.sessions.by_key.get(key)
            if session is None or session.ended_at is not None:
                tail.keys.discard(key)
                continue
            await set_doing(self.sidecar, session, line(tail.title, tail.task))

    async def _run(self) -> None:
        try:
            while True:
                for tail in list(self.tails.values()):
                    if await anyio.to_thread.run_sync(tail.read):  # up to 2 MiB: off the event loop
                        await self._update(tail)
                    if not tail.keys:
                        self.tails.pop(tail.path, None)
                if not self.tails:
                    return
                self.changed = anyio.Event()
                paths = [str(p) for p in self.tails]
                # watchfiles waits on inotify (or the OS's equivalent) in a thread and wakes every 5 s
                # anyway; that empty wake-up rereads every tail, which catches bytes appended between
                # the reads above and the moment the watcher started.
                async for changes in watchfiles.awatch(*paths, stop_event=self.changed, debounce=100, step=50,
                                                       yield_on_timeout=True):
                    touched = {Path(p) for _, p in changes} if changes else set(self.tails)
                    for path in touched:
                        tail = self.tails.get(path)
                        if tail is not None and await anyio.to_thread.run_sync(tail.read):
                            await self._update(tail)
                # The set changed (a new transcript): start over with it.
        except Exception:
            log.exception("following transcripts failed")
        finally:
            self.running = False


_doing: dict[int, Doing] = {}


def doing_of(sidecar: Sidecar) -> Doing:
    found = _doing.get(id(sidecar))
    if found is None or found.sidecar is not sidecar:
        found = _doing[id(sidecar)] = Doing(sidecar)
    return found


async def set_doing(sidecar: Sidecar, session: Session, text: str) -> None:
    """Store a new ``doing`` for the session when it changed; the mesh sends it on."""
    if text and text != session.doing:
        await sidecar.sessions.set_status(session, text, None)
        sidecar.mesh.poke()


async def from_tool_call(sidecar: Sidecar, session: Session, tool_inputs: Iterable[Any]) -> None:
    """A todo or plan tool call names the task in progress: keep the title, replace the task."""
    for value in tool_inputs:
        task = in_progress(value)
        if task is None:
            continue
        title = session.doing.partition(" · ")[0] if " · " in session.doing else ""
        tail = next((t for t in doing_of(sidecar).tails.values() if session.key in t.keys), None)
        if tail is not None:
            tail.task = task
            title = tail.title
        await set_doing(sidecar, session, line(title, task))

"""``doing``: a session's title plus its in-progress task, read from what its harness writes anyway.

Agents never report what they do (seed Part 1 §14). The sources, all passive, with their places
taken from each harness descriptor's presence plane (``transcripts``, ``titles``, ``todos``):

- todo- and plan-shaped tool calls seen by the hooks (Claude Code ``TodoWrite``, Codex
  ``update_plan``, Gemini ``write_todos``, Cursor ``todo_write``): the in-progress item is the task.
- the session's transcript (its path comes with the hooks, or from discovery): title entries
  (Claude Code's ``ai-title``, ``summary``) give the title, and todo or plan arrays inside it the task.
- title indexes: Codex names threads in ``~/.codex/session_index.jsonl`` (``{id, thread_name}`` lines).
- task folders: Claude Code keeps one JSON file per task in ``~/.claude/tasks/<session>/``; the one
  ``in_progress`` is the task.
- the name a running-session file gives (Claude Code's ``~/.claude/sessions/<pid>.json``), through
  :mod:`hive.sidecar.presence.discover`.

Files are tailed incrementally, driven by watchfiles rather than a timer: the first read takes at
most the last 2 MiB, later reads only the bytes appended since; a file that is one JSON document
(not JSON lines) is reread whole when it changes. A folder that does not exist yet is watched
through its closest existing parent until it appears.

The line is ``title · task``, clipped to 120 characters, and stored with the session (``doing``),
so ``who`` and presence carry it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import watchfiles

from ..base.defang import one_line
from ..base.host import PerSidecar
from ..base.wire import json_objects, parse

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .events import PresenceHost

log = logging.getLogger("hive.sidecar.presence.doing")

FIRST_READ = 2 * 1024 * 1024
RECHECK = 2.0  # seconds before a transcript that was not there is looked for again
MAX_DOING = 120
IN_PROGRESS = {"in_progress", "in-progress", "inprogress", "active", "doing"}
TITLE_TYPES = {"ai-title", "summary", "title"}
_TEXT_KEYS = ("activeForm", "content", "step", "subject", "description", "title", "text", "task")
_TITLE_KEYS = ("aiTitle", "title", "summary", "name")


def line(title: str, task: str) -> str:
    """``title · task`` on one line, at most 120 characters."""
    text = " · ".join(one_line(p, MAX_DOING) for p in (title, task) if p)
    return text if len(text) <= MAX_DOING else text[: MAX_DOING - 1] + "…"


_PLAN_TEXT = re.compile(r'^\s*\{.*"(?:plan|todos)"\s*:\s*\[', re.S)


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
            # A tool call's arguments may be a JSON string (Codex's update_plan in its rollout).
            stack.extend(parse(v) for v in item.values() if isinstance(v, str) and _PLAN_TEXT.search(v))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return None


def title_of(entry: dict[str, Any]) -> str | None:
    if str(entry.get("type", "")).lower() in TITLE_TYPES:
        return next((str(entry[k]) for k in _TITLE_KEYS if isinstance(entry.get(k), str) and entry[k]), None)
    return None


News = dict[str, tuple[str | None, str | None]]  # session key -> (new title, new task); None: no news


def harness_home() -> Path:
    """The home folder the harnesses write under (``HOME``, as the harness processes see it)."""
    return Path.home()


def nearest(path: Path) -> Path:
    """``path`` if it exists, else its closest existing parent: what can be watched until it appears."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _read_new(path: Path, offset: int, first: int) -> tuple[bytes, int, bool]:
    """The bytes after ``offset``, or, when ``offset`` is -1 or the file shrank (replaced), the whole
    file but at most its last ``first`` bytes from the first whole line. Returns them, the offset to
    read from next time, and whether this read started over."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        again = offset < 0 or size < offset
        start = max(0, size - first) if again else offset
        f.seek(start)
        data = f.read(max(0, size - start))
    end = start + len(data)
    if again and start > 0:
        data = data.partition(b"\n")[2]
    return data, end, again


@dataclass
class Tail:
    """One transcript being followed."""

    path: Path
    offset: int = -1  # -1: not read yet
    rest: bytes = b""
    title: str = ""
    task: str = ""
    keys: set[str] = field(default_factory=set)

    def watched(self) -> Path:
        return self.path

    def read(self) -> News:
        """Read what is new; news for every session of this transcript when title or task changed."""
        before = (self.title, self.task)
        whole = self.path.suffix == ".json"
        try:
            if whole:  # one document: all of it, every time it changes
                data, again = self.path.read_bytes(), True
            else:
                data, self.offset, again = _read_new(self.path, self.offset, FIRST_READ)
        except OSError:
            return {}
        if whole:
            self._take(parse(data))
        else:
            if again:
                self.rest = b""
            lines = (self.rest + data).split(b"\n")
            self.rest = lines.pop()  # an unfinished last line waits for the rest of it
            for entry in json_objects(lines):
                self._take(entry)
        title = self.title if self.title != before[0] else None
        task = self.task if self.task != before[1] else None
        if title is None and task is None:
            return {}
        return {key: (title, task) for key in self.keys}

    def _take(self, entry: Any) -> None:
        if not isinstance(entry, dict):
            return
        title = title_of(entry)
        if title is not None:
            self.title = title
        task = in_progress(entry)
        if task is not None:
            self.task = task


MAX_NAMES = 10_000
_ID_KEYS = ("id", "thread_id", "session_id", "sessionId")
_NAME_KEYS = ("thread_name", "name", "title")


@dataclass
class Titles:
    """A JSON-lines index that names sessions, one ``{id, thread_name}`` entry per line (Codex's
    ``~/.codex/session_index.jsonl``). Its folder is watched, as the file may be replaced whole."""

    path: Path
    offset: int = -1
    rest: bytes = b""
    names: dict[str, str] = field(default_factory=dict)
    told: dict[str, str] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)

    def watched(self) -> Path:
        return nearest(self.path.parent)

    def read(self) -> News:
        try:
            data, self.offset, again = _read_new(self.path, self.offset, FIRST_READ)
        except OSError:
            data, again = b"", False
        if again:
            self.rest = b""
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        for entry in json_objects(lines):
            ident = next((entry[k] for k in _ID_KEYS if isinstance(entry.get(k), str) and entry[k]), None)
            name = next((entry[k] for k in _NAME_KEYS if isinstance(entry.get(k), str)), None)
            if ident is None or name is None:
                continue
            self.names.pop(ident, None)  # the newest naming goes last, the oldest is dropped first
            self.names[ident] = name
            if len(self.names) > MAX_NAMES:
                self.names.pop(next(iter(self.names)))
        news: News = {}
        for key in self.keys:
            name = self.names.get(key)
            if name and self.told.get(key) != name:
                self.told[key] = name
                news[key] = (name, None)
        return news


MAX_TASK_FILES = 200
MAX_TASK_BYTES = 64 * 1024


@dataclass
class Tasks:
    """One session's task folder (Claude Code's ``~/.claude/tasks/<session>/``): one JSON file per
    task with a ``status``; the task in progress (the newest, if several) is the session's task."""

    folder: Path
    pattern: str = "*.json"
    keys: set[str] = field(default_factory=set)
    task: str | None = None
    signature: tuple[tuple[str, int, int], ...] = ()

    @property
    def path(self) -> Path:
        return self.folder

    def watched(self) -> Path:
        return nearest(self.folder)

    def read(self) -> News:
        try:
            found = []
            for file in self.folder.glob(self.pattern):
                with contextlib.suppress(OSError):
                    stat = file.stat()
                    found.append((stat.st_mtime_ns, stat.st_size, file))
        except OSError:
            found = []
        found.sort(reverse=True)
        found = found[:MAX_TASK_FILES]
        signature = tuple((f.name, mtime, size) for mtime, size, f in found)
        if signature == self.signature:
            return {}  # nothing changed since the last read: no file is parsed again
        self.signature = signature
        task: str | None = "" if found else None
        for _, size, file in found:
            if size > MAX_TASK_BYTES:
                continue
            try:
                entry = parse(file.read_bytes())
            except OSError:
                continue
            if isinstance(entry, dict) and str(entry.get("status", "")).lower() in IN_PROGRESS:
                task = next((str(entry[k]) for k in _TEXT_KEYS if isinstance(entry.get(k), str) and entry[k]), "")
                break
        if task is None or task == self.task:
            return {}
        self.task = task
        return {key: (None, task) for key in self.keys}


Source = Tail | Titles | Tasks


def _presence_of(agent: str) -> Any:
    """The harness descriptor's presence plane for a session's agent (None for an unknown agent)."""
    if agent not in _PRESENCE:
        try:
            from hive.integrations import registry

            found = registry.harnesses().get(agent)
            _PRESENCE[agent] = found.presence() if found is not None else None
        except Exception:  # a broken harness plugin costs only its own sources
            log.exception("reading the presence plane of %s failed", agent)
            _PRESENCE[agent] = None
    return _PRESENCE[agent]


_PRESENCE: dict[str, Any] = {}


def task_folder(home: Path, pattern: str, key: str) -> tuple[Path, str] | None:
    """The folder and file pattern for one session from a ``todos`` glob (its first ``*`` is the
    session id): ``.claude/tasks/*/*.json`` -> ``~/.claude/tasks/<key>``, ``*.json``."""
    parts = pattern.split("/")
    if len(parts) < 2 or "*" not in parts[:-1] or "/" in key or key in (".", ".."):
        return None
    index = next(i for i, part in enumerate(parts[:-1]) if "*" in part)
    parts[index] = parts[index].replace("*", key, 1)
    return home.joinpath(*parts[:-1]), parts[-1]


@dataclass(frozen=True)
class Either:
    """Set when either event is: what watchfiles' thread polls as its stop event, so the watcher
    returns at once when the set of sources changed or when the sidecar stops (its thread cannot
    be cancelled, and would otherwise hold the sidecar's shutdown until its next 5 s wake-up)."""

    changed: anyio.Event
    stopping: anyio.Event

    def is_set(self) -> bool:
        return self.changed.is_set() or self.stopping.is_set()

    def set(self) -> None:
        self.changed.set()


class Doing:
    """The watcher of one sidecar: which transcripts, title indexes and task folders belong to which
    session, what each says, and the line they make."""

    def __init__(self, sidecar: PresenceHost) -> None:
        self.sidecar = sidecar
        self.sources: dict[Path, Source] = {}
        self.facts: dict[str, list[str]] = {}  # session key -> [title, task]
        self.followed: dict[str, str] = {}  # session key -> the transcript already followed
        # session key -> (a transcript not there yet, when it was looked for): hooks come by the
        # thousand, so a missing one is looked for again only after RECHECK seconds.
        self.missing: dict[str, tuple[str, float]] = {}
        self.changed = anyio.Event()
        self.running = False

    def _add(self, key: str, path: Path, make: Callable[[], Source]) -> None:
        source = self.sources.get(path)
        if source is None:
            source = self.sources[path] = make()
        if key not in source.keys:
            source.keys.add(key)
            self.changed.set()  # the watcher restarts, reading every source, with the new set

    def follow(self, session: Session) -> None:
        """Follow what the session's harness writes (a no-op when nothing new is known)."""
        key = session.key
        if self.followed.get(key) == session.transcript:
            return
        looked = self.missing.get(key)
        if looked is not None and looked[0] == session.transcript and time.monotonic() - looked[1] < RECHECK:
            return
        if key not in self.followed:
            presence = _presence_of(session.agent)
            home = harness_home()
            for pattern in getattr(presence, "titles", ()):
                self._add(key, home / pattern, functools.partial(Titles, home / pattern))
            for pattern in getattr(presence, "todos", ()):
                found = task_folder(home, pattern, key)
                if found is not None:
                    self._add(key, found[0], functools.partial(Tasks, *found))
            self.followed[key] = ""
        if session.transcript:
            path = Path(session.transcript)
            if path in self.sources or path.is_file():
                self._add(key, path, lambda: Tail(path))
                self.followed[key] = session.transcript
                self.missing.pop(key, None)
            else:
                self.missing[key] = (session.transcript, time.monotonic())
        if self.changed.is_set() and not self.running and self.sources:
            self.running = True
            self.sidecar.tasks.start_soon(self._run)

    def forget(self, key: str) -> None:
        for path, source in list(self.sources.items()):
            source.keys.discard(key)
            if not source.keys:
                del self.sources[path]
        self.facts.pop(key, None)
        self.followed.pop(key, None)
        self.missing.pop(key, None)

    def _facts(self, session: Session) -> list[str]:
        facts = self.facts.get(session.key)
        if facts is None:
            title = session.doing.partition(" · ")[0] if " · " in session.doing else ""
            facts = self.facts[session.key] = [title, ""]
        return facts

    async def note(self, session: Session, title: str | None = None, task: str | None = None) -> None:
        """News about the session from elsewhere (a hook's todo call, a running-session file)."""
        facts = self._facts(session)
        if title is not None:
            facts[0] = title
        if task is not None:
            facts[1] = task
        await set_doing(self.sidecar, session, line(*facts))

    async def _apply(self, news: News) -> None:
        for key, (title, task) in news.items():
            session = self.sidecar.sessions.by_key.get(key)
            if session is None or session.ended_at is not None:
                self.forget(key)
                continue
            await self.note(session, title, task)

    async def _read(self, sources: Iterable[Source]) -> None:
        for source in sources:
            # A first read takes up to 2 MiB: off the event loop.
            await self._apply(await anyio.to_thread.run_sync(source.read))

    async def _run(self) -> None:
        try:
            stopping = self.sidecar.stopping
            while self.sources and not stopping.is_set():
                self.changed = anyio.Event()
                await self._read(list(self.sources.values()))
                watching = {path: source.watched() for path, source in self.sources.items()}
                if not watching or self.changed.is_set():
                    continue
                # watchfiles waits on inotify (or the OS's equivalent) in a thread and wakes every 5 s
                # anyway; that empty wake-up rereads every source, which catches bytes appended between
                # the reads above and the moment the watcher started.
                async for changes in watchfiles.awatch(
                    *sorted({str(p) for p in watching.values()}),
                    stop_event=Either(self.changed, stopping),
                    debounce=100,
                    step=50,
                    yield_on_timeout=True,
                    recursive=False,
                ):
                    touched = {Path(p) for _, p in changes}
                    near = touched | {p.parent for p in touched}
                    due = [
                        s
                        for path, s in list(self.sources.items())
                        if not changes or path in touched or watching.get(path) in near
                    ]
                    await self._read(due)
                    if any(s.watched() != watching.get(path) for path, s in self.sources.items()):
                        self.changed.set()  # a folder that was missing appeared: watch it itself
                        break
                # The set changed (a new source, or a folder appeared): start over with it.
            if stopping.is_set():
                log.info("stopped following what harnesses write: the sidecar is stopping")
        except Exception:
            log.exception("following what harnesses write failed")
        finally:
            self.running = False


DOINGS: PerSidecar[Doing] = PerSidecar(Doing)


def doing_of(sidecar: PresenceHost) -> Doing:
    return DOINGS.of(sidecar)


async def set_doing(sidecar: PresenceHost, session: Session, text: str) -> None:
    """Store a new ``doing`` for the session when it changed; the mesh sends it on."""
    if text and text != session.doing:
        await sidecar.sessions.set_status(session, text, None)
        sidecar.mesh.poke()


async def from_tool_call(sidecar: PresenceHost, session: Session, tool_inputs: Iterable[Any]) -> None:
    """A todo or plan tool call names the task in progress: keep the title, replace the task."""
    for value in tool_inputs:
        task = in_progress(value)
        if task is not None:
            await doing_of(sidecar).note(session, task=task)

"""Passive discovery: sessions hive did not start or hook, found from what harnesses write on disk.

A session of a wired harness that started before ``hive setup``, or never loaded hive's hooks or
MCP server, still leaves files behind (seed Part 1 §14, Part 3 §2):

- running-session files (descriptor ``running``): Claude Code writes ``~/.claude/sessions/<pid>.json``
  (``{pid, sessionId, cwd, status, waitingFor, name, …}``) while a session runs and removes it when it
  exits. The pid says whether it still runs, ``status`` whether it is busy, idle or waiting for its
  person (``waitingFor``: "permission prompt", …), ``name`` its title. The waiting state is also
  taken for sessions hive manages, as no hook reports it (recorded as ``approval.requested``,
  collected by ``poll``).
- transcripts (descriptor ``transcripts``), for harnesses without running-session files: a
  transcript written to within the last 30 minutes is a running session; its first lines name the
  session id and working folder (Codex's ``session_meta``, pi's ``session`` header, …).

Each one becomes a session marked *unmanaged* (``Sessions.unmanaged``): it is listed by ``who`` here, its
``doing`` is followed like any other, and it reaches teammates' presence only
when ``share_unmanaged = true`` is in config.toml. The first hook or MCP registration for it makes it
managed. It ends when its running-session file goes, its pid dies, or its transcript stays quiet
for 30 minutes.

A session in a folder the person turned off (``hive folder PATH off``) is never registered, and one
already listed leaves when its folder is turned off.

All of it is driven by watchfiles on the folders the descriptors name. watchfiles' own 5 s wake-up
checks that pids still live and that missing folders have not appeared; the first one after the
watcher starts also scans again, for files written while it started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio
import watchfiles

from ..base.wire import json_objects, parse
from ..sessions import folders
from ..sessions.registry import pid_alive
from . import doing, observe

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .events import PresenceHost

log = logging.getLogger("hive.sidecar.presence.discover")

RECENT = 30 * 60.0  # a transcript written to within this long is a running session
HEAD_BYTES = 64 * 1024  # how much of a transcript's start is read for its session id and folder
HEAD_LINES = 20
MAX_FILE = 64 * 1024  # a running-session file is small; a bigger one is not what it claims
KV = "sessions.unmanaged"
_ID_KEYS = ("sessionId", "session_id", "id", "thread_id", "conversation_id")
_CWD_KEYS = ("cwd", "workdir", "working_directory", "projectRoot")


@dataclass(frozen=True)
class Found:
    """One session as a harness's files describe it."""

    key: str
    harness: str
    cwd: str
    source: str  # the file it was found in
    seen: float  # when that file last changed
    pid: int | None = None
    transcript: str = ""
    title: str = ""
    state: str = ""
    waiting_for: str = ""  # what a waiting session waits for ("permission prompt", …)


@dataclass(frozen=True)
class Place:
    """A descriptor glob, resolved under the home folder: what to watch and how to read it."""

    harness: str
    kind: str  # "running" or "transcript"
    pattern: str  # relative to the home folder
    root: Path  # the part of the glob before its first wildcard: the folder watched

    def matches(self, path: Path, home: Path) -> bool:
        try:
            relative = PurePosixPath(path.relative_to(home))
        except ValueError:
            return False
        return relative.match(self.pattern) and len(relative.parts) == len(PurePosixPath(self.pattern).parts)


def places(home: Path) -> list[Place]:
    """Where each registered harness's descriptor says running sessions show on disk."""
    from hive.integrations import registry

    out = []
    for name, harness in sorted(registry.harnesses().items()):
        try:
            presence = harness.presence()
        except Exception:  # one broken plugin costs only its own harness
            log.exception("reading the presence plane of %s failed", name)
            continue
        running = tuple(getattr(presence, "running", ()))
        kinds = [("running", p) for p in running] or [("transcript", p) for p in presence.transcripts]
        for kind, pattern in kinds:
            parts = PurePosixPath(pattern).parts
            fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts) - 1)
            out.append(Place(name, kind, pattern, home.joinpath(*parts[:fixed])))
    return out


# ---- reading what harnesses write ------------------------------------------------------------


def _first_str(entry: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((entry[k] for k in keys if isinstance(entry.get(k), str) and entry[k]), "")


def _state(status: Any) -> str:
    text = str(status or "").lower()
    if any(word in text for word in ("wait", "permission", "approv")):
        return "waiting_approval"
    if text in ("busy", "running", "working", "thinking", "active", "streaming"):
        return "busy"
    return "idle" if text in ("idle", "ready", "done") else ""


def read_running(path: Path, harness: str) -> Found | None:
    """A running-session file (``{pid, sessionId, cwd, status, name}``), if its process still runs."""
    try:
        stat = path.stat()
        if stat.st_size > MAX_FILE:
            return None
        entry = parse(path.read_bytes())
    except OSError:
        return None
    if not isinstance(entry, dict):
        return None
    key = _first_str(entry, _ID_KEYS)
    pid = entry.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 else None
    if pid is None and path.stem.isdigit():
        pid = int(path.stem)
    if not key or len(key) > 200 or not pid_alive(pid):
        return None
    return Found(
        key=key,
        harness=harness,
        cwd=_first_str(entry, _CWD_KEYS),
        source=str(path),
        seen=stat.st_mtime,
        pid=pid,
        title=_first_str(entry, ("name", "title")),
        state=_state(entry.get("status")),
        waiting_for=_first_str(entry, ("waitingFor",))[:200],
    )


def read_transcript(path: Path, harness: str, now: float) -> Found | None:
    """A transcript written to recently, with the session id and folder its first lines give."""
    try:
        stat = path.stat()
        if now - stat.st_mtime > RECENT:
            return None
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return None
    key = cwd = ""
    for entry in json_objects(head.split(b"\n")[:HEAD_LINES]):
        for holder in (entry, entry.get("payload"), entry.get("session")):
            if isinstance(holder, dict):
                source = holder.get("source")
                if isinstance(source, dict) and "subagent" in source:
                    return None  # a sub-agent's thread (Codex spawn_agent) is part of its parent session
                key = key or _first_str(holder, _ID_KEYS)
                cwd = cwd or _first_str(holder, _CWD_KEYS)
        if key and cwd:
            break
    if not key or len(key) > 200:
        return None
    return Found(key=key, harness=harness, cwd=cwd, source=str(path), seen=stat.st_mtime, transcript=str(path))


def transcript_of(home: Path, harness: str, key: str) -> str:
    """The transcript of a session found by its running-session file: the descriptor's transcript
    glob with its file name's wildcard replaced by the session id (``…/*/<id>.jsonl``)."""
    from hive.integrations import registry

    found = registry.harnesses().get(harness)
    if found is None or "/" in key or key in (".", ".."):
        return ""
    for pattern in found.presence().transcripts:
        folder, _, name = pattern.rpartition("/")
        if name.count("*") != 1:
            continue
        with contextlib.suppress(OSError):
            for path in home.glob(f"{folder}/{name.replace('*', key)}"):
                return str(path)
    return ""


def scan(home: Path, where: list[Place], now: float) -> list[Found]:
    """Every running session the places show (a thread's work: globs and small reads)."""
    out = []
    for place in where:
        if not place.root.is_dir():
            continue
        for path in home.glob(place.pattern):
            found = (
                read_running(path, place.harness)
                if place.kind == "running"
                else read_transcript(path, place.harness, now)
            )
            if found is not None:
                out.append(found)
    return out


# ---- sessions --------------------------------------------------------------------------------


class Discovery:
    """One sidecar's discovered sessions: which file each came from, and keeping them current."""

    def __init__(self, sidecar: PresenceHost) -> None:
        self.sidecar = sidecar
        self.home = doing.harness_home()
        self.places = places(self.home)
        self.by_source: dict[str, str] = {}  # file -> the session key it describes
        self.pids: dict[str, int] = {}  # unmanaged session key -> its pid, when the file names one
        self.saved: set[str] = set()

    async def load(self) -> None:
        raw = await self.sidecar.store.get_kv(KV)
        with contextlib.suppress(ValueError, TypeError):
            keys = {k for k in json.loads(raw or "[]") if isinstance(k, str)}
            self.sidecar.sessions.unmanaged.update(k for k in keys if k in self.sidecar.sessions.by_key)
            self.saved = set(keys)

    async def _save(self) -> None:
        """Kept across restarts, so a session found last time is not taken for a managed one."""
        if self.sidecar.sessions.unmanaged != self.saved:
            self.saved = set(self.sidecar.sessions.unmanaged)
            await self.sidecar.store.set_kv(KV, json.dumps(sorted(self.saved)))

    async def take(self, found: Found) -> None:
        """A session seen on disk: register it as unmanaged, or refresh it if it already is."""
        from ..base.git import git_facts

        sessions = self.sidecar.sessions
        session = sessions.by_key.get(found.key)
        if found.cwd and await folders.is_off(self.sidecar, found.cwd):
            return  # the person turned hive off there: nothing of it is registered or shown
        before = self.by_source.pop(found.source, None)
        if before is not None and before != found.key:
            await self.gone(before)  # the same process moved on to a new session (Claude Code's /clear)
        if session is not None and found.key not in self.sidecar.sessions.unmanaged:
            if session.ended_at is None:
                await self._waiting(session, found)
            # hive manages it (hooks or MCP): its hooks and its process say when it ends, and a resumed
            # session says so with its start hook. A file written after its end never brings it back.
            return
        if not found.cwd:
            return  # nowhere to place it (a Gemini transcript head without a folder): never shown as live
        self.by_source[found.source] = found.key
        if found.state:  # before the session shows at all, so it never shows without its state
            seen = observe.OBSERVED.of(self.sidecar).setdefault(found.key, observe.Observed(files={}))
            seen.state, seen.since = found.state, found.seen
        transcript = (
            found.transcript
            or (session.transcript if session else "")
            or await anyio.to_thread.run_sync(transcript_of, self.home, found.harness, found.key)
        )
        if (
            session is None
            or session.ended_at is not None
            or session.cwd != (found.cwd or session.cwd)
            or session.transcript != transcript
            or (found.pid and session.pid != found.pid)
        ):
            info: dict[str, Any] = {
                "key": found.key,
                "agent": found.harness,
                "cwd": found.cwd,
                "transcript": transcript,
            }
            if found.pid:
                info["pid"] = found.pid
            info.update(git_facts(found.cwd))
            session, _ = await sessions.register(info, None)
        session.last_seen = max(found.seen, min(session.last_seen, time.time()))
        if found.pid:
            self.pids[found.key] = found.pid
        if found.key not in self.sidecar.sessions.unmanaged:
            self.sidecar.sessions.unmanaged.add(found.key)
            await self._save()
        follower = doing.doing_of(self.sidecar)
        follower.follow(session)
        if found.title and not follower.facts.get(found.key, [""])[0]:
            await follower.note(session, title=found.title)
        self.sidecar.mesh.poke()

    async def _waiting(self, session: Session, found: Found) -> None:
        """A managed session's running-session file says it waits for its person (a permission
        prompt): no hook says that, so the file does, until it or the next hook says otherwise."""
        seen = observe.OBSERVED.of(self.sidecar).setdefault(session.key, observe.Observed(files={}))
        if found.state == "waiting_approval" and seen.state != found.state:
            seen.state, seen.since = found.state, found.seen
            await observe.store_events(
                self.sidecar.store,
                [
                    observe.Event(
                        at=time.time(),
                        session=session.key,
                        harness=found.harness,
                        action="approval.requested",
                        cwd=session.cwd,
                        method="poll",
                        fidelity="observed",
                        detail=json.dumps({"waiting_for": found.waiting_for}),
                    )
                ],
            )
            self.sidecar.mesh.poke()
        elif seen.state == "waiting_approval" and found.state in ("busy", "idle"):
            seen.state, seen.since = found.state, found.seen
            self.sidecar.mesh.poke()

    async def gone(self, key: str) -> None:
        """An unmanaged session stopped running: it ends (a managed one is its hooks' business)."""
        session = self.sidecar.sessions.by_key.get(key)
        self.pids.pop(key, None)
        if key not in self.sidecar.sessions.unmanaged:
            return
        if session is not None and session.ended_at is None:
            await self.sidecar.sessions.end(session)
            observe.OBSERVED.of(self.sidecar).pop(key, None)
            doing.doing_of(self.sidecar).forget(key)
            self.sidecar.mesh.poke()

    async def check(self, now: float) -> None:
        """Unmanaged sessions whose process died or whose transcript went quiet have ended; a
        session hive now manages leaves the list."""
        for key in list(self.sidecar.sessions.unmanaged):
            session = self.sidecar.sessions.by_key.get(key)
            if session is None or session.holders:
                self.sidecar.sessions.unmanaged.discard(key)  # forgotten, or an MCP server holds it now
            elif session.ended_at is None:
                pid = self.pids.get(key) or session.pid
                if (
                    (pid and not pid_alive(pid))
                    or (not pid and now - session.last_seen > RECENT)
                    or await folders.is_off(self.sidecar, session.cwd)
                ):
                    await self.gone(key)
        await self._save()  # also what hooks changed: they make sessions managed in memory

    async def changed(self, path: Path, deleted: bool, now: float) -> None:
        place = next((p for p in self.places if p.matches(path, self.home)), None)
        if place is None:
            return
        key = self.by_source.get(str(path))
        session = self.sidecar.sessions.by_key.get(key) if key is not None else None
        # A known transcript changing is only a sign of life: nothing else is read.
        quick = (
            place.kind == "transcript"
            and session is not None
            and key in self.sidecar.sessions.unmanaged
            and session.ended_at is None
        )

        def look() -> tuple[float | None, Found | None]:
            try:
                mtime = path.stat().st_mtime
            except OSError:
                return None, None
            if quick:
                return mtime, None
            if place.kind == "running":
                return mtime, read_running(path, place.harness)
            return mtime, read_transcript(path, place.harness, now)

        mtime, found = (None, None) if deleted else await anyio.to_thread.run_sync(look)
        if mtime is None:
            self.by_source.pop(str(path), None)
        if quick and mtime is not None and session is not None:
            session.last_seen = mtime
        elif found is not None:
            await self.take(found)
        elif key is not None and place.kind == "running":
            await self.gone(key)  # the file went, or its process did


async def run(sidecar: PresenceHost) -> None:
    """Find unmanaged sessions now, then follow the harnesses' folders for as long as the sidecar runs."""
    try:
        discovery = Discovery(sidecar)
        await discovery.load()
        while True:
            now = time.time()
            for found in await anyio.to_thread.run_sync(scan, discovery.home, discovery.places, now):
                await discovery.take(found)
            await discovery.check(now)
            roots = {p.root for p in discovery.places}
            watched = sorted(str(r) for r in roots if r.is_dir())
            missing = [r for r in roots if not r.is_dir()]
            if not watched:
                # Nothing to watch yet: the home folder (not recursively) tells when a harness's
                # folder appears, and the wake-up every 5 s notices deeper ones.
                watched = [str(discovery.home)] if discovery.home.is_dir() else []
                if not watched:
                    return
            appeared = False
            rescan = True
            # The thread watchfiles waits in cannot be cancelled; the stopping event ends its wait
            # at once instead of at its next 5 s wake-up, so `hive stop` does not wait for it.
            async for changes in watchfiles.awatch(
                *watched,
                debounce=200,
                step=100,
                yield_on_timeout=True,
                recursive=watched != [str(discovery.home)],
                stop_event=sidecar.stopping,
            ):
                now = time.time()
                if rescan:
                    # Files written between the scan above and the moment the watcher started are
                    # in no change set: the first wake-up (at most 5 s later) scans once more.
                    rescan = False
                    for found in await anyio.to_thread.run_sync(scan, discovery.home, discovery.places, now):
                        await discovery.take(found)
                for change, raw in sorted(changes, key=lambda c: c[1]):
                    await discovery.changed(Path(raw), change == watchfiles.Change.deleted, now)
                await discovery.check(now)
                if any(r.is_dir() for r in missing):
                    appeared = True
                    break
            if sidecar.stopping.is_set():
                log.info("stopped watching harnesses' folders: the sidecar is stopping")
                return
            if not appeared:
                return
    except Exception:
        log.exception("discovering sessions on disk failed")


def shared(sidecar: PresenceHost, session: Session) -> bool:
    """Whether the session goes into presence for teammates: unmanaged ones only if the person said so."""
    return not sidecar.sessions.is_unmanaged(session) or bool(getattr(sidecar.settings, "share_unmanaged", False))

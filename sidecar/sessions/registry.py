"""Agent sessions on this machine: registration, names, liveness and forgetting.

A session is one live agent conversation. Its address is ``person/name``; mail is stored by
address, so a name outlives the process that held it. A new session started in the same place
by the same agent inherits a stale session's name, and with it that name's unread mail, which
is what lets "tell the api agent X" survive a restart. A session elsewhere with the same
default name gets ``-2`` instead (the reference system keyed inheritance on the name alone).

Addresses name a person's session whichever of their machines it runs on, so a name that
another machine of the same person holds (``elsewhere``, which the mesh fills from presence)
is taken here too.

A session ends when its harness process ends, whether or not a session-end hook said so (Codex
``exec`` has none): the pid recorded at registration, with that process's start time so a reused
pid is not taken for it, is watched (:func:`watch`, through :mod:`hive.sidecar.base.procs`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from hive.integrations import registry

from ..base import procs
from ..base.config import Settings, slug
from ..base.errors import BadRequest, Conflict, NotFound
from ..base.host import Host
from ..base.peer import Stat, proc_stat, program_names
from ..base.store import Store

TIERS = ("push", "turn", "pull")
RESERVED_NAMES = frozenset({"terminal"})
HARNESSES_KEPT = 256  # the latest harness processes whose group, session and terminal are remembered


@dataclass(frozen=True)
class Entry:
    """A session somewhere in the team, as the directory lists it (``who``, addressing mail)."""

    person: str
    machine: str
    name: str
    agent: str
    repo: str
    branch: str
    folder: str
    doing: str
    tier: str
    live: bool
    key: str | None = None  # set for sessions on this machine

    @property
    def address(self) -> str:
        return f"{self.person}/{self.name}"

    @property
    def full_address(self) -> str:
        return f"{self.address}@{self.machine}"


@dataclass
class Session:
    key: str
    name: str
    agent: str
    cwd: str = ""
    repo: str = ""
    branch: str = ""
    doing: str = ""
    tier: str = "pull"
    pid: int | None = None
    transcript: str = ""
    created_at: float = 0.0
    last_seen: float = 0.0
    ended_at: float | None = None
    pid_started: float | None = None  # when process ``pid`` started: the pair names one process
    # Connections that hold the session open (MCP servers, plugins); not stored.
    holders: set[int] = field(default_factory=set, repr=False, compare=False)
    push_failed: bool = field(default=False, repr=False, compare=False)
    # The working folder the harness itself reported (hook payload, or its plugin in-process), which
    # attachments are confined to; never what a client declares. Not stored: the next hook tells it again.
    harness_cwd: str = field(default="", repr=False, compare=False)

    def live(self, now: float, ttl: float) -> bool:
        if self.ended_at is not None:
            return False
        if self.holders:
            return True
        return now - self.last_seen < ttl

    def place(self) -> str:
        return self.repo or self.cwd

    def row(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("holders")
        data.pop("push_failed")
        data.pop("harness_cwd")
        return data


def default_base_name(cwd: str, repo_root: str, agent: str) -> str:
    folder = Path(repo_root or cwd or "session").name or "session"
    return slug(f"{folder}-{agent}") or slug(agent) or "session"


def pid_alive(pid: int | None) -> bool:
    return procs.alive(pid, None)


class SessionsHost(Host, Protocol):
    """What the session ops use of the daemon: :class:`Host` and the session registry."""

    sessions: Sessions


class Sessions:
    """All sessions this sidecar knows, cached in memory and stored in ``sessions``."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.by_key: dict[str, Session] = {}
        # Names taken elsewhere: sessions on this person's other machines, their mailboxes here.
        self.elsewhere: list[Callable[[], set[str]]] = []
        # Keys of sessions found on disk (presence.discover) that no hook or client speaks for yet.
        self.unmanaged: set[str] = set()
        # Set when a session's recorded process may have changed (see watch_processes).
        self.changed = anyio.Event()
        # The group, session and terminal of harness processes sessions registered, kept after they
        # exit: a tool call that outlives its harness is still an agent's (peer.agent_reason).
        self.harnesses_seen: dict[int, Stat] = {}

    async def load(self) -> None:
        for row in await self.store.fetchall("SELECT * FROM sessions"):
            data = dict(row)
            self.by_key[data["key"]] = Session(**data)

    def taken_elsewhere(self) -> set[str]:
        """Names a session here may not take (see :attr:`elsewhere`)."""
        return set().union(*(names() for names in self.elsewhere))

    def address(self, session: Session) -> str:
        return f"{self.settings.person}/{session.name}"

    def is_live(self, session: Session, now: float | None = None) -> bool:
        return session.live(time.time() if now is None else now, self.settings.session_ttl)

    def get(self, key: str) -> Session:
        session = self.by_key.get(key)
        if session is None:
            raise NotFound(f"no session with key {key!r} is registered here; register it first")
        return session

    def find(self, ref: Any) -> Session:
        """A session named by its key, its name or its address. Raises ``bad_request`` for a
        reference that is not a string and ``not_found`` for one no session here answers to."""
        if not isinstance(ref, str) or not ref:
            raise BadRequest("name a session by its key, name or person/name")
        if ref in self.by_key:
            return self.by_key[ref]
        name = ref.split("/", 1)[1] if ref.startswith(self.settings.person + "/") else ref
        session = self.by_name(name)
        if session is None:
            raise NotFound(f"no session {ref!r} on this machine; see `hive who`")
        return session

    def is_unmanaged(self, session: Session) -> bool:
        """Found on disk and still without hive's hooks or tools: nothing can show it mail."""
        return session.key in self.unmanaged and not session.holders

    def by_name(self, name: str) -> Session | None:
        for session in self.by_key.values():
            if session.name == name:
                return session
        return None

    def _pick_name(self, key: str, base: str, place: str, agent: str, now: float) -> str:
        holders = {s.name: s for s in self.by_key.values() if s.key != key}
        taken = self.taken_elsewhere()
        current = holders.get(base)
        if current is None and base not in taken:
            return base
        if (
            current is not None
            and base not in taken
            and not self.is_live(current, now)
            and current.place() == place
            and current.agent == agent
        ):
            return base  # the same place and agent: take over the stale name and its mail
        n = 2
        while True:
            candidate = f"{base[:60]}-{n}"
            other = holders.get(candidate)
            if candidate in taken:
                n += 1
                continue
            if other is None:
                return candidate
            if not self.is_live(other, now) and other.place() == place and other.agent == agent:
                return candidate
            n += 1

    async def register(self, info: dict[str, Any], holder: int | None) -> tuple[Session, bool]:
        """Create or refresh a session from a client's description. Returns it and whether it is new."""
        now = time.time()
        agent = slug(str(info.get("agent") or "")) or "agent"
        key = str(info.get("key") or "").strip()
        if not key or len(key) > 200:
            raise BadRequest("register needs session.key: the harness's session id, or any stable id")
        cwd = str(info.get("cwd") or "")
        repo_root = str(info.get("repo_root") or "")
        repo = str(info.get("repo") or "")
        existing = self.by_key.get(key)
        # A client that does not state a tier (an MCP server) keeps what hooks or plugins set.
        tier = str(info.get("tier") or (existing.tier if existing else "pull"))
        if tier not in TIERS:
            raise BadRequest(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
        if tier == "push" and existing is not None and existing.push_failed:
            tier = "turn"
        inherited: Session | None = None
        if existing is None:
            wanted = slug(str(info.get("name") or "")) or default_base_name(cwd, repo_root, agent)
            if wanted == self.settings.person or wanted in RESERVED_NAMES:
                wanted = f"{wanted}-{agent}"
            place = repo or cwd
            name = self._pick_name(key, wanted, place, agent, now)
            previous = self.by_name(name)
            if previous is not None:
                inherited = previous  # a stale session in the same place; its row gives way
            session = Session(key=key, name=name, agent=agent, created_at=now, last_seen=now)
        else:
            session = existing
        session.cwd = cwd or session.cwd
        session.repo = repo or session.repo
        session.branch = str(info.get("branch") or session.branch)
        session.tier = tier
        pid = int(info["pid"]) if str(info.get("pid") or "").isdigit() else session.pid
        process_changed = pid != session.pid or session.pid_started is None or session.ended_at is not None
        if pid != session.pid or session.pid_started is None:
            session.pid_started = procs.started(pid)
        session.pid = pid
        session.transcript = str(info.get("transcript") or session.transcript)
        session.last_seen = now
        session.ended_at = None
        if holder is not None:
            session.holders.add(holder)
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if inherited is not None:
            statements.append(("DELETE FROM sessions WHERE key = ?", (inherited.key,)))
            self.by_key.pop(inherited.key, None)
        statements.append(self._upsert(session))
        await self.store.write(statements)
        self.by_key[key] = session
        if process_changed:
            self.changed.set()  # watch_processes looks at by_key: only now is the session in it
            self._remember_harness(pid)
        return session, existing is None

    def _remember_harness(self, pid: int | None) -> None:
        found = proc_stat(pid) if pid and program_names(pid) & registry.binaries() else None
        if found is None:
            return
        self.harnesses_seen.pop(found.pid, None)  # re-inserted: the newest is kept longest
        self.harnesses_seen[found.pid] = found
        while len(self.harnesses_seen) > HARNESSES_KEPT:
            del self.harnesses_seen[next(iter(self.harnesses_seen))]

    def _upsert(self, session: Session) -> tuple[str, tuple[Any, ...]]:
        row = session.row()
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        return (f"INSERT OR REPLACE INTO sessions ({columns}) VALUES ({marks})", tuple(row.values()))

    def seen(self, session: Session) -> None:
        """A sign of life; kept in memory and written with the session's next durable change."""
        session.last_seen = time.time()

    async def downgrade(self, session: Session) -> None:
        """Its push channel failed: turn tier from now on, and re-registering cannot raise it."""
        session.push_failed = True
        if session.tier == "push":
            session.tier = "turn"
            await self.store.write([self._upsert(session)])

    async def touch(self, session: Session) -> None:
        session.last_seen = time.time()
        await self.store.write([self._upsert(session)])

    async def set_status(self, session: Session, doing: str | None, name: str | None) -> str | None:
        """Update ``doing`` and/or rename; returns the old address when the name changed."""
        old_address = None
        if doing is not None:
            session.doing = doing[:500]
        statements: list[tuple[str, tuple[Any, ...]]] = []
        if name is not None:
            wanted = slug(name)
            if not wanted:
                raise BadRequest("a session name needs at least one letter or digit (a-z, 0-9, -)")
            if wanted == self.settings.person:
                raise Conflict(f"{wanted!r} is your person name; a session cannot take it")
            if wanted in RESERVED_NAMES:
                raise Conflict(f"{wanted!r} is reserved for your own terminal mailbox")
            holder = self.by_name(wanted)
            if holder is not None and holder.key != session.key:
                raise Conflict(f"{wanted!r} is already the name of another session; pick another")
            if wanted != session.name and wanted in self.taken_elsewhere():
                raise Conflict(f"{wanted!r} is the name of a session on another machine of yours; pick another")
            if wanted != session.name:
                old_address = self.address(session)
                session.name = wanted
                statements.append(
                    (
                        "UPDATE messages SET recipient = ? WHERE recipient = ? AND read_at IS NULL",
                        (self.address(session), old_address),
                    )
                )
        session.last_seen = time.time()
        statements.append(self._upsert(session))
        await self.store.write(statements)
        return old_address

    def free_name(self, session: Session) -> str:
        """A name for ``session`` that no other session of this person holds, here or elsewhere."""
        return self._pick_name(session.key, session.name, session.place(), session.agent, time.time())

    async def end(self, session: Session) -> None:
        session.ended_at = time.time()
        session.holders.clear()
        await self.store.write([self._upsert(session)])

    async def release(self, holder: int) -> None:
        """A connection closed: the sessions only it held have ended."""
        ended = []
        for session in self.by_key.values():
            if holder in session.holders:
                session.holders.discard(holder)
                if not session.holders:
                    session.ended_at = time.time()
                    ended.append(self._upsert(session))
        if ended:
            await self.store.write(ended)

    async def forget_gone(self, now: float) -> list[str]:
        """Delete sessions gone longer than ``forget_after``, with their unread mail."""
        cutoff = now - self.settings.forget_after
        gone = [s for s in self.by_key.values() if not self.is_live(s, now) and (s.ended_at or s.last_seen) < cutoff]
        statements: list[tuple[str, tuple[Any, ...]]] = []
        for session in gone:
            statements.append(("DELETE FROM sessions WHERE key = ?", (session.key,)))
            statements.append(
                ("DELETE FROM messages WHERE recipient = ? AND read_at IS NULL", (self.address(session),))
            )
            del self.by_key[session.key]
        if statements:
            await self.store.write(statements)
        return [s.name for s in gone]


async def watch_processes(sessions: Sessions, ended: Callable[[Session], Awaitable[None]]) -> None:
    """For as long as the sidecar runs: each session whose harness process is known is ended (by
    ``ended``) as soon as that process exits, hook or no hook. A process that had already exited
    when hive first saw its pid was never recorded (no start time), so it ends nothing."""
    async with anyio.create_task_group() as tg:
        watched: dict[str, tuple[int, float]] = {}
        while True:
            sessions.changed = anyio.Event()
            for key, session in sessions.by_key.items():
                process = (session.pid, session.pid_started)
                if (
                    session.ended_at is None
                    and session.pid
                    and session.pid_started is not None
                    and watched.get(key) != process
                ):
                    watched[key] = (session.pid, session.pid_started)
                    tg.start_soon(_follow, sessions, key, session.pid, session.pid_started, ended, watched)
            await sessions.changed.wait()


async def _follow(
    sessions: Sessions,
    key: str,
    pid: int,
    start: float,
    ended: Callable[[Session], Awaitable[None]],
    watched: dict[str, tuple[int, float]],
) -> None:
    await procs.exited(pid, start)
    if watched.get(key) == (pid, start):
        del watched[key]
    session = sessions.by_key.get(key)
    if session is not None and session.ended_at is None and (session.pid, session.pid_started) == (pid, start):
        await ended(session)

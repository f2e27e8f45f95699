"""The sidecar daemon: owns the state folder, serves NDJSON requests on a 0600 unix socket.

One object per line. Requests are ``{"id", "op", ...}``; replies ``{"id", "ok": true, "result"}``
or ``{"id", "ok": false, "error": {"code", "message"}}``. Every request runs in its own task, so
a long poll never holds up the requests behind it on the same connection. A connection that
registered sessions with ``push`` also receives ``{"event": "deliver", "session", "ids", "text"}``
and answers with a ``delivered`` request once the text reached its agent.

Nothing here polls: work happens when a request, a message or a frame arrives; the only timers
are deadlines (the mesh's dial backoff, the gate's next hold bound).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import importlib
import itertools
import logging
import logging.handlers
import os
import resource
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from hive.integrations import registry

from . import __version__, attachments, codex_push, discover, folders, hooks, mailboxes, observe, projects, wire
from .addresses import Entry, Target, is_group, resolve
from .ask import confirm_group, confirm_override, group_question, notify_person
from .config import HOUR, Settings, load_settings
from .defang import brackets, one_line
from .errors import BadRequest, Conflict, HiveError, NotFound, Refused, TooLarge, UnknownOp
from .gate import run_gate
from .guards import Guards
from .mailbox import Mailbox
from .mesh import Mesh
from .paths import StatePaths, ensure_home
from .peer import agent_reason, peer_pid, person_at_terminal
from .person import asks_person
from .render import Message, frames
from .sessions import Session, Sessions, watch_processes
from .store import Store
from .supervise import Supervised
from .team import attach as attach_team
from .ulid import new_ulid
from .wire import encode_line

MAX_LINE = 1 << 20
MAX_WAIT = 600.0
# A client that stops reading: this many replies (or bytes) waiting behind a full socket close
# its connection. A client that reads never gets near this: the socket itself holds ~200 KB.
MAX_PENDING_REPLIES = 64
MAX_PENDING_BYTES = 8 << 20
MAX_INFLIGHT = 256  # requests of one connection running at once; reading waits beyond that
MAX_CONNECTIONS = 4096
FD_RESERVE = 128  # descriptors kept for the database, the mesh, pop-ups and log files
MAX_RECEIPT_IDS = 500  # receipts asked for at once: one query binds them all, and its work stays bounded
ACCEPT_BACKOFF = (0.05, 2.0)

log = logging.getLogger("hive.sidecar")

TIER_NOTES = {
    "push": "pushed into the session now (it wakes if idle); read once its model has had it",
    "turn": "queued: it sees this at its next tool call or when its turn ends",
    "pull": "queued: it sees this when it checks its inbox",
}


class Connection:
    """One client on the socket."""

    def __init__(self, conn_id: int, stream: SocketStream) -> None:
        self.id = conn_id
        self.stream = stream
        self._write_lock = anyio.Lock()
        self.pid = peer_pid(stream.extra(SocketAttribute.raw_socket, None))
        self.push_sessions: set[str] = set()
        # (session key, channel, point) of mail a hook or watcher on this connection was given: it
        # is recorded injected when the client says it printed it (hooks.hook_written).
        self.hook_shown: tuple[str, str, str] | None = None
        self.closed = False
        self.scope = anyio.CancelScope()  # cancelled to drop the client (evicted, or not reading)
        self.last_active = time.monotonic()
        self.inflight = 0
        self._pending = 0
        self._pending_bytes = 0

    @property
    def idle(self) -> bool:
        return self.inflight == 0 and self._pending == 0

    def drop(self, why: str) -> None:
        """Close this client's connection from the sidecar's side; its requests are cancelled."""
        if not self.closed:
            log.warning("closing connection %d (pid %s): %s", self.id, self.pid, why)
        self.closed = True
        self.scope.cancel()

    @functools.cached_property
    def at_terminal(self) -> bool:
        """A person's own terminal: a process's terminal and ancestry do not change."""
        return person_at_terminal(self.pid, registry.binaries(), registry.agent_environment())

    @functools.cached_property
    def by_agent(self) -> bool:
        """A client an agent harness started: its MCP server, or a command in the agent's shell,
        also one cut loose from it (``setsid -f``, a double fork): see peer.agent_reason."""
        return bool(agent_reason(self.pid, registry.binaries(), registry.agent_environment()))

    async def send(self, payload: dict[str, Any]) -> None:
        """Write one line. Raises BrokenResourceError when the connection is (or gets) closed,
        which it is once too many replies wait for a client that does not read them."""
        await self.send_line(encode_line(payload))

    async def send_line(self, data: bytes) -> None:
        """:meth:`send` for a line already encoded."""
        if self.closed:
            raise anyio.BrokenResourceError("the connection is closed")
        if self._pending >= MAX_PENDING_REPLIES or self._pending_bytes + len(data) > MAX_PENDING_BYTES:
            self.drop(f"{self._pending} replies ({self._pending_bytes} bytes) wait for a client that does not read")
            raise anyio.BrokenResourceError("the client does not read its replies")
        self._pending += 1
        self._pending_bytes += len(data)
        try:
            async with self._write_lock:
                await self.stream.send(data)
        finally:
            self._pending -= 1
            self._pending_bytes -= len(data)
        self.last_active = time.monotonic()


Handler = Callable[[Connection, dict[str, Any]], Awaitable[dict[str, Any]]]
ModuleOp = Callable[["Sidecar", Connection, dict[str, Any]], Awaitable[dict[str, Any]]]

# Modules that add ops of their own, each exposing ``OPS: dict[str, ModuleOp]``; a concern that
# is not mail or sessions (hooks, MCP attachment, the team) lives in its own module.
OP_MODULES: tuple[str, ...] = (
    "hive.sidecar.attach",
    "hive.sidecar.hooks",
    "hive.sidecar.mesh",
    "hive.sidecar.ask",
    "hive.sidecar.team",
    "hive.sidecar.gate",
    "hive.sidecar.observe",
    "hive.sidecar.folders",
    "hive.sidecar.lesson_ops",
    "hive.sidecar.projects",
    "hive.sidecar.lesson_sync",
    "hive.sidecar.policy",
)


def op_table(modules: Iterable[str] = OP_MODULES) -> dict[str, ModuleOp]:
    """Every op the sidecar serves: the ``op_<name>`` methods of :class:`Sidecar`, then the ``OPS``
    of each module in ``modules``. Returns op name -> handler, called with the sidecar, the
    connection and the request. Raises RuntimeError naming both sources when two register one
    name: a programming error, so the sidecar must not start with one silently replacing the other.
    """
    sources: list[tuple[str, dict[str, ModuleOp]]] = [
        ("hive.sidecar.server.Sidecar", {name[3:]: getattr(Sidecar, name) for name in dir(Sidecar)
                                         if name.startswith("op_")}),
    ]
    sources += [(f"{name}.OPS", importlib.import_module(name).OPS) for name in modules]
    table: dict[str, ModuleOp] = {}
    registered_by: dict[str, str] = {}
    for source, ops in sources:
        for op, func in ops.items():
            if op in table:
                raise RuntimeError(f"op {op!r} is registered twice: by {registered_by[op]} and by {source}")
            table[op], registered_by[op] = func, source
    return table


class Sidecar:
    def __init__(self, paths: StatePaths, settings: Settings) -> None:
        self.paths = paths
        self.settings = settings
        self.started = time.time()
        self._forgot_at = 0.0
        self._ids = itertools.count(1)
        self.connections: dict[int, Connection] = {}
        self.waits: dict[str, set[anyio.CancelScope]] = {}
        self.parked: Counter[str] = Counter()  # mailboxes with a long poll waiting right now
        self.handlers: dict[str, Handler] = {op: functools.partial(func, self) for op, func in op_table().items()}
        self.store: Store
        self.sessions: Sessions
        self.mailbox: Mailbox
        self.mesh: Mesh
        self.guards: Guards
        self.tasks: Supervised  # work that outlives the request that started it (a pop-up left up)
        self._stop = anyio.Event()

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def stopping(self) -> anyio.Event:
        """Set once the sidecar begins to stop, before its tasks are cancelled: a worker thread
        that cannot be cancelled (watchfiles' watcher) polls it and returns at once."""
        return self._stop

    async def run(self, ready: Callable[[], None] | None = None) -> None:
        self.store = await Store.open(self.paths.database)
        try:
            self.sessions = Sessions(self.store, self.settings)
            await self.sessions.load()
            self.mailbox = Mailbox(self.store, self.settings)
            self.mesh = Mesh(self)  # links to teammates' sidecars; idle until this machine is in a team
            limits = self.mesh.config
            self.guards = Guards(self.store, limits.rate_limit, limits.rate_window, limits.loop_limit)
            await attach_team(self)  # sidecar.team; in a team, the roster's names replace config's
            # The look-alike bracket table (a scan of all of Unicode, unless the cache has it): build it before
            # the first client waits on it, and off the event loop.
            await anyio.to_thread.run_sync(brackets)
            with contextlib.suppress(FileNotFoundError):
                self.paths.socket.unlink()  # we hold the lock, so any socket file is stale
            old_umask = os.umask(0o177)
            try:
                listener = await anyio.create_unix_listener(self.paths.socket)
            finally:
                os.umask(old_umask)
            os.chmod(self.paths.socket, 0o600)
            log.info("sidecar %s listening on %s (pid %d)", __version__, self.paths.socket, os.getpid())
            async with listener, anyio.create_task_group() as tg:
                # The gate loads its state before any request can reach it, then keeps its one
                # timer (the earliest quiet-hours end or wait bound) in this task group.
                await tg.start(run_gate, self)
                self.tasks = Supervised(tg)
                tg.start_soon(self._watch_signals, tg.cancel_scope)
                tg.start_soon(self._accept, listener, tg)
                await tg.start(self.mesh.run)
                tg.start_soon(discover.run, self)  # sessions hive does not manage, from harnesses' files
                # Sessions end when their harness process does, end hook or not (Codex exec has none).
                tg.start_soon(watch_processes, self.sessions, functools.partial(hooks.session_ended, self))
                if ready is not None:
                    ready()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            with contextlib.suppress(OSError):
                self.paths.socket.unlink()
            with anyio.CancelScope(shield=True):
                await self.store.close()
            log.info("sidecar stopped")

    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                self._stop.set()
                return

    # ---- connections -----------------------------------------------------------------

    async def _accept(self, listener: Any, tg: TaskGroup) -> None:
        """Accept clients for as long as the sidecar runs. Out of descriptors (EMFILE), the
        oldest idle clients are dropped and accepting resumes after a pause: a burst of idle
        connections costs those clients their connection, never the sidecar."""
        backoff = ACCEPT_BACKOFF[0]
        while True:
            try:
                stream = await listener.accept()
            except anyio.ClosedResourceError:
                return
            except (anyio.BrokenResourceError, OSError) as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
                log.warning("accepting a client failed (%s); dropping idle clients, retrying in %.2f s",
                            cause, backoff)
                self._evict_idle(max(1, len(self.connections) // 16))
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF[1])
                continue
            backoff = ACCEPT_BACKOFF[0]
            over = len(self.connections) + 1 - connection_cap()
            if over > 0:
                self._evict_idle(over)
            tg.start_soon(self._serve_connection, stream)

    def _evict_idle(self, count: int) -> None:
        """Drop up to ``count`` idle clients, oldest activity first; push channels go last."""
        idle = sorted((c for c in self.connections.values() if c.idle and not c.closed),
                      key=lambda c: (bool(c.push_sessions), c.last_active))
        for conn in idle[:count]:
            conn.drop(f"over {connection_cap()} connections: the oldest idle one goes")

    async def _serve_connection(self, stream: SocketStream) -> None:
        conn = Connection(next(self._ids), stream)
        self.connections[conn.id] = conn
        reader = BufferedByteReceiveStream(stream)
        room = anyio.Event()  # set when a request finishes, for a reader waiting at MAX_INFLIGHT
        try:
            with conn.scope:
                async with anyio.create_task_group() as tg:
                    while True:
                        try:
                            line = await reader.receive_until(b"\n", MAX_LINE)
                        except anyio.DelimiterNotFound:
                            line = b"x" * (MAX_LINE + 1)
                        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                                anyio.ClosedResourceError, ConnectionError):
                            break
                        conn.last_active = time.monotonic()
                        if len(line) > MAX_LINE:
                            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                                await conn.send(_error(None, TooLarge(
                                    f"a request line is limited to {MAX_LINE} bytes; the connection is closed")))
                            break
                        if line.strip():
                            while conn.inflight >= MAX_INFLIGHT:
                                await room.wait()
                                room = anyio.Event()
                            conn.inflight += 1
                            tg.start_soon(self._run_line, conn, line, room)
                    tg.cancel_scope.cancel()
        except Exception:  # a bug reached here: this client goes, every other one stays
            log.exception("connection %d failed", conn.id)
        finally:
            conn.closed = True
            del self.connections[conn.id]
            self.mailbox.connection_closed(conn.id)  # a hook that died before printing its mail
            with anyio.CancelScope(shield=True):
                await self.sessions.release(conn.id)
                self.mesh.poke()
                await stream.aclose()

    async def _run_line(self, conn: Connection, line: bytes, room: anyio.Event) -> None:
        try:
            await self._handle_line(conn, line)
        except Exception:  # _handle_line answers every error; this is a bug in answering
            log.exception("answering a request failed: %.200r", line)
        finally:
            conn.inflight -= 1
            room.set()

    async def _handle_line(self, conn: Connection, line: bytes) -> None:
        request_id: Any = None
        request: dict[str, Any] = {}
        try:
            try:
                request = wire.decode(line)
            except wire.BadText as exc:
                raw_id = exc.value.get("id") if isinstance(exc.value, dict) else None
                request_id = raw_id if not isinstance(raw_id, str) or wire.proper_text(raw_id) else None
                raise BadRequest(f"a request's strings must be proper Unicode: {exc.reason}") from exc
            except wire.WireError as exc:
                raise BadRequest(f"a request must be one JSON object per line: {exc.reason}") from exc
            if not isinstance(request, dict):
                raise BadRequest("a request must be a JSON object with an 'op'")
            request_id = request.get("id")
            op = request.get("op")
            handler = self.handlers.get(op) if isinstance(op, str) else None
            if handler is None:
                raise UnknownOp(f"unknown op {op!r}; this sidecar serves: {', '.join(sorted(self.handlers))}")
            result = await handler(conn, request)
            self.mesh.poke()  # presence, receipts or the roster may have changed: the mesh looks
            reply: dict[str, Any] = {"id": request_id, "ok": True, "result": result}
        except HiveError as exc:
            reply = _error(request_id, exc)
        except Exception:
            log.exception("request failed: %.200r", line)
            reply = _error(request_id, HiveError("the sidecar hit an internal error; see sidecar.log"))
        try:
            data = encode_line(reply)
        except Exception:  # a result that is not JSON is our bug: answer it as one
            log.exception("the reply to %.40r could not be encoded", request.get("op"))
            reply = _error(request_id, HiveError("the sidecar hit an internal error; see sidecar.log"))
            data = encode_line(reply)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await conn.send_line(data)
        if reply["ok"] and request.get("op") == "shutdown":
            self._stop.set()  # only once the caller has its answer

    # ---- helpers ---------------------------------------------------------------------

    def _address_of(self, session: Session) -> str:
        return self.sessions.address(session)

    @property
    def terminal(self) -> str:
        return f"{self.settings.person}/terminal"

    def _session_ref(self, ref: Any) -> Session:
        """A session named by its key, its name or its address."""
        if not isinstance(ref, str) or not ref:
            raise BadRequest("name a session by its key, name or person/name")
        if ref in self.sessions.by_key:
            return self.sessions.by_key[ref]
        name = ref.split("/", 1)[1] if ref.startswith(self.settings.person + "/") else ref
        session = self.sessions.by_name(name)
        if session is None:
            raise NotFound(f"no session {ref!r} on this machine; see `hive who`")
        return session

    def _mailbox_of(self, request: dict[str, Any]) -> tuple[str, Session | None]:
        """The mailbox a request reads: a session's (``session``, or ``as`` naming one), the
        person's terminal, or a named mailbox of theirs (``as``: opened on first use)."""
        ref = request.get("session") or request.get("as")
        if ref in (None, "", "terminal", self.terminal):
            return self.terminal, None
        try:
            session = self._session_ref(ref)
        except NotFound:
            if request.get("session") or not isinstance(ref, str):
                raise
            name = ref.split("/", 1)[1] if ref.startswith(self.settings.person + "/") else ref
            return mailboxes.open_named(self, name), None
        return self._address_of(session), session

    def directory(self) -> list[Entry]:
        now = time.time()
        return [
            Entry(
                person=self.settings.person, machine=self.settings.machine, name=s.name, agent=s.agent,
                repo=s.repo, branch=s.branch, folder=os.path.basename(s.cwd.rstrip("/")), doing=s.doing,
                tier=s.tier, live=self.sessions.is_live(s, now), key=s.key,
            )
            for s in self.sessions.by_key.values()
        ] + self.mesh.entries()

    async def _maybe_forget(self) -> None:
        now = time.time()
        if now - self.started < self.settings.forget_grace:
            return
        if now - self._forgot_at < min(HOUR, self.settings.forget_after / 2):
            return
        self._forgot_at = now
        forgotten = await self.sessions.forget_gone(now)
        if forgotten:
            log.info("forgot %d gone sessions: %s", len(forgotten), ", ".join(forgotten))

    def _push_connection(self, session: Session) -> Connection | None:
        for conn in self.connections.values():
            if session.key in conn.push_sessions and not conn.closed:
                return conn
        return None

    async def _push(self, session: Session) -> bool:
        """Hand waking mail to the connection that delivers into this session, if any."""
        if codex_push.serves(session):  # no connection: the sidecar itself drives Codex's app-server
            return await codex_push.push(self, session)
        conn = self._push_connection(session)
        address = self._address_of(session)
        if conn is None or self.parked[address] > 0:
            return False  # nobody to push to, or a reader is already long-polling for it
        messages = [m for m in await self.mailbox.unread(address) if m.wake]
        if not messages:
            return False
        self.mailbox.mark_shown(messages)
        try:
            await conn.send({"event": "deliver", "session": session.key,
                             "ids": [m.id for m in messages], "text": frames(messages)})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            self.mailbox.unshow([m.id for m in messages])
            return False
        return True

    def _describe(self, entry: Entry) -> dict[str, Any]:
        return {
            "address": entry.address, "person": entry.person, "machine": entry.machine,
            "name": one_line(entry.name, 64), "agent": one_line(entry.agent, 32),
            "repo": one_line(entry.repo, 200), "branch": one_line(entry.branch, 200),
            "folder": one_line(entry.folder, 200), "doing": one_line(entry.doing, 200),
            "tier": entry.tier, "live": entry.live,
            **observe.describe_extra(self, entry.key, entry.person, entry.machine, entry.name),
        }

    # ---- ops -------------------------------------------------------------------------

    async def op_ping(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Answer that the sidecar is up.

        Reads no fields. Returns ``{"pong": true, "version", "pid", "home", "uptime"}`` (the state
        folder, and seconds since the sidecar started).
        """
        return {"pong": True, "version": __version__, "pid": os.getpid(), "home": str(self.paths.home),
                "uptime": round(time.time() - self.started, 3)}

    async def op_status(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Describe this sidecar: who and where it is, its sessions and the person's terminal mailbox.

        Reads no fields. Returns ``{"version", "pid", "home", "socket", "person", "machine", "uptime",
        "sessions_live", "sessions_known", "terminal_unread", "terminal_unread_from", "team", "waiting"}``:
        ``team`` is the team's name or None, ``waiting`` the mailboxes a long poll waits on now.
        """
        now = time.time()
        count, senders = await self.mailbox.counts(self.terminal)
        live = [s for s in self.sessions.by_key.values() if self.sessions.is_live(s, now)]
        return {
            "version": __version__, "pid": os.getpid(), "home": str(self.paths.home),
            "socket": str(self.paths.socket), "person": self.settings.person,
            "machine": self.settings.machine, "uptime": round(now - self.started, 3),
            "sessions_live": len(live), "sessions_known": len(self.sessions.by_key),
            "terminal_unread": count, "terminal_unread_from": senders, "team": self._team_name(),
            "waiting": sorted(address for address, n in self.parked.items() if n > 0),
        }

    def _team_name(self) -> str | None:
        team = getattr(self, "team", None)
        state = getattr(team, "state", None)
        if state is None:
            return None
        return state.meta.body.name if state.meta is not None else state.id

    async def op_register(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Register a session, or refresh one already known by its key.

        Request: ``session`` (object, required): ``key`` (required), ``agent``, ``cwd``, ``name`` (wanted
        name), ``tier`` (push, turn or pull), ``repo``, ``repo_root``, ``branch``, ``pid``, ``transcript``;
        the repository around ``cwd`` fills in what it does not say. ``hold`` (bool, optional): this
        connection holds the session, which ends once no connection does. ``push`` (bool, optional):
        also hold it, and take its ``deliver`` events on this connection. Returns ``{"key", "name",
        "address", "tier", "new", "unread", "unread_from"}``. Raises ``refused`` in a folder the person
        turned hive off in, and ``bad_request`` without a key or with an unknown tier.
        """
        info = request.get("session")
        if not isinstance(info, dict):
            raise BadRequest("register needs a 'session' object with at least 'key' and 'agent'")
        if isinstance(info.get("cwd"), str) and await folders.is_off(self, info["cwd"]):
            raise Refused(f"the person turned hive off in this folder ({info['cwd']}); `hive folder PATH on` "
                          "turns it back on")
        if isinstance(info.get("cwd"), str):
            # The repository around it, as a hook's registration finds it: a plugin's or MCP
            # server's session is then one of that repository's for overlaps and project lessons.
            info = {**hooks.git_facts(info["cwd"]), **info}
        hold = bool(request.get("hold") or request.get("push"))
        session, new = await self.sessions.register(info, conn.id if hold else None)
        attachments.note_plugin_folder(session, info, conn.pid, registry.binaries())
        if new and session.repo:
            self.tasks.start_soon(projects.on_session, self, session.repo)  # a first session there proposes its person
        observe.UNMANAGED.discard(session.key)  # a client speaks for it
        if request.get("push") and session.tier == "push":
            conn.push_sessions.add(session.key)
        await self._maybe_forget()
        address = self._address_of(session)
        count, senders = await self.mailbox.counts(address)
        if session.key in conn.push_sessions:
            await self._push(session)
        return {"key": session.key, "name": session.name, "address": address, "tier": session.tier,
                "new": new, "unread": count, "unread_from": senders}

    async def op_set_status(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Set what a session is doing, rename it, or both.

        Request: ``session`` (str, required): its key, name or address. ``doing`` (str, optional): the
        line others see in ``who``. ``name`` (str, optional): a new name. Returns ``{"name", "address",
        "renamed_from"}``, the old address when the name changed, else None. Raises ``not_found``, and
        ``conflict`` for a name the person, the terminal mailbox or another session has.
        """
        session = self._session_ref(request.get("session"))
        doing = request.get("doing")
        name = request.get("name")
        if doing is not None and not isinstance(doing, str):
            raise BadRequest("doing must be a string")
        if name is not None and not isinstance(name, str):
            raise BadRequest("name must be a string")
        old = await self.sessions.set_status(session, doing, name)
        return {"name": session.name, "address": self._address_of(session), "renamed_from": old}

    async def op_end(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """End a session: it is offline from now on, and this connection stops pushing to it.

        Request: ``session`` (str, required): its key, name or address. Returns ``{"ended": name}``.
        Raises ``not_found``.
        """
        session = self._session_ref(request.get("session"))
        await self.sessions.end(session)
        conn.push_sessions.discard(session.key)
        return {"ended": session.name}

    async def op_who(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """List the sessions this sidecar knows: its own and, in a team, the teammates' machines'.

        Request: ``session`` (str, optional): the asking session, returned as ``me``. ``all`` (bool,
        optional): offline sessions too. ``filter`` (str, optional): keep sessions with a field
        containing it (case-insensitive). Returns ``{"person", "machine", "me", "sessions"}``, each
        session with its address, person, machine, name, agent, repo, branch, folder, doing, tier, live
        and presence (state, head, files, unmanaged). Raises ``not_found`` for an unknown ``session``.
        """
        await self._maybe_forget()
        me = None
        if request.get("session"):
            me = self._address_of(self._session_ref(request["session"]))
        entries = self.directory()
        if not request.get("all"):
            entries = [e for e in entries if e.live]
        needle = str(request.get("filter") or "").lower()
        described = [self._describe(e) for e in entries]
        if needle:
            described = [d for d in described if any(needle in str(v).lower() for v in d.values())]
        described.sort(key=lambda d: (d["person"], d["machine"], not d["live"], d["name"]))
        return {"person": self.settings.person, "machine": self.settings.machine, "me": me,
                "sessions": described}

    @asks_person  # group sends and loop-guard overrides
    async def op_send(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Send a message to a session, a person's mailbox or (from the person only) a group.

        Request: ``to`` (str, required): person/session, a session name, or a group. ``body`` (str,
        required, at most ``max_body`` bytes). ``from`` (str, optional): the sending session, or one of
        the person's mailboxes (default ``terminal``). ``reply_to`` (str, optional): the message id this
        answers. ``fyi`` (bool): do not wake the recipient. ``notify`` (bool): also a desktop notification.
        ``files`` (list of paths) and ``cwd`` (str): attachments. Returns ``{"from", "results": [{"to",
        "id", "state", "note"}]}``, plus ``notified`` and ``notify_note`` with ``notify``. Raises
        ``bad_request``, ``too_large``, ``not_found``/``ambiguous``, ``group_refused``, ``needs_person`` or
        ``confirm_on_terminal`` (group sends and loop-guard overrides), ``loop_guard``, ``rate_limited``,
        and ``attachment_*`` refusals.
        """
        body = request.get("body")
        to = request.get("to")
        if not isinstance(body, str) or not body.strip():
            raise BadRequest("send needs a non-empty 'body' string")
        if not isinstance(to, str):
            raise BadRequest("send needs 'to': person/session, a session name, or a group")
        size = len(body.encode("utf-8"))
        if size > self.settings.max_body:
            raise TooLarge(f"the message is {size} bytes; the limit is {self.settings.max_body}. "
                           "Send the gist and attach or point to the rest")
        reply_to = request.get("reply_to")
        if reply_to is not None and not isinstance(reply_to, str):
            raise BadRequest("reply_to must be a message id")
        ref = request.get("from")
        box = mailboxes.sending_as(self, ref)
        sender_session = None if box is not None else self._session_ref(ref)
        if sender_session is not None:
            sender, kind = self._address_of(sender_session), "agent"
            agent, repo = sender_session.agent, sender_session.repo
            self.sessions.seen(sender_session)
        else:
            # From the person's own mailbox: typed at their terminal, or a script of theirs.
            sender, agent, repo = f"{self.settings.person}/{box}", "", ""
            kind = "person" if conn.at_terminal else "script"
        carried = await attachments.for_send(self, request, sender_session, by_agent=conn.by_agent,
                                             at_terminal=conn.at_terminal, caller_pid=conn.pid)
        # A group goes out only from the person's own mailbox, and only once they confirm it in a
        # pop-up (or, with no desktop, at this client's terminal): see ask.confirm_group.
        group = sender_session is None and is_group(to)
        targets = resolve(to, self.directory(), {self.settings.person} | self.mesh.people(), sender,
                          may_use_groups=group, mailboxes=mailboxes.entries(self.mesh),
                          own={f"{self.settings.person}/{n}" for n in mailboxes.names(self)})
        targets = await mailboxes.route(self, targets, reply_to if isinstance(reply_to, str) else None)
        if is_group(to) and not targets:
            raise NotFound(f"no live session matches {to}")
        if group:
            await confirm_group(self, conn, request, group_question(to, len(targets)), body)
            kind = "person"
        elif kind == "person" and reply_to:
            # A person's reply restarts the loop guard's count: a loop-guard override, confirmed the same way.
            await confirm_override(self, conn, request, [t.address for t in targets], body)
        wake = not request.get("fyi")
        now = time.time()
        messages = [
            Message(id=new_ulid(), sender=sender, sender_kind=kind, sender_agent=agent, sender_repo=repo,
                    recipient=t.address, reply_to=reply_to, body=body, wake=wake, sent_at=now, carried=carried)
            for t in targets
        ]
        runs = await self._guard(sender, kind, list(zip(targets, messages, strict=True)))
        waiting = {t.address for t in targets if self.parked[t.address] > 0}
        sender_key = sender_session.key if sender_session else None
        copies: dict[str, list[str]] = {}  # one person's mailbox on several machines: each copy names the others
        for message in messages:
            copies.setdefault(message.recipient, []).append(message.id)
        remote = await self.mesh.send(
            [(t, m) for t, m in zip(targets, messages, strict=True) if self.mesh.is_remote(t)], sender_key,
            notify=bool(request.get("notify")), runs=runs,
            copies={m.id: mailboxes.copies_of(copies[m.recipient], m.id) for m in messages
                    if len(copies[m.recipient]) > 1})
        local = [await attachments.keep(self, m) for m in messages if m.id not in remote]  # files saved first
        await self.mailbox.deposit(local, sender_key)
        results = []
        for target, message in zip(targets, messages, strict=True):
            if message.id in remote:
                results.append(remote[message.id])
                continue
            state, note = await self._after_deposit(target, wake, target.address in waiting)
            results.append({"to": target.address, "id": message.id, "state": state, "note": note})
        reply = {"from": sender, "results": results}
        if request.get("notify"):
            reply.update(await notify_person(self, request, sender, messages, remote))
        return reply

    async def _guard(self, sender: str, kind: str, sends: list[tuple[Target, Message]]) -> dict[str, int]:
        """Apply the mail guards (hive.sidecar.guards) to a send, or raise; returns the loop guard's
        count for each message to a teammate's session, by id, for its frame. What the guards
        record is staged here and committed with the messages."""
        if kind == "person":  # human input to every session it goes to
            await self.store.stage([s for target, _ in sends for s in Guards.human_input(target.address)])
            return {}
        steps = {message.id: await self.guards.step(sender, target.address, enforce=not self.mesh.is_remote(target))
                 for target, message in sends if kind == "agent" and not mailboxes.is_mailbox(target)}
        self.guards.take_rate(sender)
        await self.store.stage([s for step in steps.values() for s in step.statements])
        return {message_id: step.run for message_id, step in steps.items()}

    async def _after_deposit(self, target: Target, wake: bool, waiting: bool) -> tuple[str, str]:
        if target.entry is None:
            person, name = target.address.split("/", 1)
            command = "hive inbox" if name == mailboxes.TERMINAL else f"hive inbox --as {name}"
            return "queued", f"queued: {person} sees it with `{command}` on {self.settings.machine}"
        session = self.sessions.by_key.get(target.entry.key or "")
        if session is None or not self.sessions.is_live(session):
            return "queued", "queued: that session is offline; it sees this when it comes back"
        if discover.is_unmanaged(session):
            return "queued", ("queued: that session runs without hive's hooks or tools (hive found it on disk), so "
                              "it cannot read this until its harness loads hive; tell its person if it is urgent")
        if not wake:
            return "queued", "queued (fyi): shown at its next natural pause; it does not wake the session"
        if waiting:
            return "delivered", "delivered: the session was waiting in check_inbox"
        if session.tier == "push" and await self._push(session):
            return "pushed", TIER_NOTES["push"]
        tier = "turn" if session.tier == "push" else session.tier
        return "queued", TIER_NOTES[tier]

    async def op_inbox(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Fetch a mailbox's unread mail, waiting for some to arrive when asked to (a long poll).

        Request: ``session`` (str, optional): the session whose mailbox; or ``as`` (str, optional): a
        session, or a named mailbox of the person's (opened on first use); neither: the person's terminal.
        ``wait`` (number, optional): seconds to wait for mail, at most 600 (``stop_waiting`` ends it).
        ``peek`` (bool): show nothing and confirm nothing. ``keep_held`` (bool): a plugin taking mail,
        which does not confirm what the session's harness holds. Returns ``{"to", "messages", "ids",
        "text"}``: the mailbox's address, the messages, their ids and the framed text for a model.
        Raises ``bad_request`` for a ``wait`` that is not a number, ``not_found`` for an unknown session.
        """
        recipient, session = self._mailbox_of(request)
        try:
            wait = min(max(float(request.get("wait") or 0), 0.0), MAX_WAIT)
        except (TypeError, ValueError) as exc:
            raise BadRequest("wait is a number of seconds, at most 600") from exc
        if session is not None:
            self.sessions.seen(session)
            # The agent checking its inbox saw what its hooks showed it; a plugin taking mail for the
            # session (keep_held) proves nothing: what it holds is confirmed by its next model request.
            if not request.get("peek") and not request.get("keep_held"):
                await self.mailbox.confirm_held(session.key)
        deadline = time.monotonic() + wait
        messages: list[Message] = []
        with anyio.CancelScope() as scope:
            self.waits.setdefault(recipient, set()).add(scope)
            try:
                while True:
                    arrival = self.mailbox.watch(recipient)
                    messages = await self.mailbox.unread(recipient)
                    remaining = deadline - time.monotonic()
                    if messages or remaining <= 0:
                        break
                    self.parked[recipient] += 1
                    try:
                        await self.mailbox.wait(recipient, arrival, remaining)
                    finally:
                        self.parked[recipient] -= 1
            finally:
                self.waits[recipient].discard(scope)
        if scope.cancelled_caught:
            messages = await self.mailbox.unread(recipient)
        if not request.get("peek"):
            self.mailbox.mark_shown(messages)
        return {"to": recipient, "messages": [m.public() for m in messages],
                "ids": [m.id for m in messages], "text": frames(messages)}

    async def op_unread(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Count a mailbox's unread mail still waiting to be shown.

        Request: ``session`` or ``as`` (str, optional), as for ``inbox``; neither: the person's
        terminal. Returns ``{"to", "count", "from"}``: the mailbox's address, how many messages, and the
        senders. Raises ``not_found`` for an unknown ``session``.
        """
        recipient, _ = self._mailbox_of(request)
        count, senders = await self.mailbox.counts(recipient)
        return {"to": recipient, "count": count, "from": senders}

    async def op_delivered(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Mark messages read: the client passed them on to its agent or person.

        Request: ``session`` or ``as`` (str, optional), as for ``inbox``. ``ids`` (list of str, required):
        the message ids that arrived. Returns ``{"confirmed": n}``, the unread messages of that mailbox
        among ``ids`` now marked read. Raises ``bad_request`` without ``ids``, ``not_found`` for an
        unknown ``session``.
        """
        recipient, session = self._mailbox_of(request)
        ids = request.get("ids")
        if not isinstance(ids, list):
            raise BadRequest("delivered needs 'ids': the message ids that reached the agent")
        confirmed = await self.mailbox.confirm(recipient, ids)
        if session is not None and confirmed:  # check_inbox's result (or an agent's `hive inbox --as`)
            channel = "mcp" if conn.id in session.holders else "cli"
            await observe.injected(self, session.key, [i for i in ids if isinstance(i, str)], channel, "check_inbox")
        return {"confirmed": confirmed}

    async def op_undelivered(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """A client was shown messages but could not pass them on: make them visible now.

        Request: ``ids`` (list of str, required): the messages. ``push_failed`` (bool, optional) with
        ``session`` (str): the session's push channel is broken: it drops to the turn tier (hooks or
        check_inbox show the mail instead) and senders are told so from then on. Returns
        ``{"released": len(ids), "tier"}``, the session's tier after a ``push_failed``, else None.
        Raises ``bad_request`` without ``ids``, ``not_found`` for an unknown ``session``.
        """
        ids = request.get("ids")
        if not isinstance(ids, list):
            raise BadRequest("undelivered needs 'ids'")
        self.mailbox.unshow([i for i in ids if isinstance(i, str)])
        tier = None
        if request.get("push_failed") and request.get("session"):
            session = self._session_ref(request["session"])
            await self.sessions.downgrade(session)
            conn.push_sessions.discard(session.key)
            tier = session.tier
        return {"released": len(ids), "tier": tier}

    async def op_stop_waiting(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """End the long polls (``inbox`` with ``wait``) on a mailbox now; each answers with what it has.

        Request: ``session`` or ``as`` (str, optional), as for ``inbox``. Returns ``{"stopped": n}``,
        the polls ended. Raises ``not_found`` for an unknown ``session``.
        """
        recipient, _ = self._mailbox_of(request)
        scopes = self.waits.get(recipient, set())
        for scope in scopes:
            scope.cancel()
        return {"stopped": len(scopes)}

    async def op_sent(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Receipts for what a session or the person's terminal sent: queued or read, and when.

        Request: ``session`` or ``from`` (str, optional): the sender; neither: the person's terminal.
        ``ids`` (list of str, optional): these messages; without them the sender's latest 50 here and
        their latest 50 to teammates' machines. Returns ``{"messages": [{"id", "to", "sent_at", "read_at",
        "state", ...}]}``, newest first without ``ids``; those to other machines add ``note``, ``remote``
        and ``in_outbox``. Raises ``bad_request`` for ``ids`` that are not strings or more than
        :data:`MAX_RECEIPT_IDS`, ``not_found`` for an unknown sender.
        """
        ref = request.get("session") or request.get("from")
        ids = request.get("ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise BadRequest("ids must be a list of message ids")
        if len(ids) > MAX_RECEIPT_IDS:
            raise BadRequest(f"at most {MAX_RECEIPT_IDS} ids at a time")
        if ref in (None, "", "terminal", self.terminal):
            key, address = None, self.terminal
        else:
            session = self._session_ref(ref)
            key, address = session.key, self._address_of(session)
        messages = await self.mailbox.sent_by(key, address, ids) + await self.mesh.sent_by(key, address, ids)
        return {"messages": sorted(messages, key=lambda m: m["id"], reverse=not ids)}

    async def op_shutdown(self, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
        """Stop the sidecar once this reply is written.

        Reads no fields. Returns ``{"stopping": true, "pid"}``.
        """
        return {"stopping": True, "pid": os.getpid()}


def _error(request_id: Any, exc: HiveError) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": exc.to_wire()}


def connection_cap() -> int:
    """How many local clients this process keeps at once, from its descriptor limit now (the
    limit can change under a running process: ``prlimit``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, soft - FD_RESERVE))


class _PrivateLog(logging.handlers.RotatingFileHandler):
    """A rotating log whose every file is the user's alone: the handler reopens ``sidecar.log``
    after each rotation, with the process's umask (often 0644) unless told otherwise."""

    def _open(self) -> Any:
        def opener(path: str, flags: int) -> int:
            fd = os.open(path, flags, 0o600)
            os.fchmod(fd, 0o600)  # a file left from before keeps its mode on open
            return fd

        return open(self.baseFilename, self.mode, encoding=self.encoding, errors=self.errors, opener=opener)


def _setup_logging(paths: StatePaths) -> None:
    handler = _PrivateLog(paths.log, maxBytes=1 << 20, backupCount=3, encoding="utf-8")
    for old in paths.log.parent.glob(paths.log.name + ".*"):  # copies rotated by an older hive
        with contextlib.suppress(OSError):
            old.chmod(0o600)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("hive")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


class AlreadyRunning(Conflict):
    code = "conflict"


def acquire_lock(paths: StatePaths) -> int:
    """Take the state folder's lock; the kernel drops it when this process dies, however it dies."""
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise AlreadyRunning(
                f"a sidecar is already running for {paths.home} (pid {holder}); "
                "use `hive stop` first or talk to that one"
            ) from exc
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def run_sidecar(paths: StatePaths, ready_fd: int | None = None) -> None:
    """Run a sidecar in this process until it is stopped. Raises AlreadyRunning."""
    ensure_home(paths.home)
    lock_fd = acquire_lock(paths)
    _setup_logging(paths)
    settings = load_settings(paths.config)

    def ready() -> None:
        if ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(ready_fd, b"ready\n")
                os.close(ready_fd)

    try:
        anyio.run(Sidecar(paths, settings).run, ready)
    finally:
        os.close(lock_fd)

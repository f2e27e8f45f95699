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
import itertools
import logging
import logging.handlers
import os
import resource
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketListener, SocketStream, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from .. import __version__
from ..agents import hooks
from ..base import wire
from ..base.config import Settings, load_settings
from ..base.defang import brackets
from ..base.errors import BadRequest, Conflict, HiveError, TooLarge, UnknownOp
from ..base.host import Connection, Handler
from ..base.paths import StatePaths, ensure_home
from ..base.store import Store
from ..base.supervise import Supervised
from ..base.wire import encode_line
from ..gate.engine import run_gate
from ..mail.addresses import Entry
from ..mail.guards import Guards
from ..mail.mailbox import Mailbox
from ..mesh.links import Mesh
from ..presence import discover
from ..presence import frames as presence_frames
from ..sessions.registry import Sessions, watch_processes
from ..team.local import Team
from ..team.membership import attach as attach_team
from .features import FEATURES, op_table

MAX_LINE = 1 << 20
MAX_INFLIGHT = 256  # requests of one connection running at once; reading waits beyond that
MAX_CONNECTIONS = 4096
FD_RESERVE = 128  # descriptors kept for the database, the mesh, pop-ups and log files
ACCEPT_BACKOFF = (0.05, 2.0)

log = logging.getLogger("hive.sidecar")


def publish_socket(path: Path) -> socket.socket:
    """A listening socket at ``path``, mode 0600, that appears there only once it accepts.

    Clients treat a socket file nobody listens on as a dead sidecar (a hook answers without it
    and starts another), so it is bound and put to listen under a temporary name, then renamed
    into place. The caller holds the sidecar lock, so a socket file already there is stale.
    """
    staging = path.with_name(f".{os.getpid() % 10**7}s")  # no longer than the name: sun_path is short
    with contextlib.suppress(FileNotFoundError):
        staging.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(staging))
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    try:
        os.chmod(staging, 0o600)
        sock.listen(socket.SOMAXCONN)
        os.replace(staging, path)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            staging.unlink()
        raise
    return sock


class Sidecar:
    def __init__(self, paths: StatePaths, settings: Settings) -> None:
        self.paths = paths
        self.settings = settings
        self.started = time.time()
        self.forgot_at = 0.0  # when gone sessions were last forgotten (agents.sessions.maybe_forget)
        self._ids = itertools.count(1)
        self.connections: dict[int, Connection] = {}
        self.waits: dict[str, set[anyio.CancelScope]] = {}
        self.parked: Counter[str] = Counter()  # mailboxes with a long poll waiting right now
        self.handlers: dict[str, Handler] = {op: functools.partial(func, self) for op, func in op_table().items()}
        self.before_digest = [feature.before_digest for feature in FEATURES if feature.before_digest is not None]
        self.on_events = [feature.on_events for feature in FEATURES if feature.on_events is not None]
        self.store: Store
        self.sessions: Sessions
        self.mailbox: Mailbox
        self.mesh: Mesh
        self.guards: Guards
        self.team: Team  # set by team.membership.attach as the sidecar starts
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
            for feature in FEATURES:
                if feature.frames is not None:
                    feature.frames(self)
            await attach_team(self)  # sidecar.team; in a team, the roster's names replace config's
            for feature in FEATURES:
                if feature.setup is not None:
                    feature.setup(self)
            # The look-alike bracket table (a scan of all of Unicode, unless the cache has it): build it before
            # the first client waits on it, and off the event loop.
            await anyio.to_thread.run_sync(brackets)
            listener = await SocketListener.from_socket(publish_socket(self.paths.socket))
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
                log.warning("accepting a client failed (%s); dropping idle clients, retrying in %.2f s", cause, backoff)
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
        idle = sorted(
            (c for c in self.connections.values() if c.idle and not c.closed),
            key=lambda c: (bool(c.push_sessions), c.last_active),
        )
        for conn in idle[:count]:
            conn.drop(f"over {connection_cap()} connections: the oldest idle one goes")

    async def _serve_connection(self, stream: SocketStream) -> None:
        conn = Connection(next(self._ids), stream, self.sessions.harnesses_seen.values())
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
                        except (
                            anyio.EndOfStream,
                            anyio.IncompleteRead,
                            anyio.BrokenResourceError,
                            anyio.ClosedResourceError,
                            ConnectionError,
                        ):
                            break
                        conn.last_active = time.monotonic()
                        if len(line) > MAX_LINE:
                            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                                await conn.send(
                                    _error(
                                        None,
                                        TooLarge(
                                            f"a request line is limited to {MAX_LINE} bytes; the connection is closed"
                                        ),
                                    )
                                )
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

    @property
    def terminal(self) -> str:
        return f"{self.settings.person}/terminal"

    def directory(self) -> list[Entry]:
        now = time.time()
        return [
            Entry(
                person=self.settings.person,
                machine=self.settings.machine,
                name=s.name,
                agent=s.agent,
                repo=s.repo,
                branch=s.branch,
                folder=os.path.basename(s.cwd.rstrip("/")),
                doing=s.doing,
                tier=s.tier,
                live=self.sessions.is_live(s, now),
                key=s.key,
            )
            for s in self.sessions.by_key.values()
        ] + presence_frames.entries(self)

    # ---- ops -------------------------------------------------------------------------


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

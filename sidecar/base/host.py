"""What an op knows of its caller (:class:`Connection`) and of the daemon it runs in (:class:`Host`).

The daemon makes one per client; every op receives it, with the process facts the kernel gives
about the caller (its pid, whether a person's terminal or an agent started it) and the push
channel a harness plugin keeps open on it.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import anyio
from anyio.abc import SocketAttribute, SocketStream

from hive.integrations import registry

from .peer import Stat, agent_reason, peer_pid, person_at_terminal
from .wire import encode_line

if TYPE_CHECKING:
    from .config import Settings
    from .paths import StatePaths
    from .store import Store
    from .supervise import Supervised

# A client that stops reading: this many replies (or bytes) waiting behind a full socket close
# its connection. A client that reads never gets near this: the socket itself holds ~200 KB.
MAX_PENDING_REPLIES = 64
MAX_PENDING_BYTES = 8 << 20

log = logging.getLogger("hive.sidecar")

T = TypeVar("T")


class Connection:
    """One client on the socket."""

    def __init__(self, conn_id: int, stream: SocketStream, harnesses_seen: Iterable[Stat] = ()) -> None:
        self.id = conn_id
        self.stream = stream
        self._seen = harnesses_seen  # the harnesses this sidecar recorded, some gone since (peer.agent_reason)
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
        """The person at a terminal of their own: the only caller whose person-only changes need
        no pop-up. A process's terminal and ancestry do not change."""
        return person_at_terminal(self.pid, registry.binaries(), registry.agent_environment(), self._seen)

    @functools.cached_property
    def by_agent(self) -> bool:
        """A client an agent harness started: its MCP server, or a command in the agent's shell,
        also one cut loose from it (``setsid -f``, a double fork): see peer.agent_reason."""
        return bool(agent_reason(self.pid, registry.binaries(), registry.agent_environment(), self._seen))

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
"""An op bound to its sidecar: called with the caller's connection and the request; returns the result."""


class Host(Protocol):
    """What every feature may use of the daemon it runs in: its state folder, settings, database,
    clients and background tasks. Each concept that needs more says so in a protocol of its own
    that extends the one of the layer below (sessions.registry.SessionsHost, team.local.TeamHost,
    mesh.links.MeshHost, presence.events.PresenceHost, mail.host.MailHost, gate.host.GateHost,
    agents.sessions.AgentsHost), so no concept names the
    daemon's class; mypy checks the daemon against them where daemon/features.py lists the ops."""

    paths: StatePaths
    settings: Settings
    store: Store
    tasks: Supervised
    connections: dict[int, Connection]

    @property
    def stopping(self) -> anyio.Event:
        """Set once the sidecar begins to stop."""
        ...


class PerSidecar(Generic[T]):
    """What a feature keeps for each sidecar it serves, made on first use.

    A feature's state lives beside the feature (``DESKS = PerSidecar(lambda sidecar: Desk())``,
    then ``DESKS.of(sidecar)``), not as an attribute the daemon would have to declare and so know
    about, and two sidecars in one process (tests) never share it. Held weakly by the sidecar: state
    that points back to its sidecar (most does) lives as long as the process, as an attribute would.
    """

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._state: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()

    def of(self, sidecar: Any) -> T:
        """This sidecar's state, made now if it has none yet."""
        found = self._state.get(sidecar)
        if found is None:
            found = self._state[sidecar] = self._make(sidecar)
        return found

    def get(self, sidecar: Any) -> T | None:
        """This sidecar's state, or None when it has none yet (nothing is made)."""
        return self._state.get(sidecar)

    def put(self, sidecar: Any, value: T) -> None:
        """Give the sidecar this state: for state made where the sidecar starts it (a task, a link)."""
        self._state[sidecar] = value

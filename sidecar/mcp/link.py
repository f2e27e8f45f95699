"""The MCP server's one connection to the sidecar: opened on first use, reopened after it drops.

It carries every call of every session the server serves. The sidecar client is imported when
the first tool call opens it, not with this module: a harness gives ``hive mcp`` only a few
seconds to answer ``initialize`` and ``tools/list``, which need no sidecar.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..base.errors import Unreachable
from ..base.paths import StatePaths

if TYPE_CHECKING:
    from ..client import Client

log = logging.getLogger("hive.mcp")


class SidecarLink:
    """One connection to the sidecar, opened on first use and reopened after it drops.

    Reopening goes through :meth:`Client.open`, which starts a sidecar when none answers. It
    happens only when a call needs it, so a sidecar someone stopped stays stopped until an
    agent actually uses a tool.
    """

    def __init__(self, paths: StatePaths, tg: TaskGroup) -> None:
        self._paths = paths
        self._tg = tg
        self._lock = anyio.Lock()
        self._client: Client | None = None
        self._scope: anyio.CancelScope | None = None
        self.generation = 0  # bumped per connection: sessions are held per connection

    async def _hold(self, *, task_status: TaskStatus[Client]) -> None:
        from ..client import Client

        held: Client | None = None
        try:
            with anyio.CancelScope() as scope:
                async with Client.open(self._paths) as client:
                    held = client
                    self._client, self._scope = client, scope
                    self.generation += 1
                    task_status.started(client)
                    # Nothing is pushed to an MCP connection, so this stream ends only when the
                    # connection does; then the next call reconnects.
                    async for _event in client.events:
                        pass
        except Exception:
            if held is None:
                raise  # not connected yet: start() hands this to the caller
            log.warning("the connection to the sidecar failed", exc_info=True)
        finally:
            if held is not None and self._client is held:
                self._client = self._scope = None

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None:
                return self._client
            try:
                client: Client = await self._tg.start(self._hold)
            except OSError as exc:  # e.g. a state folder that cannot be created
                raise Unreachable(f"cannot reach or start the sidecar for {self._paths.home}: {exc}") from exc
            return client

    def _drop(self, client: Client) -> None:
        if self._client is client and self._scope is not None:
            self._scope.cancel()
            self._client = self._scope = None

    async def call(self, op: str, *, idempotent: bool = True, **args: Any) -> dict[str, Any]:
        """Call an op, reconnecting once if the connection turns out to be dead.

        A call that may have reached the sidecar before the link broke is retried only when
        repeating it is harmless; a ``send`` is not, so that one reports ``unreachable``.
        """
        client = await self._connected()
        try:
            return await client.call(op, **args)
        except Unreachable as exc:
            self._drop(client)
            if not idempotent and not _never_sent(exc):
                raise Unreachable(
                    f"the link to the sidecar broke during {op}; it may or may not have been done, "
                    "so check before repeating it"
                ) from exc
        return await (await self._connected()).call(op, **args)


def _never_sent(exc: Unreachable) -> bool:
    # Client.call chains a write failure; a reply that never came chains EndOfStream.
    return isinstance(exc.__cause__, anyio.BrokenResourceError | anyio.ClosedResourceError | OSError)

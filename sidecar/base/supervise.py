"""Background work that may fail without taking the sidecar with it.

A task started in an anyio task group that raises cancels the whole group; for the sidecar's
main group that is every connection, the mesh and the gate. Work started through
:class:`Supervised` logs its traceback once and ends alone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from anyio.abc import TaskGroup

log = logging.getLogger("hive.sidecar")


async def guarded(func: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``func(*args)``; an exception is logged with its traceback and goes no further."""
    try:
        await func(*args)
    except Exception:
        log.exception("background task %s failed", getattr(func, "__qualname__", func))


class Supervised:
    """A task group's ``start_soon`` whose tasks cannot fail the group (see :func:`guarded`)."""

    def __init__(self, group: TaskGroup) -> None:
        self.group = group
        self.cancel_scope = group.cancel_scope

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        self.group.start_soon(guarded, func, *args, name=name or getattr(func, "__qualname__", None))

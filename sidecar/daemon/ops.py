"""The daemon's own ops: ``ping``, ``status`` and ``shutdown``."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..base.host import Connection

if TYPE_CHECKING:
    from .server import Sidecar


async def op_ping(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Answer that the sidecar is up.

    Reads no fields. Returns ``{"pong": true, "version", "pid", "home", "uptime"}`` (the state
    folder, and seconds since the sidecar started).
    """
    return {
        "pong": True,
        "version": __version__,
        "pid": os.getpid(),
        "home": str(sidecar.paths.home),
        "uptime": round(time.time() - sidecar.started, 3),
    }


async def op_status(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Describe this sidecar: who and where it is, its sessions and the person's terminal mailbox.

    Reads no fields. Returns ``{"version", "pid", "home", "socket", "person", "machine", "uptime",
    "sessions_live", "sessions_known", "terminal_unread", "terminal_unread_from", "team", "waiting"}``:
    ``team`` is the team's name or None, ``waiting`` the mailboxes a long poll waits on now.
    """
    now = time.time()
    count, senders = await sidecar.mailbox.counts(sidecar.terminal)
    live = [s for s in sidecar.sessions.by_key.values() if sidecar.sessions.is_live(s, now)]
    return {
        "version": __version__,
        "pid": os.getpid(),
        "home": str(sidecar.paths.home),
        "socket": str(sidecar.paths.socket),
        "person": sidecar.settings.person,
        "machine": sidecar.settings.machine,
        "uptime": round(now - sidecar.started, 3),
        "sessions_live": len(live),
        "sessions_known": len(sidecar.sessions.by_key),
        "terminal_unread": count,
        "terminal_unread_from": senders,
        "team": team_name(sidecar),
        "waiting": sorted(address for address, n in sidecar.parked.items() if n > 0),
    }


def team_name(sidecar: Sidecar) -> str | None:
    state = sidecar.team.state
    if state is None:
        return None
    return state.meta.body.name if state.meta is not None else state.id


async def op_shutdown(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Stop the sidecar once this reply is written.

    Reads no fields. Returns ``{"stopping": true, "pid"}``.
    """
    return {"stopping": True, "pid": os.getpid()}


OPS = {"ping": op_ping, "status": op_status, "shutdown": op_shutdown}

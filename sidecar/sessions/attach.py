"""The ``attach`` op: which hook-registered session an MCP server process belongs to.

Most harnesses do not say in a tool call which session made it (see the MCP session-identity
notes). Their hooks do know, and register the session with the harness's pid. The MCP server is
a descendant of that same harness process, so it sends its ancestor pids and the sidecar answers
with the session registered under the nearest of them.

This is correlation, not proof: a harness process that holds several live sessions at once
(``opencode serve``) is ambiguous, and the most recently seen one wins. Exact identities (a
session id in the call's ``_meta`` or stamped into its arguments by a hook) never come here.

Request: ``{"op": "attach", "pids": [ppid, grandparent, ...], "cwd": "...", "hint": "..."}``.
``hint`` is a session id from the MCP server's spawn-time environment: it wins while the sidecar
knows it as live, or knows nothing against it, and gives way when hooks ended it (Claude Code's
``/clear`` starts a new session in the same process and leaves the old id in the environment).
Reply: ``{"key", "name", "address", "agent", "via": "hint" | "ancestry"}``, or ``not_found``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest, NotFound
from .registry import Session, SessionsHost

if TYPE_CHECKING:
    from ..base.host import Connection

MAX_PIDS = 64


def _pids(value: Any) -> list[int]:
    if (
        not isinstance(value, list)
        or len(value) > MAX_PIDS
        or not all(isinstance(p, int) and not isinstance(p, bool) for p in value)
    ):
        raise BadRequest(
            f"attach needs 'pids': the caller's ancestor pids (integers), nearest first, at most {MAX_PIDS}"
        )
    return [p for p in value if p > 1]  # pid 1 adopts orphans: it is nobody's harness


def _answer(sidecar: SessionsHost, session: Session, via: str) -> dict[str, Any]:
    return {
        "key": session.key,
        "name": session.name,
        "address": sidecar.sessions.address(session),
        "agent": session.agent,
        "via": via,
    }


async def attach(sidecar: SessionsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Say which live session, registered by a hook, the calling MCP server process belongs to.

    Request: ``pids`` (list of int, required): the caller's ancestor pids, nearest first, at most 64.
    ``cwd`` (str, optional): the caller's folder, which breaks a tie between sessions of one harness
    process. ``hint`` (str, optional): a session id from the server's environment, preferred while
    live. Returns ``{"key", "name", "address", "agent", "via": "hint" | "ancestry"}``. Raises
    ``bad_request`` for ill-typed ``pids`` or ``hint``, ``not_found`` when no session matches.
    """
    pids = _pids(request.get("pids"))
    cwd = request.get("cwd")
    hint = request.get("hint")
    if hint is not None and not isinstance(hint, str):
        raise BadRequest("attach 'hint' must be a session id string")
    now = time.time()
    hinted = sidecar.sessions.by_key.get(hint) if hint else None
    if hinted is not None and sidecar.sessions.is_live(hinted, now):
        return _answer(sidecar, hinted, "hint")
    distance = {pid: i for i, pid in reversed(list(enumerate(pids)))}
    candidates = [s for s in sidecar.sessions.by_key.values() if s.pid in distance and sidecar.sessions.is_live(s, now)]
    if candidates:
        # The nearest harness ancestor first (a nested agent inside another agent's shell belongs
        # to the inner one), then a session started in the caller's folder, then the freshest.
        best = min(candidates, key=lambda s: (distance[s.pid or 0], s.cwd != cwd, -s.last_seen))
        return _answer(sidecar, best, "ancestry")
    if hinted is not None:
        return _answer(sidecar, hinted, "hint")
    raise NotFound("no live session was registered by a hook under any of this process's ancestors")


OPS = {"attach": attach}

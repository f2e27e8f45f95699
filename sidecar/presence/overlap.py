"""Overlap notices: two live sessions modifying the same path in the same repo.

When a session modifies a path that another live session (here or on a teammate's machine)
modified in the same normalized repo within 30 minutes, each of the two gets an ``overlap.noticed``
event once per (pair, path) per window; the features that take events act on it (the gate offers
it as an item of source ``overlap``: gate.sources.offer_overlap).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from ..base.host import PerSidecar
from .activity import WINDOW, recent_files, repo_root
from .events import Event, store_events, tell

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .events import PresenceHost

log = logging.getLogger("hive.sidecar.presence.overlap")

# (session key, other session's address, path) -> when it was told; once per window.
_TOLD: PerSidecar[dict[tuple[str, str, str], float]] = PerSidecar(lambda sidecar: {})


def _repo_of(session: Session) -> str:
    return session.repo or repo_root(session)


async def overlaps_for_local(sidecar: PresenceHost, session: Session, paths: list[str], now: float) -> None:
    """Tell ``session`` and every live session that modified one of ``paths`` too, here or a teammate's."""
    repo = _repo_of(session)
    if not repo:
        return
    me = sidecar.sessions.address(session)
    for other in list(sidecar.sessions.by_key.values()):
        if other.key == session.key or not sidecar.sessions.is_live(other, now) or _repo_of(other) != repo:
            continue
        theirs = recent_files(sidecar, other.key, now, modified_only=True)
        them = sidecar.sessions.address(other)
        for path in paths:
            if path in theirs:
                await _notice(sidecar, session, them, path, theirs[path], repo, now)
                await _notice(sidecar, other, me, path, now, repo, now)
    for who, files in _remote_sessions(sidecar, session.repo):
        for path in paths:
            if path in files:
                await _notice(sidecar, session, who, path, files[path], repo, now)


def _remote_sessions(sidecar: PresenceHost, repo: str) -> list[tuple[str, dict[str, float]]]:
    """Teammates' live sessions in ``repo`` (a normalized remote, so it means the same everywhere)."""
    if not repo:
        return []
    mesh = sidecar.mesh
    out = []
    now = time.time()
    for peer, presence in mesh.presence.items():
        member = mesh.team.member(peer)
        if member is None or not member.active or peer not in mesh.links:
            continue
        for s in presence.get("sessions", []):
            if s.get("repo") != repo:
                continue
            files = {f["path"]: f["at"] for f in s.get("files", []) if f.get("edit") and now - f["at"] <= WINDOW}
            if files:
                out.append((f"{member.person}/{s['name']}", files))
    return out


async def on_peer_presence(sidecar: PresenceHost, peer: str) -> None:
    """A teammate's presence arrived: tell local sessions that modified a path one of theirs modified."""
    try:
        now = time.time()
        for session in list(sidecar.sessions.by_key.values()):
            if not session.repo or not sidecar.sessions.is_live(session, now):
                continue
            mine = recent_files(sidecar, session.key, now, modified_only=True)
            if not mine:
                continue
            for who, files in _remote_sessions(sidecar, session.repo):
                for path in mine.keys() & files.keys():
                    await _notice(sidecar, session, who, path, files[path], session.repo, now)
    except Exception:
        log.exception("overlap check on peer presence failed")


async def _notice(
    sidecar: PresenceHost, session: Session, other: str, path: str, when: float, repo: str, now: float
) -> None:
    told = _TOLD.of(sidecar).get((session.key, other, path))
    if told is not None and now - told < WINDOW:
        return
    _TOLD.of(sidecar)[(session.key, other, path)] = now
    event = Event(
        at=now,
        session=session.key,
        harness=session.agent,
        action="overlap.noticed",
        path=path,
        method="hook",
        fidelity="inferred",
        detail=json.dumps({"other": other, "repo": repo, "at": when}),
    )
    await store_events(sidecar.store, [event])
    await tell(sidecar, session, [event])

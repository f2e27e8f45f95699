"""Overlap notices: two live sessions modifying the same path in the same repo.

When a session modifies a path that another live session (here or on a teammate's machine)
modified in the same normalized repo within 30 minutes, each of the two is told once per (pair,
path) per window, through the gate (source ``overlap``) when it runs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from ..base.defang import one_line
from ..base.host import PerSidecar
from .activity import WINDOW, recent_files, repo_root
from .events import Event, store_events

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..sessions.registry import Session

log = logging.getLogger("hive.sidecar.presence.overlap")

OVERLAP_SENDER = "hive/overlap"

# (session key, other session's address, path) -> when it was told; once per window.
_TOLD: PerSidecar[dict[tuple[str, str, str], float]] = PerSidecar(lambda sidecar: {})


def _repo_of(session: Session) -> str:
    return session.repo or repo_root(session)


async def overlaps_for_local(sidecar: MailHost, session: Session, paths: list[str], now: float) -> None:
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


def _remote_sessions(sidecar: MailHost, repo: str) -> list[tuple[str, dict[str, float]]]:
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


async def on_peer_presence(sidecar: MailHost, peer: str) -> None:
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
    sidecar: MailHost, session: Session, other: str, path: str, when: float, repo: str, now: float
) -> None:
    told = _TOLD.of(sidecar).get((session.key, other, path))
    if told is not None and now - told < WINDOW:
        return
    _TOLD.of(sidecar)[(session.key, other, path)] = now
    address = sidecar.sessions.address(session)
    ago = max(0, int((now - when) // 60))
    title = f"{one_line(other, 80)} also modified {one_line(path, 200)} ({ago} min ago)"
    body = (
        f"hive noticed that {one_line(other, 80)} modified {one_line(path, 200)} in {one_line(repo, 200)} "
        f"{ago} min ago, and this session modified it too. Coordinate with send_message to "
        f'"{one_line(other, 80)}" before the edits collide.'
    )
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
    try:
        from ..gate.engine import Evidence, Item, gate_of

        gate = gate_of(sidecar)
    except Exception:  # no gate in this sidecar: deliver directly
        await deliver_notice(sidecar, session.key, address, title, body, other, path)
        return
    if "overlap" not in gate.deliverers:
        gate.register("overlap", lambda item, decision: _gate_deliver(sidecar, item))
    # The overlap is a record hive itself observed (both sessions' modify events), which is what
    # lets the gate rate it above info without taking the proposer's word for it.
    await gate.record("overlap", f"{repo}:{path}", "open")
    decision = await gate.offer(
        Item(
            source="overlap",
            person=sidecar.settings.person,
            session=address,
            title=title,
            body=body,
            evidence=(Evidence("overlap", f"{repo}:{path}"), Evidence("file", f"{repo}:{path}")),
            key=f"overlap:{repo}:{path}:{other}",
            proposer=OVERLAP_SENDER,
            data={"session": session.key, "other": other, "path": path},
        )
    )
    await store_events(
        sidecar.store,
        [
            Event(
                at=time.time(),
                session=session.key,
                harness=session.agent,
                action="overlap.offered",
                path=path,
                method="hook",
                fidelity="inferred",
                detail=json.dumps(
                    {"other": other, "outcome": decision.outcome, "rule": decision.rule, "item": decision.item_id}
                ),
            )
        ],
    )


async def _gate_deliver(sidecar: MailHost, item: Any) -> None:
    data = dict(item.data)
    await deliver_notice(
        sidecar,
        str(data.get("session") or ""),
        item.session,
        item.title,
        item.body,
        str(data.get("other") or ""),
        str(data.get("path") or ""),
    )


async def deliver_notice(
    sidecar: MailHost, key: str, address: str, title: str, body: str, other: str, path: str
) -> None:
    """Put the notice in the session's mailbox (turn tier: shown at its next hook, recorded injected then)."""
    from ..mail.delivery import deliver_note

    await deliver_note(sidecar, address, f"{title}\n{body}", sender=OVERLAP_SENDER, agent="hive")

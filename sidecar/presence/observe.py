"""Observation: every hook becomes normalized events, and the events feed presence and overlap notices.

The ``hook`` op (:mod:`hive.sidecar.agents.hooks`) hands each identified hook here with its normalized
point. :func:`ingest` turns it into records of the append-only ``events`` table (seed Part 2 §3–§5):
normalized (:mod:`hive.sidecar.presence.normalize`), secrets redacted before anything is stored
(:mod:`hive.sidecar.presence.redaction`), appended once per tool call (:mod:`hive.sidecar.presence.events`).

Presence is derived from the same events, in memory (:mod:`hive.sidecar.presence.activity`): the
session's state, the paths it touched, its HEAD commit. The mesh sends it to peers (it is poked on
every change); ``who`` shows it (:func:`describe_extra`). A modified path another live session
modified too is an overlap (:mod:`hive.sidecar.presence.overlap`).

Also here: :func:`injected` (messages that entered a model's context, recorded as events) and the
``events`` op that reads the table.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import BadRequest
from ..screening.outbound import find_secrets
from . import doing
from .activity import OBSERVED as OBSERVED
from .activity import Observed as Observed
from .activity import git_head, repo_root, sensitive
from .activity import presence_of as presence_of
from .activity import recent_files as recent_files
from .activity import sanitise_extra as sanitise_extra
from .events import COLUMNS, tell
from .events import Event as Event
from .events import store_events as store_events
from .normalize import command_output, normalize, tool_input_of
from .overlap import on_peer_presence as on_peer_presence
from .overlap import overlaps_for_local

if TYPE_CHECKING:
    from hive.integrations.descriptor import HookPoint, Presence

    from ..base.host import Connection
    from ..sessions.registry import Session
    from .events import PresenceHost

log = logging.getLogger("hive.sidecar.presence.observe")

BUSY = {"prompt.submitted", "tool.invoked", "tool.completed", "file.read", "file.modified", "command.executed"}
IDLE = {"turn.stopped", "session.started"}


@functools.lru_cache(maxsize=4096)
def _presentable(rel: str, path: str) -> bool:
    """A path that may show in presence: inside the repo and not a credential file (hooks name the
    same few paths over and over, so the answer is cached)."""
    return not (sensitive(rel) or sensitive(path) or os.path.isabs(rel))


@functools.lru_cache(maxsize=4096)
def _relative(path: str, cwd: str, root: str) -> str:
    full = path if os.path.isabs(path) else os.path.normpath(os.path.join(cwd or root or "/", path))
    if root and (full == root or full.startswith(root.rstrip("/") + "/")):
        return os.path.relpath(full, root)
    return full


# A command's output showed a credential: hive.sidecar.mail.screen holds the session's next send.
SECRET_PRINTED = "secret.printed"
IN_THREAD = 8_000  # characters of output past which it is scanned in a worker thread


async def _look_for_secrets(sidecar: PresenceHost, command: Event, output: str) -> None:
    """Record that a command printed what looks like a secret: its kinds, never the secret."""
    try:
        if len(output) <= IN_THREAD:
            found = find_secrets(output)
        else:
            found = await anyio.to_thread.run_sync(find_secrets, output)
        if found:
            kinds = sorted({s.kind for s in found})
            printed = Event(**{**command.__dict__, "action": SECRET_PRINTED, "detail": json.dumps({"kinds": kinds})})
            await store_events(sidecar.store, [printed])
    except Exception:
        log.exception("could not look for secrets in a command's output")


async def ingest(
    sidecar: PresenceHost,
    harness: str,
    point: HookPoint,
    payload: dict[str, Any],
    session: Session,
    presence: Presence | None = None,
) -> list[Event]:
    """Store what one hook call says, update the session's presence, and look for overlaps.

    ``presence`` is the harness descriptor's: a point it lists under ``waiting_approval`` means an
    approval was asked (recorded as ``approval.requested``) and the session waits until the next
    busy or idle event answers it.
    """
    events = normalize(harness, point.event, payload, session.key, session.cwd)
    if not events:
        return []
    approval = ""
    if presence is not None and point.event in presence.waiting_approval:
        approval = "requested"
        events.append(
            Event(
                at=events[0].at,
                session=session.key,
                harness=harness,
                action="approval.requested",
                tool=events[0].tool,
                call_id=events[0].call_id,
                cwd=session.cwd,
                method=events[0].method,
                fidelity="inferred",
            )
        )
    await store_events(sidecar.store, events)
    command = next((e for e in events if e.action == "command.executed"), None)
    if command is not None and (output := command_output(payload)):
        sidecar.tasks.start_soon(_look_for_secrets, sidecar, command, output)  # off the hook's path
    sidecar.sessions.unmanaged.discard(session.key)  # a hook speaks for it: hive manages it now
    seen = OBSERVED.of(sidecar).setdefault(session.key, Observed(files={}))
    before = (seen.state, seen.head)
    now = events[0].at
    actions = {e.action for e in events}
    if approval == "requested":
        seen.state, seen.since = "waiting_approval", now
    elif actions & BUSY:
        seen.state, seen.since = "busy", now
    elif actions & IDLE:
        seen.state, seen.since = "idle", now
    root = repo_root(session) or session.cwd
    modified: list[str] = []
    assert seen.files is not None
    # Presence changes with a new path, an edit flag, or a path moving to the front of the list
    # (files are listed newest first); touching the newest path again changes nothing to send.
    files_changed = False
    for e in events:
        if e.action in ("file.read", "file.modified") and e.path:
            rel = _relative(e.path, session.cwd, root)
            if not _presentable(rel, e.path):
                continue  # credentials, and files outside the repo: recorded locally, never in presence
            had = seen.files.get(rel)
            edit = e.action == "file.modified" or (had is not None and had[1])
            files_changed = files_changed or had is None or had[1] != edit or seen.newest != rel
            seen.files[rel] = (now, edit)
            seen.newest = rel
            if e.action == "file.modified":
                modified.append(rel)
    if point.event in ("session.start", "prompt.submitted", "turn.stop") or "command.executed" in actions:
        seen.head = await git_head(root if repo_root(session) else "")
    if point.event == "session.end":
        OBSERVED.of(sidecar).pop(session.key, None)
        doing.doing_of(sidecar).forget(session.key)
    else:
        doing.doing_of(sidecar).follow(session)
        if events[0].tool:
            await doing.from_tool_call(sidecar, session, [tool_input_of(payload)])
    if files_changed or (seen.state, seen.head) != before:
        sidecar.mesh.poke()  # the mesh sends presence when it changed
    if modified:
        await overlaps_for_local(sidecar, session, modified, now)
    await tell(sidecar, session, events)
    return events


async def injected(sidecar: PresenceHost, key: str, ids: Sequence[str], channel: str, point: str) -> None:
    """Record that messages entered a session's model context: ``team.message.injected``, one event
    per message with its id, the session's tier and how it went in (``channel``: hook, push,
    plugin, mcp; ``point``: the hook event, or the push's way), so ``hive events`` answers what a
    model was shown. Recorded when the text left hive for the harness, never on deposit."""
    session = sidecar.sessions.by_key.get(key)
    if not ids or session is None:
        return
    now = time.time()
    await store_events(
        sidecar.store,
        [
            Event(
                at=now,
                session=key,
                harness=session.agent,
                action="team.message.injected",
                method=channel,
                fidelity="observed",
                detail=json.dumps({"id": i, "tier": session.tier, "channel": channel, "point": point}),
            )
            for i in ids
        ],
    )


# ---- who ---------------------------------------------------------------------------------------


def describe_extra(sidecar: PresenceHost, key: str | None, person: str, machine: str, name: str) -> dict[str, Any]:
    """``state``, ``files`` (paths) and ``head`` for one directory entry, local or a teammate's."""
    if key is not None:
        extra = presence_of(sidecar, key)
        session = sidecar.sessions.by_key.get(key)
        extra["unmanaged"] = extra["unmanaged"] and not (session is not None and session.holders)
    else:
        extra = {"state": "", "files": [], "head": "", "unmanaged": False}
        mesh = sidecar.mesh
        for member in mesh.team.members():
            if member.person == person and member.machine == machine:
                for s in mesh.presence.get(member.key, {}).get("sessions", []):
                    if s.get("name") == name:
                        extra = {
                            "state": s.get("state", ""),
                            "files": s.get("files", []),
                            "head": s.get("head", ""),
                            "unmanaged": s.get("unmanaged") is True,
                        }
    return {
        "state": extra["state"],
        "head": extra["head"],
        "files": [f["path"] for f in extra["files"]],
        "unmanaged": extra["unmanaged"],
    }


# ---- ops ---------------------------------------------------------------------------------------


async def op_events(sidecar: PresenceHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Read the newest observed events (tool calls, files, commands) of this machine's sessions.

    Request: ``session`` (str, optional): a key, name or address; ``action`` (str, optional): one
    kind of event; ``limit`` (int, optional): how many, default 100, at most 10,000. Returns
    ``{"events": [{"id", "at", "session", "harness", "action", "tool", "call_id", "path", "command",
    "exit_code", "cwd", "method", "fidelity", "detail"}]}``, oldest first. Raises ``bad_request``
    for a ``limit`` that is not a number.
    """
    try:
        limit = min(max(int(request.get("limit") or 100), 1), 10_000)
    except (TypeError, ValueError) as exc:
        raise BadRequest("limit is a number") from exc
    where, params = [], []
    ref = request.get("session")
    if isinstance(ref, str) and ref:
        session = sidecar.sessions.by_key.get(ref) or sidecar.sessions.by_name(ref.rpartition("/")[2])
        where.append("session = ?")
        params.append(session.key if session else ref)
    action = request.get("action")
    if isinstance(action, str) and action:
        where.append("action = ?")
        params.append(action)
    sql = (
        f"SELECT id, {', '.join(COLUMNS)} FROM events {'WHERE ' + ' AND '.join(where) if where else ''} "
        "ORDER BY id DESC LIMIT ?"
    )
    rows = await sidecar.store.fetchall(sql, (*params, limit))
    return {"events": [dict(row) for row in reversed(rows)]}


OPS = {"events": op_events}

"""The session ops: register a session, rename it or say what it is doing, end it, and ``who``."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from hive.integrations import registry

from ..base.config import HOUR
from ..base.defang import one_line
from ..base.errors import BadRequest, Refused
from ..base.git import git_facts
from ..base.host import Connection
from ..gate.host import GateHost
from ..mail import attachments
from ..mail.addresses import Entry
from ..mail.delivery import push
from ..presence import observe
from ..sessions import folders
from ..team import projects

log = logging.getLogger("hive.sidecar")


class AgentsHost(GateHost, Protocol):
    """What the ops harnesses call use of the daemon: all of the layers below, and when it started
    and last forgot gone sessions (both only for :func:`maybe_forget`)."""

    started: float
    forgot_at: float


async def op_register(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    if isinstance(info.get("cwd"), str) and await folders.is_off(sidecar, info["cwd"]):
        raise Refused(
            f"the person turned hive off in this folder ({info['cwd']}); `hive folder PATH on` turns it back on"
        )
    if isinstance(info.get("cwd"), str):
        # The repository around it, as a hook's registration finds it: a plugin's or MCP
        # server's session is then one of that repository's for overlaps and project lessons.
        info = {**git_facts(info["cwd"]), **info}
    hold = bool(request.get("hold") or request.get("push"))
    session, new = await sidecar.sessions.register(info, conn.id if hold else None)
    attachments.note_plugin_folder(session, info, conn.pid, registry.binaries())
    if new and session.repo:
        sidecar.tasks.start_soon(projects.on_session, sidecar, session.repo)  # its first session proposes its person
    sidecar.sessions.unmanaged.discard(session.key)  # a client speaks for it
    if request.get("push") and session.tier == "push":
        conn.push_sessions.add(session.key)
    await maybe_forget(sidecar)
    address = sidecar.sessions.address(session)
    count, senders = await sidecar.mailbox.counts(address)
    if session.key in conn.push_sessions:
        await push(sidecar, session)
    return {
        "key": session.key,
        "name": session.name,
        "address": address,
        "tier": session.tier,
        "new": new,
        "unread": count,
        "unread_from": senders,
    }


async def op_set_status(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Set what a session is doing, rename it, or both.

    Request: ``session`` (str, required): its key, name or address. ``doing`` (str, optional): the
    line others see in ``who``. ``name`` (str, optional): a new name. Returns ``{"name", "address",
    "renamed_from"}``, the old address when the name changed, else None. Raises ``not_found``, and
    ``conflict`` for a name the person, the terminal mailbox or another session has.
    """
    session = sidecar.sessions.find(request.get("session"))
    doing = request.get("doing")
    name = request.get("name")
    if doing is not None and not isinstance(doing, str):
        raise BadRequest("doing must be a string")
    if name is not None and not isinstance(name, str):
        raise BadRequest("name must be a string")
    old = await sidecar.sessions.set_status(session, doing, name)
    return {"name": session.name, "address": sidecar.sessions.address(session), "renamed_from": old}


async def op_end(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """End a session: it is offline from now on, and this connection stops pushing to it.

    Request: ``session`` (str, required): its key, name or address. Returns ``{"ended": name}``.
    Raises ``not_found``.
    """
    session = sidecar.sessions.find(request.get("session"))
    await sidecar.sessions.end(session)
    conn.push_sessions.discard(session.key)
    return {"ended": session.name}


async def op_who(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """List the sessions this sidecar knows: its own and, in a team, the teammates' machines'.

    Request: ``session`` (str, optional): the asking session, returned as ``me``. ``all`` (bool,
    optional): offline sessions too. ``filter`` (str, optional): keep sessions with a field
    containing it (case-insensitive). Returns ``{"person", "machine", "me", "sessions"}``, each
    session with its address, person, machine, name, agent, repo, branch, folder, doing, tier, live
    and presence (state, head, files, unmanaged). Raises ``not_found`` for an unknown ``session``.
    """
    await maybe_forget(sidecar)
    me = None
    if request.get("session"):
        me = sidecar.sessions.address(sidecar.sessions.find(request["session"]))
    entries = sidecar.directory()
    if not request.get("all"):
        entries = [e for e in entries if e.live]
    needle = str(request.get("filter") or "").lower()
    described = [describe(sidecar, e) for e in entries]
    if needle:
        described = [d for d in described if any(needle in str(v).lower() for v in d.values())]
    described.sort(key=lambda d: (d["person"], d["machine"], not d["live"], d["name"]))
    return {"person": sidecar.settings.person, "machine": sidecar.settings.machine, "me": me, "sessions": described}


def describe(sidecar: AgentsHost, entry: Entry) -> dict[str, Any]:
    return {
        "address": entry.address,
        "person": entry.person,
        "machine": entry.machine,
        "name": one_line(entry.name, 64),
        "agent": one_line(entry.agent, 32),
        "repo": one_line(entry.repo, 200),
        "branch": one_line(entry.branch, 200),
        "folder": one_line(entry.folder, 200),
        "doing": one_line(entry.doing, 200),
        "tier": entry.tier,
        "live": entry.live,
        **observe.describe_extra(sidecar, entry.key, entry.person, entry.machine, entry.name),
    }


async def maybe_forget(sidecar: AgentsHost) -> None:
    now = time.time()
    if now - sidecar.started < sidecar.settings.forget_grace:
        return
    if now - sidecar.forgot_at < min(HOUR, sidecar.settings.forget_after / 2):
        return
    sidecar.forgot_at = now
    forgotten = await sidecar.sessions.forget_gone(now)
    if forgotten:
        log.info("forgot %d gone sessions: %s", len(forgotten), ", ".join(forgotten))


OPS = {"register": op_register, "set_status": op_set_status, "end": op_end, "who": op_who}

"""The ``hook`` and ``watch`` ops: what harness hook commands ask the sidecar.

The hook client (``hive.integrations.hook_client``) does no parsing; this module does the rest.
It tells which harness really calls (Cursor also runs Claude Code's hooks), finds the hook point,
registers or refreshes the session from the hook's stdin, and answers with the exact stdout that
puts waiting mail into the model's context in that harness's shape.

``hook`` request: ``{"harness", "event", "stdin": <raw text> | "payload": <object>, "env": {...},
"ppid", "cwd"}``; reply ``{"stdout", "ids", "session"}``, plus ``"stderr"`` and ``"exit": 2`` at a
``stderr_block`` point. The client prints ``stdout`` as is (and ``stderr``, exiting 2) and
then says so (``hook_written`` with ``ids``). The mail is then held for the harness process
(see :mod:`hive.sidecar.mail.mailbox`): printed is not yet seen, the model call comes after the hook.
Proof that the model saw it is the session's next hook at a point only a model's answer leads
to (a tool call, a turn end: :data:`PROOF`), which confirms it; so does the session's own
``check_inbox``. If the harness dies first the mail is visible again for the next turn or
session at that address; a session that ends without the proof leaves it unread.

- Mid-turn points (``wakes_only``) inject waking mail only; stop, prompt and start points inject
  everything. A stop point injects nothing when the harness says this stop already follows a
  block (``stop_hook_active``; Cursor's ``loop_count``), so hive never keeps an agent running.
- ``session.end`` ends the session; one for a session never seen registers nothing. Busy, idle
  and waiting are presence's (:func:`hive.sidecar.presence.observe.ingest`), from the same events.
- The session's pid is the harness process (the hook's parent, or the process above the shell
  it ran the hook through), so the MCP ``attach`` op can find the session by ancestry.

``watch`` is the Claude Code push watcher's long poll: the same caller fields plus ``wait`` and
``peek``; it registers the session only if unknown, waits for waking mail and answers
``{"session", "ids", "text", "ended"}``; ``ended`` tells the watcher to exit: the session ended,
or the harness really calling has no watcher push. What it shows is held and confirmed exactly
as a hook's reply (the watcher says ``hook_written`` once its stderr is written). While it waits
the mailbox counts as read by a waiting reader, so senders are told the message is delivered.

``doing`` is how a plugin inside its harness (opencode, pi) passes on what the harness told it:
``{"session", "title", "todos"}``, either field optional. ``todos`` is the whole todo list
(``[{content, status}]``); its in-progress item is the task, an empty list clears it. The line is
made, defanged and clipped by :mod:`hive.sidecar.presence.doing` as for every other source.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from hive.integrations import registry
from hive.integrations.descriptor import HookPoint
from hive.integrations.hook_client import ENV_FILE, ENV_NAMES, harness_pid, start_time

from ..base import procs
from ..base.config import slug
from ..base.errors import BadRequest, NotFound
from ..base.git import git_facts
from ..base.wire import parse
from ..lessons import turn as lesson_turn
from ..mail import codex_push
from ..mail.injection import fit
from ..mail.mailbox import Holder
from ..mail.render import Message
from ..presence import observe
from ..presence.doing import doing_of, in_progress
from ..sessions import folders
from ..sessions.registry import Session

if TYPE_CHECKING:
    from ..base.host import Connection
    from .sessions import AgentsHost

MAX_WAIT = 600.0
# Hook points a harness reaches only after a model call returned (the model asked for a tool, or
# answered and ended its turn): mail shown at an earlier hook of the session reached that call.
# A prompt or a session start comes before any model call, so it proves nothing.
PROOF = frozenset({"tool.before", "tool.after", "turn.stop"})
MAX_KEY = 200
MAX_TITLE = 4096  # a plugin's title is cut to one short line anyway: more is never read
MAX_TODOS = 500
WATCHER = "async_rewake"  # the push mechanism (Tiers.push) the watch op serves

_published: set[str] = set()

log = logging.getLogger("hive.sidecar.agents.hooks")

# Loading the plugins scans entry points (tens of ms): pay it when the sidecar starts, not at
# the first hook, which has 150 ms in all. A broken third-party plugin must not keep the sidecar
# down: hooks then fail, and a failed hook is a no-opinion answer.
try:
    registry.plugin_manager()
except Exception:
    log.exception("loading the harness plugins failed; hooks answer no opinion until it is fixed")


@dataclass(frozen=True)
class Caller:
    """One hook call, understood: who really calls, at which point, for which session."""

    harness: registry.Harness
    point: HookPoint | None
    payload: dict[str, Any]
    env: dict[str, str]
    key: str | None


def _payload(request: dict[str, Any]) -> dict[str, Any]:
    raw = request.get("stdin")
    if isinstance(raw, str):
        # A model's tool input is in it: nested past what parse takes, the event keeps no payload.
        value = parse(raw) if raw.strip() else {}
    else:
        value = request.get("payload")
    return value if isinstance(value, dict) else {}


def _env(request: dict[str, Any]) -> dict[str, str]:
    env = request.get("env")
    if not isinstance(env, dict):
        return {}
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}


def _point(harness: registry.Harness, claimed: str, native: str, payload: dict[str, Any]) -> HookPoint | None:
    own = claimed == harness.name or claimed in harness.identity.aliases
    told = payload.get("hook_event_name")
    # Another harness running this hook names its own event in stdin; ours is in argv.
    for name in (native, told) if own else (told, native):
        if isinstance(name, str) and (point := harness.point(name)) is not None:
            return point
    if not own:
        with contextlib.suppress(KeyError):
            theirs = registry.harness(claimed).point(native)
            if theirs is not None:
                return next((p for p in harness.hook_points() if p.event == theirs.event), None)
    return None


def _session_key(harness: registry.Harness, payload: dict[str, Any], env: dict[str, str]) -> str | None:
    identity = harness.identity
    candidates = [payload.get(identity.stdin_session), *(env.get(name) for name in identity.session_env)]
    for value in candidates:
        if isinstance(value, str) and 0 < len(value.strip()) <= MAX_KEY:
            return value.strip()
    return None


def understand(request: dict[str, Any]) -> Caller:
    """The caller of a ``hook`` or ``watch`` request. Raises BadRequest for an unknown harness."""
    claimed = request.get("harness")
    native = request.get("event")
    if not isinstance(claimed, str) or not isinstance(native, str):
        raise BadRequest("a hook request names its 'harness' and native 'event'")
    payload = _payload(request)
    env = _env(request)
    try:
        harness = registry.identify_caller(claimed, payload, env)
    except KeyError as exc:
        raise BadRequest(str(exc.args[0])) from exc
    return Caller(harness, _point(harness, claimed, native, payload), payload, env, _session_key(harness, payload, env))


def _cwd(caller: Caller, request: dict[str, Any]) -> str:
    value = caller.payload.get(caller.harness.identity.stdin_cwd)
    if isinstance(value, list):  # Cursor: workspace_roots, the first is the working folder
        value = next((v for v in value if isinstance(v, str) and v), None)
    if isinstance(value, str) and value:
        return value
    fallback = request.get("cwd")
    return fallback if isinstance(fallback, str) else ""


async def _harness_pid(ppid: int) -> int:
    if sys.platform.startswith("linux"):
        return harness_pid(ppid)  # a few /proc reads
    return await anyio.to_thread.run_sync(harness_pid, ppid)  # `ps` elsewhere


async def refresh(
    sidecar: AgentsHost, caller: Caller, request: dict[str, Any], client_pid: int | None, force: bool = False
) -> Session:
    """Register the caller's session, or only note a sign of life when nothing changed.

    ``client_pid`` is the kernel's pid of the connecting process: the hook client's parent the
    request names is believed only when it is that process's parent, so a client cannot make
    another process (one it started in some other folder) the session's harness."""
    assert caller.key is not None
    session = sidecar.sessions.by_key.get(caller.key)
    cwd = _cwd(caller, request)
    transcript = caller.payload.get(caller.harness.identity.transcript_field)
    transcript = transcript if isinstance(transcript, str) else ""
    force = force or caller.key in sidecar.sessions.unmanaged  # found on disk first: register it as the hook says
    ppid = request.get("ppid")
    ppid = ppid if isinstance(ppid, int) and not isinstance(ppid, bool) and ppid > 1 else None
    # A pid still to learn is a reason to register again, but only when this request can tell it.
    if (
        session is not None
        and not force
        and session.ended_at is None
        and (session.pid or ppid is None)
        and session.agent == slug(caller.harness.name)
        and session.cwd == (cwd or session.cwd)
        and session.transcript == (transcript or session.transcript)
    ):
        sidecar.sessions.seen(session)
        return session
    info: dict[str, Any] = {
        "key": caller.key,
        "agent": caller.harness.name,
        "cwd": cwd,
        "transcript": transcript,
        "tier": caller.harness.tiers().default,
    }
    if ppid is not None and procs.parent(client_pid) == ppid:  # checked here, off the common path
        info["pid"] = await _harness_pid(ppid)
    info.update(git_facts(cwd))
    session, _ = await sidecar.sessions.register(info, None)
    return session


def _continuing(payload: dict[str, Any]) -> bool:
    """This stop follows one hive (or anything) already blocked: let the agent stop now."""
    loops = payload.get("loop_count")
    return payload.get("stop_hook_active") is True or (isinstance(loops, int) and loops > 0)


async def _mail_for(sidecar: AgentsHost, session: Session, point: HookPoint, payload: dict[str, Any]) -> list[Message]:
    if point.inject is None or point.event == "session.end":
        return []
    if point.event == "turn.stop" and _continuing(payload):
        return []
    messages = await sidecar.mailbox.unread(sidecar.sessions.address(session))
    return [m for m in messages if m.wake] if point.wakes_only else messages


def _publish_env_names(sidecar: AgentsHost) -> None:
    """Tell hook clients the environment variables third-party harnesses name (see ENV_NAMES)."""
    home = str(sidecar.paths.home)
    if home in _published:
        return
    _published.add(home)
    wanted = {name for h in registry.harnesses().values() for name in (*h.identity.session_env, *h.identity.caller_env)}
    extra = sorted(wanted - set(ENV_NAMES))
    path = sidecar.paths.home / ENV_FILE
    with contextlib.suppress(OSError):
        if not extra:
            path.unlink(missing_ok=True)
            return
        temporary = path.with_suffix(".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(extra) + "\n")
        os.replace(temporary, path)


async def session_ended(sidecar: AgentsHost, session: Session) -> None:
    """The session is over: its end hook said so, or its harness process exited (sessions.watch_processes)."""
    sidecar.mailbox.release_held(session.key)
    await sidecar.sessions.end(session)
    for conn in sidecar.connections.values():
        conn.push_sessions.discard(session.key)
    sidecar.mesh.poke()


async def hook(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Answer one harness hook: register or refresh its session, record its events, and return the
    stdout that puts waiting mail (and turn-tier lessons) into the model's context.

    Request: ``harness`` (str, required): the harness the hook was installed for; ``event`` (str,
    required): its native event name; ``stdin`` (str) or ``payload`` (object): the hook's input;
    ``env`` (object of str): the variables that name the session; ``ppid`` (int): the hook client's
    parent; ``cwd`` (str): the folder when the input names none. Returns ``{"stdout", "ids",
    "session"}``, plus ``"stderr"`` and ``"exit": 2`` at a ``stderr_block`` point; ``ids`` are what
    the client confirms with ``hook_written``. Raises ``bad_request`` without ``harness`` and
    ``event``, or for a harness no plugin knows.
    """
    _publish_env_names(sidecar)
    caller = understand(request)
    point = caller.point
    if point is None or caller.key is None:
        return {"stdout": point.no_opinion if point else "", "ids": [], "session": caller.key}
    if await folders.is_off(sidecar, _cwd(caller, request)):  # the person turned hive off here
        return {"stdout": point.no_opinion, "ids": [], "session": None}
    if point.event == "session.end" and caller.key not in sidecar.sessions.by_key:
        # An end with no start: a health check (`claude mcp list` runs SessionEnd alone). Registering
        # it would leave a gone session that mail could be queued to and nobody would ever read.
        return {"stdout": point.no_opinion, "ids": [], "session": None}
    session = await refresh(sidecar, caller, request, conn.pid, force=point.event == "session.start")
    session.harness_cwd = _cwd(caller, request) or session.harness_cwd  # what attachments are confined to
    nothing = {"stdout": point.no_opinion, "ids": [], "session": session.key}
    try:  # events, presence and overlaps; a failure there must not cost the hook its mail
        await observe.ingest(sidecar, caller.harness.name, point, caller.payload, session, caller.harness.presence())
    except Exception:
        log.exception("recording the hook's events failed")
    if point.event in PROOF:
        await sidecar.mailbox.confirm_held(session.key)
    if point.event == "prompt.submitted":  # the person typed into it: its agents' runs start again
        await sidecar.guards.prompted(sidecar.sessions.address(session))
    # Mail the sidecar pushed into Codex: read if the rollout shows a model call had it, visible
    # again (for this very hook to show) if its turn ended without it.
    await codex_push.settle(sidecar, session)
    if point.event == "session.end":
        await session_ended(sidecar, session)
        return nothing
    if point.event == "turn.stop":
        await _turn_ended(sidecar, session)
    messages, mail = fit(sidecar, session, await _mail_for(sidecar, session, point, caller.payload))
    lessons = await lesson_turn.due(sidecar, session, point, caller.payload)  # turn-tier recall
    if not mail and not lessons.lines:
        return nothing
    text = "\n\n".join(part for part in (mail, lessons.text) if part)
    stdout = caller.harness.reply(point, text, caller.payload)
    if stdout == point.no_opinion:
        return nothing  # this point cannot carry text to the model (a plugin's, say)
    await lesson_turn.shown(sidecar, session, lessons)
    sidecar.mailbox.mark_shown(messages, await _holder(session, request), conn.id)
    conn.hook_shown = (session.key, "hook", point.native)  # recorded injected once the client printed it
    ids = [m.id for m in messages]
    if point.inject == "stderr_block":  # the client writes it to stderr and exits 2 (descriptor.py)
        return {"stdout": point.no_opinion, "stderr": stdout, "exit": 2, "ids": ids, "session": session.key}
    return {"stdout": stdout, "ids": ids, "session": session.key}


async def _holder(session: Session, request: dict[str, Any]) -> Holder:
    """The harness process this hook's reply goes to (pid 0 when the request does not say)."""
    ppid = request.get("ppid")
    if not isinstance(ppid, int) or isinstance(ppid, bool) or ppid <= 1:
        return Holder(session.key, 0)
    pid = await _harness_pid(ppid)
    return Holder(session.key, pid, start_time(pid))


async def hook_written(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The hook client wrote its reply (with these ids) to the harness: hold them for the harness now.

    Request: ``ids`` (list of str, required): the message ids of the reply it printed. Returns
    ``{"held": n}``, the messages this connection was shown that the harness now holds. Raises
    ``bad_request`` without ``ids``.
    """
    ids = request.get("ids")
    if not isinstance(ids, list):
        raise BadRequest("hook_written needs 'ids': the message ids in the reply the hook printed")
    printed = [
        i
        for i in ids
        if isinstance(i, str)
        and (showing := sidecar.mailbox.inflight.get(i)) is not None
        and showing.connection == conn.id
    ]
    held = sidecar.mailbox.written(ids, conn.id)
    if conn.hook_shown is not None:
        key, channel, point = conn.hook_shown
        conn.hook_shown = None
        await observe.injected(sidecar, key, printed, channel, point)
    return {"held": held}


async def _turn_ended(sidecar: AgentsHost, session: Session) -> None:
    """A turn ending is a breakpoint: the gate releases what waited for this session into its
    mailbox now, so the mail query below carries it in this very reply."""
    from ..gate.engine import gate_of

    try:
        await gate_of(sidecar).breakpoint(sidecar.settings.person, sidecar.sessions.address(session), "turn")
    except Exception:  # the gate's trouble must not cost the hook its mail
        log.exception("the gate's turn breakpoint failed")


async def plugin_event(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Take what a plugin inside its harness (opencode, pi) saw, told as a hook would tell it.

    Request: ``harness`` and ``event`` (str, required: the native name), ``payload`` (object) and
    ``env`` (object), as for ``hook``; they name the session. Returns ``{"text"}``: the turn-tier
    lessons due at a tool result, else "". Raises ``bad_request`` as ``hook`` does.

    It becomes the same normalized events (busy and idle, files, HEAD, overlaps, doing, commands
    for the gate), a prompt restarts the session's loop-guard runs, and a turn's end is the
    gate's breakpoint. At a tool result the reply's ``text`` holds the turn-tier lessons due,
    which the plugin adds to that result itself. Mail is no part of it: a plugin takes and holds
    its mail with inbox, hold and seen, so an event never shows or confirms any. A session the
    plugin has not registered is not made up here: the event is dropped.
    """
    caller = understand(request)
    point = caller.point
    session = sidecar.sessions.by_key.get(caller.key) if caller.key else None
    nothing: dict[str, Any] = {"text": ""}
    if point is None or session is None or session.ended_at is not None:
        return nothing
    if await folders.is_off(sidecar, session.cwd):
        return nothing
    sidecar.sessions.seen(session)
    try:
        await observe.ingest(sidecar, caller.harness.name, point, caller.payload, session, caller.harness.presence())
    except Exception:
        log.exception("recording the plugin's events failed")
    if point.event == "prompt.submitted":
        await sidecar.guards.prompted(sidecar.sessions.address(session))
    if point.event == "turn.stop":
        await _turn_ended(sidecar, session)
    if point.event != "tool.after":
        return nothing
    lessons = await lesson_turn.due(sidecar, session, point, caller.payload)
    if not lessons.lines:
        return nothing
    await lesson_turn.shown(sidecar, session, lessons)
    return {"text": lessons.text}


async def watch(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's push watcher's long poll: wait for the session's waking mail.

    Request: the caller fields of ``hook`` (``harness``, ``event``, ``stdin`` or ``payload``, ``env``,
    ``ppid``, ``cwd``); ``wait`` (number, optional): seconds, at most 600; ``peek`` (bool, optional):
    answer at once without waiting or showing anything. Returns ``{"session", "ids", "text",
    "ended"}``; ``ended`` tells the watcher to exit (the session ended, or this harness has no watcher
    push). Raises ``bad_request`` when nothing names a session or ``wait`` is not a number.
    """
    caller = understand(request)
    if caller.key is None:
        raise BadRequest("the watcher's stdin and environment carry no session id")
    try:
        wait = min(max(float(request.get("wait") or 0), 0.0), MAX_WAIT)
    except (TypeError, ValueError) as exc:
        raise BadRequest("wait is a number of seconds, at most 600") from exc
    answer: dict[str, Any] = {"session": caller.key, "ended": False, "ids": [], "text": ""}
    if caller.harness.tiers().push != WATCHER:
        # Another harness running Claude Code's hooks (Cursor) may run the watcher as a plain,
        # blocking hook: let it go at once.
        return {**answer, "ended": True}
    session = sidecar.sessions.by_key.get(caller.key)
    if session is None:  # the watcher may start before the session-start hook registers it
        session = await refresh(sidecar, caller, request, conn.pid, force=True)
    if session.ended_at is not None:
        return {**answer, "ended": True}
    sidecar.sessions.seen(session)
    if request.get("peek"):
        return answer
    address = sidecar.sessions.address(session)
    deadline = time.monotonic() + wait
    while True:
        arrival = sidecar.mailbox.watch(address)
        waking = [m for m in await sidecar.mailbox.unread(address) if m.wake]
        # Past the injection cap the mail waits for a pull: the watcher parks as if there were none.
        messages, text = fit(sidecar, session, waking) if waking else ([], "")
        remaining = deadline - time.monotonic()
        if messages or remaining <= 0 or session.ended_at is not None:
            break
        sidecar.parked[address] += 1
        try:
            await sidecar.mailbox.wait(address, arrival, remaining)
        finally:
            sidecar.parked[address] -= 1
    if session.ended_at is not None:
        return {**answer, "ended": True}
    # The watcher's text reaches the model only with the woken turn: held like a hook's reply.
    sidecar.mailbox.mark_shown(messages, await _holder(session, request), conn.id)
    conn.hook_shown = (session.key, "push", "watcher")
    return {**answer, "ids": [m.id for m in messages], "text": text}


async def hold(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A plugin inside its harness (opencode) put mail it was shown into a session: the harness
    process on the other end of this connection holds it until ``seen`` (or its death).

    Request: ``session`` (str, required): the session's key; ``ids`` (list of str, required): the
    messages it put in. Returns ``{"held": n}``, counting only that session's unread mail. Raises
    ``bad_request`` without ``ids``, ``not_found`` for a key not registered here.
    """
    ids = request.get("ids")
    if not isinstance(ids, list):
        raise BadRequest("hold needs 'ids': the message ids the plugin put into the session")
    session = _plugin_session(sidecar, request)
    mine = {m.id for m in await sidecar.mailbox.unread(sidecar.sessions.address(session), include_inflight=True)}
    pid = conn.pid or 0
    holder = Holder(session.key, pid, start_time(pid) if pid else "")
    taken = [i for i in ids if i in mine]
    held = sidecar.mailbox.hold(taken, holder)
    await observe.injected(sidecar, session.key, taken, "plugin", "push")
    return {"held": held}


async def seen(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A plugin saw its harness send the session's next model request: what it holds reached the model.

    Request: ``session`` (str, required): the session's key. Returns ``{"confirmed": n}``, the held
    messages now read. Raises ``not_found`` for a key not registered here.
    """
    session = _plugin_session(sidecar, request)
    return {"confirmed": await sidecar.mailbox.confirm_held(session.key)}


async def doing(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A plugin says the session's title and/or todo list, as its harness told it.

    Request: ``session`` (str, required): the session's key; ``title`` (str, optional); ``todos``
    (list of ``{content, status}``, optional): the whole list, whose in-progress item is the task
    (empty clears it). Returns ``{"doing"}``, the session's line now. Raises ``bad_request`` for
    ill-typed fields, ``not_found`` for a key not registered here.
    """
    session = _plugin_session(sidecar, request)
    title = request.get("title")
    todos = request.get("todos")
    if title is not None and not isinstance(title, str):
        raise BadRequest("title must be a string")
    if todos is not None and not isinstance(todos, list):
        raise BadRequest("todos must be a list of {content, status} objects")
    task = None
    if todos is not None:
        task = in_progress({"todos": todos[:MAX_TODOS]}) if todos else ""
    await doing_of(sidecar).note(session, title[:MAX_TITLE] if title is not None else None, task)
    return {"doing": session.doing}


def _plugin_session(sidecar: AgentsHost, request: dict[str, Any]) -> Session:
    key = request.get("session")
    session = sidecar.sessions.by_key.get(key) if isinstance(key, str) else None
    if session is None:
        raise NotFound(f"no session with key {key!r} is registered here; register it first")
    return session


OPS = {
    "hook": hook,
    "hook_written": hook_written,
    "watch": watch,
    "hold": hold,
    "seen": seen,
    "doing": doing,
    "plugin_event": plugin_event,
}

"""Push into Codex sessions: the sidecar itself hands waking mail to the Codex TUI's app-server.

Codex has no plugin that could hold a connection to the sidecar, so the sidecar delivers: a Codex
session's key is its thread id (hook stdin ``session_id``) and its rollout transcript names the
CODEX_HOME it runs under, whose control socket reaches the TUI's app-server
(:mod:`hive.integrations.codex.app_server`): ``turn/steer`` into a running turn, ``turn/start``
when idle, ``codex queue`` when the socket cannot be used.

The mail is in flight while the push runs. Codex accepting it (``turn/steer``, ``turn/start``,
``codex queue``) is not a read: the model has not seen it yet, and a turn aborted or a Codex that
exits first never shows it. So the mail is then *held* for the TUI process (:class:`Holder` with
``pushed``), hidden while it lives, and read only once the thread's rollout shows a model call had
it: Codex records the pushed text as a user message when it puts it into the thread's history, and
the model's answer after it (:func:`verdict`). The sidecar follows the rollout after a push, and
every hook of the session looks too. If the turn the text went into ends (completed or aborted)
without it, or the TUI exits, the mail is visible again for the next hook or push. The session's
next hook or ``check_inbox`` does not confirm pushed mail: the model call before it may have
begun before the push. A push that fails (no Codex TUI runs the thread: ``codex exec``, a TUI
started with ``--dangerously-bypass-hook-trust``, or one that was closed; the daemon refused) puts
the mail back at once and drops the session to the turn tier, which senders and ``list_team`` are
told from then on.

What is Codex's (its home, which process is its TUI, where its rollout is, the app-server
protocol) the Codex plugin answers through ``hive_app_server``
(:mod:`hive.integrations.codex.tui`); a push first asks it for the TUI running under the session's
CODEX_HOME, and counts none as a failed push (a closed TUI's thread stays loaded for minutes).

A sender waits at most :data:`ANSWER_WITHIN` for Codex's answer; past that the push goes on in
the sidecar's task group and the sender is told it was pushed (it is in Codex's hands, or the
session is downgraded and the mail shown at its next hook); ``read`` comes with the proof.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from hive.integrations import registry
from hive.integrations.push import PushFailed

from ..base.host import PerSidecar
from ..base.wire import json_objects
from ..presence import observe
from ..sessions.registry import Session
from .injection import fit
from .mailbox import Holder

if TYPE_CHECKING:
    from .host import MailHost

MECHANISM = "app_server"  # the Tiers.push this module serves
ANSWER_WITHIN = 3.0

log = logging.getLogger("hive.sidecar.mail.codex_push")


def serves(session: Session) -> bool:
    """Whether this session's harness pushes through the app-server (Codex, or a plugin naming it)."""
    try:
        return registry.harness(session.agent).tiers().push == MECHANISM
    except KeyError:
        return False  # an agent no descriptor names (a script, a test client)
    except Exception:  # a broken third-party plugin must not fail a send: the other push paths still work
        log.exception("looking up the harness of session %s failed", session.key)
        return False


async def push(sidecar: MailHost, session: Session) -> bool:
    """Push the session's waking mail into Codex. True when Codex took it (or is still being asked)."""
    address = sidecar.sessions.address(session)
    if sidecar.parked[address] > 0:
        return False  # a check_inbox long poll takes it
    done = anyio.Event()
    outcome: list[bool] = []
    sidecar.tasks.start_soon(_push, sidecar, session, address, done, outcome)
    with anyio.move_on_after(ANSWER_WITHIN):
        await done.wait()
    return outcome[0] if outcome else True


async def _push(sidecar: MailHost, session: Session, address: str, done: anyio.Event, outcome: list[bool]) -> None:
    pushes = PUSHES.of(sidecar)
    lock = pushes.locks.setdefault(session.key, anyio.Lock())
    ids: list[str] = []
    try:
        async with lock:
            if session.tier != "push":
                outcome.append(False)  # the push before this one failed while this one waited its turn
                return
            messages = [m for m in await sidecar.mailbox.unread(address) if m.wake]
            if not messages:
                outcome.append(True)  # an earlier push (or a hook) took this mail while this one waited
                return
            messages, text = fit(sidecar, session, messages)
            if not messages:
                outcome.append(False)  # past what may be injected this hour: it waits for a pull
                return
            ids = [m.id for m in messages]
            sidecar.mailbox.mark_shown(messages)
            server = registry.harness(session.agent).app_server()
            if server is None:
                raise PushFailed(f"{session.agent} offers no app-server to push through")
            home = server.home(session.transcript)
            tui = await anyio.to_thread.run_sync(server.running, home)
            rollout = server.rollout(session.key, session.transcript, home)
            offset = _size(rollout)  # what the rollout held before this push: proof comes after it
            how = await server.deliver(home, session.key, text, tui)
            # Codex took the text; its model has not seen it yet. Held for the TUI until the
            # rollout shows a model turn that carried it (:func:`settle`).
            sidecar.mailbox.mark_shown(messages, Holder(session.key, tui.pid, tui.started, pushed=True))
            pushes.pending.setdefault(session.key, []).append(Pending(tuple(ids), rollout, offset, how.turn))
            log.info(
                "pushed %d message(s) into codex thread %s (%s); read once a model turn carries them",
                len(ids),
                session.key,
                how.how,
            )
            outcome.append(True)
        sidecar.tasks.start_soon(_follow, sidecar, session)
    except Exception as exc:
        sidecar.mailbox.unshow(ids)
        if isinstance(exc, PushFailed):
            log.info("push into codex thread %s failed, now turn tier: %s", session.key, exc.message)
        else:
            log.exception("push into codex thread %s failed, now turn tier", session.key)
        await sidecar.sessions.downgrade(session)
        outcome.append(False)
    finally:
        done.set()


# ---- proof that a model turn carried pushed mail ----------------------------------------------------

FOLLOW_EVERY = 0.25  # seconds between looks at a rollout while pushed mail awaits its proof
# Rollout items only the model's answer writes: one after the pushed text means a model call had it.
MODEL_OUTPUT = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call", "reasoning"}
)
TURN_ENDS = frozenset({"task_complete", "turn_aborted"})


@dataclass
class Pending:
    """Mail one push handed to Codex, not yet seen by its model."""

    ids: tuple[str, ...]
    rollout: Path | None  # the thread's rollout transcript, where Codex records what the model gets
    offset: int  # its size before the push: only what comes after is about this push
    turn: str  # the turn a steer went into, or the turn a start made ("" for codex queue)


@dataclass
class _Pushes:
    """One sidecar's pushes into Codex sessions, by session key."""

    locks: dict[str, anyio.Lock] = field(default_factory=dict)  # one push at a time: mail goes in its order
    pending: dict[str, list[Pending]] = field(default_factory=dict)  # pushes awaiting proof
    following: set[str] = field(default_factory=set)  # sessions whose rollout a task follows


PUSHES: PerSidecar[_Pushes] = PerSidecar(lambda sidecar: _Pushes())


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def _items(path: Path, offset: int) -> list[dict[str, Any]]:
    """The rollout's whole lines after ``offset`` (a line still being written is left for later)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    return list(json_objects(data.split(b"\n")[:-1]))


def verdict(pending: Pending, items: list[dict[str, Any]]) -> str:
    """``seen`` (a model call had the text), ``lost`` (its turn ended without it) or ``waiting``.

    Codex records the pushed text as a user message when it puts it into the thread's history
    (the start of a turn, or the next model call of a steered turn), and the model's answer after
    it; nothing of the model's comes later than its input unless a model call had that input."""
    carried = False
    started_since: set[str] = set()
    for item in items:
        payload = item.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        if item.get("type") == "response_item":
            if (
                not carried
                and payload.get("role") in ("user", "developer")
                and all(i in json.dumps(payload.get("content")) for i in pending.ids)
            ):
                carried = True
            elif carried and (payload.get("role") == "assistant" or kind in MODEL_OUTPUT):
                return "seen"
        elif item.get("type") == "event_msg":
            turn = payload.get("turn_id") or (payload.get("turn_attribution") or {}).get("turn_id")
            if kind == "task_started" and isinstance(turn, str):
                started_since.add(turn)
            elif kind in TURN_ENDS and (turn == pending.turn or turn in started_since):
                # The turn the text went into, or one begun after the push (codex queue's), ended
                # without a model call after the text: aborted, or Codex dropped it.
                return "lost"
    return "waiting"


async def settle(sidecar: MailHost, session: Session) -> None:
    """Confirm pushed mail a model turn carried; make what an ended turn dropped visible again."""
    pushes = PUSHES.of(sidecar)
    waiting = pushes.pending.get(session.key)
    if not waiting:
        return
    address = sidecar.sessions.address(session)
    still: list[Pending] = []
    for pending in waiting:
        held = [i for i in pending.ids if sidecar.mailbox.is_pushed(i)]
        if not held:
            continue  # its TUI exited (visible again), or another reader took it
        outcome = "waiting"
        if pending.rollout is not None:
            items = await anyio.to_thread.run_sync(_items, pending.rollout, pending.offset)
            outcome = verdict(pending, items)
        if outcome == "seen":
            await sidecar.mailbox.confirm(address, held)
            await observe.injected(sidecar, session.key, held, "push", "app_server")
            sidecar.mesh.poke()  # read receipts for the senders
            log.info("codex thread %s: a model turn carried %d pushed message(s)", session.key, len(held))
        elif outcome == "lost":
            sidecar.mailbox.unshow(held)
            log.info(
                "codex thread %s: the turn ended without %d pushed message(s); visible again", session.key, len(held)
            )
        else:
            still.append(pending)
    if still:
        pushes.pending[session.key] = still
    else:
        pushes.pending.pop(session.key, None)


async def _follow(sidecar: MailHost, session: Session) -> None:
    """Look at the rollout until every push of the session is settled (one follower per session)."""
    pushes = PUSHES.of(sidecar)
    if session.key in pushes.following:
        return
    pushes.following.add(session.key)
    try:
        sizes: dict[Path, int] = {}
        while pushes.pending.get(session.key):
            grown = False
            for pending in pushes.pending[session.key]:
                if pending.rollout is not None and _size(pending.rollout) != sizes.get(pending.rollout):
                    sizes[pending.rollout] = _size(pending.rollout)
                    grown = True
            if grown or not all(sidecar.mailbox.is_pushed(i) for p in pushes.pending[session.key] for i in p.ids):
                await settle(sidecar, session)
            await anyio.sleep(FOLLOW_EVERY)
    finally:
        pushes.following.discard(session.key)

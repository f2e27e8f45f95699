"""Push into Codex sessions: the sidecar itself hands waking mail to the Codex TUI's app-server.

Codex has no plugin that could hold a connection to the sidecar, so the sidecar delivers: a Codex
session's key is its thread id (hook stdin ``session_id``) and its rollout transcript names the
CODEX_HOME it runs under, whose control socket reaches the TUI's app-server
(:mod:`hive.integrations.codex.app_server`): ``turn/steer`` into a running turn, ``turn/start``
when idle, ``codex queue`` when the socket cannot be used.

The mail is in flight while the push runs and is confirmed only once Codex accepted it. A push
that fails (no Codex TUI runs the thread: ``codex exec``, a TUI started with
``--dangerously-bypass-hook-trust``, or one that was closed; the daemon refused) puts the mail
back for the next hook or ``check_inbox`` and drops the session to the turn tier, which senders
and ``list_team`` are told from then on.

Codex's app-server keeps a closed TUI's thread loaded for a few minutes, and a turn started
there would run with nobody watching; so a push first looks for a Codex TUI process running
under the same CODEX_HOME (Linux: /proc), and counts none as a failed push.

A sender waits at most :data:`ANSWER_WITHIN` for Codex's answer; past that the push goes on in
the sidecar's task group and the sender is told it was pushed (it is in Codex's hands, or the
session is downgraded and the mail shown at its next hook).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from hive.integrations import registry
from hive.integrations.codex.app_server import NotRunning, PushFailed, codex_home, deliver

from .render import frames
from .sessions import Session

if TYPE_CHECKING:
    from .server import Sidecar

MECHANISM = "app_server"  # the Tiers.push this module serves
ANSWER_WITHIN = 3.0
# Codex subcommands that are not an interactive TUI; any other `codex` process is one.
NOT_TUI = frozenset({"app-server", "exec", "e", "queue", "mcp", "mcp-server", "login", "logout", "apply", "a",
                     "sandbox", "debug", "completion", "cloud", "features", "responses-api-proxy", "stdio-to-uds",
                     "help"})

log = logging.getLogger("hive.sidecar.codex_push")

_locks: dict[str, anyio.Lock] = {}  # one push at a time per session, so mail goes in the order it came


def serves(session: Session) -> bool:
    """Whether this session's harness pushes through the app-server (Codex, or a plugin naming it)."""
    try:
        return registry.harness(session.agent).tiers().push == MECHANISM
    except KeyError:
        return False  # an agent no descriptor names (a script, a test client)
    except Exception:  # a broken third-party plugin must not fail a send: the other push paths still work
        log.exception("looking up the harness of session %s failed", session.key)
        return False


def _home_of(pid: int) -> Path | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    if env.get(b"CODEX_HOME"):
        return Path(os.fsdecode(env[b"CODEX_HOME"]))
    return Path(os.fsdecode(env[b"HOME"])) / ".codex" if env.get(b"HOME") else None


def tui_binary(home: Path) -> Path | bool | None:
    """The executable of a Codex TUI running under ``home``; None if there is none; True where
    processes cannot be listed (not Linux), which counts as running."""
    if not sys.platform.startswith("linux"):
        return True
    wanted = os.path.realpath(home)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{name}/exe")
            if os.path.basename(exe).removesuffix(" (deleted)") != "codex":
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = [os.fsdecode(a) for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if NOT_TUI & set(argv[1:]):
            continue
        found = _home_of(int(name))
        if found is not None and os.path.realpath(found) == wanted:
            return Path(exe)
    return None


async def push(sidecar: Sidecar, session: Session) -> bool:
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


async def _push(sidecar: Sidecar, session: Session, address: str, done: anyio.Event, outcome: list[bool]) -> None:
    lock = _locks.setdefault(session.key, anyio.Lock())
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
            ids = [m.id for m in messages]
            sidecar.mailbox.mark_shown(messages)
            home = codex_home(session.transcript)
            binary = await anyio.to_thread.run_sync(tui_binary, home)
            if binary is None:
                raise NotRunning(f"no Codex TUI runs under {home}")
            fallback = binary if isinstance(binary, Path) else _which_codex()
            how = await deliver(home, session.key, frames(messages), fallback)
            await sidecar.mailbox.confirm(address, ids)
            sidecar.mesh.poke()  # read receipts for the senders
            log.info("pushed %d message(s) into codex thread %s (%s)", len(ids), session.key, how.how)
            outcome.append(True)
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


def _which_codex() -> Path | None:
    found = shutil.which("codex")
    return Path(found) if found else None

"""The contract of the ``app_server`` push: the sidecar itself puts mail into a harness's running UI.

A harness whose ``Tiers.push`` is ``"app_server"`` has no plugin that could hold a connection to
the sidecar; its interactive UI runs on a local app-server the sidecar can reach. Its plugin
returns an :class:`AppServer` from ``hive_app_server``, and :mod:`hive.sidecar.mail.codex_push`
drives it (which session, when, and the proof that the model saw the text).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hive.sidecar.base.errors import HiveError


class PushFailed(HiveError):
    """The harness did not take the message; the reason says which step refused."""

    code = "push_failed"


class NotRunning(PushFailed):
    """No interactive UI runs the thread now: nobody would see a turn started there."""

    code = "push_not_running"


@dataclass(frozen=True)
class Delivery:
    """How a message went into a thread: ``steer`` (the running turn), ``start`` (a new turn), ``queue``."""

    how: str
    turn: str = ""


@dataclass(frozen=True)
class RunningUi:
    """A running interactive UI of the harness: its process (pid and start time name it) and its executable."""

    pid: int
    started: str  # hook_client.start_time's form, as a mailbox Holder wants it ("" where the system hides it)
    binary: Path | None  # for a fallback through the harness's own CLI; None where the system hides it


class AppServer(Protocol):
    """What the sidecar asks of a harness's app-server to push into one of its sessions."""

    def home(self, transcript: str) -> Path:
        """The home folder the session (known by its hook ``transcript``, maybe "") runs under."""
        ...

    def running(self, home: Path) -> RunningUi:
        """The UI running under ``home`` (blocking: run it in a thread). Raises NotRunning when none runs."""
        ...

    def rollout(self, key: str, transcript: str, home: Path) -> Path | None:
        """The file where the harness records what session ``key``'s model gets, or None when not found."""
        ...

    async def deliver(self, home: Path, key: str, text: str, ui: RunningUi) -> Delivery:
        """Put ``text`` into session ``key``; raises PushFailed when the harness did not take it."""
        ...

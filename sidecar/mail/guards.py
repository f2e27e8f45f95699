"""The mail guards: a rate limit per sender and a loop guard per pair of sessions.

Both apply to every message no person typed, whether its recipient is on this machine or on a
teammate's; they are what stops two agents (or a runaway script) from talking without end.

- **Rate limit.** At most ``rate_limit`` messages per ``rate_window`` seconds from one sending
  address (an agent's session, a person's script), to anyone. The next is refused with
  ``rate_limited`` and the seconds until one may go. A teammate's machine as a whole is also
  limited on arrival (the mesh answers ``retry``, and the message waits in the sender's outbox).
- **Loop guard.** Agent messages between two sessions are counted in a row, either direction,
  reply or not, since the last human input to either session: a prompt its person typed into it,
  or a message a person typed to it. The message past ``loop_limit`` is refused with
  ``loop_guard`` until a person writes to either session. Mail to or from a person's own
  mailbox (``bob/terminal``, ``bob/ci``) is a person's business and not counted.

Each machine counts the pairs its sessions are in, in both directions. A machine cannot see the
human input to a teammate's session, so it never refuses a message for a teammate's session
itself: the recipient's machine decides. Every message between machines carries the sender's
count (``run`` in the ``msg`` frame) and the recipient keeps the lower of that and its own, since
each side can only have missed a reset on the other side.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import LoopGuard, RateLimited
from ..base.store import Store

Statement = tuple[str, Sequence[Any]]


@dataclass(frozen=True)
class Step:
    """One message counted into its pair: the count it makes, and the statements that record it
    (written with the message, so a message that is not stored is not counted)."""

    run: int
    statements: list[Statement] = field(default_factory=list)


def pair(one: str, other: str) -> tuple[str, str]:
    return (one, other) if one <= other else (other, one)


def loop_message(limit: int) -> str:
    return (
        f"refused: this looks like a loop ({limit} agent messages in a row between these two sessions with no "
        "person in between). Check with your person: once they write to either session, you may send again"
    )


class Guards:
    """The rate windows (memory: a restart forgives a minute) and the pair counts (the database)."""

    def __init__(self, store: Store, rate_limit: int, rate_window: float, loop_limit: int) -> None:
        self.store = store
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self.loop_limit = loop_limit
        self._sent: dict[str, deque[float]] = {}

    def take_rate(self, sender: str) -> None:
        """Count one message from ``sender``, or raise :class:`RateLimited` (nothing counted)."""
        now = time.monotonic()
        window = self._sent.setdefault(sender, deque())
        while window and now - window[0] >= self.rate_window:
            window.popleft()
        if len(window) >= self.rate_limit:
            wait = max(self.rate_window - (now - window[0]), 0.0) + 0.05
            raise RateLimited(
                f"not sent: {sender} sent {self.rate_limit} messages in the last "
                f"{self.rate_window:g} s, the most hive lets one sender send; you may send again "
                f"in {wait:.0f} s",
                retry_after=round(wait, 2),
            )
        window.append(now)

    async def run_of(self, one: str, other: str) -> int:
        row = await self.store.fetchone("SELECT agents FROM pair_runs WHERE a = ? AND b = ?", pair(one, other))
        return int(row[0]) if row else 0

    async def busiest(self, address: str) -> int:
        """The longest run of agent messages ``address`` is in right now."""
        row = await self.store.fetchone("SELECT max(agents) FROM pair_runs WHERE a = ? OR b = ?", (address, address))
        return int(row[0]) if row and row[0] is not None else 0

    async def step(self, sender: str, recipient: str, claimed: int | None = None, enforce: bool = True) -> Step:
        """Count an agent message from ``sender`` to ``recipient``.

        ``claimed``: the sending machine's count for the pair, with this message, when it came from
        a teammate's machine. ``enforce``: refuse (raise :class:`LoopGuard`) past the limit; the
        sender's machine does not, for a teammate's session (see the module's notes).
        """
        run = await self.run_of(sender, recipient) + 1
        if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed >= 1:
            run = min(run, claimed)
        if enforce and run > self.loop_limit:
            raise LoopGuard(loop_message(self.loop_limit))
        a, b = pair(sender, recipient)
        return Step(
            run, [("INSERT OR REPLACE INTO pair_runs (a, b, agents, at) VALUES (?, ?, ?, ?)", (a, b, run, time.time()))]
        )

    @staticmethod
    def human_input(address: str) -> list[Statement]:
        """The statements that restart the count of every pair ``address`` is in."""
        return [
            (
                "UPDATE pair_runs SET agents = 0, at = ? WHERE (a = ? OR b = ?) AND agents > 0",
                (time.time(), address, address),
            )
        ]

    async def prompted(self, address: str) -> None:
        """A person typed into the session at ``address``. Staged, not waited for: a lost reset
        (a crash before the next commit) only leaves a count as it was."""
        await self.store.stage(self.human_input(address))

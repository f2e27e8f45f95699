"""Limits on what hive puts into a model's context unasked: mail in a hook's reply, a push, a watcher's
wake. Each harness states them in its descriptor (:class:`hive.integrations.descriptor.Tiers`:
``inject_cap`` characters per reply, ``inject_hour`` per session per hour); mail past them stays
unread, for the agent to pull (``check_inbox``, ``hive inbox``), and one line says how much waits.

A memory plugin that puts about 7 KB into the context eight times a session slows its harness
down; hive must never be that plugin. What an agent asks for (``inbox``, ``check_inbox``) is not
limited here: the agent chose to read it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hive.integrations import registry
from hive.integrations.descriptor import Tiers

from ..base.host import PerSidecar
from .render import frame

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .host import MailHost
    from .render import Message

HOUR = 3600.0


@dataclass
class _Spent:
    """What one session was given in the last hour, and the waiting count it was last told."""

    given: deque[tuple[float, int]] = field(default_factory=deque)
    told: int = 0


_SPENT: PerSidecar[dict[str, _Spent]] = PerSidecar(lambda sidecar: {})


def _limits(session: Session) -> Tiers:
    try:
        return registry.harness(session.agent).tiers()
    except KeyError:  # a harness no plugin knows any more: the defaults every descriptor starts from
        return Tiers(default="pull")


def more_line(count: int) -> str:
    """The line that says mail waits past the limit."""
    them = "it" if count == 1 else "them"
    return f"[hive] {count} more message{'s' if count != 1 else ''} waiting: call check_inbox to read {them}."


def fit(sidecar: MailHost, session: Session, messages: list[Message]) -> tuple[list[Message], str]:
    """The first of ``messages`` that fit what may go into ``session``'s context now, and the text
    to inject: their frames, then :func:`more_line` when some are left out (once per change of
    that count, so a waiting backlog is not announced at every tool call). Nothing at all when
    not even the first fits. Counts what it returns as given."""
    if not messages:
        return [], ""
    limits = _limits(session)
    spent = _SPENT.of(sidecar).setdefault(session.key, _Spent())
    now = time.time()
    while spent.given and now - spent.given[0][0] > HOUR:
        spent.given.popleft()
    room = min(limits.inject_cap, limits.inject_hour - sum(size for _, size in spent.given))
    kept: list[Message] = []
    parts: list[str] = []
    used = 0
    for message in messages:
        text = frame(message)
        cost = len(text) + (2 if parts else 0)
        if used + cost > room:
            break
        kept.append(message)
        parts.append(text)
        used += cost
    if not kept:  # past the cap: nothing goes in, not even the line (a watcher would wake for it alone)
        return [], ""
    left = len(messages) - len(kept)
    if left and left != spent.told:
        parts.append(more_line(left))
    spent.told = left
    text = "\n\n".join(parts)
    if text:
        spent.given.append((now, len(text)))
    return kept, text

"""Who else keeps a copy of the mail this machine's person sends and receives: :data:`ARCHIVERS`.

A concept above mail that keeps the person's mail somewhere (the team's history on its anchor:
:mod:`hive.sidecar.history`) registers an archiver at its set-up; mail calls :func:`archived`
where it stores what the person sent (``send``) and what reached them (a teammate's message
accepted or approved, a held message of their own session approved), and commits the
statements it returns with the messages, so what is kept and its copy to archive are on disk
together or not at all. Mail imports nothing of the concepts that archive.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..base.host import PerSidecar

if TYPE_CHECKING:
    from .render import Message

Statement = tuple[str, Sequence[Any]]
Archiver = Callable[[Sequence["Message"]], Awaitable[list[Statement]]]
"""Given messages about to be stored here, the statements that record what it keeps of them."""

ARCHIVERS: PerSidecar[list[Archiver]] = PerSidecar(lambda sidecar: [])
"""Each sidecar's archivers, in the order they were registered."""


async def archived(sidecar: Any, messages: Sequence[Message]) -> list[Statement]:
    """The statements every archiver adds to the commit that stores ``messages`` ([] for none)."""
    if not messages:
        return []
    found = ARCHIVERS.get(sidecar)
    if not found:
        return []
    statements: list[Statement] = []
    for archiver in found:
        statements.extend(await archiver(messages))
    return statements

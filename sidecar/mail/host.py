"""What mail, and the concepts built on it, use of the daemon (:class:`MailHost`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

from ..presence.events import PresenceHost

if TYPE_CHECKING:
    import anyio

    from ..sessions.registry import Entry
    from .guards import Guards
    from .mailbox import Mailbox


class MailHost(PresenceHost, Protocol):
    """Presence's host (with the team and the mesh remote mail rides), the mailbox and its guards,
    and the long polls waiting on each mailbox (a message for a mailbox with one parked is
    delivered by waking it)."""

    mailbox: Mailbox
    guards: Guards
    waits: dict[str, set[anyio.CancelScope]]
    parked: Counter[str]

    @property
    def terminal(self) -> str:
        """The person's own mailbox: ``<person>/terminal``."""
        ...

    def directory(self) -> list[Entry]:
        """Every session this machine and its linked teammates know, local ones first."""
        ...

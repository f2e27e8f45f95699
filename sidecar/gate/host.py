"""What the gate, and the concepts built on it, use of the daemon (:class:`GateHost`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ..mail.host import MailHost


class GateHost(MailHost, Protocol):
    """Mail's host and what the features offer the gate before a person's digest is read."""

    @property
    def before_digest(self) -> Sequence[Callable[[Any, str], Awaitable[None]]]:
        """Each feature's ``before_digest`` (daemon/features.py), called with the sidecar and the person."""
        ...

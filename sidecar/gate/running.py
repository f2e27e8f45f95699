"""Each sidecar's one gate, where the ops, frames and hooks that need it find it.

:func:`hive.sidecar.gate.engine.run_gate` builds it and puts it here when the sidecar's task group starts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.errors import HiveError
from ..base.host import PerSidecar

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from .engine import Gate


def _not_started(sidecar: MailHost) -> Gate:
    raise HiveError("the gate has not started yet")


GATES: PerSidecar[Gate] = PerSidecar(_not_started)


def gate_of(sidecar: MailHost) -> Gate:
    """This sidecar's gate (it exists once the sidecar's task group has started it)."""
    return GATES.of(sidecar)

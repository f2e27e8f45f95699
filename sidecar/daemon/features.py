"""The features the sidecar runs, listed once.

Each concept brings what it adds to the daemon as one :class:`Feature`: the ops it serves on the
local socket, the frame kinds it speaks with teammates' sidecars, what it sets up before the
first client connects, and what it offers before a person's digest is read. The daemon reads
this list and nothing else, so a new concept is one line here and needs no branch in the daemon,
the mesh or the gate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..agents import ask, hooks
from ..agents import sessions as session_ops
from ..base.host import Connection
from ..gate import engine as gate
from ..gate import notify as gate_notify
from ..gate import screening as gate_screening
from ..gate import sources as gate_sources
from ..history import archive as history_archive
from ..history import ops as history_ops
from ..lessons import ops as lesson_ops
from ..lessons import sync as lesson_sync
from ..mail import copies, held, mailboxes, notify, policy, remote
from ..mail import ops as mail_ops
from ..mesh import links
from ..presence import frames, observe
from ..presence.events import EventListener
from ..sessions import attach, folders
from ..team import membership, projects
from . import ops as daemon_ops

if TYPE_CHECKING:
    from .server import Sidecar

Op = Callable[["Sidecar", Connection, dict[str, Any]], Awaitable[dict[str, Any]]]
"""An op's handler: called with the sidecar, the caller's connection and the request; returns the result."""


@dataclass(frozen=True)
class Feature:
    name: str
    ops: Mapping[str, Op] = field(default_factory=dict)
    """Op name -> handler, served on the local socket."""
    frames: Callable[[Sidecar], None] | None = None
    """Registers the frame kinds it speaks (and its mesh feature names) with the sidecar's mesh
    (:meth:`Mesh.add_speaker` or :meth:`Mesh.add_frames`); called in the order listed here."""
    setup: Callable[[Sidecar], None] | None = None
    """Runs once the sidecar's store, sessions, mailbox, mesh and team exist, before any client connects."""
    before_digest: Callable[[Sidecar, str], Awaitable[None]] | None = None
    """Offers the gate what fell due with no event to offer it at, before ``person``'s digest is read."""
    on_events: EventListener | None = None
    """Acts on the events presence recorded for a session (presence.events.tell calls it)."""


FEATURES: tuple[Feature, ...] = (
    Feature("daemon", ops=daemon_ops.OPS),
    Feature("sessions", ops=session_ops.OPS),
    Feature("hooks", ops=hooks.OPS),
    Feature("attach", ops=attach.OPS),
    Feature("folders", ops=folders.OPS),
    Feature("presence frames", frames=frames.attach),
    Feature("mail", ops=mail_ops.OPS),
    Feature("remote mail", frames=remote.attach),
    Feature("held mail", ops=held.OPS),
    Feature("mailboxes", setup=mailboxes.setup),
    Feature("copies read", frames=copies.attach),
    Feature("inbound policy", ops=policy.OPS),
    Feature("mesh", ops=links.OPS),
    Feature("ask", ops=ask.OPS),
    Feature("notify", frames=notify.attach),
    Feature("team", ops=membership.OPS),
    Feature("projects", ops=projects.OPS),
    Feature("gate", ops=gate.OPS, frames=gate.attach, setup=gate_notify.setup, on_events=gate_sources.on_events),
    Feature("screening", setup=gate_screening.setup),
    Feature("events", ops=observe.OPS),
    Feature(
        "lessons", ops=lesson_ops.OPS, setup=lesson_ops.follow_changes, before_digest=lesson_ops.offer_held_reviews
    ),
    Feature("lesson sync", ops=lesson_sync.OPS, frames=lesson_sync.attach),
    Feature("history", ops=history_ops.OPS, frames=history_archive.attach),
)


def op_table(features: tuple[Feature, ...] = FEATURES) -> dict[str, Op]:
    """Every op the sidecar serves: op name -> handler. Raises RuntimeError naming both features
    when two register one name: a programming error, so the sidecar must not start with one
    silently replacing the other."""
    table: dict[str, Op] = {}
    registered_by: dict[str, str] = {}
    for feature in features:
        for op, handler in feature.ops.items():
            if op in table:
                raise RuntimeError(
                    f"op {op!r} is registered twice: by feature {registered_by[op]!r} and by feature {feature.name!r}"
                )
            table[op], registered_by[op] = handler, feature.name
    return table

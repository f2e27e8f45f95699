"""The frame registry of ``hive/1``: the types of each known frame kind's fields, and the check
every frame from a member passes before its handler sees it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .team_view import Member
from .transport import Link

# The types of each frame kind's top-level fields (a missing field or null is allowed; the
# handler decides). A frame that breaks this is reported for its peer and skipped, so no handler
# meets a string where it iterates a list. Nested items are checked by the handlers.
_NUMBER = (int, float)
FRAME_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {"team": str, "features": list, "roster": str},
    "msg": {"msg": dict},
    "ack": {"id": str, "state": str, "note": str, "code": str, "receipts": list, "retry_after": _NUMBER},
    "receipt": {"receipts": list},
    "presence": {"presence": dict},
    "state": {"state": dict},
    "sync": {"heads": list, "want": list, "reply": bool},
    "entry": {"entries": list},
    "body": {"blobs": list},
    "gate": {"id": str, "item": dict},
    "gate_ack": {"id": str},
    "notify": {"id": str, "from": str, "to": str, "body": str, "sent_at": _NUMBER},
    "copies_read": {"ids": list, "at": _NUMBER},
    "history_put": {"id": str, "entries": list},
    "history_ack": {"id": str, "ids": list, "stored": int, "code": str, "note": str},
    "history_query": {"id": str, "q": str, "limit": int},
    "history_result": {"id": str, "hits": list, "code": str, "note": str},
    "history_forget": {"id": str},
    "history_forgot": {"id": str, "deleted": int},
}

MAX_FEATURES = 32  # feature names taken from a peer's hello or presence

# A module's handler for a frame kind of its own (Mesh.add_frames): the link, its checked member, the frame.
FrameHandler = Callable[[Link, Member, dict[str, Any]], Awaitable[None]]


class BadFrame(Exception):
    """A member's frame whose fields have the wrong types: logged for that peer and skipped."""


def check_fields(frame: dict[str, Any]) -> None:
    """Raise BadFrame when a field of a known frame kind has the wrong type."""
    for name, kind in FRAME_FIELDS.get(frame.get("t", ""), {}).items():
        value = frame.get(name)
        if value is None:
            continue
        wrong = not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, _NUMBER))
        if wrong:
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise BadFrame(f"field {name!r} is a {type(value).__name__}, not a {names}")


class Speaker:
    """A concept that speaks with teammates' sidecars over the mesh's links (remote mail, presence),
    registered with :meth:`~hive.sidecar.mesh.links.Mesh.add_speaker`. The mesh calls each method
    at its point of a link's life, in the order speakers were added; the defaults do nothing, so
    a speaker overrides only the points it cares about. The mesh itself knows none of them."""

    async def load(self) -> None:
        """Before the mesh starts: read what was kept from the last run."""

    async def run(self) -> None:
        """Runs beside the mesh for its whole life (a periodic refresh); returns at once by default."""

    def link_adopted(self, link: Link) -> None:
        """``link`` is now the one link to its peer (a duplicate it replaced is closing)."""

    async def link_up(self, link: Link) -> None:
        """The link is greeted and the roster exchanged: send what the peer must have first.
        Awaited in turn for each speaker, so the frames go out in that order."""

    def link_down(self, link: Link) -> None:
        """``link`` ended (it may have been replaced by a newer one to the same peer)."""

    async def unreachable(self, peer: str) -> None:
        """The link to ``peer`` ended, or a round of dials reached none of its addresses."""

    async def refused(self, link: Link, kind: str, frame_id: str) -> None:
        """The transport refused a ``kind`` frame with id ``frame_id`` for its text (transport.Link._decode)."""

    async def flush(self, linked: bool) -> None:
        """Something local changed (coalesced): store and send what changed; ``linked`` when any link is up."""

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
}

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

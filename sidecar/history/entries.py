"""One archived message, as it travels to the anchor and as the anchor keeps it.

An entry holds a message's id, sender and recipient addresses, the sender's kind, the time, the
message it answers, its text (at most :data:`MAX_BODY` bytes; attached files are not archived) and
its *owner*: the person whose machine archived it. The anchor keeps an entry only from a machine
of its owner's (:mod:`.keeper`).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, TypeGuard

from ..base.config import slug
from ..base.ulid import is_ulid

if TYPE_CHECKING:
    from ..mail.render import Message

MAX_BODY = 8 * 1024  # bytes of a message's text archived; what is past it is cut (``cut``)
MAX_ADDRESS = 200
KINDS = frozenset({"agent", "person", "script"})
MAX_AHEAD = 300.0  # seconds an entry's time may be ahead of the anchor's clock


def person_of(address: str) -> str:
    """The person part of an address (``alice`` of ``alice/web-codex@lap``)."""
    return slug(address.split("/", 1)[0])


def capped(text: str, limit: int = MAX_BODY) -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never inside a character), and whether it was cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", errors="ignore"), True


def from_message(message: Message, owner: str) -> dict[str, Any]:
    """The entry this machine archives for ``message``, owned by this machine's person."""
    body, cut = capped(message.body)
    return {
        "id": message.id,
        "from": message.sender,
        "to": message.recipient,
        "kind": message.sender_kind,
        "at": message.sent_at,
        "reply_to": message.reply_to,
        "body": body,
        "cut": cut,
        "owner": owner,
    }


def from_wire(raw: Any) -> dict[str, Any] | None:
    """An entry a machine sent, checked and normalised; None when it is malformed.

    Addresses must be ``person/name`` and the owner a person's name; a time further ahead of this
    machine's clock than :data:`MAX_AHEAD` is brought back to it (so a wrong clock cannot put an
    entry above every later one), and the text is cut again.
    """
    if not isinstance(raw, dict) or not is_ulid(raw.get("id")):
        return None
    sender, recipient, owner = raw.get("from"), raw.get("to"), raw.get("owner")
    if not _address(sender) or not _address(recipient):
        return None
    if not isinstance(owner, str) or not owner or slug(owner) != owner:
        return None
    at = raw.get("at")
    if not isinstance(at, int | float) or isinstance(at, bool) or not math.isfinite(at) or at < 0:
        return None
    body = raw.get("body")
    if not isinstance(body, str):
        return None
    body, cut = capped(body)
    reply_to = raw.get("reply_to")
    kind = raw.get("kind")
    return {
        "id": raw["id"],
        "from": sender,
        "to": recipient,
        "kind": kind if kind in KINDS else "agent",
        "at": min(float(at), time.time() + MAX_AHEAD),
        "reply_to": reply_to if is_ulid(reply_to) else None,
        "body": body,
        "cut": bool(raw.get("cut")) or cut,
        "owner": owner,
    }


def _address(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and "/" in value and len(value) <= MAX_ADDRESS

"""Invite tickets: what an invite line carries (``hive1:`` and base64url), enough for a joiner to find
the team and prove the invite.

A ticket is compact JSON with a 4-byte checksum against copy-and-paste damage; it names the team,
the invite's secret, up to three machines to dial (the inviting one first) and up to two of the
inviting machine's addresses. The roster never holds the secret, only its hash
(:func:`hive.sidecar.team.records.secret_hash`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from .identity import is_key_id
from .records import MAX_ADDRESS_LEN, Malformed, canonical, valid_name, valid_team_id

TICKET_PREFIX = "hive1:"
TICKET_ADDRESSES = 2
TICKET_KEYS = 3  # the inviting machine plus up to two others


@dataclass(frozen=True)
class Ticket:
    """What an invite line carries: enough to find the team and prove the invite."""

    team_id: str
    secret: str
    team: str
    keys: tuple[str, ...]  # the inviting machine first, then up to two others
    addresses: tuple[str, ...] = ()  # up to two addresses of the inviting machine
    expires: int = 0  # ms since the epoch; 0 never (the team link)
    own_machine: bool = False
    person: str = ""  # for an own-machine ticket: the person whose machine joins

    @property
    def inviter(self) -> str:
        return self.keys[0]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode_ticket(ticket: Ticket) -> str:
    """``hive1:`` + base64url of compact JSON and a 4-byte checksum against copy-and-paste damage."""
    obj: dict[str, Any] = {
        "i": _b64(bytes.fromhex(ticket.team_id)),
        "s": ticket.secret,
        "n": ticket.team,
        "k": [_b64(bytes.fromhex(k)) for k in ticket.keys[:TICKET_KEYS]],
        "a": list(ticket.addresses[:TICKET_ADDRESSES]),
        "e": ticket.expires,
    }
    if ticket.own_machine:
        obj["o"] = 1
        obj["p"] = ticket.person
    data = canonical(obj)
    return TICKET_PREFIX + _b64(data + hashlib.blake2b(data, digest_size=4).digest())


_TICKET_IN_TEXT = re.compile(re.escape(TICKET_PREFIX) + r"[A-Za-z0-9_-]+")


def decode_ticket(text: str) -> Ticket:
    """Read a ticket, alone or inside a pasted invite line.

    Raises:
        Malformed: no ticket, or a damaged one.
    """
    found_ticket = _TICKET_IN_TEXT.search(text or "")
    if found_ticket is None:
        raise Malformed(f"no hive invite found: an invite starts with {TICKET_PREFIX}")
    try:
        blob = _unb64(found_ticket.group()[len(TICKET_PREFIX) :])
    except (binascii.Error, ValueError) as exc:
        raise Malformed("the invite is damaged; copy it again") from exc
    data, check = blob[:-4], blob[-4:]
    if len(blob) < 5 or hashlib.blake2b(data, digest_size=4).digest() != check:
        raise Malformed("the invite is damaged or incomplete; copy it again")
    try:
        obj = json.loads(data)
        keys = tuple(_unb64(k).hex() for k in obj["k"])
        ticket = Ticket(
            team_id=_unb64(obj["i"]).hex(),
            secret=obj["s"],
            team=obj["n"],
            keys=keys,
            addresses=tuple(obj.get("a") or ()),
            expires=obj.get("e") or 0,
            own_machine=bool(obj.get("o")),
            person=obj.get("p") or "",
        )
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise Malformed("the invite is not one this hive can read") from exc
    if (
        not valid_team_id(ticket.team_id)
        or not isinstance(ticket.secret, str)
        or not 0 < len(ticket.secret) <= 128
        or not valid_name(ticket.team)
        or not 1 <= len(keys) <= TICKET_KEYS
        or not all(map(is_key_id, keys))
        or len(ticket.addresses) > TICKET_ADDRESSES
        or not all(isinstance(a, str) and 0 < len(a) <= MAX_ADDRESS_LEN and a.isprintable() for a in ticket.addresses)
        or not isinstance(ticket.expires, int)
        or ticket.expires < 0
        or (ticket.own_machine and not valid_name(ticket.person))
    ):
        raise Malformed("the invite is not one this hive can read")
    return ticket

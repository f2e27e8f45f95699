"""The team roster's signed records: the entry bodies, their canonical JSON, and signatures bound
to a team and a kind.

Signatures
    Every signature covers ``hive/1/{team_id}/{kind}/`` followed by the canonical JSON of the
    entry's body (sorted keys, no spaces, UTF-8), so an entry cannot be replayed into another team
    or read as another kind. The same :func:`sign`/:func:`verify` serve every kind, approvals
    included (the reference signed approvals over the team *name*, which any member may change).

Names are ``a-z0-9-``, 1 to 64 characters. Times are integer milliseconds since the epoch
(``ts``), so canonical JSON never holds a float.

Pure functions, no I/O. How the records make up a team's state and merge is
:mod:`hive.sidecar.team.roster_state`; what a state means is :mod:`hive.sidecar.team.roster`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_type_hints

from .identity import Identity, is_key_id, verify_bytes

PROTO = "hive/1"
ROLES = ("member", "anchor")
MAX_NAME = 64
MAX_ADDRESSES = 4  # static addresses in a member entry
MAX_ADDRESS_LEN = 255

_NAME = re.compile(r"[a-z0-9-]{1,64}")
_SIG = re.compile(r"[0-9a-f]{128}")
_TEAM_ID = re.compile(r"[0-9a-f]{32}")


def now_ms() -> int:
    return int(time.time() * 1000)


def valid_name(value: object) -> bool:
    """Person, machine and team names: ``a-z0-9-``, 1 to 64 characters."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def valid_team_id(value: object) -> bool:
    return isinstance(value, str) and _TEAM_ID.fullmatch(value) is not None


def secret_hash(secret: str) -> str:
    """What the roster stores for an invite: a hash of its secret, never the secret."""
    return hashlib.blake2b(f"{PROTO}/invite/{secret}".encode(), digest_size=32).hexdigest()


# ---- records ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Meta:
    name: str
    ts: int


@dataclass(frozen=True)
class Member:
    """One machine's entry: the body of both admissions and member entries."""

    key: str  # the machine this entry is about
    person: str
    machine: str
    ts: int
    role: str = "member"
    active: bool = True
    addresses: tuple[str, ...] = ()  # static ones (a VPN or public host); the mesh learns the rest
    redeems: str = ""  # admissions only: the secret hash of the invite or team link that let it in


@dataclass(frozen=True)
class Invite:
    hash: str  # secret_hash(secret)
    maker: str  # the machine it dies with
    ts: int
    expires: int = 0  # ms since the epoch; 0 never (the team link's invite, until replaced)
    reusable: bool = False
    own_machine: bool = False  # for another machine of the maker's person
    used_by: str | None = None


@dataclass(frozen=True)
class Link:
    secret: str
    ts: int


PROJECT_ROLES = ("proposed", "member", "owner", "removed")


@dataclass(frozen=True)
class ProjectMember:
    """A person's membership of a project (``hive.sidecar.team.projects``): who receives its lessons."""

    project: str  # sha256:<hex> of the normalised remote URL
    person: str
    role: str  # proposed (by the person) | owner (claimed by the person) | member, removed (by the owner)
    ts: int


@dataclass(frozen=True)
class JoinRequest:
    """What a joining machine presents on ``hive-join/1``, signed with its own key (kind ``join``)."""

    secret: str
    key: str
    person: str
    machine: str
    ts: int
    addresses: tuple[str, ...] = ()


R = TypeVar("R")


@dataclass(frozen=True)
class Signed(Generic[R]):
    """A body, the key that signed it and the signature (hex).

    ``raw`` is the exact JSON object that was signed. It is kept, and sent on, verbatim, so fields
    a newer hive adds still verify and travel through this one; ``body`` is its typed reading.
    """

    body: R
    by: str
    sig: str
    raw: dict[str, Any] = field(repr=False)

    @property
    def order(self) -> tuple[int, str]:
        """Last-writer-wins order: the timestamp, then the signature to break ties."""
        return (self.body.ts, self.sig)  # type: ignore[attr-defined]

    def to_wire(self) -> dict[str, Any]:
        return {"body": self.raw, "by": self.by, "sig": self.sig}


class Malformed(ValueError):
    """A wire object that is not a well-formed roster entry or state."""


_HINTS: dict[type, dict[str, Any]] = {}


def _coerce(hint: Any, value: Any, name: str) -> Any:
    if hint is str:
        ok = isinstance(value, str)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is bool:
        ok = isinstance(value, bool)
    elif hint == tuple[str, ...]:
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    elif hint == str | None:
        ok = value is None or isinstance(value, str)
    else:  # pragma: no cover - a record field of a type this reader does not know
        raise TypeError(f"no reader for {hint!r}")
    if not ok:
        raise Malformed(f"{name} has the wrong type")
    return value


def parse_record(cls: type[R], raw: Any) -> R:
    """Read a record from JSON, ignoring fields it does not know. Raises :class:`Malformed`."""
    if not isinstance(raw, dict):
        raise Malformed(f"a {cls.__name__} must be an object")
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in raw:
            values[f.name] = _coerce(hints[f.name], raw[f.name], f.name)
        elif f.default is dataclasses.MISSING:
            raise Malformed(f"a {cls.__name__} needs {f.name}")
    return cls(**values)


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8, no NaN."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def signing_payload(team_id: str, kind: str, raw: dict[str, Any]) -> bytes:
    return f"{PROTO}/{team_id}/{kind}/".encode() + canonical(raw)


def sign(identity: Identity, team_id: str, kind: str, body: R) -> Signed[R]:
    """Sign a record (a dataclass instance) or a plain JSON object as ``kind`` in team ``team_id``."""
    plain = dataclasses.asdict(body) if dataclasses.is_dataclass(body) else body  # type: ignore[arg-type]
    raw = json.loads(canonical(plain))  # tuples become lists: what is signed is what travels
    sig = identity.sign_bytes(signing_payload(team_id, kind, raw)).hex()
    return Signed(body=body, by=identity.key_id, sig=sig, raw=raw)


def verify(team_id: str, kind: str, signed: Signed[Any]) -> bool:
    """Whether ``signed`` is a valid signature of its body as ``kind`` in team ``team_id``."""
    if not is_key_id(signed.by) or not isinstance(signed.sig, str) or not _SIG.fullmatch(signed.sig):
        return False
    try:
        payload = signing_payload(team_id, kind, signed.raw)
    except (TypeError, ValueError):
        return False
    return verify_bytes(signed.by, payload, bytes.fromhex(signed.sig))


def signed_from_wire(cls: type[R], obj: Any) -> Signed[R]:
    """Read ``{"body", "by", "sig"}``; the signature is not checked here. Raises :class:`Malformed`."""
    if not isinstance(obj, dict) or not isinstance(obj.get("body"), dict):
        raise Malformed("a signed entry is {body, by, sig}")
    by, sig = obj.get("by"), obj.get("sig")
    if not is_key_id(by) or not isinstance(sig, str) or not _SIG.fullmatch(sig):
        raise Malformed("a signed entry needs a key id in 'by' and a hex signature in 'sig'")
    raw = obj["body"]
    try:
        canonical(raw)
    except (TypeError, ValueError) as exc:
        raise Malformed("a signed body must be plain JSON") from exc
    return Signed(body=parse_record(cls, raw), by=by, sig=sig, raw=raw)


def member_problem(body: Member) -> str | None:
    """What is wrong with a member body on its own, or None."""
    if not is_key_id(body.key):
        return "a member entry names a machine by its key"
    if not valid_name(body.person) or not valid_name(body.machine):
        return "person and machine names are a-z, 0-9 and -, at most 64 characters"
    if body.role not in ROLES:
        return f"a role is one of {', '.join(ROLES)}"
    if len(body.addresses) > MAX_ADDRESSES or any(
        not a or len(a) > MAX_ADDRESS_LEN or not a.isprintable() for a in body.addresses
    ):
        return f"at most {MAX_ADDRESSES} printable addresses"
    return None

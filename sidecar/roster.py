"""The team roster: a replicated membership state, every entry signed by a member machine's key.

Built for a team of friends who trust each other, not for adversarial members: a removed
machine cannot connect any more, but it is not made cryptographically powerless.

Pure functions, no I/O. The sidecar's ``team`` module persists a :class:`TeamState` and serves
the ops; the mesh sends states as ``state`` frames and merges what it receives.

Signatures
    Every signature covers ``hive/1/{team_id}/{kind}/`` followed by the canonical JSON of the
    entry's body (sorted keys, no spaces, UTF-8), so an entry cannot be replayed into another team
    or read as another kind. The same :func:`sign`/:func:`verify` serve every kind, approvals
    included (the reference signed approvals over the team *name*, which any member may change).

The state (:class:`TeamState`), and how each part merges
    ``meta``        team name; last writer wins by ``(ts, sig)``.
    ``admissions``  how each machine got in, kept forever, one per (machine, signer), earliest kept.
                    A machine is admitted only if a chain of admissions reaches the founder's
                    self-signed one: the founder is depth 0, and an admission counts only if its
                    signer is already admitted and signed it before any departure or removal of
                    its own, and it names the invite it redeemed (``redeems``): one the roster holds,
                    either a team link's or a one-time invite marked used by that very machine. So
                    every admission is accounted for by an invite, and one invite admits one machine.
                    Who may sign never depends on arrival order.
    ``members``     each machine's latest *standing* entry (person, machine name, role, active,
                    static addresses), last writer wins by ``(ts, sig)``. Standing entries are those
                    signed by another machine, and a machine's own departure. A machine's
                    admissions count as standing entries too, so the founder's self-admission is
                    its first entry; an entry signed after its signer's own departure or removal
                    does not count, nor a removal of the founder signed by another person's machine,
                    nor an active entry signed by a machine admitted only through the one it names.
    ``updates``     each machine's latest self-signed active entry (its own address or name
                    change). It counts only while the machine's standing entry is active and older;
                    so a machine may sign its own departure but never its own return.
    ``invites``     keyed by a hash of the secret (the secret itself is never stored); a used
                    one-time invite stays used (``used_by``); the team link's invite is reusable.
                    An invite an admission redeemed is kept for good, since that admission counts
                    only while it is there; so is a replaced team link's invite (it no longer
                    admits, but a machine admitted through it before the news arrived still counts).
    ``link``        the reusable team-link secret, last writer wins. Its invite works until the
                    link is replaced.
    ``projects``    project membership (:class:`ProjectMember`), one per (project, person), last
                    writer wins. Who may sign what is read in :func:`view`: a person proposes or
                    claims ownership of their own membership; the project's owner (the earliest
                    standing owner claim) confirms or removes others; anyone may leave.

Merging is a union followed by a per-key maximum, so it is commutative, associative and
idempotent: machines that hold the same entries hold the same state, whatever the order,
duplication or batching of their arrival. Every rule that depends on other entries (the
admission chain, self-return, name holding, invites dying with their maker) is applied when the
state is *read* (:func:`view`), deterministically, in admission-depth order, so it can never make
two machines disagree. Entries that can never count are refused on arrival: bad signatures (which
includes entries of another team), entries stamped more than a day ahead, self-admissions,
malformed bodies and bad names.

The view (:class:`Roster`)
    Who is admitted (and at what depth), each member's effective entry, which machines are active,
    and the live invites and link. Names are ``a-z0-9-``, 1 to 64 characters. A person name held by
    an active machine cannot be taken by another machine unless one of that person's machines
    vouches for it (signed its admission or its entry); the first holder in admission-depth order
    keeps it. Invites die with their maker and expire; expired ones are pruned a week later.

Times are integer milliseconds since the epoch (``ts``), so canonical JSON never holds a float.

API (stable; the mesh and approvals use it)
    :func:`sign`, :func:`verify`                 any kind, bound to the team id
    :func:`state_from_wire`, ``TeamState.to_wire``, :func:`validated`   states on the wire
    :func:`merge`, :func:`absorb`, :func:`entries`                      merging
    :func:`view` → :class:`Roster` (``is_active``, ``status``, ``people``, ``members``, ``depth``)
    :func:`without_secrets`                      what a removed machine is sent
    :func:`found`, :func:`new_invite`, :func:`new_link`, :func:`admit`, :func:`departures`,
    :func:`self_update`, :func:`sign_join`       making entries
    :class:`Ticket`, :func:`encode_ticket`, :func:`decode_ticket`       invite tickets
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_type_hints

from .identity import Identity, is_key_id, verify_bytes

PROTO = "hive/1"
MAX_SKEW_MS = 86_400_000  # entries stamped more than a day ahead are refused
PRUNE_AFTER_MS = 7 * 86_400_000  # expired invites are dropped a week after they expire
INVITE_TTL_MS = 7 * 86_400_000  # default life of a one-time invite
ROLES = ("member", "anchor")
MAX_NAME = 64
MAX_ADDRESSES = 4  # static addresses in a member entry
MAX_ADDRESS_LEN = 255
TICKET_PREFIX = "hive1:"
TICKET_ADDRESSES = 2
TICKET_KEYS = 3  # the inviting machine plus up to two others

_NAME = re.compile(r"[a-z0-9-]{1,64}")
_HASH = re.compile(r"[0-9a-f]{64}")
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
_PROJECT_ID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ProjectMember:
    """A person's membership of a project (``hive.sidecar.projects``): who receives its lessons."""

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
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


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


# ---- the state --------------------------------------------------------------------------------


@dataclass
class TeamState:
    """Everything a machine knows about its team. Treat as immutable: functions return new ones."""

    id: str  # 16 random bytes, hex
    founder: str
    meta: Signed[Meta] | None = None
    admissions: dict[str, Signed[Member]] = field(default_factory=dict)  # "machine/signer" -> admission
    members: dict[str, Signed[Member]] = field(default_factory=dict)  # machine -> latest standing entry
    updates: dict[str, Signed[Member]] = field(default_factory=dict)  # machine -> latest self-signed update
    invites: dict[str, Signed[Invite]] = field(default_factory=dict)  # secret hash -> invite
    link: Signed[Link] | None = None
    projects: dict[str, Signed[ProjectMember]] = field(default_factory=dict)  # "project/person" -> entry

    def copy(self) -> TeamState:
        return dataclasses.replace(
            self, admissions=dict(self.admissions), members=dict(self.members), updates=dict(self.updates),
            invites=dict(self.invites), projects=dict(self.projects),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": 1, "id": self.id, "founder": self.founder,
            "meta": self.meta.to_wire() if self.meta else None,
            "admissions": {k: s.to_wire() for k, s in sorted(self.admissions.items())},
            "members": {k: s.to_wire() for k, s in sorted(self.members.items())},
            "updates": {k: s.to_wire() for k, s in sorted(self.updates.items())},
            "invites": {k: s.to_wire() for k, s in sorted(self.invites.items())},
            "link": self.link.to_wire() if self.link else None,
            "projects": {k: s.to_wire() for k, s in sorted(self.projects.items())},
        }


@dataclass(frozen=True)
class Entry:
    """One signed entry with its kind, as entries travel and are merged."""

    kind: str  # meta | admission | member | invite | link | project
    signed: Signed[Any]


@dataclass(frozen=True)
class Refusal:
    kind: str
    by: str
    reason: str


def state_from_wire(obj: Any) -> TeamState:
    """Read a state frame. Only the structure is checked; :func:`merge` checks every signature.

    Raises:
        Malformed: not a team state.
    """
    if not isinstance(obj, dict):
        raise Malformed("a team state must be an object")
    if not valid_team_id(obj.get("id")) or not is_key_id(obj.get("founder")):
        raise Malformed("a team state needs a team id and its founder's key")
    state = TeamState(id=obj["id"], founder=obj["founder"])
    for entry in _wire_entries(obj):
        _put(state, entry)
    return state


def _wire_entries(obj: dict[str, Any]) -> Iterator[Entry]:
    if obj.get("meta") is not None:
        yield Entry("meta", signed_from_wire(Meta, obj["meta"]))
    for name, kind, cls in (("admissions", "admission", Member), ("members", "member", Member),
                            ("updates", "member", Member), ("invites", "invite", Invite),
                            ("projects", "project", ProjectMember)):
        part = obj.get(name) or {}
        if not isinstance(part, dict):
            raise Malformed(f"{name} must be an object")
        for value in part.values():
            yield Entry(kind, signed_from_wire(cls, value))  # type: ignore[arg-type]
    if obj.get("link") is not None:
        yield Entry("link", signed_from_wire(Link, obj["link"]))


def entries(state: TeamState) -> Iterator[Entry]:
    """Every signed entry in a state, as they would travel one by one."""
    if state.meta is not None:
        yield Entry("meta", state.meta)
    for admission in state.admissions.values():
        yield Entry("admission", admission)
    for member in state.members.values():
        yield Entry("member", member)
    for update in state.updates.values():
        yield Entry("member", update)
    for invite in state.invites.values():
        yield Entry("invite", invite)
    if state.link is not None:
        yield Entry("link", state.link)
    for project in state.projects.values():
        yield Entry("project", project)


def without_secrets(state: TeamState) -> TeamState:
    """The state a removed machine is sent: who is in and who is out, no link and no live invite.

    The invites admissions redeemed stay (hashes only, none of them live), since without them no
    admission counts and the removed machine could not even read that it was removed."""
    redeemed = {adm.body.redeems for adm in state.admissions.values()}
    kept = {h: s for h, s in state.invites.items() if h in redeemed}
    return dataclasses.replace(state.copy(), invites=kept, link=None)


# ---- merging ----------------------------------------------------------------------------------


_KIND_TYPES: dict[str, type[Meta | Member | Invite | Link | ProjectMember]] = {
    "meta": Meta, "admission": Member, "member": Member, "invite": Invite, "link": Link, "project": ProjectMember}


def _refusal(state: TeamState, entry: Entry, now: int) -> str | None:
    """Why an entry can never count, or None. Only checks that need no other entry."""
    signed = entry.signed
    body_type = _KIND_TYPES.get(entry.kind)
    if body_type is None or not isinstance(signed.body, body_type):
        return f"not a {entry.kind} entry"
    if not verify(state.id, entry.kind, signed):
        return "bad signature (forged, altered, or signed for another team or kind)"
    body = signed.body
    if body.ts > now + MAX_SKEW_MS:
        return "stamped more than a day in the future"
    if body.ts < 0:
        return "stamped before the epoch"
    if isinstance(body, Member):
        problem = member_problem(body)
        if problem:
            return problem
        if entry.kind == "admission":
            if not body.active:
                return "an admission admits an active machine"
            if signed.by == body.key and body.key != state.founder:
                return "a machine cannot admit itself"
            if body.key != state.founder and not _HASH.fullmatch(body.redeems):
                return "an admission names the invite it redeemed"
    elif isinstance(body, Invite):
        if not _HASH.fullmatch(body.hash) or not is_key_id(body.maker) or body.expires < 0:
            return "malformed invite"
        if body.used_by is not None and not is_key_id(body.used_by):
            return "malformed invite"
    elif isinstance(body, Link):
        if not body.secret or len(body.secret) > 128:
            return "malformed link"
    elif isinstance(body, Meta) and not valid_name(body.name):
        return "a team name is a-z, 0-9 and -, at most 64 characters"
    elif isinstance(body, ProjectMember):
        if not _PROJECT_ID.fullmatch(body.project) or not valid_name(body.person) or body.role not in PROJECT_ROLES:
            return "malformed project membership"
    return None


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


def _later(a: Signed[Any] | None, b: Signed[Any]) -> bool:
    return a is None or b.order > a.order


def _invite_order(s: Signed[Invite]) -> tuple[bool, int, str]:
    return (s.body.used_by is not None, s.body.ts, s.sig)  # used stays used


def _put(state: TeamState, entry: Entry) -> None:
    """Fold one entry into ``state`` in place, by the per-key rule of its kind."""
    s = entry.signed
    kind = entry.kind
    if kind == "meta":
        if _later(state.meta, s):
            state.meta = s
    elif kind == "admission":
        key = f"{s.body.key}/{s.by}"
        earliest = state.admissions.get(key)
        if earliest is None or s.order < earliest.order:  # kept forever: the earliest stays
            state.admissions[key] = s
    elif kind == "member":
        slot = state.updates if (s.by == s.body.key and s.body.active) else state.members
        if _later(slot.get(s.body.key), s):
            slot[s.body.key] = s
    elif kind == "invite":
        held = state.invites.get(s.body.hash)
        if held is None or _invite_order(s) > _invite_order(held):
            state.invites[s.body.hash] = s
    elif kind == "link":
        if _later(state.link, s):
            state.link = s
    elif kind == "project":
        key = f"{s.body.project}/{s.body.person}"
        if _later(state.projects.get(key), s):
            state.projects[key] = s


def _prune(state: TeamState, now: int) -> None:
    for key, update in list(state.updates.items()):
        standing = state.members.get(key)
        if standing is not None and update.order <= standing.order:
            del state.updates[key]  # can never count again: standing entries only get newer
    redeemed = {adm.body.redeems for adm in state.admissions.values()}
    for h, invite in list(state.invites.items()):
        body = invite.body
        if body.expires and body.expires + PRUNE_AFTER_MS < now and h not in redeemed:
            del state.invites[h]


def _held(state: TeamState, entry: Entry) -> bool:
    """Whether this exact entry is already in ``state`` (so it was checked when it arrived)."""
    s, body = entry.signed, entry.signed.body
    kind = entry.kind
    if kind == "meta":
        return state.meta == s
    if kind == "link":
        return state.link == s
    if kind == "admission" and isinstance(body, Member):
        return state.admissions.get(f"{body.key}/{s.by}") == s
    if kind == "member" and isinstance(body, Member):
        return state.members.get(body.key) == s or state.updates.get(body.key) == s
    if kind == "invite" and isinstance(body, Invite):
        return state.invites.get(body.hash) == s
    if kind == "project" and isinstance(body, ProjectMember):
        return state.projects.get(f"{body.project}/{body.person}") == s
    return False


def absorb(state: TeamState, incoming: Iterable[Entry], now: int | None = None) -> tuple[TeamState, list[Refusal]]:
    """A new state holding ``state``'s entries plus every acceptable one of ``incoming``."""
    now = now_ms() if now is None else now
    result = state.copy()
    refused: list[Refusal] = []
    for entry in incoming:
        if _held(result, entry):
            continue  # gossip resends the whole state: skip re-verifying what we hold
        reason = _refusal(result, entry, now)
        if reason is None:
            _put(result, entry)
        else:
            refused.append(Refusal(entry.kind, entry.signed.by, reason))
    _prune(result, now)
    return result, refused


class WrongTeam(ValueError):
    """A state of another team (or the same id under another founder)."""


def merge(local: TeamState, incoming: TeamState, now: int | None = None) -> tuple[TeamState, list[Refusal]]:
    """Merge a received state into ours. Commutative, associative and idempotent.

    Raises:
        WrongTeam: the states are of different teams.
    """
    if incoming.id != local.id or incoming.founder != local.founder:
        raise WrongTeam("that state belongs to another team")
    return absorb(local, entries(incoming), now)


def validated(obj: Any, now: int | None = None) -> tuple[TeamState, list[Refusal]]:
    """A received state rebuilt from nothing, keeping only the entries that verify.

    Raises:
        Malformed: not a team state.
    """
    raw = state_from_wire(obj)
    return absorb(TeamState(id=raw.id, founder=raw.founder), entries(raw), now)


# ---- the view ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemberView:
    """A machine as the team sees it now."""

    key: str
    person: str
    machine: str
    role: str
    active: bool
    addresses: tuple[str, ...]
    ts: int
    depth: int
    signed_by: str  # who signed the entry in effect

    @property
    def label(self) -> str:
        return f"{self.person}@{self.machine}"


@dataclass(frozen=True)
class Roster:
    """What a state means: who is admitted, who is active, which invites and link are live."""

    team_id: str
    name: str
    founder: str
    depth: dict[str, int]  # admitted machines and their admission depth
    members: dict[str, MemberView]  # admitted machines with an entry in effect, active or not
    refused: dict[str, str]  # admitted machines whose entry does not count, and why
    invites: dict[str, Invite]  # live invites by secret hash
    link: Link | None  # the live team link
    projects: dict[str, ProjectView] = field(default_factory=dict)  # project id -> owner, members, proposed

    def active(self) -> dict[str, MemberView]:
        return {k: m for k, m in self.members.items() if m.active}

    def is_active(self, key: str) -> bool:
        member = self.members.get(key)
        return member is not None and member.active

    def status(self, key: str) -> str:
        """``active``, ``removed`` (was a member: gets the state without secrets) or ``stranger``."""
        member = self.members.get(key)
        if member is None:
            return "stranger"
        return "active" if member.active else "removed"

    def people(self) -> dict[str, list[MemberView]]:
        """Active machines grouped by person, people and machines sorted by name."""
        grouped: dict[str, list[MemberView]] = {}
        for m in sorted(self.active().values(), key=lambda m: (m.person, m.machine, m.key)):
            grouped.setdefault(m.person, []).append(m)
        return grouped

    def holder_person(self, person: str) -> list[MemberView]:
        return [m for m in self.active().values() if m.person == person]


def _departed_before(state: TeamState, signed: Signed[Member]) -> bool:
    """Whether ``signed`` was signed by a machine after its own departure or removal."""
    if signed.by == signed.body.key:
        return False  # a departure signed by the machine itself
    standing = state.members.get(signed.by)
    return standing is not None and not standing.body.active and standing.order < signed.order


def view(state: TeamState, now: int | None = None) -> Roster:
    """What ``state`` means now. Deterministic: equal states give equal rosters."""
    now = now_ms() if now is None else now
    founder = state.founder
    by_subject: dict[str, list[Signed[Member]]] = {}
    by_signer: dict[str, list[Signed[Member]]] = {}
    for adm in state.admissions.values():
        by_subject.setdefault(adm.body.key, []).append(adm)
        by_signer.setdefault(adm.by, []).append(adm)

    # The admission chain, breadth first from the founder's self-signed admission. An admission a
    # machine signed after its own departure or removal is no link in it: a removed machine cannot
    # admit a helper that would then sign it back in. Nor is one that redeemed no invite of the team.
    admitters = {adm.by for adm in state.admissions.values()} | {adm.body.key for adm in state.admissions.values()}

    def redeemed(adm: Signed[Member]) -> bool:
        if adm.by == adm.body.key == founder:
            return True  # the founding admission, the chain's root
        invite = state.invites.get(adm.body.redeems)
        if invite is None or invite.by not in admitters:
            return False
        return invite.body.reusable or invite.body.used_by == adm.body.key

    depth: dict[str, int] = {}
    if f"{founder}/{founder}" in state.admissions:
        depth[founder] = 0
    frontier = list(depth)
    while frontier:
        following: list[str] = []
        for signer in frontier:
            for adm in by_signer.get(signer, ()):
                if adm.body.key not in depth and not _departed_before(state, adm) and redeemed(adm):
                    depth[adm.body.key] = depth[signer] + 1
                    following.append(adm.body.key)
        frontier = following

    def valid_admissions(key: str) -> list[Signed[Member]]:
        return [a for a in by_subject.get(key, ()) if a.by in depth and redeemed(a)]

    def first_admission(key: str) -> tuple[int, str]:
        return min((a.order for a in valid_admissions(key)), default=(0, ""))

    def admitted_person(key: str) -> str:
        """The person a machine was admitted as (its earliest valid admission)."""
        admissions = sorted(valid_admissions(key), key=lambda a: a.order)
        return admissions[0].body.person if admissions else ""

    founder_person = admitted_person(founder)

    def reachable_without(skipped: str) -> set[str]:
        """The machines whose admission chain reaches the founder without passing through ``skipped``."""
        seen = {founder} if founder in depth and founder != skipped else set()
        frontier = list(seen)
        while frontier:
            frontier = [adm.body.key for signer in frontier for adm in by_signer.get(signer, ())
                        if adm.body.key not in seen and adm.body.key != skipped and adm.body.key in depth
                        and not _departed_before(state, adm) and redeemed(adm)]
            seen.update(frontier)
        return seen

    def may_sign(key: str, signed: Signed[Member]) -> bool:
        if signed.by == key:
            return True
        if not signed.body.active:
            # The founder is removed only by its own person (from any of their machines, or itself).
            return key != founder or admitted_person(signed.by) == founder_person
        # A machine is never brought back by machines that are in only through it: a removed member
        # could admit a helper and have it sign the member back in.
        return signed.by in reachable_without(key)

    # Admission-depth order, so a person's first machine holds their name before later ones are checked.
    order = sorted(depth, key=lambda k: (depth[k], first_admission(k), k))
    members: dict[str, MemberView] = {}
    refused: dict[str, str] = {}
    holders: dict[str, str] = {}
    for key in order:
        candidates = [a for a in valid_admissions(key) if not _departed_before(state, a)]
        entry = state.members.get(key)
        # Its latest entry brings it back through a machine that is in only through it: it was
        # removed before that (the removal itself was overwritten), so it stays out.
        returned_by_its_own = (entry is not None and entry.body.active and entry.by != key and entry.by in depth
                               and not may_sign(key, entry))
        if entry is not None and entry.by in depth and not _departed_before(state, entry) and may_sign(key, entry):
            candidates.append(entry)
        if not candidates:
            refused[key] = "admitted, but no entry in effect"
            continue
        standing = max(candidates, key=lambda s: s.order)
        effective = standing
        update = state.updates.get(key)
        if (update is not None and standing.body.active and update.order > standing.order
                and update.body.person == standing.body.person and not returned_by_its_own):
            effective = update  # its own change while active; never its own return
        body = dataclasses.replace(effective.body, active=False) if returned_by_its_own else effective.body
        if body.active and body.person in holders:
            vouchers = {standing.by} | {a.by for a in valid_admissions(key) if a.body.person == body.person}
            if not any(members.get(v) is not None and members[v].person == body.person for v in vouchers):
                refused[key] = f"the name {body.person} is held by another machine"
                continue
        if body.active:
            holders.setdefault(body.person, key)
        members[key] = MemberView(
            key=key, person=body.person, machine=body.machine, role=body.role, active=body.active,
            addresses=body.addresses, ts=body.ts, depth=depth[key], signed_by=effective.by,
        )

    def maker_active(key: str) -> bool:
        return key in members and members[key].active

    link: Link | None = None
    if state.link is not None and maker_active(state.link.by):
        own = state.invites.get(secret_hash(state.link.body.secret))
        if own is not None and own.body.reusable and maker_active(own.body.maker):
            link = state.link.body
    invites: dict[str, Invite] = {}
    for h, signed in state.invites.items():
        inv = signed.body
        if not maker_active(inv.maker) or signed.by not in depth:
            continue  # invites die with their maker
        if inv.expires and inv.expires <= now:
            continue
        if inv.reusable:
            if link is None or secret_hash(link.secret) != h:
                continue
        elif inv.used_by is not None or signed.by != inv.maker:
            continue
        invites[h] = inv
    name = state.meta.body.name if state.meta is not None and state.meta.by in depth else ""
    return Roster(team_id=state.id, name=name, founder=founder, depth=depth, members=members,
                  refused=refused, invites=invites, link=link, projects=_projects_view(state, members))


@dataclass(frozen=True)
class ProjectView:
    """Who is in a project now: the owner, confirmed members (owner included) and open proposals."""

    project: str
    owner: str
    members: frozenset[str]
    proposed: frozenset[str]


def _projects_view(state: TeamState, members: dict[str, MemberView]) -> dict[str, ProjectView]:
    """Read project membership. An entry counts only if its signer was a member then; a person
    speaks for their own proposal, owner claim and departure; the owner confirms and removes."""
    by_project: dict[str, list[Signed[ProjectMember]]] = {}
    for signed in state.projects.values():
        by_project.setdefault(signed.body.project, []).append(signed)
    out: dict[str, ProjectView] = {}
    for project, records in by_project.items():
        def signer_person(s: Signed[ProjectMember]) -> str:
            m = members.get(s.by)
            return m.person if m is not None else ""

        claims = [s for s in records if s.body.role == "owner" and signer_person(s) == s.body.person]
        if not claims:
            owner = ""
        else:
            owner = min(claims, key=lambda s: s.order).body.person
        confirmed, proposed = set(), set()
        for s in records:
            body, who = s.body, signer_person(s)
            if body.role == "member" and owner and who == owner:
                confirmed.add(body.person)
            elif body.role in ("proposed", "owner") and who == body.person:
                proposed.add(body.person)  # a claim that lost to an earlier owner asks to join
        if owner:
            confirmed.add(owner)
        out[project] = ProjectView(project=project, owner=owner, members=frozenset(confirmed),
                                   proposed=frozenset(proposed - confirmed))
    return out


def project_entry(state: TeamState, identity: Identity, project: str, person: str, role: str,
                  now: int | None = None) -> TeamState:
    """A new state with a project membership entry signed by ``identity`` (it must win over the
    current one for that person, so it is stamped after it)."""
    now = now_ms() if now is None else now
    current = state.projects.get(f"{project}/{person}")
    ts = max(now, current.body.ts + 1) if current is not None else now
    body = ProjectMember(project=project, person=person, role=role, ts=ts)
    return _checked(state, [Entry("project", sign(identity, state.id, "project", body))], now)


# ---- making entries ---------------------------------------------------------------------------


def next_ts(state: TeamState, key: str, now: int) -> int:
    """A timestamp for a new entry about ``key`` that wins over every entry about it so far."""
    latest = now
    for slot in (state.members, state.updates):
        if key in slot:
            latest = max(latest, slot[key].body.ts + 1)
    for adm in state.admissions.values():
        if adm.body.key == key:
            latest = max(latest, adm.body.ts + 1)
    return latest


def _link_entries(team_id: str, identity: Identity, ts: int) -> tuple[list[Entry], str]:
    secret = secrets.token_urlsafe(16)
    invite = Invite(hash=secret_hash(secret), maker=identity.key_id, ts=ts, reusable=True)
    return [Entry("invite", sign(identity, team_id, "invite", invite)),
            Entry("link", sign(identity, team_id, "link", Link(secret=secret, ts=ts)))], secret


def _checked(state: TeamState, made: list[Entry], now: int) -> TeamState:
    result, refused = absorb(state, made, now)
    if refused:  # our own entries: a refusal is a bug here, not a peer's doing
        raise ValueError(f"this machine made an entry the roster refuses: {refused[0].reason}")
    return result


def found(identity: Identity, team: str, person: str, machine: str, addresses: Iterable[str] = (),
          now: int | None = None) -> TeamState:
    """A new team with ``identity`` as its founder and only member, and a team link."""
    now = now_ms() if now is None else now
    for label, value in (("team", team), ("person", person), ("machine", machine)):
        if not valid_name(value):
            raise ValueError(f"a {label} name is a-z, 0-9 and -, at most {MAX_NAME} characters")
    team_id = secrets.token_hex(16)
    me = Member(key=identity.key_id, person=person, machine=machine, ts=now, addresses=tuple(addresses))
    made = [Entry("meta", sign(identity, team_id, "meta", Meta(name=team, ts=now))),
            Entry("admission", sign(identity, team_id, "admission", me))]
    link_made, _ = _link_entries(team_id, identity, now)
    return _checked(TeamState(id=team_id, founder=identity.key_id), made + link_made, now)


def new_link(state: TeamState, identity: Identity, now: int | None = None) -> TeamState:
    """Replace the team link: the old link's invite stops working everywhere the news reaches."""
    now = now_ms() if now is None else now
    ts = max(now, state.link.body.ts + 1 if state.link else now)
    made, _ = _link_entries(state.id, identity, ts)
    return _checked(state, made, now)


def new_invite(state: TeamState, identity: Identity, *, own_machine: bool = False, ttl_ms: int = INVITE_TTL_MS,
               now: int | None = None) -> tuple[TeamState, str]:
    """A one-time invite; returns the new state and the secret (which the state never holds)."""
    now = now_ms() if now is None else now
    secret = secrets.token_urlsafe(16)
    invite = Invite(hash=secret_hash(secret), maker=identity.key_id, ts=now, expires=now + ttl_ms,
                    own_machine=own_machine)
    return _checked(state, [Entry("invite", sign(identity, state.id, "invite", invite))], now), secret


def departures(state: TeamState, identity: Identity, keys: Iterable[str], now: int | None = None) -> TeamState:
    """Mark machines inactive (a removal, or this machine's own departure).

    Raises:
        KeyError: a key the roster does not list as a member.
    """
    now = now_ms() if now is None else now
    current = view(state, now).members
    made = []
    for key in keys:
        m = current[key]
        body = Member(key=key, person=m.person, machine=m.machine, ts=next_ts(state, key, now), role=m.role,
                      active=False, addresses=m.addresses)
        made.append(Entry("member", sign(identity, state.id, "member", body)))
    return _checked(state, made, now)


def admit(state: TeamState, identity: Identity, request: JoinRequest, invite_hash: str,
          now: int | None = None) -> TeamState:
    """Sign a joiner in: its admission (unless it has one), an active member entry, and, for a
    one-time invite, the mark that it is used. The caller checks the invite and the name first."""
    now = now_ms() if now is None else now
    roster = view(state, now)
    ts = next_ts(state, request.key, now)
    body = Member(key=request.key, person=request.person, machine=request.machine, ts=ts,
                  addresses=request.addresses)
    made = []
    if request.key not in roster.depth:
        admission = dataclasses.replace(body, redeems=invite_hash)
        made.append(Entry("admission", sign(identity, state.id, "admission", admission)))
    made.append(Entry("member", sign(identity, state.id, "member", body)))
    invite = state.invites[invite_hash]
    if not invite.body.reusable:
        used = dataclasses.replace(invite.body, used_by=request.key, ts=max(now, invite.body.ts + 1))
        made.append(Entry("invite", sign(identity, state.id, "invite", used)))
    return _checked(state, made, now)


def self_update(state: TeamState, identity: Identity, *, machine: str | None = None,
                addresses: Iterable[str] | None = None, role: str | None = None,
                now: int | None = None) -> TeamState:
    """This machine's own change to its entry (machine name, static addresses, role) while active."""
    now = now_ms() if now is None else now
    me = view(state, now).members.get(identity.key_id)
    if me is None or not me.active:
        raise ValueError("only an active member can update its own entry")
    body = Member(key=me.key, person=me.person, machine=machine or me.machine, role=role or me.role,
                  ts=next_ts(state, me.key, now),
                  addresses=tuple(me.addresses if addresses is None else addresses))
    return _checked(state, [Entry("member", sign(identity, state.id, "member", body))], now)


def sign_join(identity: Identity, team_id: str, secret: str, person: str, machine: str,
              addresses: Iterable[str] = (), now: int | None = None) -> Signed[JoinRequest]:
    """The joiner's signed request; signing proves it holds the key it asks to admit."""
    now = now_ms() if now is None else now
    body = JoinRequest(secret=secret, key=identity.key_id, person=person, machine=machine, ts=now,
                       addresses=tuple(addresses))
    return sign(identity, team_id, "join", body)


# ---- tickets ----------------------------------------------------------------------------------


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
        "i": _b64(bytes.fromhex(ticket.team_id)), "s": ticket.secret, "n": ticket.team,
        "k": [_b64(bytes.fromhex(k)) for k in ticket.keys[:TICKET_KEYS]],
        "a": list(ticket.addresses[:TICKET_ADDRESSES]), "e": ticket.expires,
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
        blob = _unb64(found_ticket.group()[len(TICKET_PREFIX):])
    except (binascii.Error, ValueError) as exc:
        raise Malformed("the invite is damaged; copy it again") from exc
    data, check = blob[:-4], blob[-4:]
    if len(blob) < 5 or hashlib.blake2b(data, digest_size=4).digest() != check:
        raise Malformed("the invite is damaged or incomplete; copy it again")
    try:
        obj = json.loads(data)
        keys = tuple(_unb64(k).hex() for k in obj["k"])
        ticket = Ticket(
            team_id=_unb64(obj["i"]).hex(), secret=obj["s"], team=obj["n"], keys=keys,
            addresses=tuple(obj.get("a") or ()), expires=obj.get("e") or 0, own_machine=bool(obj.get("o")),
            person=obj.get("p") or "",
        )
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise Malformed("the invite is not one this hive can read") from exc
    if (not valid_team_id(ticket.team_id) or not isinstance(ticket.secret, str) or not 0 < len(ticket.secret) <= 128
            or not valid_name(ticket.team) or not 1 <= len(keys) <= TICKET_KEYS or not all(map(is_key_id, keys))
            or len(ticket.addresses) > TICKET_ADDRESSES
            or not all(isinstance(a, str) and 0 < len(a) <= MAX_ADDRESS_LEN and a.isprintable()
                       for a in ticket.addresses)
            or not isinstance(ticket.expires, int) or ticket.expires < 0
            or (ticket.own_machine and not valid_name(ticket.person))):
        raise Malformed("the invite is not one this hive can read")
    return ticket

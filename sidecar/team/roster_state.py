"""The roster's replicated state (:class:`TeamState`): what travels as ``state`` frames, and how
states merge.

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

Pure functions, no I/O. The records it holds and their signatures are
:mod:`hive.sidecar.team.records`; what a state means is :func:`hive.sidecar.team.roster.view`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .identity import is_key_id
from .records import (
    PROJECT_ROLES,
    Invite,
    Link,
    Malformed,
    Member,
    Meta,
    ProjectMember,
    Signed,
    member_problem,
    now_ms,
    signed_from_wire,
    valid_name,
    valid_team_id,
    verify,
)

MAX_SKEW_MS = 86_400_000  # entries stamped more than a day ahead are refused
PRUNE_AFTER_MS = 7 * 86_400_000  # expired invites are dropped a week after they expire

_HASH = re.compile(r"[0-9a-f]{64}")
_PROJECT_ID = re.compile(r"sha256:[0-9a-f]{64}")


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
            self,
            admissions=dict(self.admissions),
            members=dict(self.members),
            updates=dict(self.updates),
            invites=dict(self.invites),
            projects=dict(self.projects),
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": 1,
            "id": self.id,
            "founder": self.founder,
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
    for name, kind, cls in (
        ("admissions", "admission", Member),
        ("members", "member", Member),
        ("updates", "member", Member),
        ("invites", "invite", Invite),
        ("projects", "project", ProjectMember),
    ):
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
    "meta": Meta,
    "admission": Member,
    "member": Member,
    "invite": Invite,
    "link": Link,
    "project": ProjectMember,
}


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

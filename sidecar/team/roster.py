"""The team roster: a replicated membership state, every entry signed by a member machine's key.

Built for a team of friends who trust each other, not for adversarial members: a removed
machine cannot connect any more, but it is not made cryptographically powerless.

Pure functions, no I/O. The sidecar's :class:`~hive.sidecar.team.local.Team` persists a
:class:`TeamState` and serves the ops; the mesh sends states as ``state`` frames and merges what it receives.

The state and how it merges are :mod:`hive.sidecar.team.roster_state`, its signed records
:mod:`hive.sidecar.team.records`, invite tickets :mod:`hive.sidecar.team.tickets`; this module reads
a state (the view) and makes the entries this machine signs.

The view (:class:`Roster`)
    Who is admitted (and at what depth), each member's effective entry, which machines are active,
    and the live invites and link. Names are ``a-z0-9-``, 1 to 64 characters. A person name held by
    an active machine cannot be taken by another machine unless one of that person's machines
    vouches for it (signed its admission or its entry); the first holder in admission-depth order
    keeps it. Invites die with their maker and expire; expired ones are pruned a week later.

API (stable; the mesh and approvals use it)
    :func:`sign`, :func:`verify`                 any kind, bound to the team id (records)
    :func:`state_from_wire`, ``TeamState.to_wire``, :func:`validated`   states on the wire (roster_state)
    :func:`merge`, :func:`absorb`, :func:`entries`                      merging (roster_state)
    :func:`view` → :class:`Roster` (``is_active``, ``status``, ``people``, ``members``, ``depth``)
    :func:`without_secrets`                      what a removed machine is sent (roster_state)
    :func:`found`, :func:`new_invite`, :func:`new_link`, :func:`admit`, :func:`departures`,
    :func:`self_update`, :func:`sign_join`       making entries
    :class:`Ticket`, :func:`encode_ticket`, :func:`decode_ticket`       invite tickets (tickets)
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from .identity import Identity
from .records import MAX_NAME, Invite, JoinRequest, Link, Meta
from .records import Malformed as Malformed
from .records import Member as Member
from .records import ProjectMember as ProjectMember
from .records import Signed as Signed
from .records import canonical as canonical
from .records import now_ms as now_ms
from .records import parse_record as parse_record
from .records import secret_hash as secret_hash
from .records import sign as sign
from .records import signed_from_wire as signed_from_wire
from .records import signing_payload as signing_payload
from .records import valid_name as valid_name
from .records import verify as verify
from .roster_state import Entry as Entry
from .roster_state import TeamState
from .roster_state import WrongTeam as WrongTeam
from .roster_state import absorb as absorb
from .roster_state import merge as merge
from .roster_state import state_from_wire as state_from_wire
from .tickets import Ticket as Ticket
from .tickets import decode_ticket as decode_ticket
from .tickets import encode_ticket as encode_ticket

INVITE_TTL_MS = 7 * 86_400_000  # default life of a one-time invite


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
            frontier = [
                adm.body.key
                for signer in frontier
                for adm in by_signer.get(signer, ())
                if adm.body.key not in seen
                and adm.body.key != skipped
                and adm.body.key in depth
                and not _departed_before(state, adm)
                and redeemed(adm)
            ]
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
        returned_by_its_own = (
            entry is not None
            and entry.body.active
            and entry.by != key
            and entry.by in depth
            and not may_sign(key, entry)
        )
        if entry is not None and entry.by in depth and not _departed_before(state, entry) and may_sign(key, entry):
            candidates.append(entry)
        if not candidates:
            refused[key] = "admitted, but no entry in effect"
            continue
        standing = max(candidates, key=lambda s: s.order)
        effective = standing
        update = state.updates.get(key)
        if (
            update is not None
            and standing.body.active
            and update.order > standing.order
            and update.body.person == standing.body.person
            and not returned_by_its_own
        ):
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
            key=key,
            person=body.person,
            machine=body.machine,
            role=body.role,
            active=body.active,
            addresses=body.addresses,
            ts=body.ts,
            depth=depth[key],
            signed_by=effective.by,
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
    return Roster(
        team_id=state.id,
        name=name,
        founder=founder,
        depth=depth,
        members=members,
        refused=refused,
        invites=invites,
        link=link,
        projects=_projects_view(state, members),
    )


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
        out[project] = ProjectView(
            project=project, owner=owner, members=frozenset(confirmed), proposed=frozenset(proposed - confirmed)
        )
    return out


def project_entry(
    state: TeamState, identity: Identity, project: str, person: str, role: str, now: int | None = None
) -> TeamState:
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
    return [
        Entry("invite", sign(identity, team_id, "invite", invite)),
        Entry("link", sign(identity, team_id, "link", Link(secret=secret, ts=ts))),
    ], secret


def _checked(state: TeamState, made: list[Entry], now: int) -> TeamState:
    result, refused = absorb(state, made, now)
    if refused:  # our own entries: a refusal is a bug here, not a peer's doing
        raise ValueError(f"this machine made an entry the roster refuses: {refused[0].reason}")
    return result


def found(
    identity: Identity,
    team: str,
    person: str,
    machine: str,
    addresses: Iterable[str] = (),
    now: int | None = None,
    role: str = "member",
) -> TeamState:
    """A new team with ``identity`` as its founder and only member (of ``role``), and a team link."""
    now = now_ms() if now is None else now
    for label, value in (("team", team), ("person", person), ("machine", machine)):
        if not valid_name(value):
            raise ValueError(f"a {label} name is a-z, 0-9 and -, at most {MAX_NAME} characters")
    team_id = secrets.token_hex(16)
    me = Member(key=identity.key_id, person=person, machine=machine, ts=now, role=role, addresses=tuple(addresses))
    made = [
        Entry("meta", sign(identity, team_id, "meta", Meta(name=team, ts=now))),
        Entry("admission", sign(identity, team_id, "admission", me)),
    ]
    link_made, _ = _link_entries(team_id, identity, now)
    return _checked(TeamState(id=team_id, founder=identity.key_id), made + link_made, now)


def new_link(state: TeamState, identity: Identity, now: int | None = None) -> TeamState:
    """Replace the team link: the old link's invite stops working everywhere the news reaches."""
    now = now_ms() if now is None else now
    ts = max(now, state.link.body.ts + 1 if state.link else now)
    made, _ = _link_entries(state.id, identity, ts)
    return _checked(state, made, now)


def new_invite(
    state: TeamState,
    identity: Identity,
    *,
    own_machine: bool = False,
    ttl_ms: int = INVITE_TTL_MS,
    now: int | None = None,
) -> tuple[TeamState, str]:
    """A one-time invite; returns the new state and the secret (which the state never holds)."""
    now = now_ms() if now is None else now
    secret = secrets.token_urlsafe(16)
    invite = Invite(
        hash=secret_hash(secret), maker=identity.key_id, ts=now, expires=now + ttl_ms, own_machine=own_machine
    )
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
        body = Member(
            key=key,
            person=m.person,
            machine=m.machine,
            ts=next_ts(state, key, now),
            role=m.role,
            active=False,
            addresses=m.addresses,
        )
        made.append(Entry("member", sign(identity, state.id, "member", body)))
    return _checked(state, made, now)


def admit(
    state: TeamState, identity: Identity, request: JoinRequest, invite_hash: str, now: int | None = None
) -> TeamState:
    """Sign a joiner in: its admission (unless it has one), an active member entry, and, for a
    one-time invite, the mark that it is used. The caller checks the invite and the name first."""
    now = now_ms() if now is None else now
    roster = view(state, now)
    ts = next_ts(state, request.key, now)
    body = Member(key=request.key, person=request.person, machine=request.machine, ts=ts, addresses=request.addresses)
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


def self_update(
    state: TeamState,
    identity: Identity,
    *,
    machine: str | None = None,
    addresses: Iterable[str] | None = None,
    role: str | None = None,
    now: int | None = None,
) -> TeamState:
    """This machine's own change to its entry (machine name, static addresses, role) while active."""
    now = now_ms() if now is None else now
    me = view(state, now).members.get(identity.key_id)
    if me is None or not me.active:
        raise ValueError("only an active member can update its own entry")
    body = Member(
        key=me.key,
        person=me.person,
        machine=machine or me.machine,
        role=role or me.role,
        ts=next_ts(state, me.key, now),
        addresses=tuple(me.addresses if addresses is None else addresses),
    )
    return _checked(state, [Entry("member", sign(identity, state.id, "member", body))], now)


def sign_join(
    identity: Identity,
    team_id: str,
    secret: str,
    person: str,
    machine: str,
    addresses: Iterable[str] = (),
    now: int | None = None,
) -> Signed[JoinRequest]:
    """The joiner's signed request; signing proves it holds the key it asks to admit."""
    now = now_ms() if now is None else now
    body = JoinRequest(
        secret=secret, key=identity.key_id, person=person, machine=machine, ts=now, addresses=tuple(addresses)
    )
    return sign(identity, team_id, "join", body)

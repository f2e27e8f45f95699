"""The team this machine is in (:class:`Team`): the roster kept in the database, the changes this
machine makes to it, and the hooks the mesh uses.

Each sidecar has one :class:`Team` at ``sidecar.team`` (:func:`hive.sidecar.team.membership.attach`
sets it at start), in a team or not. Once in a team, the sidecar's own person and machine names
come from the roster, not from ``config.toml``: loading and every change that joins or leaves a
team replace the sidecar's :class:`~hive.sidecar.base.config.Settings` (a frozen record shared with
the session registry) with a copy carrying the roster's names, and leaving restores the
configured ones.

The ops that drive it (``team_init``, ``team_invite``, ...) are :mod:`hive.sidecar.team.membership`;
the checks on both sides of a join are :mod:`hive.sidecar.team.admission`.

For the mesh (:mod:`hive.sidecar.mesh.links`): :meth:`Team.team_id`, :attr:`Team.identity`,
:meth:`Team.member`, :meth:`Team.members`, :meth:`Team.fingerprint`, :meth:`Team.state_for`,
:meth:`Team.merge`, :meth:`Team.accept_join`, and :meth:`Team.subscribe` for a callback on
every change (broadcast the state, drop removed machines' links). Optional hooks the mesh may
set: ``address_source`` (this machine's dialable addresses, for tickets), ``online_source``
(keys of members linked now), ``link_info`` (per key: LINK_FIELDS) and
``peer_addresses`` (the addresses learned for a member: an anchor's go in tickets).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from ..base.config import load_settings
from ..base.errors import Ambiguous, BadRequest, Conflict, NotFound, Refused
from ..sessions.registry import SessionsHost
from . import admission, records, roster, roster_state, tickets
from .admission import decode_link as decode_link
from .admission import parse_addresses as parse_addresses
from .identity import Identity, KeyUnavailable, load_identity
from .records import Signed
from .roster import MemberView, Roster
from .roster_state import TeamState
from .tickets import Ticket

log = logging.getLogger("hive.sidecar.team.local")

HOUR_MS = 3_600_000
MAX_TTL_HOURS = 30 * 24
# What the mesh adds to each machine in `team_show` (Mesh._link_info).
LINK_FIELDS = ("online", "last_seen", "path", "unreachable", "linked_by")


@dataclass(frozen=True)
class TeamChange:
    """What changed, for subscribers. ``state`` is None once the team is forgotten.

    Reasons: ``init`` (founded here), ``joined`` (this machine joined), ``join`` (this machine
    admitted ``joined``), ``invite``, ``link`` (replaced), ``remove`` (this machine removed
    ``removed``: drop their links once they had the news), ``merge`` (a peer's state changed
    ours), ``leave`` (this machine signed its departure; the team is forgotten as soon as the
    subscribers return, so send the state before returning), ``removed`` (a merge showed this
    machine removed) and ``cleared`` (after ``leave``). Subscribers are awaited in order, under
    the team's lock: they must not call back into ops that take it.
    """

    reason: str
    state: TeamState | None
    removed: tuple[str, ...] = ()  # machines that just stopped being active
    joined: tuple[str, ...] = ()  # machines that just became active


Listener = Callable[[TeamChange], Awaitable[None]]


def invite_line(ticket: Ticket, link: str) -> str:
    if ticket.own_machine:
        return (
            f"To add another machine of {ticket.person}'s to the hive team {ticket.team}, run this there "
            f"(once, before it expires): hive join '{link}'"
        )
    if ticket.expires:
        return f"Join my hive team {ticket.team} (one use): hive join '{link}' --as <your-name>"
    return f"Join my hive team {ticket.team}: hive join '{link}' --as <your-name>"


class TeamHost(SessionsHost, Protocol):
    """What the team's ops use of the daemon: the session registry's host and the team."""

    team: Team


class Team:
    """One sidecar's team membership: state, identity, persistence and change notices."""

    def __init__(self, sidecar: SessionsHost) -> None:
        self.sc = sidecar
        self.state: TeamState | None = None
        self.roster: Roster | None = None
        self._identity: Identity | None = None
        self._lock = anyio.Lock()
        self._version = 0
        self._listeners: list[Listener] = []
        self.address_source: Callable[[], Sequence[str]] | None = None
        self.online_source: Callable[[], Collection[str]] | None = None
        self.link_info: Callable[[str], dict[str, Any]] | None = None
        self.peer_addresses: Callable[[str], Sequence[str]] | None = None
        self.unavailable: KeyUnavailable | None = None  # in a team whose machine key cannot be read now

    # ---- what the mesh reads ---------------------------------------------------------

    def team_id(self) -> str | None:
        return self.state.id if self.state is not None else None

    @property
    def identity(self) -> Identity:
        """This machine's key; loaded at start while in a team, or on first use (blocking).

        Raises:
            KeyUnavailable: the key's store cannot be read now.
        """
        if self._identity is None:
            self._identity = load_identity(self.sc.paths.home)
        return self._identity

    async def ensure_identity(self) -> Identity:
        if self._identity is None:
            self._identity = await anyio.to_thread.run_sync(load_identity, self.sc.paths.home)
            log.info("machine key %s (%s)", self._identity.key_id[:12], self._identity.why)
        return self._identity

    def my_key(self) -> str:
        return self.identity.key_id

    def member(self, key: str) -> MemberView | None:
        """A machine the roster knows (active or removed), or None for a stranger."""
        return None if self.roster is None else self.roster.members.get(key)

    def members(self) -> list[MemberView]:
        return [] if self.roster is None else list(self.roster.members.values())

    def fingerprint(self) -> tuple[str | None, int]:
        """Changes whenever the roster does."""
        return (self.team_id(), self._version)

    def state_for(self, key: str) -> dict[str, Any] | None:
        """What to send a peer: the full state to an active member, the state without secrets to a
        removed one (so it learns why), nothing to a stranger."""
        if self.state is None or self.roster is None:
            return None
        status = self.roster.status(key)
        if status == "active":
            return self.state.to_wire()
        if status == "removed":
            return roster_state.without_secrets(self.state).to_wire()
        return None

    def sign(self, kind: str, body: Any) -> Signed[Any]:
        """Sign any record as ``kind`` for this team (approvals use this). Raises NotFound if in no team."""
        return records.sign(self.identity, self._require().id, kind, body)

    def verify(self, kind: str, signed: Signed[Any]) -> bool:
        return self.state is not None and records.verify(self.state.id, kind, signed)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # ---- state -----------------------------------------------------------------------

    def _require(self) -> TeamState:
        if self.unavailable is not None:
            raise self.unavailable
        if self.state is None:
            raise NotFound(
                "this machine is in no team: `hive init <team> --as <you>` founds one, "
                "`hive join '<invite>' --as <you>` joins one"
            )
        return self.state

    def _roster(self) -> Roster:
        assert self.roster is not None
        return self.roster

    async def load(self) -> None:
        row = await self.sc.store.fetchone("SELECT state FROM team WHERE slot = 1")
        if row is None:
            return
        try:
            state, refused = roster_state.validated(json.loads(row[0]))
        except (ValueError, records.Malformed) as exc:
            log.error("the stored team state is unreadable (%s); this machine is in no team until it joins again", exc)
            return
        if refused:
            log.warning("dropped %d stored roster entries: %s", len(refused), refused[0].reason)
        try:
            await self.ensure_identity()
        except KeyUnavailable as exc:
            # Stay out of the team (the mesh stays idle) but keep its row: it comes back with the key.
            log.error("in team %s but the machine key is unavailable: %s", state.id[:8], exc.message)
            self.unavailable = exc
            return
        self._set(state)
        if self._roster().status(self._identity.key_id if self._identity else "") != "active":
            log.info("the stored roster no longer lists this machine as active; forgetting the team")
            await self._clear("removed")
            return
        await self._apply_names()

    def _set(self, state: TeamState | None) -> None:
        self.state = state
        self.roster = roster.view(state) if state is not None else None
        self._version += 1

    async def _save(self, state: TeamState) -> None:
        await self.sc.store.write(
            [
                (
                    "INSERT OR REPLACE INTO team (slot, team_id, state, updated_at) VALUES (1, ?, ?, ?)",
                    (state.id, json.dumps(state.to_wire(), separators=(",", ":")), time.time()),
                )
            ]
        )

    async def _commit(self, state: TeamState, reason: str) -> TeamChange:
        """Keep a new state (on disk before anyone is told) and tell the subscribers."""
        before = self.roster.active() if self.roster is not None else {}
        await self._save(state)
        self._set(state)
        after = self._roster().active()
        change = TeamChange(
            reason=reason,
            state=state,
            removed=tuple(sorted(set(before) - set(after))),
            joined=tuple(sorted(set(after) - set(before))),
        )
        await self._notify(change)
        return change

    async def _clear(self, reason: str) -> None:
        """Forget the team: the row, the old link in the WAL, and the roster's names."""
        await self.sc.store.write([("DELETE FROM team", ())])
        with contextlib.suppress(Exception):  # best effort: secure_delete already zeroed the pages
            await self.sc.store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._set(None)
        await self._apply_names()
        await self._notify(TeamChange(reason=reason, state=None))

    async def _notify(self, change: TeamChange) -> None:
        for listener in list(self._listeners):
            try:
                await listener(change)
            except Exception:
                log.exception("a team listener failed on %s", change.reason)

    async def _apply_names(self) -> None:
        """The sidecar's person and machine: the roster's while in a team, else config.toml's.

        Unread mail addressed under the old person name (``alice/api-claude``, ``alice/terminal``)
        moves to the new one, so what arrived before a join under config.toml's name is not stranded.
        """
        me = self.member(self._identity.key_id) if self._identity is not None and self.roster else None
        if me is not None and me.active:
            person, machine = me.person, me.machine
        else:
            configured = load_settings(self.sc.paths.config)
            person, machine = configured.person, configured.machine
        settings = self.sc.settings
        if (settings.person, settings.machine) == (person, machine):
            return
        old = settings.person
        settings = dataclasses.replace(settings, person=person, machine=machine)
        if old != person:
            await self.sc.store.write(
                [
                    (
                        "UPDATE messages SET recipient = ? || substr(recipient, ?) "
                        "WHERE substr(recipient, 1, ?) = ? AND read_at IS NULL",
                        (f"{person}/", len(old) + 2, len(old) + 1, f"{old}/"),
                    ),
                    # Senders too, so a reply to mail one local session sent another before the join finds it.
                    (
                        "UPDATE messages SET sender = ? || substr(sender, ?) WHERE substr(sender, 1, ?) = ?",
                        (f"{person}/", len(old) + 2, len(old) + 1, f"{old}/"),
                    ),
                ]
            )
        self.sc.settings = settings
        self.sc.sessions.settings = settings  # names addresses; the mailbox reads no name from its copy
        log.info("this machine is now %s on %s", person, machine)

    # ---- merging what peers send -----------------------------------------------------

    async def merge(self, obj: Any, peer: str | None = None) -> bool:
        """Merge a state a peer sent; True if ours changed. Never raises for a bad state."""
        if self.state is None:
            return False
        try:
            incoming = roster_state.state_from_wire(obj)
        except records.Malformed as exc:
            log.info("ignored a malformed state from %s: %s", (peer or "?")[:12], exc)
            return False
        async with self._lock:
            if self.state is None:
                return False
            try:
                merged, refused = roster_state.merge(self.state, incoming)
            except roster_state.WrongTeam:
                log.info("ignored another team's state from %s", (peer or "?")[:12])
                return False
            if refused:
                log.info(
                    "refused %d roster entries from %s, e.g. %s: %s",
                    len(refused),
                    (peer or "?")[:12],
                    refused[0].kind,
                    refused[0].reason,
                )
            if merged == self.state:
                return False
            change = await self._commit(merged, "merge")
            me = self.identity.key_id
            if self._roster().status(me) != "active":
                log.info("this machine was removed from team %s (or left from another process)", merged.id[:8])
                await self._clear("removed")
            elif change.removed:
                log.info("no longer active: %s", ", ".join(k[:12] for k in change.removed))
            return True

    # ---- tickets ---------------------------------------------------------------------

    def _my_addresses(self) -> list[str]:
        found: list[str] = []
        if self.address_source is not None:
            with contextlib.suppress(Exception):
                found = list(self.address_source())
        me = self.member(self.identity.key_id)
        if me is not None:
            found = list(me.addresses) + [a for a in found if a not in me.addresses]
        return found[: tickets.TICKET_ADDRESSES]

    def _online(self) -> set[str] | None:
        if self.online_source is not None:
            with contextlib.suppress(Exception):
                return set(self.online_source())
        return None

    def _anchor_address(self, anchor: MemberView) -> str | None:
        learned: list[str] = []
        if self.peer_addresses is not None:
            with contextlib.suppress(Exception):
                learned = list(self.peer_addresses(anchor.key))
        return next(iter([*anchor.addresses, *learned]), None)

    def _ticket(self, secret: str, expires: int, own_machine: bool) -> Ticket:
        state, view = self._require(), self._roster()
        me = view.members[self.identity.key_id]
        online = self._online() or set()
        others = [m for m in view.active().values() if m.key != me.key and (not own_machine or m.person == me.person)]
        # Prefer the team's anchors (always on, dialable from anywhere), then machines online now,
        # then the most recently changed entries.
        others.sort(key=lambda m: (m.role != "anchor", m.key not in online, -m.ts, m.key))
        keys = (me.key, *(m.key for m in others[: tickets.TICKET_KEYS - 1]))
        addresses = self._my_addresses()
        anchor = next((m for m in others if m.role == "anchor" and m.key in keys), None)
        anchor_address = self._anchor_address(anchor) if anchor is not None else None
        if anchor_address is not None and anchor_address not in addresses:
            # The anchor's address first (always on, dialable from anywhere), then this machine's
            # best one (a LAN address, for a joiner next to it while the anchor is down).
            addresses = [anchor_address, *addresses[: tickets.TICKET_ADDRESSES - 1]]
        return Ticket(
            team_id=state.id,
            secret=secret,
            team=view.name,
            keys=keys,
            addresses=tuple(addresses),
            expires=expires,
            own_machine=own_machine,
            person=me.person if own_machine else "",
        )

    def _invite_reply(self, ticket: Ticket, kind: str) -> dict[str, Any]:
        link = tickets.encode_ticket(ticket)
        return {
            "team": ticket.team,
            "kind": kind,
            "link": link,
            "line": invite_line(ticket, link),
            "expires": ticket.expires / 1000 if ticket.expires else None,
        }

    def _link_reply(self) -> dict[str, Any]:
        link = self._roster().link
        assert link is not None
        return self._invite_reply(self._ticket(link.secret, 0, False), "link")

    # ---- ops -------------------------------------------------------------------------

    async def init(
        self, team: str, person: str, machine: str, addresses: Sequence[str] = (), role: str = "member"
    ) -> dict[str, Any]:
        for label, value in (("team", team), ("person", person), ("machine", machine)):
            admission.check_name(label, value)
        if self.unavailable is not None:
            raise self.unavailable
        identity = await self.ensure_identity()
        async with self._lock:
            if self.state is not None:
                raise Conflict(f"this machine is already in team {self._roster().name}; `hive leave` first")
            state = roster.found(identity, team, person, machine, parse_addresses(addresses), role=role)
            await self._commit(state, "init")
            await self._apply_names()
        return {**self.show(), "invite": self._link_reply()}

    async def invite(
        self, own_machine: bool = False, once: bool = False, ttl_hours: float | None = None
    ) -> dict[str, Any]:
        async with self._lock:
            state = self._require()
            if own_machine or once:
                hours = 24.0 * 7 if ttl_hours is None else float(ttl_hours)
                if not 0 < hours <= MAX_TTL_HOURS:
                    raise BadRequest(f"an invite lasts more than 0 and at most {MAX_TTL_HOURS} hours")
                state, secret = roster.new_invite(
                    state, self.identity, own_machine=own_machine, ttl_ms=int(hours * HOUR_MS)
                )
                await self._commit(state, "invite")
                invite = state.invites[records.secret_hash(secret)].body
                ticket = self._ticket(secret, invite.expires, own_machine)
                return self._invite_reply(ticket, "own_machine" if own_machine else "once")
            if self._roster().link is None:  # its maker left: make a new one rather than fail
                await self._commit(roster.new_link(state, self.identity), "link")
            return self._link_reply()

    async def link_new(self) -> dict[str, Any]:
        async with self._lock:
            await self._commit(roster.new_link(self._require(), self.identity), "link")
            return self._link_reply()

    async def project_entry(self, project: str, person: str, role: str) -> None:
        """Sign a project membership entry (hive.sidecar.team.projects checks who may) and spread it."""
        async with self._lock:
            await self._commit(roster.project_entry(self._require(), self.identity, project, person, role), "project")

    @property
    def name(self) -> str:
        return self._roster().name if self.state is not None else ""

    def targets(self, target: str) -> list[MemberView]:
        """The active machines ``target`` names: a person's, one machine, or person@machine."""
        self._require()  # in no team: not_found (or why the team cannot be read), not an assertion
        view = self._roster()
        active = list(view.active().values())
        if "@" in target:
            person, _, machine = target.partition("@")
            found = [m for m in active if m.person == person and m.machine == machine]
        else:
            found = [m for m in active if m.person == target]
            if not found:
                found = [m for m in active if m.machine == target or m.key == target]
                if len(found) > 1:
                    raise Ambiguous(
                        f"several machines are called {target}: "
                        + ", ".join(sorted(m.label for m in found))
                        + "; name one as person@machine"
                    )
        if not found:
            raise NotFound(f"no active person or machine {target!r} in team {view.name}; see `hive team`")
        return found

    async def remove(self, target: str) -> dict[str, Any]:
        if not isinstance(target, str) or not target:
            raise BadRequest("remove needs a target: a person, a machine, or person@machine")
        async with self._lock:
            state = self._require()
            found = self.targets(target)
            if any(m.key == self.identity.key_id for m in found):
                raise Refused("that includes this machine: use `hive leave` to leave the team")
            view = self._roster()
            founder = view.members.get(view.founder)
            me = view.members[self.identity.key_id]
            if founder is not None and any(m.key == founder.key for m in found) and me.person != founder.person:
                raise Refused(
                    f"{founder.label} founded team {view.name}: only {founder.person} removes it, "
                    "from one of their machines"
                )
            state = roster.departures(state, self.identity, [m.key for m in found])
            # The removed machines know the team link: replace it so they cannot come back with it.
            state = roster.new_link(state, self.identity)
            await self._commit(state, "remove")
            return {
                "removed": sorted(m.label for m in found),
                "keys": sorted(m.key for m in found),
                "link_replaced": True,
                "invite": self._link_reply(),
            }

    async def leave(self, force: bool = False) -> dict[str, Any]:
        async with self._lock:
            state = self._require()
            view = self._roster()
            me = self.identity.key_id
            others = set(view.active()) - {me}
            online = self._online()
            if others and online is not None and not (others & online) and not force:
                raise Refused(
                    "no teammate is online to hear that this machine left; try again when one is, "
                    "or leave anyway with --force"
                )
            name = view.name
            await self._commit(roster.departures(state, self.identity, [me]), "leave")
            await self._clear("cleared")
        return {"left": name}

    # ---- joins -----------------------------------------------------------------------

    async def prepare_join(
        self, link: str, person: str | None = None, machine: str | None = None, addresses: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The joiner's side, before dialing: read the ticket and sign the join frame."""
        if self.unavailable is not None:
            raise self.unavailable
        if self.state is not None:
            raise Conflict(f"this machine is already in team {self._roster().name}; `hive leave` first")
        ticket, person, machine = admission.read_invite(
            link, person, machine, self.sc.settings.person, self.sc.settings.machine
        )
        identity = await self.ensure_identity()
        if identity.key_id in ticket.keys:
            raise BadRequest("that invite was made on this machine; run `hive join` on the machine that should join")
        hello = roster.sign_join(identity, ticket.team_id, ticket.secret, person, machine, parse_addresses(addresses))
        return {
            "team": ticket.team,
            "team_id": ticket.team_id,
            "person": person,
            "machine": machine,
            "own_machine": ticket.own_machine,
            "addresses": list(ticket.addresses),
            "keys": list(ticket.keys),
            "expires": ticket.expires / 1000 if ticket.expires else None,
            "frame": {"t": "join", "hello": hello.to_wire()},
        }

    async def accept_join(self, frame: Any, peer: str | None = None) -> dict[str, Any]:
        """The inviter's side: check the join frame, admit the joiner, return the full state.

        ``peer`` is the key the transport proved (the joiner's certificate); it must be the key the
        frame names. Raises Refused (bad, used, expired or replaced invite; a name that is taken).
        """
        hello = admission.join_request(frame)
        async with self._lock:
            state = self._require()
            admitted = admission.admit(state, self._roster(), self.identity, hello, peer)
            if admitted is None:
                return state.to_wire()  # a retry after a lost answer
            new, machine = admitted
            await self._commit(new, "join")
            log.info("admitted %s@%s (%s)", hello.body.person, machine, hello.body.key[:12])
            return new.to_wire()

    async def finish_join(self, link: str, obj: Any, peer: str | None = None, role: str = "member") -> dict[str, Any]:
        """The joiner's side, after the inviter answered: check the state and keep it; with
        ``role`` anchor, then sign this machine's entry as the team's anchor."""
        ticket = decode_link(link)
        identity = await self.ensure_identity()
        state, refused = admission.answered_state(ticket, obj, identity.key_id, peer)
        if refused:
            log.warning("the inviter's state held %d entries that do not verify (%s)", len(refused), refused[0].reason)
        async with self._lock:
            if self.state is not None:
                raise Conflict(f"this machine is already in team {self._roster().name}")
            await self._commit(state, "joined")
            if role != "member":
                await self._commit(roster.self_update(state, identity, role=role), "role")
            await self._apply_names()
        reply = self.show()
        if self._roster().link is not None:
            reply["invite"] = self._link_reply()
        return reply

    # ---- showing ---------------------------------------------------------------------

    def show(self) -> dict[str, Any]:
        settings = self.sc.settings
        if self.state is None or self.roster is None:
            shown: dict[str, Any] = {
                "team": None,
                "me": {
                    "person": settings.person,
                    "machine": settings.machine,
                    "key": self._identity.key_id if self._identity else None,
                },
                "people": [],
                "departed": [],
            }
            if self.unavailable is not None:
                shown["problem"] = self.unavailable.message
            return shown
        view = self.roster
        me = self.identity.key_id
        names = {m.key: m.machine for m in view.members.values()}

        def machine(m: MemberView) -> dict[str, Any]:
            info: dict[str, Any] = {
                "key": m.key,
                "machine": m.machine,
                "role": m.role,
                "addresses": list(m.addresses),
                "me": m.key == me,
                "online": None,
                "last_seen": None,
                "path": None,
                "unreachable": False,  # up (linked to a machine linked here) or relayed, but not dialable from here
                "linked_by": [],
            }
            if self.link_info is not None and m.key != me:
                with contextlib.suppress(Exception):
                    extra = self.link_info(m.key) or {}
                    info.update({k: extra[k] for k in LINK_FIELDS if k in extra})
                    info["linked_by"] = [names.get(k, k[:12]) for k in info["linked_by"]]
            return info

        people = [
            {"person": person, "machines": [machine(m) for m in machines]} for person, machines in view.people().items()
        ]
        departed = [
            {"key": m.key, "person": m.person, "machine": m.machine}
            for m in sorted(view.members.values(), key=lambda m: (m.person, m.machine))
            if not m.active
        ]
        mine = view.members.get(me)
        return {
            "team": {
                "id": self.state.id,
                "name": view.name,
                "founder": view.founder,
                "link": view.link is not None,
                "invites": sum(1 for i in view.invites.values() if not i.reusable),
            },
            "me": {
                "key": me,
                "person": mine.person if mine else settings.person,
                "machine": mine.machine if mine else settings.machine,
                "role": mine.role if mine else None,
            },
            "people": people,
            "departed": departed,
            "anchors": [
                {"key": m.key, "person": m.person, "machine": m.machine}
                for m in sorted(view.members.values(), key=lambda m: (m.person, m.machine))
                if m.active and m.role == "anchor"
            ],
        }

"""Joining a team, checked on both sides: the invite link and the names a joiner asks for, the
inviter's checks on a join request (may it join, and under which machine name), and the joiner's
checks on the state the inviter answers with.

Pure functions, no I/O: :class:`hive.sidecar.team.local.Team` calls them under its lock and keeps
what they return.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..base.errors import BadRequest, Conflict, Refused
from . import records, roster, roster_state, tickets
from .identity import Identity
from .records import JoinRequest, Signed
from .roster import Roster
from .roster_state import Refusal, TeamState
from .tickets import Ticket

JOIN_MAX_AGE_MS = roster_state.MAX_SKEW_MS  # a join frame older than a day is stale


def check_name(label: str, value: Any) -> None:
    if not records.valid_name(value):
        raise BadRequest(f"a {label} name is 1 to {records.MAX_NAME} of a-z, 0-9 and - (got {str(value)[:80]!r})")


def parse_addresses(value: Any) -> tuple[str, ...]:
    """A request's ``addresses``: a list of printable ``host:port``. Raises ``BadRequest``."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(a, str) for a in value):
        raise BadRequest("addresses is a list of host:port strings")
    if len(value) > records.MAX_ADDRESSES or any(
        not a or len(a) > records.MAX_ADDRESS_LEN or not a.isprintable() for a in value
    ):
        raise BadRequest(f"at most {records.MAX_ADDRESSES} addresses, each one printable host:port")
    return tuple(value)


def decode_link(link: Any) -> Ticket:
    """The ticket in an invite link a request carries. Raises ``BadRequest``."""
    if not isinstance(link, str):
        raise BadRequest("join needs the invite link (it starts with hive1:)")
    try:
        return tickets.decode_ticket(link)
    except records.Malformed as exc:
        raise BadRequest(str(exc)) from exc


def read_invite(
    link: Any, person: str | None, machine: str | None, default_person: str, default_machine: str
) -> tuple[Ticket, str, str]:
    """The joiner's side, before dialing: the invite's ticket, and the person and machine to join as
    (an own-machine invite's person; else as asked, else the configured ones).

    Raises:
        BadRequest: a damaged link, a bad name, or another person than an own-machine invite's.
        Refused: the invite has expired.
    """
    ticket = decode_link(link)
    if ticket.expires and ticket.expires <= records.now_ms():
        raise Refused(f"this invite to {ticket.team} has expired; ask for a new one")
    if ticket.own_machine:
        if person and person != ticket.person:
            raise BadRequest(f"this invite adds a machine of {ticket.person}'s; it cannot join as {person}")
        person = ticket.person
    person = person or default_person
    machine = machine or default_machine
    check_name("person", person)
    check_name("machine", machine)
    return ticket, person, machine


def join_request(frame: Any) -> Signed[JoinRequest]:
    """The signed request in a ``join`` frame. Raises Refused."""
    try:
        return records.signed_from_wire(JoinRequest, frame.get("hello") if isinstance(frame, dict) else None)
    except records.Malformed as exc:
        raise Refused("not a join request") from exc


def admit(
    state: TeamState, view: Roster, me: Identity, hello: Signed[JoinRequest], peer: str | None
) -> tuple[TeamState, str] | None:
    """The inviter's side: the state with the joiner admitted, and the machine name it got (its
    own, or with a ``-2`` ... suffix when the person has a machine called that); None when the
    joiner is already active (a retry after a lost answer).

    ``view`` is the roster of ``state`` the team holds. ``peer`` is the key the transport proved
    (the joiner's certificate); it must be the key the request names. Raises Refused (bad, used,
    expired or replaced invite) or Conflict (a name that is taken).
    """
    request = hello.body
    if not records.verify(state.id, "join", hello) or hello.by != request.key:
        raise Refused("the join request's signature does not verify for this team")
    if peer is not None and peer != request.key:
        raise Refused("the join request names another key than the connection's")
    now = records.now_ms()
    if not now - JOIN_MAX_AGE_MS <= request.ts <= now + roster_state.MAX_SKEW_MS:
        raise Refused("the join request is stale or from a clock far off")
    problem = records.member_problem(
        records.Member(
            key=request.key,
            person=request.person,
            machine=request.machine,
            ts=request.ts,
            addresses=request.addresses[: records.MAX_ADDRESSES],
        )
    )
    if problem:
        raise Refused(problem)
    if view.is_active(request.key):
        return None
    invite_hash = records.secret_hash(request.secret)
    invite = view.invites.get(invite_hash)
    if invite is None:
        raise Refused("that invite is not valid here: used, expired, replaced, or its maker left")
    my_person = view.members[me.key_id].person
    holders = [m for m in view.holder_person(request.person) if m.key != request.key]
    if invite.own_machine:
        owner = view.members[invite.maker].person
        if request.person != owner:
            raise Refused(f"this invite is for another machine of {owner}'s")
        if my_person != owner:
            raise Refused(f"an own-machine invite is redeemed by one of {owner}'s machines")
    elif holders:
        raise Conflict(
            f"the name {request.person} is taken in team {view.name}; join with another "
            f"--as name, or ask {request.person} for `hive invite --own-machine`"
        )
    taken = {m.machine for m in view.active().values() if m.person == request.person}
    machine = free_name(request.machine, taken)
    admitted = dataclasses.replace(request, machine=machine, addresses=request.addresses[: records.MAX_ADDRESSES])
    new = roster.admit(state, me, admitted, invite_hash)
    if not roster.view(new).is_active(request.key):
        raise Refused(roster.view(new).refused.get(request.key, "the roster does not admit that machine"))
    return new, machine


def answered_state(ticket: Ticket, obj: Any, my_key: str, peer: str | None) -> tuple[TeamState, list[Refusal]]:
    """The joiner's side, after the inviter answered: the team state it sent, and the entries in it
    that did not verify (dropped). Raises Refused when it is not the invite's team, or does not
    list this machine, or came from a machine the invite does not name."""
    try:
        state, refused = roster_state.validated(obj)
    except records.Malformed as exc:
        raise Refused(f"the inviter's answer is not a team state: {exc}") from exc
    if state.id != ticket.team_id:
        raise Refused("the inviter answered with another team than the invite names")
    view = roster.view(state)
    if not view.is_active(my_key):
        raise Refused("the inviter's answer does not list this machine as a member")
    if peer is not None and (peer not in ticket.keys or not view.is_active(peer)):
        raise Refused("the machine that answered is not one the invite names")
    return state, refused


def free_name(wanted: str, taken: set[str]) -> str:
    if wanted not in taken:
        return wanted
    for n in range(2, 1000):
        suffix = f"-{n}"
        candidate = wanted[: records.MAX_NAME - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise Conflict(f"too many machines called {wanted}")

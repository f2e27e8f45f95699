"""The team ops on the local socket, and wiring a starting sidecar's :class:`~hive.sidecar.team.local.Team`.

Ops (requests on the local socket)::

    team_init {team, person?, machine?, addresses?}  found a team; returns the roster and invite line
    team_invite {own_machine?, once?, ttl_hours?}    the team link, or a one-time invite
    team_show                                        people, machines, roles (+ link state from the mesh)
    team_remove {target}                             a person (all their machines) or a machine
    team_leave {force?}                              sign this machine's departure, then forget the team
    team_link_new                                    replace the team link
    team_join_prepare {link, person?, machine?}      joiner: read the invite, sign the join frame
    team_join_accept {frame, peer?}                  inviter: check the invite, admit, return the state
    team_join_finish {link, state, peer?}            joiner: check and keep the inviter's answer

``team_join {link, person?}`` (prepare, dial on ``hive-join/1``, finish) belongs to the mesh.

Every op here that changes the team or hands out a way in asks the person when an agent runs it
(``person.confirm_by_person``, the one check; ``needs_person`` when they cannot be asked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest
from ..person.confirm import asks_person, confirm_by_person
from .local import Team, decode_link, parse_addresses
from .tickets import Ticket

if TYPE_CHECKING:
    from ..base.host import Connection
    from .local import TeamHost


async def attach(sidecar: TeamHost) -> Team:
    """Give a starting sidecar its :class:`Team` (``sidecar.team``), loaded from the database."""
    team = Team(sidecar)
    sidecar.team = team
    await team.load()
    return team


def team_of(sidecar: TeamHost) -> Team:
    team = getattr(sidecar, "team", None)
    if team is None:  # a sidecar started without attach(): tests of other modules, older wiring
        team = Team(sidecar)
        sidecar.team = team
    return team


def _flag(request: dict[str, Any], name: str) -> bool:
    value = request.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name} is true or false")
    return value


def _text(request: dict[str, Any], name: str) -> str | None:
    value = request.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    return value or None


@asks_person
async def op_team_init(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Found a team with this machine as its first member.

    Request: ``team`` (str, required): the team's name; ``person`` and ``machine`` (str, optional):
    this machine's names in it (default config.toml's); ``addresses`` (list of host:port, optional):
    where teammates dial it; ``anchor`` (bool, optional): this machine is the team's always-on
    anchor. Returns the team as ``team_show`` does, with ``invite`` (the team link).
    Raises ``bad_request`` for a bad name, ``conflict`` when already in a team, ``needs_person`` or
    ``confirm_on_terminal`` when an agent asks unconfirmed.
    """
    team = _text(request, "team")
    if team is None:
        raise BadRequest("team_init needs 'team': the team's name (a-z, 0-9 and -)")
    person = _text(request, "person") or sidecar.settings.person
    machine = _text(request, "machine") or sidecar.settings.machine
    await agent_confirms(
        conn,
        request,
        f"Found team {team} as {person} on this machine?",
        f"Ask your person to run `hive init {team}` in a terminal.",
    )
    role = "anchor" if _flag(request, "anchor") else "member"
    return await team_of(sidecar).init(team, person, machine, parse_addresses(request.get("addresses")), role)


@asks_person
async def op_team_invite(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Hand out a way into the team: the team link, a one-time invite, or one for another of this
    person's machines.

    Request: ``own_machine`` (bool, optional): an invite for another machine of this person's;
    ``once`` (bool, optional): a one-time invite; ``ttl_hours`` (number, optional): how long either
    lasts (default a week, at most 30 days). Returns ``{"team", "kind": "link" | "once" |
    "own_machine", "link", "line", "expires"}``. Raises ``not_found`` in no team, ``bad_request``,
    ``needs_person``/``confirm_on_terminal`` when an agent asks unconfirmed.
    """
    ttl = request.get("ttl_hours")
    if ttl is not None and (not isinstance(ttl, int | float) or isinstance(ttl, bool)):
        raise BadRequest("ttl_hours is a number")
    own_machine, once = _flag(request, "own_machine"), _flag(request, "once")
    team = team_of(sidecar)
    if team.state is not None:
        # The invite is the key to the team: whoever holds it can join (friends assumption).
        what = (
            "an invite for another of your machines"
            if own_machine
            else "a one-time invite"
            if once
            else "the team link"
        )
        await agent_confirms(
            conn,
            request,
            f"Hand out {what} to team {team.name}? Whoever holds it can join.",
            "Ask your person to run `hive invite` in a terminal and pass the link on.",
        )
    return await team.invite(own_machine, once, ttl)


async def op_team_show(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show the team: its people, their machines and roles, and each link's state from the mesh.

    Reads no fields. Returns ``{"team": {"id", "name", "founder", "link", "invites"} | None, "me",
    "people": [{"person", "machines"}], "departed", "anchors": [{"key", "person", "machine"}]}``
    (``anchors``: the active machines whose role is anchor), plus ``problem`` when this machine's
    key cannot be read.
    """
    return team_of(sidecar).show()


async def agent_confirms(conn: Connection, request: dict[str, Any], question: str, hint: str) -> None:
    """A team change an agent (or a script with no terminal) asks for goes ahead only once the
    person confirms it in a pop-up.

    A teammate's message or a web page the agent read can ask it to remove someone, leave, join
    another team or replace the link, and an agent can hand the command to a process with no trace
    of itself; the person's own command, typed at a terminal of theirs, needs no second question.
    Raises ``needs_person`` when the person declines or cannot be asked. This is
    ``person.confirm_by_person``, the one check, with ``agents_only``.
    """
    await confirm_by_person(
        conn,
        request,
        question,
        title="hive · confirm a team change",
        outcome="not changed",
        hint=hint,
        agents_only=True,
    )


@asks_person
async def op_team_remove(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Remove a person (all their machines) or one machine from the team, and replace the team link.

    Request: ``target`` (str, required): a person, a machine, or person@machine. Returns
    ``{"removed", "keys", "link_replaced": true, "invite"}``. Raises ``bad_request`` without a
    target, ``not_found``/``ambiguous``, ``refused`` for this machine (leave instead) or the
    founder (only their own person removes them), ``needs_person``/``confirm_on_terminal``.
    """
    team = team_of(sidecar)
    target = _text(request, "target") or ""
    if target and not conn.at_terminal:
        labels = ", ".join(sorted(m.label for m in team.targets(target)))
        await agent_confirms(
            conn,
            request,
            f"Remove {labels} from team {team.name}? The team link is replaced.",
            f"Ask your person to run `hive remove {target}` in a terminal.",
        )
    return await team.remove(target)


@asks_person
async def op_team_leave(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Sign this machine's departure, send it to the teammates, then forget the team.

    Request: ``force`` (bool, optional): leave even when no teammate is online to hear it. Returns
    ``{"left": team name}``. Raises ``not_found`` in no team, ``refused`` when no teammate is online
    (without ``force``), ``needs_person``/``confirm_on_terminal`` when an agent asks unconfirmed.
    """
    team = team_of(sidecar)
    if team.state is not None:
        await agent_confirms(
            conn,
            request,
            f"Leave team {team.name} on this machine?",
            "Ask your person to run `hive leave` in a terminal.",
        )
    return await team.leave(_flag(request, "force"))


@asks_person
async def op_team_link_new(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Replace the team link: the old one stops working.

    Reads no fields. Returns the new link as ``team_invite`` does. Raises ``not_found`` in no team,
    ``needs_person``/``confirm_on_terminal`` when an agent asks unconfirmed.
    """
    team = team_of(sidecar)
    if team.state is not None:
        await agent_confirms(
            conn,
            request,
            f"Replace the link of team {team.name}? The old link stops working.",
            "Ask your person to run `hive link --new` in a terminal.",
        )
    return await team.link_new()


def join_question(ticket: Ticket, person: str, machine: str) -> str:
    """What the person confirms before this machine joins a team (both halves of a join ask it)."""
    return f"Join team {ticket.team} as {person} on {machine}? Its members will see and message your sessions."


@asks_person
async def op_team_join_prepare(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The joiner's first half of ``team_join``: read the invite and sign the join frame.

    Request: ``link`` (str, required): the invite; ``person`` and ``machine`` (str, optional): the
    names to join as; ``addresses`` (list of host:port, optional). Returns ``{"team", "team_id",
    "person", "machine", "own_machine", "addresses", "keys", "expires", "frame"}``: where to dial
    and the frame to send. Raises ``bad_request``, ``conflict`` when already in a team, ``refused``
    for an expired invite, ``needs_person``/``confirm_on_terminal``.
    """
    link = _text(request, "link") or ""
    person, machine = _text(request, "person"), _text(request, "machine")
    ticket = decode_link(link)
    await agent_confirms(
        conn,
        request,
        join_question(ticket, person or ticket.person or sidecar.settings.person, machine or sidecar.settings.machine),
        "Ask your person to run `hive join` in a terminal.",
    )
    return await team_of(sidecar).prepare_join(link, person, machine, parse_addresses(request.get("addresses")))


@asks_person
async def op_team_join_accept(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The inviter's half of a join, by hand: check a join frame, admit the joiner, return the state.

    Request: ``frame`` (object, required): the joiner's join frame; ``peer`` (str, optional): the key
    the transport proved, which must be the frame's. Returns ``{"state"}``, the team state to hand
    back. Raises ``not_found`` in no team, ``refused`` (a bad, used or expired invite, a stale or
    unsigned frame), ``conflict`` for a taken person name, ``needs_person``/``confirm_on_terminal``.
    """
    team = team_of(sidecar)
    if team.state is not None:
        await agent_confirms(
            conn,
            request,
            f"Admit a machine to team {team.name} by hand?",
            "A machine joins with `hive join '<link>'`, which this sidecar answers itself.",
        )
    return {"state": await team.accept_join(request.get("frame"), _text(request, "peer"))}


@asks_person
async def op_team_join_finish(sidecar: TeamHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The joiner's last half of ``team_join``: check the inviter's answer and keep the team state.

    Request: ``link`` (str, required): the invite; ``state`` (object, required): the inviter's
    answer; ``peer`` (str, optional): the key that answered. Returns the team as ``team_show`` does,
    with ``invite`` when the team has a link. Raises ``bad_request`` for a bad link, ``refused`` for
    an answer that does not check out, ``conflict`` when already in a team,
    ``needs_person``/``confirm_on_terminal``.
    """
    link = _text(request, "link") or ""
    ticket = decode_link(link)
    await agent_confirms(
        conn,
        request,
        f"Join team {ticket.team} on this machine with the answer given?",
        "Ask your person to run `hive join` in a terminal.",
    )
    return await team_of(sidecar).finish_join(link, request.get("state"), _text(request, "peer"))


OPS = {
    "team_init": op_team_init,
    "team_invite": op_team_invite,
    "team_show": op_team_show,
    "team_remove": op_team_remove,
    "team_leave": op_team_leave,
    "team_link_new": op_team_link_new,
    "team_join_prepare": op_team_join_prepare,
    "team_join_accept": op_team_join_accept,
    "team_join_finish": op_team_join_finish,
}

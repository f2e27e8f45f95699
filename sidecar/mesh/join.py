"""Joining a team over ``hive-join/1``: the inviter's side (an invite secret in, the roster out),
the joiner's dial, and the ``team_join`` op that drives it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import one_line
from ..base.errors import BadRequest, NotFound, Refused
from ..person.confirm import asks_person
from ..team.admission import parse_addresses
from .config import BACKOFF_START
from .transport import ALPN_JOIN, CLOSE_PROTOCOL, FrameError, Link, LinkClosed, dial, machine_cert

if TYPE_CHECKING:
    from ..base.host import Connection
    from .links import Mesh, MeshHost

log = logging.getLogger("hive.sidecar.mesh.join")

JOIN_TIMEOUT = 30.0
JOIN_ATTEMPTS = 3


async def serve_join(mesh: Mesh, link: Link) -> None:
    """``hive-join/1``: a joiner presents an invite secret and receives the roster."""
    try:
        with anyio.fail_after(JOIN_TIMEOUT):
            frame = await link.receive()
    except (LinkClosed, TimeoutError):
        return
    team = getattr(mesh.sc, "team", None)
    if frame.get("t") != "join" or team is None:
        link.close(CLOSE_PROTOCOL, "expected a join")
        return
    try:
        state = await team.accept_join(frame, link.peer)
    except Exception as exc:  # an invalid or used invite: say so without team details
        log.info("refused a join from %s: %s", link.peer[:12], exc)
        with contextlib.suppress(LinkClosed, FrameError):
            await link.send({"t": "refused", "note": "that invite is not valid (used, expired or replaced)"})
        with anyio.move_on_after(2):
            await link.closed.wait()
        return
    with contextlib.suppress(LinkClosed, FrameError):
        await link.send({"t": "state", "state": state})
    with anyio.move_on_after(5):  # the joiner closes once it has stored the state
        await link.closed.wait()


async def dial_join(mesh: Mesh, addresses: Sequence[str], keys: Sequence[str], frame: dict[str, Any]) -> dict[str, Any]:
    """Dial the ticket's addresses on ``hive-join/1`` until one inviter answers with the roster.

    Raises Refused (the invite was refused) or NotFound (nobody answered).
    """
    seed = mesh.team.identity_seed()
    if seed is None:
        raise BadRequest("this machine has no machine key yet")
    cert = machine_cert(seed)
    wanted = {k.lower() for k in keys}

    def check(key: bytes, alpn: str) -> bool:
        return not wanted or key.hex() in wanted

    errors: list[str] = []
    for attempt in range(JOIN_ATTEMPTS):  # a busy inviter may drop a join: the frame is safe to resend
        if attempt:
            await anyio.sleep(BACKOFF_START * attempt)
        for address in addresses:
            try:
                async with dial(
                    address, cert, check, alpn=ALPN_JOIN, connect_within=mesh.config.connect_timeout
                ) as link:
                    await link.send(frame)
                    with anyio.fail_after(JOIN_TIMEOUT):
                        answer = await link.receive()
                    if answer.get("t") == "state":
                        return {"state": answer.get("state"), "peer": link.peer, "address": address}
                    if answer.get("t") == "refused":
                        raise Refused(one_line(answer.get("note"), 200) or "the invite was refused")
                    errors.append(f"{address}: unexpected answer")
            except (ConnectionError, OSError, ValueError, LinkClosed, TimeoutError) as exc:
                errors.append(f"{address}: {exc or type(exc).__name__}")
        if not addresses:
            break
    raise NotFound("no machine of that team answered at " + ("; ".join(errors[-len(addresses) :]) or "no address"))


@asks_person
async def op_team_join(sidecar: MeshHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Join a team: read the invite, dial its machines, keep the roster (``hive join '<link>' --as <person>``).

    Request: ``link`` (str, required): the invite, ``hive1:...``. ``person`` or ``as`` (str,
    optional): the name to join as (default this machine's person, or the invite's own for an
    own-machine invite). ``machine`` (str, optional): this machine's name. ``anchor`` (bool,
    optional): this machine joins as the team's always-on anchor. ``addresses`` (list of
    host:port, optional): where teammates dial it (a public address; it listens there). Returns the team as
    ``team_show`` does, with ``invite`` (the team link) when the team has one. Raises
    ``bad_request``, ``conflict`` when already in a team, ``refused`` for an expired or refused
    invite, ``needs_person``/``confirm_on_terminal`` when an agent asks unconfirmed, and
    ``not_found`` when none of the invite's machines answers.
    """
    from ..team.membership import (  # the team module imports nothing of the mesh; keep it that way
        agent_confirms,
        team_of,
    )

    link = request.get("link")
    if not isinstance(link, str) or not link.strip():
        raise BadRequest("join needs 'link': the invite (it starts with hive1:)")
    person = request.get("person") or request.get("as")
    machine = request.get("machine")
    if any(v is not None and not isinstance(v, str) for v in (person, machine)):
        raise BadRequest("person and machine are names (a-z, 0-9 and -)")
    if not isinstance(request.get("anchor", False), bool):
        raise BadRequest("anchor is true or false")
    team = team_of(sidecar)
    addresses = parse_addresses(request.get("addresses"))
    prepared = await team.prepare_join(link.strip(), person, machine, addresses)
    # A link in a stranger's text must not make this machine a member of their team unasked.
    await agent_confirms(
        conn,
        request,
        f"Join team {prepared['team']} as {prepared['person']} on "
        f"{prepared['machine']}? Its members will see this machine's sessions.",
        "Ask your person to run `hive join` in a terminal.",
    )
    answer = await dial_join(sidecar.mesh, prepared["addresses"], prepared["keys"], prepared["frame"])
    sidecar.mesh.learn(answer["peer"], [answer["address"]], front=True)
    sidecar.mesh.eager.add(answer["peer"])
    role = "anchor" if request.get("anchor") else "member"
    result = await team.finish_join(link.strip(), answer["state"], answer["peer"], role)
    sidecar.mesh.roster_changed()
    return dict(result)

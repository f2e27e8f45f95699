"""Roster sync over the links: ``state {state}`` frames, merged on receipt and spread on change.

A machine broadcasts only changes made on it (the mesh is full, so every linked member hears a
change from its origin), as a delta against its last broadcast; a member linked later gets the
whole state at link-up, skipped when both hold the same roster (:meth:`RosterSync.digest`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

import anyio

from .config import HELLO_TIMEOUT
from .transport import FrameError, Link, LinkClosed, encode_frame

if TYPE_CHECKING:
    from .links import Mesh

log = logging.getLogger("hive.sidecar.mesh.roster_sync")


class RosterSync:
    """The roster's side of one mesh: what to send, what came in."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.dirty = False  # a change made here awaits the flusher's broadcast
        self._digest: tuple[Any, str] = (object(), "")
        self._base: dict[str, Any] | None = None  # what the last broadcast held

    async def tell_leaving(self) -> None:
        """This machine signed its departure and forgets the team as soon as this returns: every
        linked member gets the whole state now (there is no later link-up to catch up at), and
        a ping answered on each link says the frame got there before the links close."""
        self.dirty = False
        team = getattr(self.mesh.sc, "team", None)
        state = getattr(team, "state", None)
        if state is None or not self.mesh.links:
            return
        frame = {"t": "state", "state": state.to_wire()}

        async def tell(link: Link) -> None:
            with anyio.move_on_after(HELLO_TIMEOUT / 2), contextlib.suppress(LinkClosed, FrameError, ConnectionError):
                await link.send(frame)
                await link.protocol.ping()

        async with anyio.create_task_group() as tg:
            for link in list(self.mesh.links.values()):
                tg.start_soon(tell, link)

    def digest(self) -> str:
        """A short hash of the roster, so two machines that agree skip the state exchange."""
        fingerprint = self.mesh.team.fingerprint()
        if self._digest[0] != fingerprint:
            team = getattr(self.mesh.sc, "team", None)
            state = getattr(team, "state", None)
            wire = json.dumps(state.to_wire(), sort_keys=True) if state is not None else ""
            self._digest = (fingerprint, hashlib.sha256(wire.encode()).hexdigest()[:32])
        return self._digest[1]

    async def merge(self, link: Link, frame: dict[str, Any]) -> None:
        """Merge a peer's roster; a change reaches the mesh's team-change hook, which spreads it."""
        try:
            await self.mesh.team.merge(frame.get("state"), link.peer)
        except Exception:
            log.exception("could not merge the roster from %s", link.peer[:12])

    async def broadcast(self) -> None:
        """Send what changed here to every linked member: only the entries that differ from the
        last broadcast (merging is a union, so a partial state merges like a whole one), encoded
        once. A member that missed one gets the whole state at its next link-up."""
        team = getattr(self.mesh.sc, "team", None)
        state = getattr(team, "state", None)
        if state is None:
            return
        wire = state.to_wire()
        base = self._base
        delta = _state_delta(base, wire) if base is not None and base.get("id") == wire["id"] else wire
        self._base = wire
        try:
            encoded = encode_frame({"t": "state", "state": delta})
        except FrameError:
            log.error("the roster no longer fits in one frame")
            return
        for peer, link in list(self.mesh.links.items()):
            member = self.mesh.team.member(peer)
            with contextlib.suppress(LinkClosed, FrameError):
                if member is not None and member.active:
                    await link.send_encoded(encoded)
                else:
                    removed = self.mesh.team.state_for(peer)  # without secrets
                    if removed is not None:
                        await link.send({"t": "state", "state": removed})


def _state_delta(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The entries of roster state ``new`` that ``old`` does not hold as they are now."""
    delta: dict[str, Any] = {"v": new.get("v"), "id": new["id"], "founder": new["founder"]}
    for single in ("meta", "link"):
        delta[single] = new.get(single) if new.get(single) != old.get(single) else None
    for section in ("admissions", "members", "updates", "invites", "projects"):
        before = old.get(section) or {}
        delta[section] = {k: v for k, v in (new.get(section) or {}).items() if before.get(k) != v}
    return delta

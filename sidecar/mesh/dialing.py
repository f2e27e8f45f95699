"""Dialing teammates: one loop per active member that keeps a link to it, and a loop per static address.

A member's loop tries the addresses learned for it (best first: the last one that answered leads)
and then those in its roster entry, backing off 2 → 60 s while none answers (up to
``relayed_redial``, 600 s, while an anchor relays to it), and sleeps while the member is linked
directly. :meth:`Dialer.wake` makes it try at once (new addresses, a link dropped). Both sides
dial; the larger key holds back a little, so that usually only the smaller key's link is made.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from .addresses import valid_address
from .config import BACKOFF_MAX, BACKOFF_START
from .transport import dial

if TYPE_CHECKING:
    from .links import Mesh

log = logging.getLogger("hive.sidecar.mesh.dialing")


class Dialer:
    """The dial loops of one mesh; :meth:`Mesh.run_link` serves each link they make."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.dialing: set[str] = set()  # members whose dial loop runs
        self._wakes: dict[str, anyio.Event] = {}

    def check(self, key: bytes, alpn: str) -> bool:
        """The TLS pin when dialing: an active member other than this machine."""
        member = self.mesh.team.member(key.hex())
        return member is not None and member.active and key.hex() != self.mesh.team.my_key()

    def wake(self, peer: str) -> anyio.Event:
        return self._wakes.setdefault(peer, anyio.Event())

    async def dial_loop(self, peer: str) -> None:
        backoff = BACKOFF_START
        first = True
        try:
            while True:
                member = self.mesh.team.member(peer)
                if member is None or not member.active:
                    return
                link = self.mesh.links.get(peer)
                if link is not None and not link.relayed:  # relayed through an anchor: dial on, direct is better
                    await link.closed.wait()
                    first = False
                    backoff = BACKOFF_START
                    await self.mesh.unreachable(peer)
                    continue
                learned = self.mesh.addresses.get(peer, [])
                candidates = list(learned) + [a for a in member.addresses if a not in learned and valid_address(a)]
                wake = self._wakes[peer] = anyio.Event()
                if not candidates:
                    await wake.wait()
                    continue
                # Both sides dial; the larger key holds back a little so that usually only one
                # link is made (the smaller key's), instead of two that are then deduplicated.
                if not first or (peer < self.mesh.team.my_key() and peer not in self.mesh.eager):
                    with anyio.move_on_after(backoff if not first else BACKOFF_START):
                        await wake.wait()
                    if self.mesh.direct(peer):
                        continue
                first = False
                connected = False
                for address in candidates:
                    if self.mesh.direct(peer):
                        connected = True
                        break
                    try:
                        assert self.mesh.cert is not None
                        async with dial(
                            address, self.mesh.cert, self.check, connect_within=self.mesh.config.connect_timeout
                        ) as link:
                            connected = await self.mesh.run_link(link)
                    except (ConnectionError, OSError, ValueError) as exc:
                        log.debug("dial %s at %s failed: %s", peer[:12], address, exc)
                    if connected:
                        self._prefer(peer, address)
                        break
                if connected:
                    backoff = BACKOFF_START
                else:
                    await self.mesh.unreachable(peer)
                    relayed = (current := self.mesh.links.get(peer)) is not None and current.relayed
                    backoff = min(backoff * 2, self.mesh.config.relayed_redial if relayed else BACKOFF_MAX)
        finally:
            self.dialing.discard(peer)

    def _prefer(self, peer: str, address: str) -> None:
        current = self.mesh.addresses.get(peer, [])
        if current and current[0] != address:
            self.mesh.addresses[peer] = [address] + [a for a in current if a != address]

    async def dial_static(self, address: str) -> None:
        """A static address (VPN, public host): whoever answers there must be an active member."""
        backoff = BACKOFF_START
        while True:
            try:
                assert self.mesh.cert is not None
                async with dial(
                    address, self.mesh.cert, self.check, connect_within=self.mesh.config.connect_timeout
                ) as link:
                    self.mesh.learn(link.peer, [address])
                    if self.mesh.direct(link.peer):
                        return  # already linked: the member's own dial loop owns it from now on
                    if await self.mesh.run_link(link):
                        backoff = BACKOFF_START
                        return
            except (ConnectionError, OSError, ValueError) as exc:
                log.debug("static %s: %s", address, exc)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

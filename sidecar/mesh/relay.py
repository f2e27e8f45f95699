"""Relay through the team's anchor, for members that cannot dial each other, and custody for
members that are offline.

Two laptops behind their own NATs cannot link, but both link to the anchor (an ordinary member
whose roster role is ``anchor``, on an always-on machine teammates can dial). Then:

- The anchor tells each linked member which machines it links now: ``reach {peers}``, again on
  every change.
- A member with no direct link to a machine an anchor reaches talks to it through a
  :class:`RelayedLink`. Each frame is *sealed*: signed by this machine as kind ``relay`` (over
  ``hive/1/{team_id}/relay/``) with the machine it is for and the time, and handed to the anchor as
  ``relay {sealed}``. The anchor passes it on unchanged. The receiver checks the seal against the
  roster, not the link it came on, and handles the frame as one from its sealer, answering over a
  relayed link back through the same anchor. An anchor can read what it relays but cannot forge or
  alter it, and a removed machine's seal no longer counts. The mesh adopts a relayed link as the
  link to its peer, so every speaker (mail, presence) uses it unchanged; ``path`` says "via
  <anchor>". The dialer keeps dialing the peer, and a direct link replaces the relayed one as soon
  as it is made.
- Custody: a message, ack or receipt sealed for a machine the anchor does not link is kept
  (:mod:`.custody`) and delivered when that machine links. For a message the anchor answers its
  sender ``custody {to, id, state, note}``: ``anchored`` (the sender's outbox lets it go) or
  ``refused`` (over the sender's quota: it stays in the sender's outbox). The sender's mail hands a
  message to the anchor through :meth:`Relay.custody_link` when its recipient has no link.

Only an anchor passes frames on, and only frames sealed by the machine that handed them over (no
relaying of relays). The link layer stays one interface (:class:`~.transport.Link`): a relayed
link is a Link whose frames travel inside another link's, and a second transport (iroh, with its
own hole punching and relays) would be another kind of Link the mesh adopts the same way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

from ..team.records import Signed
from .custody import HOLD_DAYS, Custody
from .frames import Speaker
from .team_view import Member
from .transport import CLOSE_NORMAL, FrameError, Link, LinkClosed

if TYPE_CHECKING:
    from .links import Mesh

log = logging.getLogger("hive.sidecar.mesh.relay")

KIND = "relay"  # what a sealed frame is signed as
CUSTODY_KINDS = frozenset({"msg", "ack", "receipt"})  # what an anchor holds for a machine that is offline
MAX_AGE_MS = (HOLD_DAYS + 1) * 86_400_000  # a seal older than this is refused (a replay)
MAX_AHEAD_MS = 300_000  # a seal this far in the future is refused (a clock far off, or a forgery's)
MAX_REACH = 1000  # machines an anchor may say it links
# An anchor tells its members what it links this long after a change, once for a burst: each
# ``reach`` goes to every member, so telling per link-up cost n² frames while a team formed.
REACH_SETTLE = 1.0


class RelayedLink(Link):
    """A link to ``peer`` whose frames travel sealed inside ``via``, a link to an anchor.

    Not a QUIC stream of its own: it only sends. What ``peer`` sends back arrives as ``relay``
    frames on ``via`` and is handled by :class:`Relay`. ``custody``: made to hand mail to the
    anchor for a peer that is offline, never adopted as the peer's link.
    """

    relayed = True

    def __init__(self, relay: Relay, peer: str, via: Link, *, custody: bool = False) -> None:
        # Deliberately not Link.__init__: there is no stream to read or write.
        self.relay = relay
        self.via = via
        self.custody = custody
        self.peer_key = bytes.fromhex(peer)
        self.protocol = via.protocol  # a ping proves the anchor is there, which is what this link needs
        self.alpn = via.alpn
        self.outbound = True
        self.dialer = b""
        anchor = relay.mesh.team.member(via.peer)
        self.address = f"via {anchor.machine if anchor else via.peer[:12]}"
        self.opened_at = time.monotonic()
        self.closed = anyio.Event()
        self.close_reason = ""
        self.bytes_in = 0
        self.bytes_out = 0

    def __repr__(self) -> str:
        return f"<RelayedLink to {self.peer[:12]} {self.address}>"

    async def send(self, frame: dict[str, Any]) -> None:
        if self.closed.is_set():
            raise LinkClosed(self.close_reason or "the relayed link is closed")
        if self.via.closed.is_set():
            self.close(CLOSE_NORMAL, "the anchor's link closed")
            raise LinkClosed("the anchor's link closed")
        sealed = {"t": "relay", "sealed": self.relay.seal(self.peer, frame)}
        await self.via.send(sealed)
        if self.custody and frame.get("t") in CUSTODY_KINDS:
            # Every anchor holds a copy: whichever is up when the peer is back delivers it, and
            # the peer keeps one (it answers a duplicate without depositing it again).
            for other in self.relay.anchor_links():
                if other is not self.via:
                    with contextlib.suppress(LinkClosed, FrameError):
                        await other.send(sealed)

    async def send_encoded(self, data: bytes) -> None:
        await self.send(json.loads(data[4:]))  # one frame made for many links: sealed for this one

    async def receive(self) -> dict[str, Any]:
        raise LinkClosed("a relayed link is read by the relay, not by its owner")

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason or "closed here"
        self.closed.set()
        self.relay.closed(self)


class Relay(Speaker):
    """The relay of one mesh: the anchor's side (reach, passing on, custody) and a member's side
    (relayed links, opening what arrives sealed)."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.custody = Custody(mesh.sc, mesh.config.custody_frames, mesh.config.custody_bytes)
        self.reach: dict[str, frozenset[str]] = {}  # anchor key -> the machines it says it links
        self._told: frozenset[str] | None = None  # what this machine, an anchor, last said it links
        self._telling = False  # an anchor's ``reach`` to every member is due (see REACH_SETTLE)
        self._back: dict[tuple[str, int], RelayedLink] = {}  # (peer, id(anchor link)) -> link for answers
        self._custody_links: dict[str, RelayedLink] = {}  # peer -> link that hands its mail to an anchor

    def frames(self) -> dict[str, Any]:
        return {"relay": self._on_relay, "reach": self._on_reach, "custody": self._on_custody}

    # ---- roles -------------------------------------------------------------------------------

    def is_anchor(self) -> bool:
        if self.mesh.team.team_id is None:
            return False
        me = self.mesh.team.member(self.mesh.team.my_key())
        return me is not None and me.active and me.role == "anchor"

    def anchor_links(self) -> list[Link]:
        """Direct links to active anchors other than this machine."""
        found = []
        for key, link in self.mesh.links.items():
            member = self.mesh.team.member(key)
            if member is not None and member.active and member.role == "anchor" and not link.relayed:
                found.append(link)
        return found

    # ---- sealing -----------------------------------------------------------------------------

    def seal(self, to: str, frame: dict[str, Any]) -> dict[str, Any]:
        body = {"to": to, "frame": frame, "at": int(time.time() * 1000)}
        return self.mesh.team.sign(KIND, body).to_wire()

    def open(self, wire: Any) -> tuple[str, str, dict[str, Any]] | None:
        """``(sealer, to, frame)`` of a sealed frame whose seal holds for this team, else None."""
        if not isinstance(wire, dict) or not isinstance(wire.get("body"), dict):
            return None
        body, by, sig = wire["body"], wire.get("by"), wire.get("sig")
        if not isinstance(by, str) or not isinstance(sig, str):
            return None
        to, frame, at = body.get("to"), body.get("frame"), body.get("at")
        if not isinstance(to, str) or not isinstance(frame, dict) or not isinstance(frame.get("t"), str):
            return None
        now = time.time() * 1000
        if not isinstance(at, int) or isinstance(at, bool) or not now - MAX_AGE_MS < at < now + MAX_AHEAD_MS:
            return None
        if not self.mesh.team.verify(KIND, Signed(body=body, by=by, sig=sig, raw=body)):
            return None
        return by, to, frame

    # ---- a member's side ---------------------------------------------------------------------

    def reconcile(self) -> None:
        """Adopt a relayed link to each member an anchor reaches and this machine does not link
        directly; close those no anchor reaches any more."""
        if self.mesh.team.team_id is None or self.is_anchor():
            return
        me = self.mesh.team.my_key()
        anchors = {link.peer: link for link in self.anchor_links()}
        for member in self.mesh.team.members():
            if member.key == me or member.key in anchors:
                continue
            current = self.mesh.links.get(member.key)
            if current is not None and not current.relayed:
                continue
            via = next((a for k, a in anchors.items() if member.key in self.reach.get(k, ())), None)
            if not member.active or via is None:
                if isinstance(current, RelayedLink):
                    current.close(CLOSE_NORMAL, "no anchor reaches it now")
                continue
            if isinstance(current, RelayedLink) and current.via is via and not current.closed.is_set():
                continue
            self.mesh.spawn(self.mesh.adopt_relayed, RelayedLink(self, member.key, via))

    def custody_link(self, peer: str) -> Link | None:
        """A link that hands ``peer``'s mail to an online anchor while ``peer`` has no link (None
        without one). Its frames reach ``peer`` at once if the anchor links it, else are held."""
        member = self.mesh.team.member(peer)
        if member is None or not member.active or member.role == "anchor":
            return None
        current = self._custody_links.get(peer)
        if current is not None and not current.closed.is_set():
            return current
        via = next(iter(self.anchor_links()), None)
        if via is None:
            return None
        link = RelayedLink(self, peer, via, custody=True)
        self._custody_links[peer] = link
        for speaker in self.mesh.speakers:
            speaker.link_adopted(link)  # mail keeps its window per link
        return link

    def closed(self, link: RelayedLink) -> None:
        if self._custody_links.get(link.peer) is link:
            del self._custody_links[link.peer]
        for key, back in list(self._back.items()):
            if back is link:
                del self._back[key]
        self.mesh.relayed_down(link)

    def _back_link(self, peer: str, via: Link) -> RelayedLink:
        """The link that answers ``peer``'s relayed frames through ``via``, the anchor they came through."""
        current = self.mesh.links.get(peer)
        if isinstance(current, RelayedLink) and current.via is via and not current.closed.is_set():
            return current
        key = (peer, id(via))
        back = self._back.get(key)
        if back is None or back.closed.is_set():
            back = self._back[key] = RelayedLink(self, peer, via, custody=True)
            for speaker in self.mesh.speakers:
                speaker.link_adopted(back)
        return back

    # ---- frames ------------------------------------------------------------------------------

    async def _on_reach(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        if member.role != "anchor":
            return
        peers = frame.get("peers") or []
        self.reach[link.peer] = frozenset(p for p in peers[:MAX_REACH] if isinstance(p, str) and len(p) == 64)
        self.reconcile()

    async def _on_custody(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        """The anchor's answer to a message handed to it: an ack of the message, for mail."""
        to, message_id, state = frame.get("to"), frame.get("id"), frame.get("state")
        if member.role != "anchor" or not isinstance(to, str) or not isinstance(message_id, str):
            return
        recipient = self.mesh.team.member(to)
        handler = self.mesh.frame_handlers.get("ack")
        if recipient is None or handler is None:
            return
        through = self._custody_links.get(to) or self._back_link(to, link)
        if state == "anchored":
            note = (
                f"anchored: held by the team's anchor {member.machine} until "
                f"{recipient.person}'s machine {recipient.machine} is back"
            )
            await handler(through, recipient, {"t": "ack", "id": message_id, "state": "anchored", "note": note})
        else:
            note = f"retry: {frame.get('note') or 'the anchor did not keep it'}"
            await handler(through, recipient, {"t": "ack", "id": message_id, "state": "retry", "note": note})

    async def _on_relay(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        opened = self.open(frame.get("sealed"))
        if opened is None:
            log.warning("a relayed frame from %s (%s) has no valid seal; refused", member.machine, link.peer[:12])
            return
        sealer, to, inner = opened
        me = self.mesh.team.my_key()
        if to == me:
            await self._arrived(link, sealer, inner)
        elif self.is_anchor():
            await self._pass_on(link, sealer, to, inner, frame["sealed"])

    async def _arrived(self, via: Link, sealer: str, inner: dict[str, Any]) -> None:
        """A frame sealed for this machine: handled as one from its sealer."""
        origin = self.mesh.team.member(sealer)
        if origin is None or not origin.active or sealer == self.mesh.team.my_key():
            log.warning("a relayed frame sealed by %s, which is no active member; refused", sealer[:12])
            return
        await self.mesh.dispatch_relayed(self._back_link(sealer, via), origin, inner)

    async def _pass_on(self, link: Link, sealer: str, to: str, inner: dict[str, Any], sealed: dict[str, Any]) -> None:
        """An anchor: pass a frame on to the machine it is for, or hold it while that one is offline."""
        if sealer != link.peer:
            log.warning("%s handed over a frame sealed by %s; refused (no relaying of relays)", link.peer[:12], sealer)
            return
        target = self.mesh.team.member(to)
        if target is None or not target.active:
            return
        kind = str(inner.get("t"))
        if kind == "ack" and isinstance(inner.get("id"), str):
            await self.custody.answered(sealer, inner["id"])  # the recipient answered: custody ends
        out = self.mesh.links.get(to)
        if out is not None and not out.relayed:
            try:
                await out.send({"t": "relay", "sealed": sealed})
                return
            except (LinkClosed, FrameError):
                pass
        if kind not in CUSTODY_KINDS:
            return  # presence and the like are worth nothing late
        message_id = ""
        if kind == "msg" and isinstance(inner.get("msg"), dict) and isinstance(inner["msg"].get("id"), str):
            message_id = inner["msg"]["id"]
        refused = await self.custody.keep(to, sealer, kind, message_id, sealed)
        if message_id:
            answer = {"t": "custody", "to": to, "id": message_id, "state": "refused" if refused else "anchored"}
            if refused:
                answer["note"] = refused
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send(answer)

    async def deliver(self, peer: str) -> None:
        """An anchor: hand ``peer`` what was held for it, oldest first."""
        link = self.mesh.links.get(peer)
        if link is None or link.relayed:
            return
        done = []
        for held in await self.custody.waiting(peer):
            try:
                await link.send({"t": "relay", "sealed": held.sealed})
            except (LinkClosed, FrameError):
                break
            if held.kind != "msg":
                done.append(held.seq)
        await self.custody.delivered(done)

    # ---- the link's life ---------------------------------------------------------------------

    def _reach(self) -> dict[str, Any]:
        return {"t": "reach", "peers": sorted(k for k, link in self.mesh.links.items() if not link.relayed)}

    async def link_up(self, link: Link) -> None:
        if link.relayed:
            return
        if self.is_anchor():
            await link.send(self._reach())  # the others hear of it at the next flush
            self.mesh.spawn(self.deliver, link.peer)
        self.mesh.poke()

    def link_down(self, link: Link) -> None:
        if link.relayed:
            return
        if self.reach.pop(link.peer, None) is not None:
            for key in [k for k in self._back if k[1] == id(link)]:
                self._back.pop(key).close(CLOSE_NORMAL, "the anchor's link closed")
            for custody in [c for c in self._custody_links.values() if c.via is link]:
                custody.close(CLOSE_NORMAL, "the anchor's link closed")
        self.mesh.poke()

    async def flush(self, linked: bool) -> None:
        if not self.is_anchor():
            self.reconcile()
        elif not self._telling and frozenset(self._reach()["peers"]) != self._told:
            self._telling = self.mesh.spawn(self._tell_reach)

    async def _tell_reach(self) -> None:
        try:
            await anyio.sleep(REACH_SETTLE)
        finally:
            self._telling = False
        frame = self._reach()
        peers = frozenset(frame["peers"])
        if peers == self._told:
            return
        self._told = peers
        for link in [self.mesh.links[k] for k in peers if k in self.mesh.links]:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send(frame)

"""The mesh: links to every teammate's sidecar, one per peer, and the frames they carry.

One :class:`Mesh` per sidecar, run under the sidecar's task group. While this machine is in a
team it listens on QUIC (``[mesh] listen``), dials every active member it has an address for
(backoff 2 → 60 s per member, :mod:`.dialing`), advertises itself over mDNS (:mod:`.mdns`) and
keeps at most one link per peer: when both sides dial at once, both keep the link dialed by the
smaller key, and a redial after an established link is five seconds old replaces it (the peer lost
its end, e.g. it restarted).

Frames on ``hive/1`` (JSON objects with a type ``t``):

- ``hello {team, proto, features}``: first, from the dialer; the listener answers with its own.
- ``state {state}``: the roster (:mod:`.roster_sync`).
- the frame kinds the concepts above register: :meth:`Mesh.add_speaker` for one that speaks at
  every point of a link's life (presence: :mod:`hive.sidecar.presence.frames`; mail between
  machines: :mod:`hive.sidecar.mail.remote`), :meth:`Mesh.add_frames` for one that only answers.

An unknown frame type is logged and ignored. Every frame is checked against the roster first:
a machine removed while linked gets the roster without secrets and is disconnected. Joining a
team runs on its own ALPN (:mod:`.join`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ..base.ulid import is_ulid, new_ulid
from ..team.local import TeamHost
from .addresses import MAX_ADDRESSES, WILDCARDS, is_local, valid_address
from .config import HELLO_TIMEOUT
from .config import MeshConfig as MeshConfig
from .config import load_mesh_config as load_mesh_config
from .dialing import Dialer
from .frames import MAX_FEATURES, BadFrame, FrameHandler, Speaker, check_fields
from .join import op_team_join, serve_join
from .mdns import run_mdns
from .relay import Relay
from .roster_sync import RosterSync
from .tailscale import advertised_addresses
from .team_view import Member as Member
from .team_view import TeamView as TeamView
from .transport import (
    ALPN_JOIN,
    ALPN_TEAM,
    CLOSE_DUPLICATE,
    CLOSE_PROTOCOL,
    CLOSE_REFUSED,
    INVALID,
    FrameError,
    Link,
    LinkClosed,
    Listener,
    MachineCert,
    listen,
    machine_cert,
    split_address,
)

if TYPE_CHECKING:
    from ..base.host import Connection

log = logging.getLogger("hive.sidecar.mesh.links")

PROTO = 1
REPLACE_AFTER = 5.0  # a redial replaces an established link older than this


class MeshHost(TeamHost, Protocol):
    """What the concepts that speak over the links use of the daemon: the team's host and the mesh."""

    mesh: Mesh


class Mesh:
    """Links to teammates' machines for one sidecar, and the object the rest of the sidecar talks to
    about them. Start with ``await tg.start(mesh.run)``."""

    def __init__(self, sidecar: TeamHost) -> None:
        self.sc = sidecar
        self.config = load_mesh_config(sidecar.paths.config)
        self.team = TeamView(sidecar)
        self.links: dict[str, Link] = {}
        self.presence: dict[str, dict[str, Any]] = {}  # peer key -> its presence, as the presence speaker keeps it
        self.addresses: dict[str, list[str]] = {}  # peer key -> addresses to try, best first
        # peer key -> the machines that peer last said it links directly (its presence ``peers``):
        # one of them this machine cannot link is up but unreachable from here, not offline.
        self.their_links: dict[str, frozenset[str]] = {}
        self.listener: Listener | None = None
        self.my_addresses: list[str] = []
        self._poked = anyio.Event()
        self._fingerprint: Any = object()
        self._roster_changed = anyio.Event()
        self._team_tg: TaskGroup | None = None
        self._tg: TaskGroup | None = None
        self.cert: MachineCert | None = None
        self._listen_scope: anyio.CancelScope | None = None
        self._listen_lock = anyio.Lock()
        self._subscribed: Any = None
        self._addresses_dirty = False
        self._expelling: set[int] = set()
        self.eager: set[str] = set()  # dial these at once (the inviter, right after a join)
        self.started = anyio.Event()
        self.frame_handlers: dict[str, FrameHandler] = {}
        self.extra_features: list[str] = []
        self.link_up_hooks: list[Callable[[str], Awaitable[None]]] = []
        self.peer_features: dict[str, frozenset[str]] = {}  # from each peer's hello, then its presence
        self.speakers: list[Speaker] = []
        self.roster_sync = RosterSync(self)
        self.dialer = Dialer(self)
        self.relay = Relay(self)  # through the team's anchor, for members that cannot link directly
        self.add_speaker(self.relay, frames=self.relay.frames())

    def add_speaker(
        self, speaker: Speaker, features: Sequence[str] = (), frames: Mapping[str, FrameHandler] | None = None
    ) -> None:
        """Let ``speaker`` take part in every link's life (see :class:`~.frames.Speaker`), announce
        ``features`` in hello and presence, and handle its frame kinds."""
        self.speakers.append(speaker)
        self.extra_features.extend(features)
        self.frame_handlers.update(frames or {})

    def add_frames(
        self,
        feature: str,
        handlers: dict[str, FrameHandler],
        on_link_up: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """Handle frame kinds of a module. ``feature`` is announced in hello and presence; send
        such frames only to peers for which :meth:`peer_has` is true (an older hive drops the link
        on nothing, but ignores what it cannot read). ``on_link_up(peer)`` runs after each link-up."""
        self.extra_features.append(feature)
        self.frame_handlers.update(handlers)
        if on_link_up is not None:
            self.link_up_hooks.append(on_link_up)

    def features(self) -> list[str]:
        return list(self.extra_features)

    def peer_has(self, peer: str, feature: str) -> bool:
        return feature in self.peer_features.get(peer, ())

    # ---- lifecycle -----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled: follow the team, link to its members, move mail."""
        await self._load()
        self._subscribe()
        async with anyio.create_task_group() as tg:
            self._tg = tg
            # Listen only while in a team: outside one, nobody may link, and a listener would show
            # anyone on the network this machine's key (its certificate) and that it runs hive.
            await self._listen()
            tg.start_soon(self._flusher)
            for speaker in self.speakers:
                tg.start_soon(self._guarded, speaker.run)
            task_status.started()
            await self._follow_team()

    async def _listen(self) -> None:
        """Start listening if this machine is in a team and is not listening yet.

        Called at start and on every team change, before the change's request answers, so the
        invite that `hive init` prints already carries this machine's address.
        """
        async with self._listen_lock:  # a team change and the team loop may both get here
            if self.listener is None and self._tg is not None and self.team.team_id is not None:
                await self._start_listening(self._tg)

    async def _start_listening(self, tg: TaskGroup) -> None:
        try:
            seed = await self._seed()
        except Exception as exc:  # no key store answers: the machine cannot be a member anyway
            log.error("no machine key (%s); the mesh stays off", exc)
            return
        host, port = self._listen_address()
        if port == 0:
            saved = await self.sc.store.get_kv("mesh.port")
            port = int(saved) if saved and saved.isdigit() else 0
        cert = machine_cert(seed)
        self.cert = cert
        try:
            self.listener = await tg.start(self._listening, host, port, cert)
        except OSError:  # the last port is taken now: any port will do, peers learn the new one
            self.listener = await tg.start(self._listening, host, 0, cert)
        assert self.listener is not None
        await self.sc.store.set_kv("mesh.port", str(self.listener.port))
        # Tailnet addresses first when tailscale runs here (asked in a thread: the CLI may hang).
        self.my_addresses = list(self.config.advertise) or await anyio.to_thread.run_sync(
            advertised_addresses, host, self.listener.port
        )

    async def _listening(
        self, host: str, port: int, cert: MachineCert, *, task_status: TaskStatus[Listener] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as scope:
            self._listen_scope = scope
            await listen(host, port, cert, self._check, self._serve_link, task_status=task_status)

    def _listen_address(self) -> tuple[str, int]:
        """``[mesh] listen``, unless it is a wildcard and this machine's roster entry names the
        address teammates dial it at (``hive init --anchor --address``): then its port, and its
        host when that is an address of this machine. Bound to the wildcard, a machine with several
        addresses answers from whichever the routing table picks, and a NAT on the dialer's side
        drops an answer from an address it did not dial."""
        host, port = split_address(self.config.listen)
        if host not in WILDCARDS or self.team.team_id is None:
            return host, port
        me = self.team.member(self.team.my_key())
        for address in me.addresses if me is not None else ():
            with contextlib.suppress(ValueError):
                static_host, static_port = split_address(address)
                return (static_host.strip("[]") if is_local(static_host) else host), (port or static_port)
        return host, port

    def _stop_listening(self) -> None:
        """Out of every team: close the port (a later team listens again, on the same port if free)."""
        if self._listen_scope is not None:
            self._listen_scope.cancel()
        self._listen_scope = None
        self.listener = None
        self.my_addresses = []

    async def _seed(self) -> bytes:
        team = getattr(self.sc, "team", None)
        if team is not None:
            identity = await team.ensure_identity()  # the key the team signs with, loaded once
        else:
            from ..team.identity import load_identity

            identity = await anyio.to_thread.run_sync(load_identity, self.sc.paths.home)
        return bytes(identity.signing_key.encode())

    def _subscribe(self) -> None:
        """Follow the sidecar's team object: its changes, and the hooks it asks the mesh for."""
        team = getattr(self.sc, "team", None)
        if team is None or team is self._subscribed:
            return
        self._subscribed = team
        team.subscribe(self._on_team_change)
        team.address_source = lambda: list(self.my_addresses)
        team.online_source = lambda: set(self.links)
        team.link_info = self._link_info
        team.peer_addresses = lambda key: list(self.addresses.get(key, []))

    async def _on_team_change(self, change: Any) -> None:
        # Called under the team's lock: only note it; the flusher and the team loop act on it.
        # Only a change made here is broadcast: the mesh is full, so every linked member hears it
        # from its origin, and a member linked later gets it in the state exchange at link-up.
        # (The reference rebroadcast every merge that changed anything: N² frames per change.)
        if getattr(change, "reason", "") != "merge":
            self.roster_sync.dirty = True
        if getattr(change, "state", None) is not None:
            await self._listen()
        if getattr(change, "reason", "") == "leave":
            await self.roster_sync.tell_leaving()
        self.roster_changed()

    def _link_info(self, key: str) -> dict[str, Any]:
        link = self.links.get(key)
        online = link is not None
        seen = self.presence.get(key, {}).get("at")
        path = None if link is None else (link.address if link.relayed else "direct")
        # Up but not linked from here: a machine this one links directly says it links ``key``.
        linked_by = [] if online else sorted(p for p, theirs in self.their_links.items() if key in theirs)
        return {
            "online": online,
            "last_seen": time.time() if online else seen,
            "path": path,
            "unreachable": bool(linked_by) or (link is not None and link.relayed),
            "linked_by": linked_by,
        }

    def direct(self, peer: str) -> bool:
        """Whether ``peer`` is linked directly (not through an anchor)."""
        link = self.links.get(peer)
        return link is not None and not link.relayed

    def route(self, peer: str, custody: bool = False) -> Link | None:
        """The link to ``peer`` (direct or relayed); with ``custody``, when it has none, a link that
        hands what is sent to an online anchor to hold for it (mail, acks, receipts)."""
        link = self.links.get(peer)
        if link is not None or not custody:
            return link
        return self.relay.custody_link(peer)

    async def _guarded(self, func: Any, *args: Any) -> None:
        """Run a background task of the mesh; an unexpected error is logged, never fatal to the sidecar."""
        try:
            await func(*args)
        except Exception:
            log.exception("mesh task %s failed", getattr(func, "__name__", func))

    def spawn(self, func: Callable[..., Awaitable[None]], *args: Any) -> bool:
        """Start ``func(*args)`` among the team's tasks (guarded); False while serving no team."""
        if self._team_tg is None:
            return False
        self._team_tg.start_soon(self._guarded, func, *args)
        return True

    def poke(self) -> None:
        """Something local may have changed (a session, a read message, the roster): look soon."""
        self._poked.set()

    async def _load(self) -> None:
        for speaker in self.speakers:
            await speaker.load()
        saved = await self.sc.store.get_kv("mesh.addresses")
        if saved:
            with contextlib.suppress(ValueError, TypeError):
                self.addresses = {k: [a for a in v if valid_address(a)] for k, v in json.loads(saved).items()}

    async def _follow_team(self) -> None:
        """While in a team, serve it; when the team changes or goes, start over."""
        while True:
            team_id = self.team.team_id
            if team_id is None:
                self._stop_listening()
                self._fingerprint = self.team.fingerprint()
                await self._roster_changed.wait()
                self._roster_changed = anyio.Event()
                continue
            await self._listen()
            async with anyio.create_task_group() as tg:
                self._team_tg = tg
                tg.start_soon(self._serve_team, team_id)
                while self.team.team_id == team_id:
                    await self._roster_changed.wait()
                    self._roster_changed = anyio.Event()
                    self._sync_members()
                tg.cancel_scope.cancel()
            self._team_tg = None
            for link in list(self.links.values()):
                link.close(CLOSE_REFUSED, "left the team")
            self.links.clear()

    async def _serve_team(self, team_id: str) -> None:
        assert self._team_tg is not None
        tg = self._team_tg
        if self.listener is None:  # no machine key (logged in _listen): no links either way
            self.started.set()
            return
        log.info("mesh on port %d for team %s as %s", self.listener.port, team_id[:8], self.team.my_key()[:12])
        if self.config.mdns:
            tg.start_soon(self._guarded, run_mdns, self, self.listener.port)
        for address in self.config.static:
            tg.start_soon(self._guarded, self.dialer.dial_static, address)
        self._sync_members()
        self.started.set()
        self.poke()

    def _sync_members(self) -> None:
        """Dial members not yet dialed; drop links to machines no longer active."""
        tg = self._team_tg
        if tg is None:
            return
        me = self.team.my_key()
        for member in self.team.members():
            if member.key == me:
                continue
            if member.active and member.key not in self.dialer.dialing:
                self.dialer.dialing.add(member.key)
                tg.start_soon(self._guarded, self.dialer.dial_loop, member.key)
            elif not member.active and member.key in self.links:
                link = self.links[member.key]
                if id(link) not in self._expelling:
                    self._expelling.add(id(link))
                    tg.start_soon(self._guarded, self._expel, link)

    def _check(self, key: bytes, alpn: str) -> bool:
        """The TLS pin: members (and removed members, who are told and closed) or joiners."""
        if self.team.team_id is None:
            return False
        if alpn == ALPN_JOIN:
            return True  # the join frame must then present an invite secret
        return alpn == ALPN_TEAM and self.team.member(key.hex()) is not None

    # ---- addresses ---------------------------------------------------------------------------

    def learn(self, peer: str, addresses: Iterable[str], *, front: bool = False) -> None:
        """Remember addresses for a member; a waiting dialer tries them at once."""
        if self.team.team_id is not None and peer == self.team.my_key():
            return
        current = self.addresses.get(peer, [])
        new = [a for a in addresses if valid_address(a)]
        merged = (
            (new + [a for a in current if a not in new]) if front else current + [a for a in new if a not in current]
        )
        merged = merged[:MAX_ADDRESSES]
        if merged != current:
            self.addresses[peer] = merged
            self._addresses_dirty = True
            if any(a not in current for a in merged):
                self.dialer.wake(peer).set()
            self.poke()

    # ---- links ---------------------------------------------------------------------------

    async def _serve_link(self, link: Link) -> None:
        try:
            if link.alpn == ALPN_JOIN:
                await serve_join(self, link)
            else:
                await self.run_link(link)
        except Exception:  # one bad link must not stop the listener
            log.exception("serving %r failed", link)

    def _hello(self) -> dict[str, Any]:
        return {
            "t": "hello",
            "team": self.team.team_id,
            "proto": PROTO,
            "features": self.features(),
            "roster": self.roster_sync.digest(),
        }

    async def run_link(self, link: Link) -> bool:
        """Greet, keep one link per peer, then read frames until the link ends.

        Returns whether the link was established (greeted and kept).
        """
        peer = link.peer
        try:
            if link.outbound:
                await link.send(self._hello())
            with anyio.fail_after(HELLO_TIMEOUT):
                first = await link.receive()
            if first.get("t") == "state" and link.outbound:
                await self.roster_sync.merge(link, first)  # we were removed: the state says so
                return False
            try:
                check_fields(first)
            except BadFrame as exc:
                log.warning("%r greeted with a malformed %.40r frame (%s); closing", link, first.get("t"), exc)
                link.close(CLOSE_PROTOCOL, "bad hello")
                return False
            if first.get("t") != "hello" or first.get("team") != self.team.team_id:
                log.warning("%r greeted with %.80r; closing", link, first.get("t"))
                link.close(CLOSE_PROTOCOL, "bad hello")
                return False
            member = self.team.member(peer)
            if member is None or not member.active:
                await self._expel(link)
                return False
            if not link.outbound:
                await link.send(self._hello())
            self.peer_features[peer] = frozenset(
                f for f in (first.get("features") or [])[:MAX_FEATURES] if isinstance(f, str) and len(f) <= 32
            )
            if not self._adopt(link):
                return False
        except (LinkClosed, TimeoutError, FrameError):
            return False
        try:
            await self._link_up(link, same_roster=first.get("roster") == self.roster_sync.digest())
            async for frame in link:
                member = self.team.member(peer)
                if member is None or not member.active:
                    await self._expel(link)
                    break
                try:
                    await self._dispatch(link, member, frame)
                except (LinkClosed, FrameError):
                    raise
                except BadFrame as exc:  # the peer's mistake, not ours: say so and read on
                    log.warning(
                        "a malformed %.40r frame from %s (%s): %s; ignored",
                        frame.get("t"),
                        member.machine,
                        peer[:12],
                        exc,
                    )
                    continue
                except Exception:  # a bug or a failing disk must not take the mesh down with it
                    log.exception("could not handle a %.40r frame from %s; closing the link", frame.get("t"), peer[:12])
                    link.close(CLOSE_PROTOCOL, "internal error")
                    break
        except (LinkClosed, FrameError):
            pass
        finally:
            self._link_down(link)
        return True

    def _adopt(self, link: Link) -> bool:
        """Keep exactly one link per peer; both ends reach the same choice."""
        peer = link.peer
        existing = self.links.get(peer)
        if existing is not None and not existing.closed.is_set():
            me = self.team.my_key()
            preferred_dialer = min(me, peer)
            if existing.relayed:
                keep_new = True  # a direct link replaces one through an anchor
            elif existing.dialer == link.dialer:
                keep_new = True  # the same side dialed again: it lost the old link
            elif time.monotonic() - existing.opened_at > REPLACE_AFTER:
                keep_new = True
            else:
                keep_new = link.dialer.hex() == preferred_dialer
            if not keep_new:
                link.close(CLOSE_DUPLICATE, "duplicate link")
                return False
            existing.close(CLOSE_DUPLICATE, "replaced by a newer link")
        self.links[peer] = link
        for speaker in self.speakers:
            speaker.link_adopted(link)
        self.dialer.wake(peer).set()
        return True

    async def adopt_relayed(self, link: Link) -> None:
        """Take ``link``, through an anchor (.relay), as the link to its peer while no direct one exists."""
        existing = self.links.get(link.peer)
        if existing is not None and not existing.closed.is_set():
            if not existing.relayed:
                link.close(CLOSE_DUPLICATE, "linked directly")
                return
            existing.close(CLOSE_DUPLICATE, "replaced by another relayed link")
        self.links[link.peer] = link
        for speaker in self.speakers:
            speaker.link_adopted(link)
        await self._link_up(link, same_roster=True)

    def relayed_down(self, link: Link) -> None:
        """A relayed link closed: its peer is unlinked unless a direct link took its place."""
        self._link_down(link)

    async def dispatch_relayed(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        """Handle a frame that came sealed through an anchor as one from its sealer, over ``link``."""
        if frame.get("t") in ("hello", INVALID, "relay", "reach", "custody"):
            return  # the link's own business, never a relayed frame's
        try:
            await self._dispatch(link, member, frame)
        except BadFrame as exc:
            log.warning("a malformed relayed %.40r frame from %s: %s; ignored", frame.get("t"), member.machine, exc)

    async def _link_up(self, link: Link, same_roster: bool) -> None:
        peer = link.peer
        log.info("linked with %s (%s, %s)", peer[:12], link.address, "dialed" if link.outbound else "accepted")
        state = None if same_roster else self.team.state_for(peer)
        if state is not None:
            await link.send({"t": "state", "state": state})
        for speaker in self.speakers:
            await speaker.link_up(link)
        self.poke()  # the directory changed: the peer's sessions are live again
        assert self._team_tg is not None
        for hook in self.link_up_hooks:
            self._team_tg.start_soon(self._guarded, hook, peer)

    def _link_down(self, link: Link) -> None:
        for speaker in self.speakers:
            speaker.link_down(link)
        if self.links.get(link.peer) is link:
            del self.links[link.peer]
            self.their_links.pop(link.peer, None)
            log.info("link to %s closed: %s", link.peer[:12], link.close_reason)
            self.poke()

    async def _expel(self, link: Link) -> None:
        """A removed machine learns it was removed (the roster without secrets), then goes."""
        state = self.team.state_for(link.peer)
        if state is not None:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "state", "state": state})
            with anyio.move_on_after(2):  # let the state arrive before the close overtakes it
                await link.closed.wait()
        link.close(CLOSE_REFUSED, "not a member")
        self._expelling.discard(id(link))

    async def _dispatch(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        kind = frame.get("t")
        check_fields(frame)
        if kind == INVALID:
            await self._receive_invalid(link, member, frame)
        elif kind == "state":
            await self.roster_sync.merge(link, frame)
        elif kind == "hello":
            pass
        elif isinstance(kind, str) and kind in self.frame_handlers:
            await self.frame_handlers[kind](link, member, frame)
        else:
            log.info("ignored a %.40r frame from %s (a newer hive?)", kind, link.peer[:12])

    async def _receive_invalid(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        """A frame the transport refused for its text (see transport.Link._decode): the speakers
        hear of it (remote mail answers a message as refused)."""
        kind, message_id = frame.get("of"), frame.get("id")
        log.warning(
            "a %.40r frame from %s (%s) was refused: %s", kind, member.machine, link.peer[:12], frame.get("reason")
        )
        if isinstance(kind, str) and is_ulid(message_id):
            for speaker in self.speakers:
                await speaker.refused(link, kind, message_id)

    async def unreachable(self, peer: str) -> None:
        """The link to ``peer`` ended or no address of it answered (the dialer calls this)."""
        for speaker in self.speakers:
            await speaker.unreachable(peer)

    def roster_changed(self) -> None:
        """The roster changed here (a team op or a merge): re-sync links and dialers."""
        self._fingerprint = self.team.fingerprint()
        self._roster_changed.set()
        self.poke()

    # ---- for the rest of the sidecar -----------------------------------------------------

    def people(self) -> set[str]:
        return {m.person for m in self.team.members() if m.active}

    # ---- background work -----------------------------------------------------------------

    async def _flusher(self) -> None:
        """After local changes: roster changes, learned addresses, then each speaker's flush
        (presence if it changed, owed receipts, ...)."""
        while True:
            await self._poked.wait()
            self._poked = anyio.Event()
            try:
                self._subscribe()
                if self.team.fingerprint() != self._fingerprint:
                    self.roster_changed()
                if self.roster_sync.dirty:
                    self.roster_sync.dirty = False
                    await self.roster_sync.broadcast()
                if self._addresses_dirty:
                    self._addresses_dirty = False
                    await self.sc.store.set_kv("mesh.addresses", json.dumps(self.addresses))
            except Exception:
                log.exception("mesh flush failed")
            for speaker in self.speakers:
                try:
                    await speaker.flush(bool(self.links))
                except Exception:
                    log.exception("%s could not flush", type(speaker).__name__)

    # ---- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "listening": self.listener.port if self.listener else None,
            "addresses": self.my_addresses,
            "links": {
                peer: {
                    "address": link.address,
                    "dialed": link.outbound,
                    "age": round(time.monotonic() - link.opened_at, 1),
                    "relayed": link.relayed,
                }
                for peer, link in self.links.items()
            },
        }


# ---- ops ---------------------------------------------------------------------------------


async def op_mesh(sidecar: MeshHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show this machine's links to teammates, its addresses and its listener (`hive team`, tests).

    Reads no fields. Returns ``{"listening": port | None, "addresses", "links": {peer key:
    {"address", "dialed", "age", "relayed"}}, "custody": {peer key: frames}}``: ``relayed`` for a
    link through an anchor (``address`` then says "via <machine>"), ``custody`` what this machine,
    an anchor, holds for each offline machine.
    """
    return {**sidecar.mesh.status(), "custody": await sidecar.mesh.relay.custody.holding()}


OPS = {"mesh": op_mesh, "team_join": op_team_join}

__all__ = ["OPS", "Member", "Mesh", "MeshConfig", "TeamView", "load_mesh_config", "new_ulid"]

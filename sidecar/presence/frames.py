"""Presence frames: this machine's sessions told to teammates, and theirs, checked, kept and listed.

``presence {presence}`` carries a machine's sessions, its offline names, features, addresses and
the addresses it knows for other members (so a new member finds everyone, not only its
inviter). It is sent when it changes and sanitised on receipt (:func:`sanitise_presence`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..base.config import slug
from ..base.defang import one_line
from ..base.host import PerSidecar
from ..mesh.addresses import HEX_KEY, MAX_ADDRESSES, valid_address
from ..mesh.frames import MAX_FEATURES, Speaker
from ..mesh.transport import FrameError, Link, LinkClosed
from ..sessions.registry import TIERS, Entry
from . import discover, observe

if TYPE_CHECKING:
    from ..mesh.links import Mesh
    from ..mesh.team_view import Member
    from .events import PresenceHost

log = logging.getLogger("hive.sidecar.presence.frames")

PRESENCE_REFRESH = 60.0

# Limits on what a peer's presence may carry; anything beyond is cut.
MAX_SESSIONS = 200
MAX_KNOWN = 100
MAX_PEERS = 256
MAX_MAILBOXES = 16

FRAMES: PerSidecar[PresenceFrames] = PerSidecar(lambda sidecar: PresenceFrames(sidecar))
"""Each sidecar's presence frames (:func:`attach` makes them its mesh's speaker)."""


def _listed(raw: dict[str, Any], key: str) -> list[Any]:
    """A peer's list field, or an empty list when it sent something else there."""
    value = raw.get(key)
    return value if isinstance(value, list) else []


def sanitise_presence(raw: Any) -> dict[str, Any]:
    """A peer's presence cut to the shape and sizes hive shows: counts, lengths, one line each."""
    raw = raw if isinstance(raw, dict) else {}
    sessions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in _listed(raw, "sessions"):
        if len(sessions) >= MAX_SESSIONS:
            break
        if not isinstance(item, dict):
            continue
        name = slug(str(item.get("name") or ""), 64)
        if not name or name in seen or name == "terminal":
            continue
        seen.add(name)
        tier = str(item.get("tier") or "pull")
        sessions.append(
            {
                "name": name,
                "agent": one_line(item.get("agent"), 32),
                "repo": one_line(item.get("repo"), 200),
                "branch": one_line(item.get("branch"), 200),
                "folder": one_line(item.get("folder"), 200),
                "doing": one_line(item.get("doing"), 200),
                "activity": one_line(item.get("activity"), 16),
                "tier": tier if tier in TIERS else "pull",
                **observe.sanitise_extra(item),
            }
        )
    known = []
    for item in _listed(raw, "known"):
        name = slug(str(item), 64)
        if name and name not in seen and name != "terminal":
            seen.add(name)
            known.append(name)
        if len(known) >= MAX_KNOWN:
            break
    gone: dict[str, dict[str, str]] = {}
    for item in _listed(raw, "gone")[:MAX_KNOWN]:
        name = slug(str(item.get("name") or ""), 64) if isinstance(item, dict) else ""
        if name in known and name not in gone:
            tier = str(item.get("tier") or "pull")
            gone[name] = {
                "agent": one_line(item.get("agent"), 32),
                "repo": one_line(item.get("repo"), 200),
                "branch": one_line(item.get("branch"), 200),
                "tier": tier if tier in TIERS else "pull",
            }
    features = [one_line(f, 32) for f in _listed(raw, "features")[:MAX_FEATURES] if isinstance(f, str)]
    addresses = [a for a in _listed(raw, "addresses")[:MAX_ADDRESSES] if valid_address(a)]
    peers: dict[str, list[str]] = {}
    raw_peers = raw.get("peers")
    if isinstance(raw_peers, dict):
        for key, values in list(raw_peers.items())[:MAX_PEERS]:
            if isinstance(key, str) and HEX_KEY.match(key) and isinstance(values, list):
                good = [a for a in values[:MAX_ADDRESSES] if valid_address(a)]
                if good:
                    peers[key] = good
    return {
        "sessions": sessions,
        "known": known,
        "gone": gone,
        "features": features,
        "addresses": addresses,
        "peers": peers,
        "mailboxes": _mailboxes(raw.get("mailboxes")),
    }


def _mailboxes(raw: Any) -> list[str]:
    """A peer's ``mailboxes`` field: its person's named mailboxes there, distinct, ``terminal`` implied."""
    out: list[str] = []
    for item in (raw if isinstance(raw, list) else [])[:MAX_MAILBOXES]:
        name = slug(item, 64) if isinstance(item, str) else ""
        if name and name != "terminal" and name not in out:
            out.append(name)
    return out


class PresenceFrames(Speaker):
    """Presence over one sidecar's mesh: what goes out (sent when it changes, refreshed once a
    minute) and what comes in (kept in ``mesh.presence``, stored at the mesh's flush).

    Fields other concepts add to this machine's presence (mail's named mailboxes) come from
    :attr:`fields`: name -> what to send; a peer's are read back by :func:`sanitise_presence`.
    """

    def __init__(self, sidecar: PresenceHost) -> None:
        self.sc = sidecar
        self.mesh: Mesh = sidecar.mesh
        self.fields: dict[str, Callable[[], Any]] = {}
        self.dirty: set[str] = set()  # peers whose presence changed since it was last stored
        self._sent = ""
        self._sent_peers = ""

    async def load(self) -> None:
        for key, value in await self.sc.store.fetchall("SELECT key, value FROM kv WHERE key LIKE 'mesh.presence.%'"):
            with contextlib.suppress(ValueError, TypeError):
                presence = sanitise_presence(json.loads(value))
                presence["at"] = json.loads(value).get("at")
                self.mesh.presence[key.removeprefix("mesh.presence.")] = presence

    async def run(self) -> None:
        """Liveness changes with time alone (a session goes stale): look at most once a minute,
        and pass on the addresses of members linked since the last look."""
        while True:
            await anyio.sleep(PRESENCE_REFRESH)
            with contextlib.suppress(Exception):
                await self.send_if_changed(refresh=True)

    async def link_up(self, link: Link) -> None:
        # The first presence on a link carries the addresses this machine knows for other members,
        # so a machine that just joined through one inviter can dial everyone else.
        await link.send({"t": "presence", "presence": self.own(with_peers=True)})

    async def flush(self, linked: bool) -> None:
        """Store the presence received since the last flush; send this machine's when it changed."""
        statements: list[tuple[str, Sequence[Any]]] = [
            (
                "INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)",
                (f"mesh.presence.{peer}", json.dumps(self.mesh.presence[peer])),
            )
            for peer in self.dirty
            if peer in self.mesh.presence
        ]
        self.dirty.clear()
        if statements:
            await self.sc.store.write(statements)
        if linked:
            await self.send_if_changed()

    def own(self, *, with_peers: bool = False) -> dict[str, Any]:
        """This machine's presence; ``with_peers`` adds the addresses it knows for linked members."""
        now = time.time()
        sessions, known, gone = [], [], []
        for s in self.sc.sessions.by_key.values():
            if not discover.shared(self.sc, s):
                continue  # found on disk, not managed: stays on this machine unless share_unmanaged
            if self.sc.sessions.is_live(s, now):
                sessions.append(
                    {
                        "name": s.name,
                        "agent": s.agent,
                        "repo": s.repo,
                        "branch": s.branch,
                        "folder": Path(s.cwd.rstrip("/")).name if s.cwd else "",
                        "doing": s.doing,
                        "activity": "",  # what older hives read before ``state``; nothing fills it now
                        "tier": s.tier,
                        **observe.presence_of(self.sc, s.key),
                    }
                )
            else:
                known.append(s.name)
                # what teammates keep showing of a gone session (``known`` alone is what older hives read)
                gone.append({"name": s.name, "agent": s.agent, "repo": s.repo, "branch": s.branch, "tier": s.tier})
        sessions.sort(key=lambda d: d["name"])
        gone.sort(key=lambda d: d["name"])
        presence: dict[str, Any] = {
            "sessions": sessions[:MAX_SESSIONS],
            "known": sorted(known)[:MAX_KNOWN],
            "gone": gone[:MAX_KNOWN],
            "features": self.mesh.features(),
            "addresses": self.mesh.my_addresses,
            **{name: field() for name, field in self.fields.items()},
        }
        if with_peers:
            presence["peers"] = self.peer_addresses()
        return presence

    def peer_addresses(self) -> dict[str, list[str]]:
        """Addresses of the members this machine links directly: proven to answer. A member reached
        through an anchor has none worth passing on, and listing them made every join change each
        member's list, re-sent to every member through the anchor at the next refresh."""
        addresses = self.mesh.addresses
        return {
            peer: addresses[peer][:MAX_ADDRESSES]
            for peer, link in sorted(self.mesh.links.items())
            if not link.relayed and addresses.get(peer)
        }

    async def send_if_changed(self, *, refresh: bool = False) -> None:
        """Send presence when it changed. Peers' addresses change with every link while a mesh
        forms, so they go out at link-up and with the once-a-minute refresh, never per change."""
        presence = self.own()
        encoded = json.dumps(presence, sort_keys=True)
        peers = json.dumps(self.peer_addresses(), sort_keys=True) if refresh else self._sent_peers
        if encoded == self._sent and peers == self._sent_peers:
            return
        self._sent = encoded
        if peers != self._sent_peers:
            self._sent_peers = peers
            presence["peers"] = json.loads(peers)
        for link in list(self.mesh.links.values()):
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "presence", "presence": presence})

    async def receive(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        """A ``presence`` frame: keep it, learn the addresses it carries, rename clashing sessions."""
        peer = link.peer
        presence = sanitise_presence(frame.get("presence"))
        presence["at"] = time.time()
        mesh = self.mesh
        mesh.presence[peer] = presence
        mesh.peer_features[peer] = frozenset(presence["features"])
        if presence["addresses"]:
            mesh.learn(peer, presence["addresses"])
        me = mesh.team.my_key()
        raw = frame.get("presence")
        if not link.relayed and isinstance(raw, dict) and "peers" in raw:  # only sent when it changed
            mesh.their_links[peer] = frozenset(presence["peers"])
        for other, addresses in presence["peers"].items():
            known = mesh.team.member(other)
            if other != me and known is not None and known.active:
                mesh.learn(other, addresses)
        self.dirty.add(peer)
        await self._rename_clashes(peer, presence)
        mesh.poke()  # stored at the flush, coalesced: one write for a burst of presence frames
        await observe.on_peer_presence(self.sc, peer)

    def names_elsewhere(self) -> set[str]:
        """Session names this person's other machines hold, live or known: an address names one session."""
        team = self.mesh.team
        if team.team_id is None:
            return set()
        me, person = team.my_key(), self.sc.settings.person
        names: set[str] = set()
        for peer, presence in self.mesh.presence.items():
            member = team.member(peer)
            if peer != me and member is not None and member.active and member.person == person:
                names.update(s["name"] for s in presence["sessions"])
                names.update(presence["known"])
        return names

    async def _rename_clashes(self, peer: str, presence: dict[str, Any]) -> None:
        """Two machines of one person named sessions alike before either heard of the other's: the
        machine with the larger key renames its own (unread mail follows), the other keeps its names."""
        member = self.mesh.team.member(peer)
        if member is None or member.person != self.sc.settings.person or peer > self.mesh.team.my_key():
            return
        theirs = {s["name"] for s in presence["sessions"]}
        for session in list(self.sc.sessions.by_key.values()):
            if session.name in theirs:
                old = session.name
                await self.sc.sessions.set_status(session, None, self.sc.sessions.free_name(session))
                log.info(
                    "renamed session %s to %s: %s's machine %s has one of that name",
                    old,
                    session.name,
                    member.person,
                    member.machine,
                )

    def entries(self) -> list[Entry]:
        """Teammates' sessions for the directory: person and machine from the roster, never the peer."""
        team = self.mesh.team
        if team.team_id is None:
            return []
        out: list[Entry] = []
        me = team.my_key()
        for peer, presence in self.mesh.presence.items():
            member = team.member(peer)
            if member is None or not member.active or peer == me:
                continue
            online = peer in self.mesh.links
            for s in presence["sessions"]:
                out.append(
                    Entry(
                        person=member.person,
                        machine=member.machine,
                        name=s["name"],
                        agent=s["agent"],
                        repo=s["repo"],
                        branch=s["branch"],
                        folder=s["folder"],
                        doing=s["doing"],
                        tier=s["tier"],
                        live=online,
                    )
                )
            for name in presence["known"]:
                last = presence["gone"].get(name, {})
                out.append(
                    Entry(
                        person=member.person,
                        machine=member.machine,
                        name=name,
                        agent=last.get("agent", ""),
                        repo=last.get("repo", ""),
                        branch=last.get("branch", ""),
                        folder="",
                        doing="",
                        tier=last.get("tier", "pull"),
                        live=False,
                    )
                )
        return out


def attach(sidecar: PresenceHost) -> None:
    """Its feature's ``frames`` (daemon.features): presence is this sidecar's mesh's first speaker,
    and the names its person's other machines hold are taken for new sessions here."""
    frames = FRAMES.of(sidecar)
    sidecar.mesh.add_speaker(frames, frames={"presence": frames.receive})
    sidecar.sessions.elsewhere.append(frames.names_elsewhere)


def entries(sidecar: PresenceHost) -> list[Entry]:
    """Teammates' sessions for the directory (:meth:`PresenceFrames.entries`)."""
    return FRAMES.of(sidecar).entries()

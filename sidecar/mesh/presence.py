"""Presence frames: this machine's sessions told to teammates, and theirs, checked, kept and listed.

``presence {presence}`` carries a machine's sessions, its offline names, features, addresses and
the addresses it knows for other members (so a new member finds everyone, not only its
inviter). It is sent when it changes and sanitised on receipt (:func:`sanitise_presence`).
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import json
import logging
import re
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..base.config import slug
from ..base.defang import one_line
from ..mail import mailboxes
from ..mail.addresses import Entry
from ..presence import discover, observe
from ..sessions.registry import TIERS
from .transport import FrameError, LinkClosed, split_address

if TYPE_CHECKING:
    from .links import Mesh

log = logging.getLogger("hive.sidecar.mesh.presence")

PRESENCE_REFRESH = 60.0

# Limits on what a peer's presence may carry; anything beyond is cut.
MAX_SESSIONS = 200
MAX_KNOWN = 100
MAX_FEATURES = 32
MAX_ADDRESSES = 8
MAX_PEERS = 256

_ADDRESS = re.compile(r"^[A-Za-z0-9._:\[\]-]{1,100}:[0-9]{1,5}$")
HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


def valid_address(value: Any) -> bool:
    if not isinstance(value, str) or not _ADDRESS.match(value):
        return False
    try:
        host, port = split_address(value)
    except ValueError:
        return False
    return 0 < port < 65536 and bool(host)


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
        "mailboxes": mailboxes.sanitise(raw.get("mailboxes")),
    }


def _activity_of(key: str) -> str:
    """Busy/idle/waiting as the session's hooks last reported it, when the hooks module is here."""
    try:
        hooks = importlib.import_module("hive.sidecar.agents.hooks")
    except ImportError:
        return ""
    getter = getattr(hooks, "activity", None)
    found = getter(key) if callable(getter) else None
    return str(found[0]) if found else ""


def local_addresses(listen_host: str, port: int) -> list[str]:
    """The addresses teammates can try for this machine's listener."""
    if listen_host not in ("0.0.0.0", "::", ""):
        host = listen_host if ":" not in listen_host else f"[{listen_host}]"
        return [f"{host}:{port}"]
    found: list[str] = []
    try:
        import ifaddr  # zeroconf's own dependency; lists interface addresses without root

        for adapter in ifaddr.get_adapters():
            for ip in adapter.ips:
                if isinstance(ip.ip, str):
                    address = ipaddress.ip_address(ip.ip)
                    if not address.is_loopback and not address.is_link_local:
                        found.append(f"{ip.ip}:{port}")
    except Exception:  # no interface list: the hostname's address is the best guess
        with contextlib.suppress(OSError):
            found.append(f"{socket.gethostbyname(socket.gethostname())}:{port}")
    return found[:MAX_ADDRESSES]


class PresenceFrames:
    """Presence for one mesh: what goes out (sent when it changes, refreshed once a minute) and
    what comes in (kept in ``mesh.presence``, stored by the mesh's flusher)."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.sc = mesh.sc
        self.dirty: set[str] = set()  # peers whose presence changed since the flusher stored it
        self._sent = ""
        self._sent_peers = ""

    async def load(self) -> None:
        for key, value in await self.sc.store.fetchall("SELECT key, value FROM kv WHERE key LIKE 'mesh.presence.%'"):
            with contextlib.suppress(ValueError, TypeError):
                presence = sanitise_presence(json.loads(value))
                presence["at"] = json.loads(value).get("at")
                self.mesh.presence[key.removeprefix("mesh.presence.")] = presence

    def statements(self) -> list[tuple[str, Sequence[Any]]]:
        """The writes that store the presence received since the last call."""
        statements: list[tuple[str, Sequence[Any]]] = []
        for peer in self.dirty:
            if peer in self.mesh.presence:
                statements.append(
                    (
                        "INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)",
                        (f"mesh.presence.{peer}", json.dumps(self.mesh.presence[peer])),
                    )
                )
        self.dirty.clear()
        return statements

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
                        "activity": _activity_of(s.key),
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
            "mailboxes": mailboxes.presence_field(self.sc),
        }
        if with_peers:
            presence["peers"] = self.peer_addresses()
        return presence

    def peer_addresses(self) -> dict[str, list[str]]:
        addresses = self.mesh.addresses
        return {peer: addresses[peer][:MAX_ADDRESSES] for peer in sorted(self.mesh.links) if addresses.get(peer)}

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

    async def receive(self, peer: str, raw: Any) -> None:
        presence = sanitise_presence(raw)
        presence["at"] = time.time()
        mesh = self.mesh
        mesh.presence[peer] = presence
        mesh.peer_features[peer] = frozenset(presence["features"])
        if presence["addresses"]:
            mesh.learn(peer, presence["addresses"])
        me = mesh.team.my_key()
        for other, addresses in presence["peers"].items():
            member = mesh.team.member(other)
            if other != me and member is not None and member.active:
                mesh.learn(other, addresses)
        self.dirty.add(peer)
        await self._rename_clashes(peer, presence)
        mesh.poke()  # stored by the flusher, coalesced: one write for a burst of presence frames
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

    async def refresher(self) -> None:
        """Liveness changes with time alone (a session goes stale): look at most once a minute,
        and pass on the addresses of members linked since the last look."""
        while True:
            await anyio.sleep(PRESENCE_REFRESH)
            with contextlib.suppress(Exception):
                await self.send_if_changed(refresh=True)

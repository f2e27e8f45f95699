"""The mesh: links to every teammate's sidecar, presence, and mail between machines.

One :class:`Mesh` per sidecar, run under the sidecar's task group. While this machine is in a
team it listens on QUIC (``[mesh] listen``), dials every active member it has an address for
(backoff 2 → 60 s per member), advertises itself over mDNS and keeps at most one link per peer:
when both sides dial at once, both keep the link dialed by the smaller key, and a redial after
an established link is five seconds old replaces it (the peer lost its end, e.g. it restarted).

Frames on ``hive/1`` (JSON objects with a type ``t``):

- ``hello {team, proto, features}``: first, from the dialer; the listener answers with its own.
- ``state {state}``: the roster (:mod:`hive.sidecar.roster`); merged, and rebroadcast on change.
- ``presence {presence}``: this machine's sessions, its offline names, features, addresses and
  the addresses it knows for other members (so a new member finds everyone, not only its
  inviter). Sent when it changes; sanitised on receipt.
- ``msg {msg}`` → ``ack {id, state, note, retry_after?}``: one message for one session. States:
  ``delivered``, ``queued``, ``held``, ``refused``, ``retry`` (the sender keeps it and tries
  again later).
- ``receipt {receipts: [{id, state, at}]}`` → ``ack {receipts: [[id, state], ...]}``: later news
  about a message (``delivered`` once a held message is approved, ``refused`` if dropped,
  ``read`` once its recipient confirmed it).

An unknown frame type is logged and ignored. Every frame is checked against the roster first:
a machine removed while linked gets the roster without secrets and is disconnected.

Mail is at-least-once and deduplicated by id: the sender stores each message in its outbox
before ``send`` answers and replays the outbox on every (re)connect until the recipient
acknowledges it; it gives up after seven days and says so in ``sent``. The receiver records
every message it answered (``inbound``), so a replay is answered again and never deposited
twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib
import ipaddress
import json
import logging
import re
import socket
import sqlite3
import time
import tomllib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from . import attachments, discover, mailboxes, observe
from .addresses import Entry, Target
from .approvals import receive_approval, wire_of
from .config import DAY, slug
from .defang import defang, one_line
from .errors import BadRequest, HiveError, LoopGuard, NotFound, Refused
from .guards import Guards
from .person import asks_person, confirm_by_person
from .policy import InboundPolicy
from .render import Message
from .sessions import TIERS
from .transport import (
    ALPN_JOIN,
    ALPN_TEAM,
    CLOSE_DUPLICATE,
    CLOSE_NORMAL,
    CLOSE_PROTOCOL,
    CLOSE_REFUSED,
    INVALID,
    FrameError,
    Link,
    LinkClosed,
    Listener,
    MachineCert,
    dial,
    encode_frame,
    listen,
    machine_cert,
    split_address,
)
from .ulid import is_ulid, new_ulid

if TYPE_CHECKING:
    from .server import Connection, Sidecar

log = logging.getLogger("hive.sidecar.mesh")

PROTO = 1
FEATURES = ("receipts", "hold", "loop-guard", "files")
# Modules that speak frame kinds of their own. Each has ``attach(mesh)``, which registers its
# frames, feature and link-up hook with :meth:`Mesh.add_frames`, so _dispatch needs no branch per module.
FRAME_MODULES: tuple[str, ...] = ("hive.sidecar.lesson_sync", "hive.sidecar.gate", "hive.sidecar.ask",
                                   "hive.sidecar.mailboxes")
BACKOFF_START = 2.0
BACKOFF_MAX = 60.0
REPLACE_AFTER = 5.0  # a redial replaces an established link older than this
PROBE_TIMEOUT = 5.0  # a peer that does not answer a ping in this long is taken for gone
HELLO_TIMEOUT = 10.0
JOIN_TIMEOUT = 30.0
JOIN_ATTEMPTS = 3
PRESENCE_REFRESH = 60.0
WINDOW = 128  # messages in flight per link, unacknowledged (aioquic's drain() never pushes back)
OUTBOX_GIVE_UP = 7 * DAY
RATE_WINDOW = 60.0

# Limits on what a peer's presence may carry; anything beyond is cut.
MAX_SESSIONS = 200
MAX_KNOWN = 100
MAX_FEATURES = 32
MAX_ADDRESSES = 8
MAX_PEERS = 256

MDNS_TYPE = "_hive._udp.local."

ACK_STATES = ("delivered", "queued", "held", "refused", "retry")
# The types of each frame kind's top-level fields (a missing field or null is allowed; the
# handler decides). A frame that breaks this is reported for its peer and skipped, so no handler
# meets a string where it iterates a list. Nested items are checked by the handlers.
_NUMBER = (int, float)
FRAME_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {"team": str, "features": list, "roster": str},
    "msg": {"msg": dict},
    "ack": {"id": str, "state": str, "note": str, "code": str, "receipts": list, "retry_after": _NUMBER},
    "receipt": {"receipts": list},
    "presence": {"presence": dict},
    "state": {"state": dict},
    "sync": {"heads": list, "want": list, "reply": bool},
    "entry": {"entries": list},
    "body": {"blobs": list},
    "gate": {"id": str, "item": dict},
    "gate_ack": {"id": str},
    "notify": {"id": str, "from": str, "to": str, "body": str, "sent_at": _NUMBER},
    "copies_read": {"ids": list, "at": _NUMBER},
}
_ADDRESS = re.compile(r"^[A-Za-z0-9._:\[\]-]{1,100}:[0-9]{1,5}$")
_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


# ---- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class MeshConfig:
    """``[mesh]`` in config.toml (``[inbound]`` is hive.sidecar.policy's, read as it changes).

    ``listen`` is ``host:port`` (port 0: reuse the last port if free, else any); ``advertise``
    overrides the addresses told to teammates; ``static`` lists addresses always worth dialing
    (a VPN or public host); ``mdns`` turns LAN discovery on, on ``mdns_interfaces`` or all.
    """

    listen: str = "0.0.0.0:0"
    advertise: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    mdns: bool = True
    mdns_interfaces: tuple[str, ...] = ()
    ack_wait: float = 5.0
    rate_limit: int = 60
    rate_window: float = RATE_WINDOW
    loop_limit: int = 12
    connect_timeout: float = 10.0
    outbox_give_up: float = OUTBOX_GIVE_UP


def load_mesh_config(path: Path) -> MeshConfig:
    data: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(tomllib.TOMLDecodeError, OSError):
            data = tomllib.loads(path.read_text(encoding="utf-8"))
    mesh = data.get("mesh") if isinstance(data.get("mesh"), dict) else {}
    assert isinstance(mesh, dict)

    def strings(value: Any) -> tuple[str, ...]:
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    base = MeshConfig()
    return MeshConfig(
        listen=str(mesh.get("listen", base.listen)),
        advertise=strings(mesh.get("advertise")),
        static=strings(mesh.get("static")),
        mdns=bool(mesh.get("mdns", base.mdns)),
        mdns_interfaces=strings(mesh.get("mdns_interfaces")),
        ack_wait=float(mesh.get("ack_wait", base.ack_wait)),
        rate_limit=int(mesh.get("rate_limit", base.rate_limit)),
        rate_window=float(mesh.get("rate_window", base.rate_window)),
        loop_limit=int(mesh.get("loop_limit", base.loop_limit)),
        connect_timeout=float(mesh.get("connect_timeout", base.connect_timeout)),
        outbox_give_up=float(mesh.get("outbox_give_up", base.outbox_give_up)),
    )


# ---- presence ----------------------------------------------------------------------------


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
        sessions.append({
            "name": name,
            "agent": one_line(item.get("agent"), 32),
            "repo": one_line(item.get("repo"), 200),
            "branch": one_line(item.get("branch"), 200),
            "folder": one_line(item.get("folder"), 200),
            "doing": one_line(item.get("doing"), 200),
            "activity": one_line(item.get("activity"), 16),
            "tier": tier if tier in TIERS else "pull",
            **observe.sanitise_extra(item),
        })
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
            gone[name] = {"agent": one_line(item.get("agent"), 32), "repo": one_line(item.get("repo"), 200),
                          "branch": one_line(item.get("branch"), 200), "tier": tier if tier in TIERS else "pull"}
    features = [one_line(f, 32) for f in _listed(raw, "features")[:MAX_FEATURES] if isinstance(f, str)]
    addresses = [a for a in _listed(raw, "addresses")[:MAX_ADDRESSES] if valid_address(a)]
    peers: dict[str, list[str]] = {}
    raw_peers = raw.get("peers")
    if isinstance(raw_peers, dict):
        for key, values in list(raw_peers.items())[:MAX_PEERS]:
            if isinstance(key, str) and _HEX_KEY.match(key) and isinstance(values, list):
                good = [a for a in values[:MAX_ADDRESSES] if valid_address(a)]
                if good:
                    peers[key] = good
    return {"sessions": sessions, "known": known, "gone": gone, "features": features, "addresses": addresses,
            "peers": peers,
            "mailboxes": mailboxes.sanitise(raw.get("mailboxes"))}


def _activity_of(key: str) -> str:
    """Busy/idle/waiting as the session's hooks last reported it, when the hooks module is here."""
    try:
        hooks = importlib.import_module("hive.sidecar.hooks")
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


# ---- the team, as the mesh sees it -------------------------------------------------------


@dataclass(frozen=True)
class Member:
    key: str  # hex of the machine's ed25519 public key
    person: str
    machine: str
    active: bool
    addresses: tuple[str, ...] = ()  # static ones from its roster entry


# A module's handler for a frame kind of its own (Mesh.add_frames): the link, its checked member, the frame.
FrameHandler = Callable[[Link, Member, dict[str, Any]], Awaitable[None]]


class TeamView:
    """The roster and machine key as the mesh uses them: :class:`hive.sidecar.team.Team`.

    Always read through ``sidecar.team`` (set when the sidecar starts), never cached, so the
    mesh follows whatever team object the sidecar holds.
    """

    def __init__(self, sidecar: Sidecar) -> None:
        self.sc = sidecar

    def _team(self) -> Any:
        return getattr(self.sc, "team", None)

    def identity_seed(self) -> bytes | None:
        team = self._team()
        return None if team is None else team.identity.signing_key.encode()

    @property
    def team_id(self) -> str | None:
        team = self._team()
        return None if team is None else team.team_id()

    def my_key(self) -> str:
        return str(self._team().identity.key_id)

    def member(self, key: str) -> Member | None:
        team = self._team()
        found = None if team is None else team.member(key)
        if found is None:
            return None
        return Member(key=key, person=found.person, machine=found.machine, active=found.active,
                      addresses=tuple(found.addresses))

    def members(self) -> list[Member]:
        team = self._team()
        if team is None:
            return []
        return [Member(key=m.key, person=m.person, machine=m.machine, active=m.active, addresses=tuple(m.addresses))
                for m in team.members()]

    def fingerprint(self) -> Any:
        team = self._team()
        return None if team is None else team.fingerprint()

    def state_for(self, key: str) -> dict[str, Any] | None:
        team = self._team()
        return None if team is None else team.state_for(key)

    async def merge(self, state: Any, key: str) -> bool:
        team = self._team()
        return False if team is None else bool(await team.merge(state, key))

    def mdns_tag(self) -> str:
        team_id = self.team_id or ""
        return hmac.new(team_id.encode(), b"hive-mdns-v1", hashlib.sha256).hexdigest()[:16]


# ---- the mesh ----------------------------------------------------------------------------


@dataclass
class _AckWait:
    event: anyio.Event = field(default_factory=anyio.Event)
    state: str = ""
    note: str = ""
    code: str = ""  # a refusal's error code (loop_guard, …)


@dataclass
class _Flow:
    """Per-link bookkeeping: the in-flight window and what is in it."""

    window: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(WINDOW))
    inflight: set[str] = field(default_factory=set)
    receipts: set[tuple[str, str]] = field(default_factory=set)


class Mesh:
    """Links, presence and remote mail for one sidecar. Start with ``await tg.start(mesh.run)``."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sc = sidecar
        self.config = load_mesh_config(sidecar.paths.config)
        self.inbound = InboundPolicy(sidecar.paths.config)
        self.team = TeamView(sidecar)
        self.links: dict[str, Link] = {}
        self.flows: dict[int, _Flow] = {}
        self.presence: dict[str, dict[str, Any]] = {}  # peer key -> sanitised presence
        self.addresses: dict[str, list[str]] = {}  # peer key -> addresses to try, best first
        self.listener: Listener | None = None
        self.my_addresses: list[str] = []
        self._poked = anyio.Event()
        self._wakes: dict[str, anyio.Event] = {}
        self._acks: dict[str, _AckWait] = {}
        self._rates: dict[str, deque[float]] = {}
        self._sent_presence = ""
        self._fingerprint: Any = object()
        self._roster_changed = anyio.Event()
        self._dialers: set[str] = set()
        self._retrying: set[str] = set()
        self._team_tg: TaskGroup | None = None
        self._tg: TaskGroup | None = None
        self._cert: MachineCert | None = None
        self._listen_scope: anyio.CancelScope | None = None
        self._listen_lock = anyio.Lock()
        self._subscribed: Any = None
        self._state_dirty = False
        self._addresses_dirty = False
        self._expelling: set[int] = set()
        self.eager: set[str] = set()  # dial these at once (the inviter, right after a join)
        self._probing: set[int] = set()
        # Inbound messages that may still owe their sender a receipt: while none do, a poke (one
        # per local request) costs no query.
        self._open_inbound = 0
        self._digest: tuple[Any, str] = (object(), "")
        self._broadcast_base: dict[str, Any] | None = None
        self._presence_dirty: set[str] = set()
        self._staged = False  # statements staged (acks' outbox updates) await the flusher's commit
        self._sent_peers = ""
        # Names a session may not take: the person's other machines' sessions, and their mailboxes here.
        sidecar.sessions.elsewhere = lambda: self.names_elsewhere() | mailboxes.named(sidecar)
        self.started = anyio.Event()
        self.frame_handlers: dict[str, FrameHandler] = {}
        self.extra_features: list[str] = []
        self.link_up_hooks: list[Callable[[str], Awaitable[None]]] = []
        self.peer_features: dict[str, frozenset[str]] = {}  # from each peer's hello, then its presence
        for module_name in FRAME_MODULES:
            importlib.import_module(module_name).attach(self)

    def add_frames(self, feature: str, handlers: dict[str, FrameHandler],
                   on_link_up: Callable[[str], Awaitable[None]] | None = None) -> None:
        """Handle frame kinds of a module. ``feature`` is announced in hello and presence; send
        such frames only to peers for which :meth:`peer_has` is true (an older hive drops the link
        on nothing, but ignores what it cannot read). ``on_link_up(peer)`` runs after each link-up."""
        self.extra_features.append(feature)
        self.frame_handlers.update(handlers)
        if on_link_up is not None:
            self.link_up_hooks.append(on_link_up)

    def features(self) -> list[str]:
        return [*FEATURES, *self.extra_features]

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
            tg.start_soon(self._refresher)
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
        host, port = split_address(self.config.listen)
        if port == 0:
            saved = await self.sc.store.get_kv("mesh.port")
            port = int(saved) if saved and saved.isdigit() else 0
        cert = machine_cert(seed)
        self._cert = cert
        try:
            self.listener = await tg.start(self._listening, host, port, cert)
        except OSError:  # the last port is taken now: any port will do, peers learn the new one
            self.listener = await tg.start(self._listening, host, 0, cert)
        assert self.listener is not None
        await self.sc.store.set_kv("mesh.port", str(self.listener.port))
        self.my_addresses = list(self.config.advertise) or local_addresses(host, self.listener.port)

    async def _listening(self, host: str, port: int, cert: MachineCert, *,
                         task_status: TaskStatus[Listener] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.CancelScope() as scope:
            self._listen_scope = scope
            await listen(host, port, cert, self._check, self._serve_link, task_status=task_status)

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
            from .identity import load_identity

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

    async def _on_team_change(self, change: Any) -> None:
        # Called under the team's lock: only note it; the flusher and the team loop act on it.
        # Only a change made here is broadcast: the mesh is full, so every linked member hears it
        # from its origin, and a member linked later gets it in the state exchange at link-up.
        # (The reference rebroadcast every merge that changed anything: N² frames per change.)
        if getattr(change, "reason", "") != "merge":
            self._state_dirty = True
        if getattr(change, "state", None) is not None:
            await self._listen()
        if getattr(change, "reason", "") == "leave":
            await self._tell_leaving()
        self.roster_changed()

    async def _tell_leaving(self) -> None:
        """This machine signed its departure and forgets the team as soon as this returns: every
        linked member gets the whole state now (there is no later link-up to catch up at), and
        a ping answered on each link says the frame got there before the links close."""
        self._state_dirty = False
        team = getattr(self.sc, "team", None)
        state = getattr(team, "state", None)
        if state is None or not self.links:
            return
        frame = {"t": "state", "state": state.to_wire()}

        async def tell(link: Link) -> None:
            with anyio.move_on_after(HELLO_TIMEOUT / 2), contextlib.suppress(LinkClosed, FrameError, ConnectionError):
                await link.send(frame)
                await link.protocol.ping()

        async with anyio.create_task_group() as tg:
            for link in list(self.links.values()):
                tg.start_soon(tell, link)

    def _state_digest(self) -> str:
        """A short hash of the roster, so two machines that agree skip the state exchange."""
        fingerprint = self.team.fingerprint()
        if self._digest[0] != fingerprint:
            team = getattr(self.sc, "team", None)
            state = getattr(team, "state", None)
            wire = json.dumps(state.to_wire(), sort_keys=True) if state is not None else ""
            self._digest = (fingerprint, hashlib.sha256(wire.encode()).hexdigest()[:32])
        return self._digest[1]

    def _link_info(self, key: str) -> dict[str, Any]:
        online = key in self.links
        seen = self.presence.get(key, {}).get("at")
        return {"online": online, "last_seen": time.time() if online else seen,
                "path": "direct" if online else None}

    async def _guarded(self, func: Any, *args: Any) -> None:
        """Run a background task of the mesh; an unexpected error is logged, never fatal to the sidecar."""
        try:
            await func(*args)
        except Exception:
            log.exception("mesh task %s failed", getattr(func, "__name__", func))

    def poke(self) -> None:
        """Something local may have changed (a session, a read message, the roster): look soon."""
        self._poked.set()

    async def _count_open_inbound(self) -> None:
        row = await self.sc.store.fetchone(
            "SELECT COUNT(*) FROM inbound WHERE (state = 'accepted' AND reported != 'read') "
            "OR (due != '' AND due != reported AND reported != 'read')")
        self._open_inbound = int(row[0]) if row else 0

    async def _load(self) -> None:
        await self._count_open_inbound()
        saved = await self.sc.store.get_kv("mesh.addresses")
        if saved:
            with contextlib.suppress(ValueError, TypeError):
                self.addresses = {k: [a for a in v if valid_address(a)] for k, v in json.loads(saved).items()}
        for key, value in await self.sc.store.fetchall("SELECT key, value FROM kv WHERE key LIKE 'mesh.presence.%'"):
            with contextlib.suppress(ValueError, TypeError):
                presence = sanitise_presence(json.loads(value))
                presence["at"] = json.loads(value).get("at")
                self.presence[key.removeprefix("mesh.presence.")] = presence

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
            tg.start_soon(self._guarded, self._mdns, self.listener.port)
        for address in self.config.static:
            tg.start_soon(self._guarded, self._dial_static, address)
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
            if member.active and member.key not in self._dialers:
                self._dialers.add(member.key)
                tg.start_soon(self._guarded, self._dial_loop, member.key)
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

    def _dial_check(self, key: bytes, alpn: str) -> bool:
        member = self.team.member(key.hex())
        return member is not None and member.active and key.hex() != self.team.my_key()

    # ---- dialing -------------------------------------------------------------------------

    def _wake(self, peer: str) -> anyio.Event:
        return self._wakes.setdefault(peer, anyio.Event())

    def learn(self, peer: str, addresses: Iterable[str], *, front: bool = False) -> None:
        """Remember addresses for a member; a waiting dialer tries them at once."""
        if self.team.team_id is not None and peer == self.team.my_key():
            return
        current = self.addresses.get(peer, [])
        new = [a for a in addresses if valid_address(a)]
        merged = (new + [a for a in current if a not in new]) if front else current + [a for a in new
                                                                                          if a not in current]
        merged = merged[:MAX_ADDRESSES]
        if merged != current:
            self.addresses[peer] = merged
            self._addresses_dirty = True
            if any(a not in current for a in merged):
                self._wake(peer).set()
            self.poke()

    async def _dial_loop(self, peer: str) -> None:
        backoff = BACKOFF_START
        first = True
        try:
            while True:
                member = self.team.member(peer)
                if member is None or not member.active:
                    return
                link = self.links.get(peer)
                if link is not None:
                    await link.closed.wait()
                    first = False
                    backoff = BACKOFF_START
                    await self._expire_outbox(peer)
                    continue
                learned = self.addresses.get(peer, [])
                candidates = list(learned) + [a for a in member.addresses if a not in learned and valid_address(a)]
                wake = self._wakes[peer] = anyio.Event()
                if not candidates:
                    await wake.wait()
                    continue
                # Both sides dial; the larger key holds back a little so that usually only one
                # link is made (the smaller key's), instead of two that are then deduplicated.
                if not first or (peer < self.team.my_key() and peer not in self.eager):
                    with anyio.move_on_after(backoff if not first else BACKOFF_START):
                        await wake.wait()
                    if peer in self.links:
                        continue
                first = False
                connected = False
                for address in candidates:
                    if peer in self.links:
                        connected = True
                        break
                    try:
                        assert self._cert is not None
                        async with dial(address, self._cert, self._dial_check,
                                        connect_within=self.config.connect_timeout) as link:
                            connected = await self._run_link(link)
                    except (ConnectionError, OSError, ValueError) as exc:
                        log.debug("dial %s at %s failed: %s", peer[:12], address, exc)
                    if connected:
                        self._prefer(peer, address)
                        break
                if connected:
                    backoff = BACKOFF_START
                else:
                    await self._expire_outbox(peer)
                    backoff = min(backoff * 2, BACKOFF_MAX)
        finally:
            self._dialers.discard(peer)

    def _prefer(self, peer: str, address: str) -> None:
        current = self.addresses.get(peer, [])
        if current and current[0] != address:
            self.addresses[peer] = [address] + [a for a in current if a != address]

    async def _dial_static(self, address: str) -> None:
        """A static address (VPN, public host): whoever answers there must be an active member."""
        backoff = BACKOFF_START
        while True:
            try:
                assert self._cert is not None
                async with dial(address, self._cert, self._dial_check,
                                connect_within=self.config.connect_timeout) as link:
                    self.learn(link.peer, [address])
                    if link.peer in self.links:
                        return  # already linked: the member's own dial loop owns it from now on
                    if await self._run_link(link):
                        backoff = BACKOFF_START
                        return
            except (ConnectionError, OSError, ValueError) as exc:
                log.debug("static %s: %s", address, exc)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    # ---- links ---------------------------------------------------------------------------

    async def _serve_link(self, link: Link) -> None:
        try:
            if link.alpn == ALPN_JOIN:
                await self._serve_join(link)
            else:
                await self._run_link(link)
        except Exception:  # one bad link must not stop the listener
            log.exception("serving %r failed", link)

    def _hello(self) -> dict[str, Any]:
        return {"t": "hello", "team": self.team.team_id, "proto": PROTO, "features": self.features(),
                "roster": self._state_digest()}

    async def _run_link(self, link: Link) -> bool:
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
                await self._merge_state(link, first)  # we were removed: the state says so
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
                f for f in (first.get("features") or [])[:MAX_FEATURES] if isinstance(f, str) and len(f) <= 32)
            if not self._adopt(link):
                return False
        except (LinkClosed, TimeoutError, FrameError):
            return False
        try:
            await self._link_up(link, same_roster=first.get("roster") == self._state_digest())
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
                    log.warning("a malformed %.40r frame from %s (%s): %s; ignored", frame.get("t"),
                                member.machine, peer[:12], exc)
                    continue
                except Exception:  # a bug or a failing disk must not take the mesh down with it
                    log.exception("could not handle a %.40r frame from %s; closing the link", frame.get("t"),
                                  peer[:12])
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
            if existing.dialer == link.dialer:
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
        self.flows[id(link)] = _Flow()
        self._wake(peer).set()
        return True

    async def _link_up(self, link: Link, same_roster: bool) -> None:
        peer = link.peer
        log.info("linked with %s (%s, %s)", peer[:12], link.address, "dialed" if link.outbound else "accepted")
        state = None if same_roster else self.team.state_for(peer)
        if state is not None:
            await link.send({"t": "state", "state": state})
        # The first presence on a link carries the addresses this machine knows for other members,
        # so a machine that just joined through one inviter can dial everyone else.
        await link.send({"t": "presence", "presence": self._presence(with_peers=True)})
        self.poke()  # the directory changed: the peer's sessions are live again
        assert self._team_tg is not None
        self._team_tg.start_soon(self._guarded, self._replay, peer)
        self._team_tg.start_soon(self._guarded, self._flush_receipts, peer)
        for hook in self.link_up_hooks:
            self._team_tg.start_soon(self._guarded, hook, peer)

    def _link_down(self, link: Link) -> None:
        # Unacknowledged messages stay pending in the outbox and go again on the next link.
        self.flows.pop(id(link), None)
        if self.links.get(link.peer) is link:
            del self.links[link.peer]
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
        elif kind == "msg":
            await self._receive_msg(link, member, frame.get("msg"))
        elif kind == "ack":
            await self._receive_ack(link, frame)
        elif kind == "receipt":
            await self._receive_receipts(link, frame)
        elif kind == "presence":
            await self._receive_presence(link.peer, frame.get("presence"))
        elif kind == "state":
            await self._merge_state(link, frame)
        elif kind == "hello":
            pass
        elif isinstance(kind, str) and kind in self.frame_handlers:
            await self.frame_handlers[kind](link, member, frame)
        else:
            log.info("ignored a %.40r frame from %s (a newer hive?)", kind, link.peer[:12])

    async def _receive_invalid(self, link: Link, member: Member, frame: dict[str, Any]) -> None:
        """A frame the transport refused for its text (see transport.Link._decode): a message
        is answered as refused, so its sender stops replaying it and tells its author why."""
        kind, message_id = frame.get("of"), frame.get("id")
        log.warning("a %.40r frame from %s (%s) was refused: %s", kind, member.machine, link.peer[:12],
                    frame.get("reason"))
        if kind == "msg" and is_ulid(message_id):
            await self._ack(link, message_id, "refused",
                            "refused: the message holds text that is not proper Unicode (a lone UTF-16 "
                            "surrogate), so it was not stored; send it again as proper UTF-8 text")

    async def _merge_state(self, link: Link, frame: dict[str, Any]) -> None:
        """Merge a peer's roster; a change reaches :meth:`_on_team_change`, which spreads it."""
        try:
            await self.team.merge(frame.get("state"), link.peer)
        except Exception:
            log.exception("could not merge the roster from %s", link.peer[:12])

    async def _broadcast_state(self) -> None:
        """Send what changed here to every linked member: only the entries that differ from the
        last broadcast (merging is a union, so a partial state merges like a whole one), encoded
        once. A member that missed one gets the whole state at its next link-up."""
        team = getattr(self.sc, "team", None)
        state = getattr(team, "state", None)
        if state is None:
            return
        wire = state.to_wire()
        base = self._broadcast_base
        delta = _state_delta(base, wire) if base is not None and base.get("id") == wire["id"] else wire
        self._broadcast_base = wire
        try:
            encoded = encode_frame({"t": "state", "state": delta})
        except FrameError:
            log.error("the roster no longer fits in one frame")
            return
        for peer, link in list(self.links.items()):
            member = self.team.member(peer)
            with contextlib.suppress(LinkClosed, FrameError):
                if member is not None and member.active:
                    await link.send_encoded(encoded)
                else:
                    removed = self.team.state_for(peer)  # without secrets
                    if removed is not None:
                        await link.send({"t": "state", "state": removed})

    def roster_changed(self) -> None:
        """The roster changed here (a team op or a merge): re-sync links and dialers."""
        self._fingerprint = self.team.fingerprint()
        self._roster_changed.set()
        self.poke()

    # ---- presence ------------------------------------------------------------------------

    def _presence(self, *, with_peers: bool = False) -> dict[str, Any]:
        now = time.time()
        sessions, known, gone = [], [], []
        for s in self.sc.sessions.by_key.values():
            if not discover.shared(self.sc, s):
                continue  # found on disk, not managed: stays on this machine unless share_unmanaged
            if self.sc.sessions.is_live(s, now):
                sessions.append({
                    "name": s.name, "agent": s.agent, "repo": s.repo, "branch": s.branch,
                    "folder": Path(s.cwd.rstrip("/")).name if s.cwd else "", "doing": s.doing,
                    "activity": _activity_of(s.key), "tier": s.tier, **observe.presence_of(s.key),
                })
            else:
                known.append(s.name)
                # what teammates keep showing of a gone session (``known`` alone is what older hives read)
                gone.append({"name": s.name, "agent": s.agent, "repo": s.repo, "branch": s.branch, "tier": s.tier})
        sessions.sort(key=lambda d: d["name"])
        gone.sort(key=lambda d: d["name"])
        presence: dict[str, Any] = {"sessions": sessions[:MAX_SESSIONS], "known": sorted(known)[:MAX_KNOWN],
                                    "gone": gone[:MAX_KNOWN],
                                    "features": self.features(), "addresses": self.my_addresses,
                                    "mailboxes": mailboxes.presence_field(self.sc)}
        if with_peers:
            presence["peers"] = self._peer_addresses()
        return presence

    def _peer_addresses(self) -> dict[str, list[str]]:
        return {peer: self.addresses[peer][:MAX_ADDRESSES] for peer in sorted(self.links) if self.addresses.get(peer)}

    async def _send_presence_if_changed(self, *, refresh: bool = False) -> None:
        """Send presence when it changed. Peers' addresses change with every link while a mesh
        forms, so they go out at link-up and with the once-a-minute refresh, never per change."""
        presence = self._presence()
        encoded = json.dumps(presence, sort_keys=True)
        peers = json.dumps(self._peer_addresses(), sort_keys=True) if refresh else self._sent_peers
        if encoded == self._sent_presence and peers == self._sent_peers:
            return
        self._sent_presence = encoded
        if peers != self._sent_peers:
            self._sent_peers = peers
            presence["peers"] = json.loads(peers)
        for link in list(self.links.values()):
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "presence", "presence": presence})

    async def _receive_presence(self, peer: str, raw: Any) -> None:
        presence = sanitise_presence(raw)
        presence["at"] = time.time()
        self.presence[peer] = presence
        self.peer_features[peer] = frozenset(presence["features"])
        if presence["addresses"]:
            self.learn(peer, presence["addresses"])
        me = self.team.my_key()
        for other, addresses in presence["peers"].items():
            member = self.team.member(other)
            if other != me and member is not None and member.active:
                self.learn(other, addresses)
        self._presence_dirty.add(peer)
        await self._rename_clashes(peer, presence)
        self.poke()  # stored by the flusher, coalesced: one write for a burst of presence frames
        await observe.on_peer_presence(self.sc, peer)

    def names_elsewhere(self) -> set[str]:
        """Session names this person's other machines hold, live or known: an address names one session."""
        if self.team.team_id is None:
            return set()
        me, person = self.team.my_key(), self.sc.settings.person
        names: set[str] = set()
        for peer, presence in self.presence.items():
            member = self.team.member(peer)
            if peer != me and member is not None and member.active and member.person == person:
                names.update(s["name"] for s in presence["sessions"])
                names.update(presence["known"])
        return names

    async def _rename_clashes(self, peer: str, presence: dict[str, Any]) -> None:
        """Two machines of one person named sessions alike before either heard of the other's: the
        machine with the larger key renames its own (unread mail follows), the other keeps its names."""
        member = self.team.member(peer)
        if member is None or member.person != self.sc.settings.person or peer > self.team.my_key():
            return
        theirs = {s["name"] for s in presence["sessions"]}
        for session in list(self.sc.sessions.by_key.values()):
            if session.name in theirs:
                old = session.name
                await self.sc.sessions.set_status(session, None, self.sc.sessions.free_name(session))
                log.info("renamed session %s to %s: %s's machine %s has one of that name", old, session.name,
                         member.person, member.machine)

    def entries(self) -> list[Entry]:
        """Teammates' sessions for the directory: person and machine from the roster, never the peer."""
        if self.team.team_id is None:
            return []
        out: list[Entry] = []
        me = self.team.my_key()
        for peer, presence in self.presence.items():
            member = self.team.member(peer)
            if member is None or not member.active or peer == me:
                continue
            online = peer in self.links
            for s in presence["sessions"]:
                out.append(Entry(
                    person=member.person, machine=member.machine, name=s["name"], agent=s["agent"],
                    repo=s["repo"], branch=s["branch"], folder=s["folder"], doing=s["doing"],
                    tier=s["tier"], live=online,
                ))
            for name in presence["known"]:
                last = presence["gone"].get(name, {})
                out.append(Entry(person=member.person, machine=member.machine, name=name,
                                 agent=last.get("agent", ""), repo=last.get("repo", ""),
                                 branch=last.get("branch", ""), folder="", doing="",
                                 tier=last.get("tier", "pull"), live=False))
        return out

    def people(self) -> set[str]:
        return {m.person for m in self.team.members() if m.active}

    def peer_of(self, entry: Entry | None) -> str | None:
        """The machine key behind a remote directory entry (None for this machine's own)."""
        if entry is None or entry.key is not None:
            return None
        for member in self.team.members():
            if member.person == entry.person and member.machine == entry.machine and member.active:
                return member.key
        return None

    def is_remote(self, target: Target) -> bool:
        return target.entry is not None and target.entry.key is None

    def receipts_owed(self, count: int) -> None:
        """``count`` messages from teammates were read other than through this machine's mailbox
        (another machine of the person read their copies): send their receipts at the next flush."""
        self._open_inbound += count
        self.poke()

    # ---- background work -----------------------------------------------------------------

    async def _flusher(self) -> None:
        """After local changes: send presence if it changed, owed receipts, roster changes."""
        while True:
            await self._poked.wait()
            self._poked = anyio.Event()
            try:
                self._subscribe()
                if self.team.fingerprint() != self._fingerprint:
                    self.roster_changed()
                if self._state_dirty:
                    self._state_dirty = False
                    await self._broadcast_state()
                statements: list[tuple[str, Sequence[Any]]] = []
                if self._addresses_dirty:
                    self._addresses_dirty = False
                    statements.append(("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)",
                                       ("mesh.addresses", json.dumps(self.addresses))))
                for peer in self._presence_dirty:
                    if peer in self.presence:
                        statements.append(("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)",
                                           (f"mesh.presence.{peer}", json.dumps(self.presence[peer]))))
                self._presence_dirty.clear()
                if statements or self._staged:
                    self._staged = False
                    await self.sc.store.write(statements)
                if self.links:
                    await self._send_presence_if_changed()
                    await self._flush_receipts(None)
                    await mailboxes.tell(self)
            except Exception:
                log.exception("mesh flush failed")

    async def _refresher(self) -> None:
        """Liveness changes with time alone (a session goes stale): look at most once a minute,
        and pass on the addresses of members linked since the last look."""
        while True:
            await anyio.sleep(PRESENCE_REFRESH)
            with contextlib.suppress(Exception):
                await self._send_presence_if_changed(refresh=True)

    # ---- sending mail --------------------------------------------------------------------

    def _msg_payload(self, message: Message) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "id": message.id, "from": message.sender, "to": message.recipient, "kind": message.sender_kind,
            "agent": message.sender_agent, "repo": message.sender_repo, "reply_to": message.reply_to,
            "body": message.body, "fyi": not message.wake, "sent_at": message.sent_at}
        approval = wire_of(message.approval)
        if approval is not None:
            payload["approval"] = approval  # signed by this machine (approvals.py)
        if message.carried:
            payload["files"] = attachments.to_wire(message.carried)
        return payload

    def _approval(self, raw: dict[str, Any], peer: str, recipient: str, body: str) -> tuple[str | None, str]:
        """An approval that came with a message: kept if it verifies, else stripped and noted in the body."""
        roster = getattr(getattr(self.sc, "team", None), "roster", None)
        approval, body, why = receive_approval(raw.get("approval"), roster=roster, delivered_by=peer,
                                               arrived_at=recipient, body=body)
        if why is not None:
            log.info("stripped an approval from %s for %s: %s", peer[:12], recipient, why)
        return approval, body

    async def send(self, pairs: Sequence[tuple[Target, Message]], sender_key: str | None,
                   notify: bool = False, copies: Mapping[str, Sequence[str]] | None = None,
                   runs: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
        """Queue messages for teammates' sessions and mailboxes; returns each one's result keyed by message id.

        ``notify``: the recipient's machine also shows each as a notification to its person (ask.py).
        ``copies``: for a message sent to one person's mailbox on several machines, the ids of
        its other copies (hive.sidecar.mailboxes marks them read together). ``runs``: the loop
        guard's count of each agent message to a session, by id, which its frame carries
        (hive.sidecar.guards: the recipient's machine decides).

        Each message is in the durable outbox before this returns. A linked recipient usually
        answers within milliseconds; after ``ack_wait`` seconds the answer is ``queued``.
        """
        results: dict[str, dict[str, Any]] = {}
        statements: list[tuple[str, Sequence[Any]]] = []
        queued: list[tuple[str, str, dict[str, Any]]] = []
        now = time.time()
        for target, message in pairs:
            peer = self.peer_of(target.entry)
            if peer is None:
                results[message.id] = {"to": target.address, "id": message.id, "state": "refused",
                                       "note": "refused: that machine is no longer in the team"}
                continue
            if message.carried and peer in self.peer_features and not self.peer_has(peer, "files"):
                # An older hive would drop the files without a word: they go in the text, or not at all.
                inlined = attachments.inline(message, self.sc.settings.max_body)
                if inlined is None:
                    results[message.id] = {"to": target.address, "id": message.id, "state": "refused",
                                           "note": "refused: that machine's hive takes no attached files, and "
                                                   "these do not fit in the message's text"}
                    continue
                message = inlined
            payload = self._msg_payload(message)
            if runs and message.id in runs:
                payload["run"] = runs[message.id]
            if notify:
                payload["notify"] = True
            if copies and copies.get(message.id):
                payload["copies"] = list(copies[message.id])
            statements.append((
                "INSERT OR IGNORE INTO outbox (id, peer, recipient, sender, sender_key, frame, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (message.id, peer, message.recipient, message.sender, sender_key, json.dumps(payload), now, now),
            ))
            queued.append((message.id, peer, payload))
        # The outbox rows commit while the messages travel: the caller hears back only once both
        # are done, and the round trip no longer waits for this machine's fsync first.
        await self.sc.store.stage(statements)
        waiters = {message_id: self._acks.setdefault(message_id, _AckWait()) for message_id, _, _ in queued}
        try:
            async with anyio.create_task_group() as committing:
                if statements:
                    committing.start_soon(self.sc.store.write, [])
                with anyio.move_on_after(self.config.ack_wait):
                    async with anyio.create_task_group() as tg:
                        for message_id, peer, payload in queued:
                            tg.start_soon(self._send_and_wait, peer, payload, waiters[message_id])
        finally:
            for message_id in waiters:
                self._acks.pop(message_id, None)
        for message_id, peer, payload in queued:
            waiter = waiters[message_id]
            if waiter.event.is_set() and waiter.state != "retry":
                state, note = waiter.state, waiter.note
            elif waiter.event.is_set():
                state, note = "queued", f"{waiter.note}; it stays in the outbox and goes again shortly"
            else:
                self._probe(peer)
                member = self.team.member(peer)
                who = f"{member.person}'s machine {member.machine}" if member else "that machine"
                state = "queued"
                note = (f"queued in the outbox: {who} is not reachable right now; it goes out when it is"
                        if peer not in self.links else f"queued in the outbox: {who} has not answered yet")
            results[message_id] = {"to": payload["to"], "id": message_id, "state": state, "note": note}
            if waiter.event.is_set() and waiter.code:
                results[message_id]["code"] = waiter.code
            member = self.team.member(peer)
            if member is not None:
                results[message_id]["machine"] = member.machine
        return results

    async def _send_and_wait(self, peer: str, payload: dict[str, Any], waiter: _AckWait) -> None:
        link = self.links.get(peer)
        if link is None or not await self._send_msg(link, payload):
            return
        async with anyio.create_task_group() as tg:  # the ack, or the link's end, whichever is first
            async def on_close() -> None:
                await link.closed.wait()
                tg.cancel_scope.cancel()
            tg.start_soon(on_close)
            await waiter.event.wait()
            tg.cancel_scope.cancel()

    def _probe(self, peer: str) -> None:
        """A linked peer did not acknowledge in time: ping it now rather than at the next keepalive,
        so a dead link is dropped (and its outbox waits for the next one) within seconds."""
        link = self.links.get(peer)
        if link is None or self._team_tg is None or id(link) in self._probing:
            return
        self._probing.add(id(link))

        async def probe() -> None:
            try:
                with anyio.move_on_after(PROBE_TIMEOUT) as scope:
                    await link.protocol.ping()
                if scope.cancelled_caught:
                    link.close(CLOSE_NORMAL, "no answer to a probe")
            except ConnectionError:
                link.close(CLOSE_NORMAL, "the connection is gone")
            finally:
                self._probing.discard(id(link))

        self._team_tg.start_soon(self._guarded, probe)

    async def _send_msg(self, link: Link, payload: dict[str, Any]) -> bool:
        flow = self.flows.get(id(link))
        if flow is None:
            return False
        if payload["id"] in flow.inflight:
            return True  # already on this link (a replay raced a send): its ack will come
        await flow.window.acquire()
        flow.inflight.add(payload["id"])
        try:
            await link.send({"t": "msg", "msg": payload})
        except (LinkClosed, FrameError) as exc:
            flow.inflight.discard(payload["id"])
            flow.window.release()
            log.info("message %s not sent to %s: %s", payload["id"], link.peer[:12], exc)
            return False
        return True

    async def _replay(self, peer: str) -> None:
        """Send everything still pending for ``peer``, oldest first."""
        await self._expire_outbox(peer)
        rows = await self.sc.store.fetchall(
            "SELECT id, frame FROM outbox WHERE pending = 1 AND peer = ? ORDER BY id", (peer,))
        for row in rows:
            link = self.links.get(peer)
            if link is None:
                return
            with contextlib.suppress(ValueError):
                await self._send_msg(link, json.loads(row[1]))

    async def _retry_later(self, peer: str, delay: float) -> None:
        try:
            await anyio.sleep(delay)
            await self._replay(peer)
        finally:
            self._retrying.discard(peer)

    async def _expire_outbox(self, peer: str) -> None:
        """Give up on messages a week old, or for a machine that left the team."""
        now = time.time()
        member = self.team.member(peer)
        if member is None or not member.active:
            cutoff, note = now + 1, "failed: that machine is no longer in the team"
        else:
            days = self.config.outbox_give_up / DAY
            cutoff = now - self.config.outbox_give_up
            note = f"failed: gave up after {days:g} days; the machine was never reachable"
        await self.sc.store.write([(
            "UPDATE outbox SET pending = 0, state = 'failed', note = ?, updated_at = ? "
            "WHERE pending = 1 AND peer = ? AND created_at < ?", (note, now, peer, cutoff))])

    async def _receive_ack(self, link: Link, frame: dict[str, Any]) -> None:
        if isinstance(frame.get("receipts"), list):
            statements = []
            for item in frame["receipts"]:
                if isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item):
                    statements.append(("UPDATE inbound SET reported = ? WHERE id = ? AND peer = ?",
                                       (item[1], item[0], link.peer)))
                    flow = self.flows.get(id(link))
                    if flow is not None:
                        flow.receipts.discard((item[0], item[1]))
            if statements:
                # Staged, committed by the flusher (a lost update only sends the receipt again): an
                # fsync here would hold up the next message's commit on this machine.
                await self.sc.store.stage(statements)
                self._staged = True
                self.poke()
                # Counted again, not decremented: a receipt may be acked twice (a flush between
                # the discard above and this write sends it again), which would leave later
                # receipts unsent behind a count that reached zero too early.
                await self._count_open_inbound()
            return
        message_id, state = frame.get("id"), frame.get("state")
        if not isinstance(message_id, str) or state not in ACK_STATES:
            return
        note = one_line(frame.get("note"), 300)
        flow = self.flows.get(id(link))
        if flow is not None and message_id in flow.inflight:
            flow.inflight.discard(message_id)
            flow.window.release()
        now = time.time()
        # The waiting sender hears the answer first: if the update below is lost to a crash, the
        # row stays pending and is replayed, and the recipient answers the duplicate again.
        waiter = self._acks.get(message_id)
        if waiter is not None:
            waiter.state, waiter.note = state, note
            waiter.code = one_line(frame.get("code"), 40) if state == "refused" else ""
            waiter.event.set()
        # Staged, committed by the flusher: the link's next frame does not wait for an fsync. A
        # crash before that commit leaves the row pending; it is replayed and answered again.
        if state == "retry":
            await self.sc.store.stage([("UPDATE outbox SET state = 'retry', note = ?, updated_at = ? "
                                        "WHERE id = ? AND peer = ? AND pending = 1",
                                        (note, now, message_id, link.peer))])
            try:
                delay = min(max(float(frame.get("retry_after") or BACKOFF_START), 1.0), BACKOFF_MAX)
            except (TypeError, ValueError):
                delay = BACKOFF_START
            if link.peer not in self._retrying and self._team_tg is not None:
                self._retrying.add(link.peer)
                self._team_tg.start_soon(self._guarded, self._retry_later, link.peer, delay)
        else:
            await self.sc.store.stage([("UPDATE outbox SET pending = 0, state = ?, note = ?, updated_at = ? "
                                        "WHERE id = ? AND peer = ? AND pending = 1",
                                        (state, note, now, message_id, link.peer))])
        self._staged = True
        self.poke()

    async def _receive_receipts(self, link: Link, frame: dict[str, Any]) -> None:
        items = frame.get("receipts")
        if not isinstance(items, list):
            return
        statements: list[tuple[str, Sequence[Any]]] = []
        answered = []
        now = time.time()
        for item in items[:1000]:
            if not isinstance(item, dict):
                continue
            message_id, state = item.get("id"), item.get("state")
            if not isinstance(message_id, str) or state not in ("delivered", "read", "refused"):
                continue
            at = item.get("at") if isinstance(item.get("at"), int | float) else now
            if state == "read":
                statements.append(("UPDATE outbox SET pending = 0, state = 'read', read_at = ?, updated_at = ? "
                                   "WHERE id = ? AND peer = ?", (at, now, message_id, link.peer)))
            else:
                # A later receipt never undoes a read one.
                statements.append(("UPDATE outbox SET pending = 0, state = ?, updated_at = ? "
                                   "WHERE id = ? AND peer = ? AND state != 'read'",
                                   (state, now, message_id, link.peer)))
            answered.append([message_id, state])
        if statements:
            await self.sc.store.write(statements)
        if answered:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "ack", "receipts": answered})

    async def sent_by(self, sender_key: str | None, sender: str, ids: Sequence[str] = ()) -> list[dict[str, Any]]:
        """What was sent to teammates' machines, with the latest state each recipient reported."""
        columns = "id, recipient, created_at, read_at, state, note, pending"
        if ids:
            marks = ", ".join("?" for _ in ids)
            rows = await self.sc.store.fetchall(f"SELECT {columns} FROM outbox WHERE id IN ({marks})", tuple(ids))
        elif sender_key:
            rows = await self.sc.store.fetchall(
                f"SELECT {columns} FROM outbox WHERE sender_key = ? ORDER BY id DESC LIMIT 50", (sender_key,))
        else:
            rows = await self.sc.store.fetchall(
                f"SELECT {columns} FROM outbox WHERE sender = ? AND sender_key IS NULL ORDER BY id DESC LIMIT 50",
                (sender,))
        # in_outbox: the recipient's machine has not acknowledged it yet (or asked to retry later).
        return [{"id": r[0], "to": r[1], "sent_at": r[2], "read_at": r[3], "state": r[4], "note": r[5],
                 "remote": True, "in_outbox": bool(r[6])} for r in rows]

    # ---- receiving mail ------------------------------------------------------------------

    async def _ack(self, link: Link, message_id: str, state: str, note: str, **extra: Any) -> None:
        with contextlib.suppress(LinkClosed, FrameError):
            await link.send({"t": "ack", "id": message_id, "state": state, "note": note, **extra})

    def _rate_ok(self, peer: str) -> float:
        """0 when a message from ``peer`` may pass now, else seconds until one may."""
        now = time.monotonic()
        window = self._rates.setdefault(peer, deque())
        while window and now - window[0] >= self.config.rate_window:
            window.popleft()
        if len(window) >= self.config.rate_limit:
            return self.config.rate_window - (now - window[0]) + 0.05
        window.append(now)
        return 0.0

    async def _receive_msg(self, link: Link, member: Member, raw: Any) -> None:
        if not isinstance(raw, dict) or not is_ulid(raw.get("id")):
            log.warning("a malformed msg frame from %s; ignored", link.peer[:12])
            return
        message_id: str = raw["id"]

        def look(conn: sqlite3.Connection) -> tuple[str, str] | None:  # one hop to the database thread
            row = conn.execute("SELECT state, note FROM inbound WHERE id = ?", (message_id,)).fetchone()
            if row is None and conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone():
                return "message", ""
            return None if row is None else (row[0], row[1])

        seen = await self.sc.store.run(look)
        if seen is not None and seen[0] == "message":
            await self._ack(link, message_id, "queued", "already received")
            return
        if seen is not None:
            state = {"accepted": "queued", "held": "held", "refused": "refused"}.get(seen[0], "queued")
            await self._ack(link, message_id, state, f"already received: {seen[1]}"[:300])
            return
        sender, recipient, body = raw.get("from"), raw.get("to"), raw.get("body")
        claimed = raw.get("kind")
        kind = claimed if claimed in ("agent", "person", "script") else "agent"
        reply_to = raw.get("reply_to") if is_ulid(raw.get("reply_to")) else None
        local_person = self.sc.settings.person
        if (not isinstance(sender, str) or not isinstance(recipient, str) or not isinstance(body, str)
                or "/" not in sender or "/" not in recipient):
            await self._refuse(link, message_id, str(sender), str(recipient), "refused: a malformed message")
            return
        sender = f"{slug(sender.split('/', 1)[0])}/{slug(sender.split('/', 1)[1]) or 'terminal'}"
        if sender.split("/", 1)[0] != member.person:
            await self._refuse(link, message_id, sender, recipient,
                               f"refused: a machine of {member.person}'s speaks only for {member.person}")
            return
        if len(body.encode("utf-8")) > self.sc.settings.max_body:
            await self._refuse(link, message_id, sender, recipient, "refused: the message is over the size limit")
            return
        try:
            carried = attachments.from_wire(raw.get("files"))
        except HiveError as exc:
            await self._refuse(link, message_id, sender, recipient, attachments.refusal_note(exc))
            return
        wait = self._rate_ok(link.peer)
        if wait:
            await self._ack(link, message_id, "retry",
                            f"retry: {local_person}'s machine takes at most {self.config.rate_limit} "
                            "messages a minute from one machine", retry_after=round(wait, 2))
            return
        policy = self.inbound.of(member.person)
        if policy == "refuse":
            await self._refuse(link, message_id, sender, recipient,
                               f"refused: {local_person} does not take messages from {member.person} right now")
            return
        to_person, to_name = recipient.split("/", 1)
        entry: Entry | None = None
        if to_person != local_person:
            await self._refuse(link, message_id, sender, recipient, f"refused: no {to_person} on this machine")
            return
        if not mailboxes.is_own(self.sc, recipient):  # the person's own mailboxes take mail from the team
            entry = next((e for e in self.sc.directory() if e.key is not None and e.name == to_name), None)
            if entry is None:
                await self._refuse(link, message_id, sender, recipient,
                                   f"refused: no session or mailbox called {to_name} on {local_person}'s machine")
                return
        if policy != "hold":  # a held message's files are saved (and counted) once it is approved
            wait = await attachments.quota_wait(self.sc, member.person, carried)
            if wait:
                await self._ack(link, message_id, "retry", f"retry: {local_person}'s machine keeps no more of "
                                f"{member.person}'s files for now", retry_after=round(wait, 2))
                return
        if kind == "person":
            thread = Guards.human_input(recipient)
        elif kind == "agent" and entry is not None:  # between two sessions: the loop guard's to count
            try:
                thread = (await self.sc.guards.step(sender, recipient, claimed=raw.get("run"))).statements
            except LoopGuard as exc:
                await self._refuse(link, message_id, sender, recipient, exc.message, code=exc.code)
                return
        else:
            thread = []
        approval, body = self._approval(raw, link.peer, recipient, body)
        message = Message(id=message_id, sender=sender, sender_kind=kind,
                          sender_agent=one_line(raw.get("agent"), 32), sender_repo=one_line(raw.get("repo"), 200),
                          recipient=recipient, reply_to=reply_to, body=body, wake=not raw.get("fyi"),
                          sent_at=time.time(), approval=approval, carried=carried)
        now = time.time()
        if policy == "hold":
            note = f"held: {local_person} sees it and approves it before any session does"
            await self.sc.store.write([*thread, (
                "INSERT INTO inbound (id, peer, sender, recipient, state, note, frame, received_at) "
                "VALUES (?, ?, ?, ?, 'held', ?, ?, ?)",
                (message_id, link.peer, sender, recipient, note, json.dumps(self._msg_payload(message)), now))])
            await self._ack(link, message_id, "held", note)
            return
        # The message, its inbound record and its thread step share one commit, made before the ack
        # (a second commit for the record would hold up both the ack and the recipient's read).
        state, note = await self._deposit(message, entry, also=[*thread, *mailboxes.record_copies(
            message_id, raw.get("copies")), (
            "INSERT OR IGNORE INTO inbound (id, peer, sender, recipient, state, note, received_at) "
            "VALUES (?, ?, ?, ?, 'accepted', 'accepted', ?)", (message_id, link.peer, sender, recipient, now))])
        if raw.get("notify") is True:
            from .ask import notify_received  # ask imports the mesh's neighbours; import late

            notify_received(self.sc, message, raw.get("sent_at"))
        self._open_inbound += 1
        await self._ack(link, message_id, state, note)

    async def _deposit(self, message: Message, entry: Entry | None,
                       also: Sequence[tuple[str, Sequence[Any]]] = ()) -> tuple[str, str]:
        message = await attachments.keep(self.sc, message)
        waiting = self.sc.parked[message.recipient] > 0
        await self.sc.mailbox.deposit([message], None, also)
        state, note = await self.sc._after_deposit(Target(message.recipient, entry), message.wake, waiting)
        return ("delivered" if state == "pushed" else state), note

    async def _refuse(self, link: Link, message_id: str, sender: str, recipient: str, note: str,
                      code: str = "refused") -> None:
        await self.sc.store.write([(
            "INSERT OR IGNORE INTO inbound (id, peer, sender, recipient, state, note, received_at) "
            "VALUES (?, ?, ?, ?, 'refused', ?, ?)", (message_id, link.peer, sender[:200], recipient[:200], note,
                                                     time.time()))])
        await self._ack(link, message_id, "refused", note, code=code)

    async def _flush_receipts(self, peer: str | None) -> None:
        """Tell senders what became of their messages: read, approved (delivered) or dropped."""
        if peer is None and self._open_inbound <= 0:
            return
        where = "" if peer is None else "AND i.peer = ?"
        params: tuple[Any, ...] = () if peer is None else (peer,)
        rows = await self.sc.store.fetchall(
            "SELECT i.id, i.peer, m.read_at FROM inbound i JOIN messages m ON m.id = i.id "
            f"WHERE i.state = 'accepted' AND i.reported != 'read' AND m.read_at IS NOT NULL {where}", params)
        owed: dict[str, list[dict[str, Any]]] = {}
        for message_id, sender_peer, read_at in rows:
            owed.setdefault(sender_peer, []).append({"id": message_id, "state": "read", "at": read_at})
        rows = await self.sc.store.fetchall(
            f"SELECT i.id, i.peer, i.due FROM inbound i WHERE i.due != '' AND i.due != i.reported "
            f"AND i.reported != 'read' {where}", params)
        for message_id, sender_peer, due in rows:
            if not any(r["id"] == message_id for r in owed.get(sender_peer, [])):
                owed.setdefault(sender_peer, []).append({"id": message_id, "state": due, "at": time.time()})
        for sender_peer, receipts in owed.items():
            link = self.links.get(sender_peer)
            flow = self.flows.get(id(link)) if link is not None else None
            if link is None or flow is None:
                continue
            fresh = [r for r in receipts if (r["id"], r["state"]) not in flow.receipts]
            if not fresh:
                continue
            flow.receipts.update((r["id"], r["state"]) for r in fresh)
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send({"t": "receipt", "receipts": fresh})

    # ---- held mail -----------------------------------------------------------------------

    async def held(self) -> list[dict[str, Any]]:
        rows = await self.sc.store.fetchall(
            "SELECT id, sender, recipient, frame, received_at FROM inbound WHERE state = 'held' ORDER BY id")
        out = []
        for message_id, sender, recipient, frame, received_at in rows:
            body, files = "", []
            with contextlib.suppress(ValueError, TypeError, AttributeError, HiveError):
                raw = json.loads(frame)
                body = raw.get("body", "")
                files = [f.name for f in attachments.from_wire(raw.get("files"))]  # saved only once approved
            out.append({"id": message_id, "from": defang(sender), "to": recipient,
                        "body": defang(str(body)), "received_at": received_at, "files": files})
        return out

    async def settle(self, ids: Sequence[str], approve: bool) -> list[dict[str, Any]]:
        """Approve (deposit now) or drop held messages; the sender hears which with a receipt."""
        results = []
        for message_id in ids:
            row = await self.sc.store.fetchone(
                "SELECT frame, recipient, peer FROM inbound WHERE id = ? AND state = 'held'", (message_id,))
            if row is None:
                results.append({"id": message_id, "state": "not_held"})
                continue
            if not approve:
                await self.sc.store.write([(
                    "UPDATE inbound SET state = 'refused', due = 'refused', frame = NULL, note = ? WHERE id = ?",
                    (f"dropped by {self.sc.settings.person}", message_id))])
                results.append({"id": message_id, "state": "dropped"})
                continue
            raw = json.loads(row[0])
            recipient = row[1]
            name = recipient.split("/", 1)[1]
            entry = next((e for e in self.sc.directory() if e.key is not None and e.name == name), None)
            approval, body = self._approval(raw, row[2], recipient, raw["body"])  # checked again: time passed
            message = Message(id=message_id, sender=raw["from"], sender_kind=raw.get("kind", "agent"),
                              sender_agent=raw.get("agent", ""), sender_repo=raw.get("repo", ""),
                              recipient=recipient, reply_to=raw.get("reply_to"), body=body,
                              wake=not raw.get("fyi"), sent_at=time.time(), approval=approval,
                              carried=attachments.from_wire(raw.get("files")))
            state, note = await self._deposit(message, entry)
            await self.sc.store.write([(
                "UPDATE inbound SET state = 'accepted', due = 'delivered', frame = NULL, note = ? WHERE id = ?",
                (note, message_id))])
            results.append({"id": message_id, "state": state, "note": note})
        self._open_inbound += len(results)
        self.poke()
        return results

    # ---- joins ---------------------------------------------------------------------------

    async def _serve_join(self, link: Link) -> None:
        """``hive-join/1``: a joiner presents an invite secret and receives the roster."""
        try:
            with anyio.fail_after(JOIN_TIMEOUT):
                frame = await link.receive()
        except (LinkClosed, TimeoutError):
            return
        team = getattr(self.sc, "team", None)
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

    async def join(self, addresses: Sequence[str], keys: Sequence[str], frame: dict[str, Any]) -> dict[str, Any]:
        """Dial the ticket's addresses on ``hive-join/1`` until one inviter answers with the roster.

        Raises Refused (the invite was refused) or NotFound (nobody answered).
        """
        seed = self.team.identity_seed()
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
                    async with dial(address, cert, check, alpn=ALPN_JOIN,
                                    connect_within=self.config.connect_timeout) as link:
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
        raise NotFound("no machine of that team answered at " + ("; ".join(errors[-len(addresses):]) or "no address"))

    # ---- mDNS ----------------------------------------------------------------------------

    async def _mdns(self, port: int) -> None:
        """Advertise this machine on the LAN and learn teammates' addresses the same way.

        TXT records are hints (anyone can send them); the QUIC pin is the proof. The team is
        a keyed tag, so a LAN observer cannot link advertisements to a team name or id.
        """
        try:
            from zeroconf import IPVersion, ServiceStateChange
            from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf
        except ImportError:
            log.warning("zeroconf is not installed: no LAN discovery")
            return
        interfaces: Any = list(self.config.mdns_interfaces) or None
        tag = self.team.mdns_tag()
        me = self.team.my_key()
        kwargs: dict[str, Any] = {"ip_version": IPVersion.V4Only}
        if interfaces:
            kwargs["interfaces"] = interfaces
        zc = AsyncZeroconf(**kwargs)
        hosts = [split_address(a)[0] for a in self.my_addresses]
        packed = [socket.inet_aton(h) for h in hosts if _is_ipv4(h)]
        if not packed and interfaces:
            packed = [socket.inet_aton(i) for i in interfaces if _is_ipv4(i)]
        info = AsyncServiceInfo(MDNS_TYPE, f"{me[:16]}-{tag[:8]}.{MDNS_TYPE}", addresses=packed, port=port,
                                server=f"hive-{me[:16]}.local.", properties={"tag": tag, "key": me})
        found: anyio.abc.ObjectSendStream[str]
        found, names = anyio.create_memory_object_stream[str](256)

        def on_change(zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
            if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated):
                with contextlib.suppress(anyio.WouldBlock):
                    found.send_nowait(name)

        browser = None
        try:
            await zc.async_register_service(info)
            browser = AsyncServiceBrowser(zc.zeroconf, [MDNS_TYPE], handlers=[on_change])
            async with names:
                async for name in names:
                    peer_info = AsyncServiceInfo(MDNS_TYPE, name)
                    if not await peer_info.async_request(zc.zeroconf, 3000):
                        continue
                    props = {k.decode(errors="replace"): (v or b"").decode(errors="replace")
                             for k, v in (peer_info.properties or {}).items()}
                    key = props.get("key", "")
                    if props.get("tag") != tag or key == me or not _HEX_KEY.match(key):
                        continue
                    member = self.team.member(key)
                    if member is None or not member.active:
                        continue
                    found_at = [f"{a}:{peer_info.port}" for a in peer_info.parsed_addresses()]
                    if any(a not in self.addresses.get(key, []) for a in found_at):
                        log.info("%s@%s found over mDNS at %s", member.person, member.machine, ", ".join(found_at))
                    self.learn(key, found_at, front=True)
        finally:
            with anyio.CancelScope(shield=True):
                if browser is not None:
                    with contextlib.suppress(Exception):
                        await browser.async_cancel()
                with contextlib.suppress(Exception):
                    await zc.async_unregister_service(info)
                with contextlib.suppress(Exception):
                    await zc.async_close()
                found.close()

    # ---- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "listening": self.listener.port if self.listener else None,
            "addresses": self.my_addresses,
            "links": {peer: {"address": link.address, "dialed": link.outbound,
                             "age": round(time.monotonic() - link.opened_at, 1)} for peer, link in self.links.items()},
        }


class BadFrame(Exception):
    """A member's frame whose fields have the wrong types: logged for that peer and skipped."""


def check_fields(frame: dict[str, Any]) -> None:
    """Raise BadFrame when a field of a known frame kind has the wrong type."""
    for name, kind in FRAME_FIELDS.get(frame.get("t", ""), {}).items():
        value = frame.get(name)
        if value is None:
            continue
        wrong = not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, _NUMBER))
        if wrong:
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise BadFrame(f"field {name!r} is a {type(value).__name__}, not a {names}")


def _state_delta(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The entries of roster state ``new`` that ``old`` does not hold as they are now."""
    delta: dict[str, Any] = {"v": new.get("v"), "id": new["id"], "founder": new["founder"]}
    for single in ("meta", "link"):
        delta[single] = new.get(single) if new.get(single) != old.get(single) else None
    for section in ("admissions", "members", "updates", "invites", "projects"):
        before = old.get(section) or {}
        delta[section] = {k: v for k, v in (new.get(section) or {}).items() if before.get(k) != v}
    return delta


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False


# ---- ops ---------------------------------------------------------------------------------


def _ids(request: dict[str, Any]) -> list[str]:
    ids = request.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise BadRequest("name the held messages by id (see `hive held`)")
    return ids


async def op_held(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """List teammates' messages the inbound policy holds for the person to approve or drop.

    Reads no fields. Returns ``{"held": [{"id", "from", "to", "body", "received_at", "files"}]}``,
    peer-written text defanged; ``files`` are the names of attachments, saved only once approved.
    """
    return {"held": await sidecar.mesh.held()}


@asks_person
async def op_approve(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Deliver held messages to their sessions, once the person confirms it when an agent asks.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state", "note"}]}``, ``state`` ``not_held`` for an id that is not held; each sender
    hears the outcome by receipt. Raises ``bad_request`` without ``ids``, ``needs_person`` or
    ``confirm_on_terminal`` when an agent asks and the person does not confirm.
    """
    ids = _ids(request)
    # Mail is held for the person to judge; the agent it would reach must not wave it through.
    await confirm_by_person(conn, request, f"Deliver {len(ids)} held message(s) to your sessions?",
                            title="hive · release held mail", outcome="not delivered",
                            hint="Ask your person to run `hive approve` in a terminal.", agents_only=True)
    return {"settled": await sidecar.mesh.settle(ids, approve=True)}


async def op_drop(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Refuse held messages: they are never delivered, and each sender hears so by receipt.

    Request: ``ids`` (list of str, required, not empty): the held messages. Returns ``{"settled":
    [{"id", "state": "dropped" | "not_held"}]}``. Raises ``bad_request`` without ``ids``.
    """
    return {"settled": await sidecar.mesh.settle(_ids(request), approve=False)}


@asks_person
async def op_team_join(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Join a team: read the invite, dial its machines, keep the roster (``hive join '<link>' --as <person>``).

    Request: ``link`` (str, required): the invite, ``hive1:...``. ``person`` or ``as`` (str,
    optional): the name to join as (default this machine's person, or the invite's own for an
    own-machine invite). ``machine`` (str, optional): this machine's name. Returns the team as
    ``team_show`` does, with ``invite`` (the team link) when the team has one. Raises
    ``bad_request``, ``conflict`` when already in a team, ``refused`` for an expired or refused
    invite, ``needs_person``/``confirm_on_terminal`` when an agent asks unconfirmed, and
    ``not_found`` when none of the invite's machines answers.
    """
    from .team import agent_confirms, team_of  # the team module imports nothing of the mesh; keep it that way

    link = request.get("link")
    if not isinstance(link, str) or not link.strip():
        raise BadRequest("join needs 'link': the invite (it starts with hive1:)")
    person = request.get("person") or request.get("as")
    machine = request.get("machine")
    if any(v is not None and not isinstance(v, str) for v in (person, machine)):
        raise BadRequest("person and machine are names (a-z, 0-9 and -)")
    team = team_of(sidecar)
    prepared = await team.prepare_join(link.strip(), person, machine, ())
    # A link in a stranger's text must not make this machine a member of their team unasked.
    await agent_confirms(conn, request, f"Join team {prepared['team']} as {prepared['person']} on "
                         f"{prepared['machine']}? Its members will see this machine's sessions.",
                         "Ask your person to run `hive join` in a terminal.")
    answer = await sidecar.mesh.join(prepared["addresses"], prepared["keys"], prepared["frame"])
    sidecar.mesh.learn(answer["peer"], [answer["address"]], front=True)
    sidecar.mesh.eager.add(answer["peer"])
    result = await team.finish_join(link.strip(), answer["state"], answer["peer"])
    sidecar.mesh.roster_changed()
    return dict(result)


async def op_mesh(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show this machine's links to teammates, its addresses and its listener (`hive team`, tests).

    Reads no fields. Returns ``{"listening": port | None, "addresses", "links": {peer key:
    {"address", "dialed", "age"}}}``.
    """
    return sidecar.mesh.status()


OPS = {"held": op_held, "approve": op_approve, "drop": op_drop, "mesh": op_mesh, "team_join": op_team_join}

__all__ = ["OPS", "Member", "Mesh", "MeshConfig", "TeamView", "load_mesh_config", "new_ulid",
           "sanitise_presence"]

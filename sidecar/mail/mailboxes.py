"""A person's own mailboxes: ``person/terminal`` and named ones (``person/ci``), across machines.

A person's mailboxes are addresses like sessions' but belong to the person: every machine of
theirs has ``terminal``, and ``hive inbox --as <name>`` (or ``hive listen --as <name>``) opens a
named one there, for a build script or notes. They are never forgotten the way stale sessions
are, and a session never takes one's name.

Mail to a teammate's mailbox goes to their machines (the roster says which):

- a reply (``reply_to`` a message that came from one of their machines) goes to that machine;
- a fresh message goes to each of their machines online now (all of them, through the outbox,
  when none is), one copy each. Every copy carries the ids of the others; once one is read,
  that machine tells the person's other machines (``copies_read``), so it is read everywhere.

Machines tell each other their named mailboxes in presence (``mailboxes``); ``terminal`` is
implied. Only a machine of the same person may mark that person's mail read.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base.config import slug
from ..base.errors import BadRequest, Conflict
from ..base.host import PerSidecar
from ..base.ulid import is_ulid
from ..presence.frames import FRAMES
from .addresses import Entry, Target, peer_of

if TYPE_CHECKING:
    from ..mesh.links import Mesh
    from .host import MailHost

TERMINAL = "terminal"
AGENT = "person"  # the ``agent`` of a mailbox's directory entry: what tells it from a session's
MAX_NAMED = 16
MAX_COPIES = 16
FILE = "mailboxes"

log = logging.getLogger("hive.sidecar.mail.mailboxes")


def _read_named(sidecar: MailHost) -> set[str]:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = (sidecar.paths.home / FILE).read_text(encoding="utf-8")
        return {n for line in text.splitlines() if (n := slug(line)) and n != TERMINAL}
    return set()


_named: PerSidecar[set[str]] = PerSidecar(_read_named)


def named(sidecar: MailHost) -> set[str]:
    """This machine's named mailboxes (read once from ``<home>/mailboxes``, one name a line)."""
    return _named.of(sidecar)


def names(sidecar: MailHost) -> set[str]:
    return {TERMINAL, *named(sidecar)}


def is_own(sidecar: MailHost, address: str) -> bool:
    """Whether ``address`` is one of this machine's person's mailboxes here."""
    person, _, name = address.partition("/")
    return person == sidecar.settings.person and name in names(sidecar)


def sending_as(sidecar: MailHost, ref: Any) -> str | None:
    """The mailbox of this machine's person a ``send`` names as its sender (``from``): ``terminal``
    when it names none, a named mailbox by its name or address; None when it names a session."""
    if ref in (None, "", TERMINAL, f"{sidecar.settings.person}/{TERMINAL}"):
        return TERMINAL
    if not isinstance(ref, str):
        return None
    name = ref.removeprefix(f"{sidecar.settings.person}/")
    return name if name in named(sidecar) else None


def is_mailbox(target: Target) -> bool:
    """Whether a target is a person's mailbox (this machine's person's, or a teammate's), not a session."""
    return target.entry is None or target.entry.agent == AGENT


def open_named(sidecar: MailHost, name: str) -> str:
    """Open (or find) the named mailbox ``name``; returns its address."""
    wanted = slug(name)
    if not wanted or wanted != name.strip().lower():
        raise BadRequest(f"a mailbox name is a-z, 0-9 and -, not {name!r}")
    mine = named(sidecar)
    if wanted == TERMINAL or wanted in mine:
        return f"{sidecar.settings.person}/{wanted}"
    if sidecar.sessions.by_name(wanted) is not None or wanted in FRAMES.of(sidecar).names_elsewhere():
        raise Conflict(f"{wanted} names one of your sessions; pick another mailbox name")
    if len(mine) >= MAX_NAMED:
        raise BadRequest(f"at most {MAX_NAMED} named mailboxes: {', '.join(sorted(mine))}")
    mine.add(wanted)
    path = sidecar.paths.home / FILE
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(sorted(mine)) + "\n")
    os.replace(temporary, path)
    sidecar.mesh.poke()  # presence tells teammates about it
    log.info("opened the mailbox %s/%s", sidecar.settings.person, wanted)
    return f"{sidecar.settings.person}/{wanted}"


def presence_field(sidecar: MailHost) -> list[str]:
    return sorted(named(sidecar))[:MAX_NAMED]


def entries(mesh: Mesh) -> list[Entry]:
    """Teammates' mailboxes, one entry per machine of theirs (live: linked now)."""
    if mesh.team.team_id is None:
        return []
    me = mesh.team.my_key()
    out: list[Entry] = []
    for member in mesh.team.members():
        if not member.active or member.key == me:
            continue
        presence = mesh.presence.get(member.key) or {}
        for name in (TERMINAL, *presence.get("mailboxes", ())):
            out.append(
                Entry(
                    person=member.person,
                    machine=member.machine,
                    name=name,
                    agent=AGENT,
                    repo="",
                    branch="",
                    folder="",
                    doing="",
                    tier="mailbox",
                    live=member.key in mesh.links,
                )
            )
    return out


async def route(sidecar: MailHost, targets: list[Target], reply_to: str | None) -> list[Target]:
    """Narrow each teammate mailbox address to the machines its mail goes to (see the module)."""
    by_address: dict[str, list[Target]] = {}
    for target in targets:
        if target.entry is not None and target.entry.agent == AGENT:
            by_address.setdefault(target.address, []).append(target)
    if not by_address:
        return targets
    origin = None
    if reply_to is not None:
        row = await sidecar.store.fetchone("SELECT peer FROM inbound WHERE id = ?", (reply_to,))
        origin = row[0] if row else None
    chosen: dict[str, list[Target]] = {}
    for address, copies in by_address.items():
        peers = {id(t): peer_of(sidecar, t.entry) for t in copies}
        answered = [t for t in copies if origin is not None and peers[id(t)] == origin]
        online = [t for t in copies if peers[id(t)] in sidecar.mesh.links]
        chosen[address] = answered or online or copies
    out: list[Target] = []
    for target in targets:
        if target.entry is None or target.entry.agent != AGENT:
            out.append(target)
        elif target.address in chosen:
            out.extend(chosen.pop(target.address))
    return out


def copies_of(ids: Sequence[str], message_id: str) -> list[str]:
    """The other copies' ids, as a copy's frame carries them."""
    return [i for i in ids if i != message_id][:MAX_COPIES]


def record_copies(message_id: str, raw: Any) -> list[tuple[str, Sequence[Any]]]:
    """Statements storing a received copy's siblings (none for a message sent once)."""
    siblings = [i for i in (raw if isinstance(raw, list) else [])[:MAX_COPIES] if is_ulid(i) and i != message_id]
    return [("INSERT OR IGNORE INTO mail_copies (id, sibling) VALUES (?, ?)", (message_id, s)) for s in siblings]


def setup(sidecar: MailHost) -> None:
    """Its feature's ``setup`` (daemon.features): no session here takes a named mailbox's name, and
    this machine's presence tells teammates its named mailboxes."""
    sidecar.sessions.elsewhere.append(lambda: named(sidecar))
    FRAMES.of(sidecar).fields["mailboxes"] = lambda: presence_field(sidecar)

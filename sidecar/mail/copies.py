"""Copies of a message to a teammate's person mailbox, one per machine of theirs: once one is read,
that machine tells the person's other machines (``copies_read {ids, at}``), so it is read on all.

Only a machine of the same person may mark that person's mail read; their senders get the read
receipts from every machine that marked a copy (:meth:`~hive.sidecar.mail.remote.RemoteMail.receipts_owed`).
See :mod:`hive.sidecar.mail.mailboxes` for how copies are made.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from ..base.host import PerSidecar
from ..base.ulid import is_ulid
from ..mesh.frames import Speaker
from .mailboxes import names
from .remote import REMOTE

if TYPE_CHECKING:
    from ..mesh.transport import Link
    from .host import MailHost

log = logging.getLogger("hive.sidecar.mail.copies")

FEATURE = "mailboxes"
FRAME = "copies_read"
SYNC_WINDOW = 7 * 86400.0  # copies read this recently are told again to a machine that links up

# Per peer: the copies already told to it over its current link.
_told: PerSidecar[dict[str, set[str]]] = PerSidecar(lambda sidecar: {})


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): this module speaks ``copies_read`` frames."""
    mesh = sidecar.mesh

    async def handle(link: Link, member: Any, frame: dict[str, Any]) -> None:
        if member.person != sidecar.settings.person:
            log.info(
                "ignored copies_read from %s's machine %s: only %s's machines mark %s's mail read",
                member.person,
                member.machine,
                sidecar.settings.person,
                sidecar.settings.person,
            )
            return
        ids = [i for i in (frame.get("ids") or [])[:1000] if is_ulid(i)]
        if not ids:
            return
        mine = [f"{sidecar.settings.person}/{n}" for n in sorted(names(sidecar))]
        marks, boxes = ", ".join("?" for _ in ids), ", ".join("?" for _ in mine)
        read_at = frame.get("at") if isinstance(frame.get("at"), int | float) else time.time()
        rows = await sidecar.store.fetchall(
            f"SELECT id FROM messages WHERE id IN ({marks}) AND read_at IS NULL AND recipient IN ({boxes})",
            (*ids, *mine),
        )
        found = [r[0] for r in rows]
        if not found:
            return
        marks = ", ".join("?" for _ in found)
        await sidecar.store.write([(f"UPDATE messages SET read_at = ? WHERE id IN ({marks})", (read_at, *found))])
        for message_id in found:
            sidecar.mailbox.inflight.pop(message_id, None)
        log.info("%d copies read on %s's machine %s", len(found), member.person, member.machine)
        REMOTE.of(sidecar).receipts_owed(len(found))  # their senders hear from this machine too

    async def link_up(peer: str) -> None:
        _told.of(sidecar).pop(peer, None)
        await tell(sidecar)

    mesh.add_speaker(CopiesRead(sidecar))
    mesh.add_frames(FEATURE, {FRAME: handle}, on_link_up=link_up)


class CopiesRead(Speaker):
    """At each flush of the mesh, tell this person's other machines which copies were read here."""

    def __init__(self, sidecar: MailHost) -> None:
        self.sc = sidecar

    async def flush(self, linked: bool) -> None:
        if linked:
            await tell(self.sc)


async def tell(sidecar: MailHost) -> None:
    """Tell this person's other linked machines which copies were read here (each once per link)."""
    mesh = sidecar.mesh
    own = [
        peer
        for peer, _ in mesh.links.items()
        if (m := mesh.team.member(peer)) is not None
        and m.person == sidecar.settings.person
        and mesh.peer_has(peer, FEATURE)
    ]
    if not own:
        return
    rows = await sidecar.store.fetchall(
        "SELECT c.sibling, m.read_at FROM mail_copies c JOIN messages m ON m.id = c.id "
        "WHERE m.read_at IS NOT NULL AND m.read_at > ?",
        (time.time() - SYNC_WINDOW,),
    )
    told = _told.of(sidecar)
    for peer in own:
        done = told.setdefault(peer, set())
        fresh = [(sibling, at) for sibling, at in rows if sibling not in done]
        link = mesh.links.get(peer)
        if not fresh or link is None:
            continue
        done.update(s for s, _ in fresh)
        with contextlib.suppress(Exception):
            await link.send({"t": FRAME, "ids": [s for s, _ in fresh], "at": max(at for _, at in fresh)})

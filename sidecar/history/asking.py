"""Talking to the team's anchors about history: which anchors there are, which are linked now, and
a request that waits for the anchor's answer.

History lives on the team's anchors (roster role ``anchor``, :mod:`hive.sidecar.mesh.relay`). A
request frame carries an ``id`` (a ULID); the anchor's answer carries it back, with ``code`` and
``note`` when it refused (``not_anchor`` from a machine that is no anchor). Requests and answers::

    history_put {id, entries}    -> history_ack {id, ids, stored}    (ids: the entries it is done with)
    history_query {id, q, limit} -> history_result {id, hits}
    history_forget {id}          -> history_forgot {id, deleted}
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import AnchorOffline, NoAnchor
from ..base.host import PerSidecar
from ..base.ulid import is_ulid, new_ulid
from ..mesh.transport import FrameError, Link, LinkClosed

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..mesh.team_view import Member

FEATURE = "history"  # announced in hello: a machine that speaks the history frames
ANSWER_WAIT = 15.0  # seconds an anchor has to answer a request
ANSWERS = ("history_ack", "history_result", "history_forgot")


@dataclass
class _Waiter:
    peer: str  # the machine asked: only its answer counts
    event: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] = field(default_factory=dict)


_WAITING: PerSidecar[dict[str, _Waiter]] = PerSidecar(lambda sidecar: {})


def is_anchor(sidecar: MailHost) -> bool:
    """Whether this machine is one of its team's active anchors."""
    return sidecar.mesh.relay.is_anchor()


def anchors(sidecar: MailHost) -> list[Member]:
    """The team's active anchors other than this machine, in key order (the same on every machine)."""
    mesh = sidecar.mesh
    if mesh.team.team_id is None:
        return []
    me = mesh.team.my_key()
    return sorted(
        (m for m in mesh.team.members() if m.active and m.role == "anchor" and m.key != me), key=lambda m: m.key
    )


def label(member: Member) -> str:
    return f"{member.person}@{member.machine}"


def linked(sidecar: MailHost) -> list[tuple[Member, Link]]:
    """The anchors linked now that speak history, each with its link."""
    mesh = sidecar.mesh
    found = []
    for member in anchors(sidecar):
        link = mesh.links.get(member.key)
        if link is not None and not link.closed.is_set() and mesh.peer_has(member.key, FEATURE):
            found.append((member, link))
    return found


def require_linked(sidecar: MailHost, what: str) -> list[tuple[Member, Link]]:
    """:func:`linked`, or raise ``no_anchor`` (none in the team) or ``anchor_offline`` (none linked)."""
    known = anchors(sidecar)
    if not known:
        if sidecar.mesh.team.team_id is None:
            raise NoAnchor(
                f"{what} needs the team's anchor, and this machine is in no team: join one (`hive join`) "
                "whose always-on anchor keeps the history"
            )
        raise NoAnchor(
            f"{what} needs the team's anchor, and the team has none: an always-on machine of the team "
            "becomes one with `hive join LINK --anchor`"
        )
    found = linked(sidecar)
    if not found:
        names = ", ".join(label(m) for m in known)
        older = [label(m) for m in known if m.key in sidecar.mesh.links]
        if older:
            raise AnchorOffline(
                f"{what} needs the team's anchor, and {', '.join(older)} runs a hive without team history: "
                "update hive there"
            )
        raise AnchorOffline(
            f"{what} needs the team's anchor, and {names} is not online now: try again once `hive team` shows it online"
        )
    return found


async def ask(sidecar: MailHost, link: Link, frame: dict[str, Any], wait: float = ANSWER_WAIT) -> dict[str, Any] | None:
    """Send ``frame`` (its ``id`` is set here) and return the anchor's answer, or None when the
    link closed or no answer came within ``wait`` seconds."""
    frame_id = new_ulid()
    waiting = _WAITING.of(sidecar)
    waiter = waiting[frame_id] = _Waiter(link.peer)
    try:
        try:
            await link.send({**frame, "id": frame_id})
        except (LinkClosed, FrameError):
            return None
        with anyio.move_on_after(wait):
            await waiter.event.wait()
    finally:
        waiting.pop(frame_id, None)
    return waiter.answer if waiter.event.is_set() else None


def answered(sidecar: MailHost, link: Link, member: Member, frame: dict[str, Any]) -> None:
    """An anchor's answer arrived: wake the request waiting for it (an answer nobody waits for,
    late or from another machine than the one asked, is dropped)."""
    frame_id = frame.get("id")
    waiter = (_WAITING.get(sidecar) or {}).get(frame_id) if is_ulid(frame_id) else None
    if waiter is None or waiter.event.is_set() or waiter.peer != link.peer:
        return
    waiter.answer.update(frame)
    waiter.event.set()


async def answer(link: Link, frame: dict[str, Any]) -> None:
    """Send an answer (best effort: a request that gets none is asked again or reported)."""
    with contextlib.suppress(LinkClosed, FrameError):
        await link.send(frame)

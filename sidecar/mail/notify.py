"""Desktop notifications of a sent message, on every online machine of the person it went to.

``notify`` pop-ups (:func:`notify_person`) are called from the ``send`` op. A notify pop-up is shown on every
online machine of the recipient person: the machine a message went to shows it on arrival (its ``msg`` frame
carries ``notify``, :func:`notify_received`); the person's other linked machines get a ``notify {id, from, to,
body, sent_at}`` frame (feature ``notify``, :func:`attach`), checked like a ``msg`` (a machine speaks only for
its roster person) and cleaned and defanged; and this machine shows it itself when it is one of that person's
(an agent may notify its own person). On each machine the person's gate there decides (source ``notify``,
through :data:`OFFERS`: hive.sidecar.gate.notify), after that machine's limits: one per sending person per
minute, none for a message older than 15 minutes, and one per message (a ``msg`` and a frame about it never
show twice).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.config import slug
from ..base.defang import defang
from ..base.errors import HiveError
from ..base.host import PerSidecar
from ..base.ulid import is_ulid
from ..mesh.transport import FrameError, Link, LinkClosed
from ..person.dialog import Prompt, backend_for, clean, clip, find_desktop
from .addresses import peer_of
from .policy import INBOUND
from .render import Message

if TYPE_CHECKING:
    from .host import MailHost

NOTIFY_EVERY = 60.0  # at most one notification per sending person per minute...
NOTIFY_MAX_AGE = 15 * 60.0  # ...and never for a message older than this
NOTIFY_TIME = 10.0
NOTIFY_BODY_LIMIT = 300
NOTIFY_REMEMBER = 2 * NOTIFY_MAX_AGE  # a machine remembers the messages it notified about this long...
NOTIFY_REMEMBER_MAX = 10_000  # ...and at most this many
NOTIFY_FRAME = "notify"  # the mesh frame asking another machine of the recipient person to notify
NOTIFY_FEATURE = "notify"
MAX_ADDRESS = 200
SETTLE_TIMEOUT = 5.0  # preflight (2 s) plus showing it; past this something is wrong

log = logging.getLogger("hive.sidecar.person.notify")


@dataclass
class Notices:
    """Per-sidecar memory of the notifications offered on this machine."""

    notified: dict[str, float] = field(default_factory=dict)  # sending person -> last notification
    shown: dict[str, float] = field(default_factory=dict)  # message id -> when it was offered here, oldest first


NOTICES: PerSidecar[Notices] = PerSidecar(lambda sidecar: Notices())

Offer = Callable[[Message, Prompt], Awaitable[tuple[bool, str]]]
"""Offers a notification about ``message`` to the person's gate, which shows ``prompt`` (with
:func:`show_notification`) if it lets it through: (shown, why). The gate's feature adds its own."""
OFFERS: PerSidecar[list[Offer]] = PerSidecar(lambda sidecar: [])


def notices(sidecar: MailHost) -> Notices:
    return NOTICES.of(sidecar)


def _person_of(address: str) -> str:
    return address.split("/", 1)[0]


def _machine_of(sidecar: MailHost, message: Message) -> str:
    """The key of the machine a remote message went to ("" when it is not known)."""
    entry = next((e for e in sidecar.directory() if e.address == message.recipient and e.key is None), None)
    return peer_of(sidecar, entry) or ""


async def notify_person(
    sidecar: MailHost,
    request: Mapping[str, Any],
    sender: str,
    messages: list[Message],
    remote: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Show a sent message as a notification on every online machine of its recipient person, each
    subject to that person's gate there; say which machines were asked. ``remote``: the mesh's
    results for the messages that went to other machines, by id.

    A machine a message went to shows it when the message arrives (the ``notify`` flag on its
    ``msg`` frame); the recipient person's other linked machines get a ``notify`` frame about the
    first of their messages; this machine shows it itself when it is one of that person's.
    """
    mesh = sidecar.mesh
    me = sidecar.settings.person
    reached: dict[str, list[Message]] = {}  # recipient person -> their messages that are on the way
    for message in messages:
        person = _person_of(message.recipient)
        if message.id in remote:
            # Held: its person approves it before any pop-up, as on the machine it went to.
            on_the_way = remote[message.id].get("state") not in ("refused", "held", "failed")
        else:
            on_the_way = person == me  # in a mailbox here
        if on_the_way:
            reached.setdefault(person, []).append(message)
    if not reached:
        return {"notified": False, "notify_note": "No notification: the message did not reach anyone's machine."}
    notified = False
    notes: list[str] = []
    for person, sent in reached.items():
        with_message = {_machine_of(sidecar, m) for m in sent if m.id in remote}
        asked = [_machine_name(sidecar, peer) + " (with the message)" for peer in sorted(with_message)]
        others = [
            m
            for m in mesh.team.members()
            if m.active
            and m.person == person
            and m.key in mesh.links
            and m.key not in with_message
            and m.key != mesh.team.my_key()
        ]
        frame = _notify_frame(sent[0])
        for member in others:
            if not mesh.peer_has(member.key, NOTIFY_FEATURE):
                notes.append(f"{person}'s machine {member.machine} runs a hive too old to be asked.")
                continue
            if await _send_frame(mesh.links.get(member.key), frame):
                asked.append(member.machine)
            else:
                notes.append(f"{person}'s machine {member.machine} went offline before it could be asked.")
        if asked:
            one = len(asked) == 1
            notes.append(
                f"Asked {person}'s machine{'' if one else 's'} to show a notification: {', '.join(asked)}. "
                f"{'It shows' if one else 'Each shows'} it if {person}'s gate there lets it through "
                "(`hive gate ledger` there)."
            )
        if person == me:
            local = [m for m in sent if m.id not in remote]
            shown, note = await notify_here(sidecar, (local or sent)[0], sent[0].sent_at)
            notified = notified or shown
            notes.append(f"Here ({sidecar.settings.machine}): {note}")
        elif not asked:
            notes.append(f"No notification for {person}: none of their machines is online.")
    return {"notified": notified, "notify_note": " ".join(notes)}


async def _send_frame(link: Link | None, frame: dict[str, Any]) -> bool:
    if link is None:
        return False
    try:
        await link.send(frame)
    except (LinkClosed, FrameError):
        return False
    return True


def _machine_name(sidecar: MailHost, peer: str) -> str:
    member = sidecar.mesh.team.member(peer) if peer else None
    return member.machine if member is not None else "their machine"


def _notify_frame(message: Message) -> dict[str, Any]:
    return {
        "t": NOTIFY_FRAME,
        "id": message.id,
        "from": message.sender,
        "to": message.recipient,
        "body": clip(clean(message.body), NOTIFY_BODY_LIMIT),
        "sent_at": message.sent_at,
    }


def _notify_from_wire(sidecar: MailHost, person: str, frame: Mapping[str, Any]) -> Message | str:
    """The message a teammate's ``notify`` frame is about, or why it is ignored. ``person``: the
    roster's person of the machine that sent it, the only person that machine speaks for."""
    message_id, sender, recipient = frame.get("id"), frame.get("from"), frame.get("to")
    body, sent_at = frame.get("body"), frame.get("sent_at")
    if (
        not is_ulid(message_id)
        or not isinstance(body, str)
        or isinstance(sent_at, bool)
        or not isinstance(sent_at, int | float)
    ):
        return "malformed"
    if (
        not isinstance(sender, str)
        or not isinstance(recipient, str)
        or "/" not in sender
        or "/" not in recipient
        or len(sender) > MAX_ADDRESS
        or len(recipient) > MAX_ADDRESS
    ):
        return "malformed addresses"
    sender_person, sender_name = sender.split("/", 1)
    if slug(sender_person) != person:
        return f"a machine of {person}'s speaks only for {person}"
    to_person, to_name = recipient.split("/", 1)
    if slug(to_person) != sidecar.settings.person:
        return f"not for {sidecar.settings.person}"
    to_name = slug(to_name) or "terminal"
    if to_name == "terminal" and person != sidecar.settings.person:
        return "messages from teammates go to sessions, not to the person"
    # Peer text: cut before the work of cleaning it, and never able to open a hive frame in the ledger.
    text = defang(clip(clean(body[: NOTIFY_BODY_LIMIT * 4]), NOTIFY_BODY_LIMIT))
    return Message(
        id=str(message_id),
        sender=f"{person}/{slug(sender_name) or 'terminal'}",
        sender_kind="agent",
        sender_agent="",
        sender_repo="",
        recipient=f"{sidecar.settings.person}/{to_name}",
        reply_to=None,
        body=text,
        wake=False,
        sent_at=float(sent_at),
    )


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): this module speaks ``notify`` frames."""
    mesh = sidecar.mesh

    async def handle(link: Link, member: Any, frame: dict[str, Any]) -> None:
        found = _notify_from_wire(sidecar, member.person, frame)
        if isinstance(found, str):
            log.info("ignored a notify frame from %s (%s): %s", member.machine, link.peer[:12], found)
            return
        if INBOUND.of(sidecar).of(member.person) != "accept":  # as for their messages: held or refused, no pop-up
            log.info("no notify for %s: %s's messages are not accepted here as they come", found.id, member.person)
            return
        notify_received(sidecar, found, frame.get("sent_at"))

    mesh.add_frames(NOTIFY_FEATURE, {NOTIFY_FRAME: handle})


def notify_received(sidecar: MailHost, message: Message, sent_at: Any) -> None:
    """A teammate's message (or a ``notify`` frame about one) arrived asking to notify this machine's
    person: show it, off the mesh's path."""
    when = float(sent_at) if isinstance(sent_at, int | float) and not isinstance(sent_at, bool) else 0.0

    async def run() -> None:
        try:
            note = (await notify_here(sidecar, message, min(when, time.time())))[1]
        except Exception:
            log.exception("the notification for %s failed", message.id)
            return
        log.info("notify for %s from %s: %s", message.id, message.sender, note)

    sidecar.tasks.start_soon(run)


def _remember_shown(shown: dict[str, float], message_id: str, now: float) -> None:
    while shown:
        oldest = next(iter(shown))
        if now - shown[oldest] < NOTIFY_REMEMBER and len(shown) < NOTIFY_REMEMBER_MAX:
            break
        del shown[oldest]
    shown[message_id] = now


async def notify_here(sidecar: MailHost, message: Message, sent_at: float) -> tuple[bool, str]:
    """One notification on this machine's desktop for its person, through the gate: (shown, why)."""
    now = time.time()
    mine = notices(sidecar)
    if message.id in mine.shown:
        return False, "No notification: this machine already offered one for this message."
    if now - sent_at > NOTIFY_MAX_AGE:
        return False, "No notification: the message is older than 15 minutes."
    person = message.sender.split("/", 1)[0]
    notified = mine.notified
    if now - notified.get(person, 0.0) < NOTIFY_EVERY:
        return False, f"No notification: {person} already notified this person in the last minute."
    notified[person] = now  # counted on the attempt, so a failing desktop is not retried in a loop
    _remember_shown(mine.shown, message.id, now)
    sender, body = clean(message.sender), defang(clean(message.body))
    prompt = Prompt(title=f"hive · {sender}", body=clip(body, NOTIFY_BODY_LIMIT), timeout=NOTIFY_TIME, question=False)
    for offer in OFFERS.of(sidecar):
        return await offer(message, prompt)
    return False, "No notification: this sidecar runs no gate to decide it."


async def show_notification(sidecar: MailHost, prompt: Prompt, message_id: str) -> None:
    """Put the notification up; return once it is on screen, raise if it cannot be shown."""
    shown = anyio.Event()
    failure: list[HiveError] = []

    async def run() -> None:
        try:
            async with backend_for(find_desktop()).show(prompt) as popup:
                shown.set()
                await popup.answer()
        except HiveError as exc:
            failure.append(exc)
        except Exception:
            log.exception("the notification for %s failed", message_id)
            failure.append(HiveError("the notification failed; see sidecar.log"))
        finally:
            shown.set()

    sidecar.tasks.start_soon(run)
    with anyio.move_on_after(SETTLE_TIMEOUT):
        await shown.wait()
    if failure:
        raise failure[0]
    if not shown.is_set():
        raise HiveError("the notification was not on screen in time")

"""Teammates' ``notify`` pop-ups, decided by the person's gate (source ``notify``).

Mail decides whether a message may notify this machine's person at all (its limits per sender
and message: :mod:`hive.sidecar.mail.notify`); the gate then decides whether now is the time, as for
any pop-up that is worth showing now or not at all (:meth:`Gate.offer_now`), and records why.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ..base.defang import defang
from ..mail import notify
from ..person.dialog import Prompt, clean, clip
from .model import Decision, Item
from .running import gate_of

if TYPE_CHECKING:
    from ..mail.host import MailHost
    from ..mail.render import Message


def setup(sidecar: MailHost) -> None:
    """Its feature's ``setup`` (daemon.features): notifications on this machine go through its gate."""
    notify.OFFERS.of(sidecar).append(functools.partial(offer, sidecar))


async def offer(sidecar: MailHost, message: Message, prompt: Prompt) -> tuple[bool, str]:
    """Offer the notification about ``message`` to the gate; show ``prompt`` if it lets it through."""
    sender, body = clean(message.sender), defang(clean(message.body))
    recipient = message.recipient
    item = Item(
        source="notify",
        person=sidecar.settings.person,
        session="" if recipient.endswith("/terminal") else recipient,
        title=clip(f"{sender}: {body}", 200),
        body="",
        evidence=(),
        key=f"notify:{message.id}",
        proposer=sender[:200],
        data={"message": message.id},
    )

    async def show(_item: Item, _decision: Decision) -> None:
        await notify.show_notification(sidecar, prompt, message.id)

    decision = await gate_of(sidecar).offer_now(item, show)
    if decision.outcome == "deliver":
        return True, f"{sidecar.settings.person} was shown a desktop notification."
    if decision.rule == "deliver.failed":
        return False, f"No notification was shown: {decision.reason}"
    return False, (
        f"No notification: {sidecar.settings.person}'s gate held it back ({decision.rule}: {decision.reason})."
    )

"""The default delivery of what the gate lets through: a desktop notification on the popup channel,
else a message from ``hive/gate`` into the session's mailbox, saying why now.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ..base.errors import HiveError, NoDesktop
from ..person.dialog import Prompt, backend_for, clip, find_desktop
from .model import Decision, Item

if TYPE_CHECKING:
    from ..mail.host import MailHost

GATE_SENDER = "hive/gate"


async def deliver_in_sidecar(sidecar: MailHost, item: Item, decision: Decision) -> None:
    """The default delivery: a desktop notification (popup channel), else a message into the session.

    Raises:
        HiveError: the person is not on this machine, or the session is unknown here.
    """
    from ..mail.delivery import deliver_note

    if item.person != sidecar.settings.person:
        raise HiveError(f"{item.person} is not on this machine, and the team knows no machine of theirs")
    text = _delivery_text(item, decision)
    if decision.channel == "popup":
        prompt = Prompt(
            title=f"hive · {item.source}",
            body=clip(f"{item.title}\n{item.body}".strip(), 400),
            timeout=30.0,
            question=False,
        )
        shown = await _show_notification(sidecar, prompt)
        if shown:
            return
    address = decision.session or item.session
    if address:
        session = sidecar.sessions.by_key.get(address)
        if session is None:
            name = address.split("/", 1)[1] if address.startswith(item.person + "/") else address
            session = sidecar.sessions.by_name(name)
        if session is None:
            raise HiveError(f"no session {address} on this machine")
        address = sidecar.sessions.address(session)
    else:
        address = sidecar.terminal
    await deliver_note(sidecar, address, text, sender=GATE_SENDER, agent="hive-gate")


async def _show_notification(sidecar: MailHost, prompt: Prompt) -> bool:
    """Put up a notification without holding up the gate; False at once when there is no desktop."""
    backend = backend_for(find_desktop())
    try:
        await backend.available(question=False)
    except NoDesktop:
        return False

    async def show() -> None:
        with contextlib.suppress(HiveError):
            async with backend.show(prompt) as popup:
                await popup.answer()

    sidecar.tasks.start_soon(show)
    return True


def _delivery_text(item: Item, decision: Decision) -> str:
    lines = [f"[hive gate · {item.source} · {decision.urgency}] {item.title}"]
    if item.body:
        lines.append(item.body)
    if item.evidence:
        lines.append("Evidence: " + "; ".join(f"{e.kind} {e.ref}" for e in item.evidence))
    origin = item.data.get("relayed_from")
    if isinstance(origin, str) and origin:
        lines.append(f"Relayed by {origin}'s hive.")
    lines.append(f"Why now: {decision.reason}. (`hive gate why {decision.item_id}`)")
    return "\n".join(lines)

"""A message that screening held, put in front of the person through their gate: a teammate's,
held before any session read it, or one of this machine's own, held before it left.

Screening's hold is a security finding: it is recorded as an open ``security`` fact
(``screening:<message id>``) and offered as an item of source ``screening`` whose evidence names
it, so the gate's floor shows it at once whatever the person's preferences (``floor.security``)
and its ledger says so (``hive gate why``). The pop-up asks Approve or Deny: Approve delivers the
message (or lets it leave), Deny drops it (a teammate sender hears either by receipt); closing it
leaves it in ``hive held`` (``--outbound``).
The fact is fixed once the message is settled either way.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING

import anyio

from ..base.errors import HiveError, NotFound
from ..mail import screen
from ..mail.held import settle
from ..mail.remote import REMOTE
from ..person.dialog import Answer, Prompt, backend_for, clean, clip, find_desktop
from .model import MAX_TITLE, Decision, Evidence, Item
from .running import gate_of

if TYPE_CHECKING:
    from ..mail.host import MailHost

log = logging.getLogger("hive.sidecar.gate.screening")

POPUP_TIME = 3600.0  # the pop-up stays up this long; unanswered, the message stays in `hive held`
SETTLE_TIME = 5.0  # for the pop-up to be on screen: past this the gate records that it failed


def setup(sidecar: MailHost) -> None:
    """Its feature's ``setup`` (daemon.features): messages screening holds are asked about through
    the gate, and who settled each, however they did, goes in its ledger."""
    screen.ASKERS.of(sidecar).append(functools.partial(ask, sidecar))
    screen.SETTLED.of(sidecar).append(functools.partial(settled, sidecar))


def ref(held: screen.Held) -> str:
    return f"screening:{held.id}"


async def ask(sidecar: MailHost, held: screen.Held) -> None:
    """Offer the held message to the person's gate; the floor puts the pop-up up."""
    try:
        gate = gate_of(sidecar)
        await gate.record("security", ref(held), "open", detail=clip(held.why, 200))
        item = Item(
            source="screening",
            person=sidecar.settings.person,
            session="" if held.recipient.endswith("/terminal") else held.recipient,
            title=clip(f"{_title(held)}: {held.why}", MAX_TITLE),  # the rule and span, in the ledger too
            body=clip(held.why, 1000),
            evidence=(Evidence("security", ref(held)),),
            key=f"screening:{held.id}",
            proposer=clean(held.sender)[:200],
            data={"message": held.id},
        )

        async def show(_item: Item, _decision: Decision) -> None:
            await _pop_up(sidecar, held)

        await gate.offer_now(item, show)
    except Exception:
        log.exception("could not ask about held message %s", held.id)


async def settled(sidecar: MailHost, message_id: str, approved: bool, by: str) -> None:
    """Fix the security finding of a held message once it is settled, and say who settled it on the
    gate's item about it (``hive why <message id>`` shows it). Mail held by the inbound policy, not
    by screening, has no finding and no item."""
    gate = gate_of(sidecar)
    key = f"screening:{message_id}"
    if ("security", key) not in gate.facts:
        return
    what = "approved" if approved else "dropped"
    await gate.record("security", key, "fixed", detail=clip(f"{what} by {by}", 200))
    with contextlib.suppress(NotFound):  # its pop-up was never offered (the gate was not up yet)
        await gate.note(message_id, what, f"by {by}")


def _title(held: screen.Held) -> str:
    if held.outbound:
        return f"Held before it left: {clean(held.sender)}'s message to {held.recipient}"
    return f"Held for you: a message from {clean(held.sender)} to {held.recipient}"


async def _pop_up(sidecar: MailHost, held: screen.Held) -> None:
    """The gate's deliverer: returns once the pop-up is on screen, the answer awaited in the background."""
    on_screen = anyio.Event()
    failed: list[HiveError] = []
    sidecar.tasks.start_soon(_ask_here, sidecar, held, on_screen, failed)
    with anyio.move_on_after(SETTLE_TIME):
        await on_screen.wait()
    if failed:
        raise failed[0]
    if not on_screen.is_set():
        raise HiveError("the pop-up about a held message was not on screen in time")


async def _ask_here(sidecar: MailHost, held: screen.Held, on_screen: anyio.Event, failed: list[HiveError]) -> None:
    what = (
        "Approve lets it leave; Deny drops it. Closing this leaves it in `hive held --outbound`."
        if held.outbound
        else "Approve delivers it to the session; Deny drops it. Closing this leaves it in `hive held`."
    )
    prompt = Prompt(title=f"hive · {_title(held)}", body=clip(f"{held.why}.\n{what}", 1000), timeout=POPUP_TIME)
    try:
        async with backend_for(find_desktop()).show(prompt) as popup:
            on_screen.set()
            answer = await popup.answer()
        if answer in (Answer.APPROVED, Answer.DENIED):
            approve = answer is Answer.APPROVED
            by = f"{sidecar.settings.person}, in the pop-up about it"
            [result] = await settle(REMOTE.of(sidecar), [held.id], approve, by)
            log.info("held message %s %s in a pop-up: %s", held.id, answer, result["state"])
    except HiveError as exc:
        failed.append(exc)  # no desktop: the gate's deliverer says so, and it waits in `hive held`
    except Exception:
        log.exception("the pop-up about held message %s failed", held.id)
        failed.append(HiveError("the pop-up about a held message failed; see sidecar.log"))
    finally:
        on_screen.set()

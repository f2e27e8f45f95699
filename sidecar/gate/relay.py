"""Items for people on other machines: the ``gate`` and ``gate_ack`` frames between teammates' gates.

An item for a person whose machines are elsewhere in the team (or for a session on another
machine) is relayed there (rule ``relay``, then ``relay.taken`` with what that gate did), with
the records its evidence points at, and decided by that machine's gate with that person's
preferences; a machine that does not take it gets it again after ``relay_retry`` seconds,
backing off to an hour, for a day; then it waits in the digest here (``relay.wait``,
``relay.failed``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

import anyio

from ..base.defang import one_line
from ..base.errors import HiveError, Refused
from ..base.host import PerSidecar
from ..base.ulid import is_ulid, new_ulid
from ..mail.addresses import peer_of
from ..mesh.transport import FrameError, Link, LinkClosed
from ..person.dialog import clean, clip
from .model import FACT_STATES, MAX_EVIDENCE, MAX_REF, Fact, Item
from .running import gate_of

if TYPE_CHECKING:
    from ..mail.host import MailHost

GATE_FEATURE = "gate"
GATE_FRAME = "gate"
GATE_ACK = "gate_ack"
RELAY_ACK_WAIT = 15.0
_acks: PerSidecar[dict[str, tuple[anyio.Event, dict[str, Any]]]] = PerSidecar(lambda sidecar: {})


def is_local(sidecar: MailHost, item: Item) -> bool:
    """Is this machine the one to decide ``item``? Its session lives here, or its person does; a
    person the team knows only elsewhere is decided on their own machine."""
    if item.session:
        entry = next((e for e in sidecar.directory() if e.address == item.session), None)
        if entry is not None:
            return entry.key is not None
    if item.person == sidecar.settings.person:
        return True
    me = sidecar.mesh.team.my_key()
    return not any(m.person == item.person and m.active and m.key != me for m in sidecar.mesh.team.members())


def _machines_for(sidecar: MailHost, item: Item) -> list[str]:
    """The machines to try for ``item``: the one its session is on, else its person's linked machines,
    those where the person has a live session first."""
    mesh = sidecar.mesh
    entries = sidecar.directory()
    if item.session:
        entry = next((e for e in entries if e.address == item.session), None)
        peer = peer_of(sidecar, entry) if entry is not None else None
        if peer is not None:
            return [peer]
    me = mesh.team.my_key()
    live = {(e.person, e.machine) for e in entries if e.key is None and e.live}
    members = [m for m in mesh.team.members() if m.person == item.person and m.active and m.key != me]
    members.sort(key=lambda m: ((m.person, m.machine) not in live, m.machine, m.key))
    return [m.key for m in members]


async def relay_item(sidecar: MailHost, item: Item, facts: list[Fact]) -> str:
    """Send ``item`` to its person's machine, whose gate decides; returns what it did there.

    Raises:
        HiveError: no machine of that person's is linked now, or none answered in time.
    """
    mesh = sidecar.mesh
    tried = []
    for peer in _machines_for(sidecar, item)[:3]:
        link = mesh.links.get(peer)
        member = mesh.team.member(peer)
        label = f"{member.person}@{member.machine}" if member else peer[:12]
        if link is None:
            tried.append(f"{label} is not linked")
            continue
        if not mesh.peer_has(peer, GATE_FEATURE):
            tried.append(f"{label} runs a hive without a gate")
            continue
        frame_id = new_ulid()
        waiter: tuple[anyio.Event, dict[str, Any]] = (anyio.Event(), {})
        waiting = _acks.of(sidecar)
        waiting[frame_id] = waiter
        try:
            await link.send(
                {"t": GATE_FRAME, "id": frame_id, "item": item.public(), "facts": [f.public() for f in facts]}
            )
            with anyio.move_on_after(RELAY_ACK_WAIT):
                await waiter[0].wait()
        except Exception as exc:  # the link went away under us: try the next machine
            tried.append(f"{label}: {exc}")
            continue
        finally:
            waiting.pop(frame_id, None)
        answer = waiter[1]
        if not waiter[0].is_set():
            tried.append(f"{label} did not answer")
        elif answer.get("error"):
            tried.append(f"{label} refused it: {one_line(answer['error'])}")
        else:
            return (
                f"{label} took it: {one_line(answer.get('outcome'), 16)} ({one_line(answer.get('rule'), 40)}) "
                f"{one_line(answer.get('reason'), 300)}"
            ).strip()
    raise HiveError("; ".join(tried) if tried else f"the team knows no machine of {item.person}'s")


def attach(sidecar: MailHost) -> None:
    """Its feature's ``frames`` (daemon.features): this module speaks ``gate`` and ``gate_ack`` frames."""
    mesh = sidecar.mesh

    async def handle(link: Link, member: Any, frame: dict[str, Any]) -> None:
        ack = await on_frame(sidecar, link.peer, member.person, member.machine, frame)
        if ack is not None:
            with contextlib.suppress(LinkClosed, FrameError):
                await link.send(ack)

    mesh.add_frames(GATE_FEATURE, {GATE_FRAME: handle, GATE_ACK: handle})


def _fact_from_wire(raw: Any) -> Fact | None:
    if not isinstance(raw, Mapping):
        return None
    kind, ref, state = raw.get("kind"), raw.get("ref"), raw.get("state")
    if (
        kind not in FACT_STATES
        or state not in FACT_STATES[kind]
        or not isinstance(ref, str)
        or not ref
        or len(ref) > MAX_REF
    ):
        return None
    since, stamped = raw.get("since"), raw.get("at")
    if not _is_number(since) or not _is_number(stamped):
        return None
    runs, due = raw.get("runs", 1), raw.get("due")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        return None
    if due is not None and not _is_number(due):
        return None
    given = raw.get("detail")
    detail = given if isinstance(given, str) else ""
    # A record from another machine cannot claim to be newer than this machine's clock.
    at = min(float(stamped), time.time())
    return Fact(kind, ref, state, min(float(since), at), at, min(runs, 1000), due, clip(clean(detail), MAX_REF))


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)  # JSON true is no number


async def on_frame(sidecar: MailHost, peer: str, person: str, machine: str, frame: Mapping[str, Any]) -> Any:
    """A ``gate`` frame (an item for this machine's person, from a teammate's gate) or its ``gate_ack``.

    Returns the acknowledgement to send back for a ``gate`` frame, None for an ack.
    """
    if frame.get("t") == GATE_ACK:
        waiter = (_acks.get(sidecar) or {}).get(str(frame.get("id")))
        if waiter is not None:
            waiter[1].update(frame)
            waiter[0].set()
        return None
    frame_id = frame.get("id")
    if not is_ulid(frame_id):
        return None
    ack: dict[str, Any] = {"t": GATE_ACK, "id": frame_id}
    try:
        raw = frame.get("item")
        item = Item.from_wire(raw)
        if item.person != sidecar.settings.person:
            raise Refused(f"{item.person} is not on {sidecar.settings.person}'s machine")
        session = item.session
        if session:
            local = next((e for e in sidecar.directory() if e.address == session and e.key is not None), None)
            session = session if local is not None else ""  # gone or renamed: it is for the person
        origin = f"{person}@{machine}"
        data = {**item.data, "relayed_from": origin}
        item = dataclasses.replace(item, session=session, proposer=clip(item.proposer or origin, MAX_REF), data=data)
        gate = gate_of(sidecar)
        facts = [f for f in map(_fact_from_wire, frame.get("facts") or []) if f is not None]
        await gate.merge_facts(facts[:MAX_EVIDENCE])
        [decision] = (await gate.offer_many([item], relayed=True))[:1]
        ack.update(
            {"outcome": decision.outcome, "rule": decision.rule, "reason": decision.reason, "item": decision.item_id}
        )
    except HiveError as exc:
        ack["error"] = exc.message
    return ack

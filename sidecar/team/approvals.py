"""Signed approvals: a person's answer to a teammate's request, verifiable on the teammate's machine.

When an agent asks its person about a teammate's message (``ask`` with ``about``), the answer
goes back to the teammate's session as an :class:`Approval`, signed by this machine's key as
kind ``approval`` through :func:`roster.sign`, that is over ``hive/1/{team_id}/approval/`` and
the record's canonical JSON. The team *id*, not its name: any member may rename the team, and
an approval in flight across a rename must still verify (the reference signed over the name).

The receiving machine keeps an approval only if (:func:`check_approval`):

- its signer is the machine that delivered it (a record re-signed elsewhere and relayed fails);
- ``approver`` is that machine's person in the roster (a machine speaks only for its person);
- ``asker`` is the session it arrived at (an approval for someone else is not replayable);
- its text fields total at most :data:`MAX_TEXT` characters;
- the signature verifies for this team.

Otherwise the approval is stripped, and the message says it came with one that did not verify
(:func:`receive_approval`). What "verified" proves is narrow, and agents are told so: that the
approver's machine recorded its person's answer to the request and question as shown there.
Software in control of that machine can still sign anything its key can.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from .identity import Identity
from .roster import Malformed, Roster, Signed, sign, signed_from_wire, verify

KIND = "approval"
MAX_TEXT = 2000
DECISIONS = ("approved", "denied")
NOT_VERIFIED_NOTE = "(It came with an approval that didn't verify.)"


@dataclass(frozen=True)
class Approval:
    about: str  # the id of the request (the teammate's message) this answers
    asker: str  # the session that made the request: where the approval goes
    approver: str  # the person who answered
    decision: str  # approved | denied
    request: str  # the request, as the pop-up showed it
    question: str  # the agent's question, as the pop-up showed it
    note: str
    at: int  # ms since the epoch

    def text_length(self) -> int:
        return sum(len(getattr(self, f.name)) for f in dataclasses.fields(self) if f.type in ("str", str))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class NotVerified(ValueError):
    """An approval that does not hold; the message says which check failed."""


def sign_approval(identity: Identity, team_id: str, approval: Approval) -> Signed[Approval]:
    if approval.decision not in DECISIONS:
        raise ValueError(f"an approval's decision is one of {', '.join(DECISIONS)}")
    return sign(identity, team_id, KIND, approval)


def check_approval(wire: Any, *, roster: Roster | None, delivered_by: str, arrived_at: str) -> Signed[Approval]:
    """The approval in ``wire`` (``{"body", "by", "sig"}``) if it holds; raises :class:`NotVerified`.

    ``delivered_by`` is the key of the machine whose link carried it (from the transport's pinned
    key, never from the frame); ``arrived_at`` is the session address it was sent to.
    """
    if roster is None:
        raise NotVerified("this machine is in no team, so it cannot check a teammate's signature")
    try:
        signed = signed_from_wire(Approval, wire)
    except Malformed as exc:
        raise NotVerified(f"malformed: {exc}") from exc
    approval = signed.body
    if signed.by != delivered_by:
        raise NotVerified("it was signed by a machine other than the one that delivered it")
    member = roster.members.get(delivered_by)
    if member is None or not member.active:
        raise NotVerified("the machine that delivered it is not an active member of the team")
    if approval.approver != member.person:
        raise NotVerified(f"it names {approval.approver} as the approver, but that machine is {member.person}'s")
    if approval.asker != arrived_at:
        raise NotVerified(f"it answers {approval.asker}, not {arrived_at}")
    if approval.decision not in DECISIONS:
        raise NotVerified("its decision is neither approved nor denied")
    if approval.text_length() > MAX_TEXT:
        raise NotVerified(f"its text is over {MAX_TEXT} characters")
    if not verify(roster.team_id, KIND, signed):
        raise NotVerified("the signature does not verify")
    return signed


def stored(signed: Signed[Approval]) -> str:
    """What a message keeps of a verified approval (``Message.approval``): the record and its proof."""
    return json.dumps(
        {"record": signed.raw, "by": signed.by, "sig": signed.sig, "verified": True}, ensure_ascii=False, sort_keys=True
    )


def wire_of(stored_json: str | None) -> dict[str, Any] | None:
    """The ``{"body", "by", "sig"}`` to send for a stored approval that carries a signature."""
    if not stored_json:
        return None
    try:
        data = json.loads(stored_json)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("sig"):
        return None  # made on this machine for a session on it: nothing to prove elsewhere
    return {"body": data.get("record"), "by": data.get("by"), "sig": data.get("sig")}


def receive_approval(
    wire: Any, *, roster: Roster | None, delivered_by: str, arrived_at: str, body: str
) -> tuple[str | None, str, str | None]:
    """For a message arriving from a teammate's machine with an ``approval`` field.

    Returns ``(approval to store or None, the body to store, why it did not verify or None)``:
    a failing approval is stripped and the body says so.
    """
    if wire is None:
        return None, body, None
    try:
        signed = check_approval(wire, roster=roster, delivered_by=delivered_by, arrived_at=arrived_at)
    except NotVerified as exc:
        return None, f"{body}\n\n{NOT_VERIFIED_NOTE}", str(exc)
    return stored(signed), body, None

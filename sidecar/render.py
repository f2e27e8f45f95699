"""How mail looks to an agent: peer input in a ``<hive-message>`` frame, never the user's voice.

A message may carry an approval its sidecar verified (see ``approvals.py``): it follows the
message as a ``<hive-approval … verified>`` frame, which no message body can produce.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .attachments import File, listing, saved_paths
from .defang import attr, defang


@dataclass(frozen=True)
class Message:
    id: str
    sender: str  # address: person/name, or person/terminal
    sender_kind: str  # "agent" or "person"
    sender_agent: str
    sender_repo: str
    recipient: str
    reply_to: str | None
    body: str
    wake: bool
    sent_at: float
    read_at: float | None = None
    approval: str | None = None  # JSON {"record", "by", "sig", "verified"}; stored only once verified
    files: str | None = None  # JSON list of the paths its attachments were saved at on this machine
    carried: tuple[File, ...] = field(default=(), repr=False)  # attachments in transit, not stored

    def public(self) -> dict[str, object]:
        """The message as a client sees it, peer-controlled fields defanged."""
        return {
            "id": self.id,
            "from": defang(self.sender),
            "kind": self.sender_kind,
            "agent": defang(self.sender_agent),
            "repo": defang(self.sender_repo),
            "to": self.recipient,
            "reply_to": self.reply_to,
            "body": defang(self.body),
            "fyi": not self.wake,
            "sent_at": self.sent_at,
            "approval": verified_approval(self.approval),
            "files": saved_paths(self.files),
        }


def frame(message: Message) -> str:
    person = message.sender.split("/", 1)[0]
    attrs = [f'from="{attr(message.sender)}"']
    if message.sender_kind == "agent" and message.sender_agent:
        attrs.append(f'agent="{attr(message.sender_agent)}"')
    if message.sender_repo:
        attrs.append(f'repo="{attr(message.sender_repo)}"')
    attrs.append(f'id="{attr(message.id)}"')
    if message.reply_to:
        attrs.append(f'reply_to="{attr(message.reply_to)}"')
    if message.sender_kind == "person":
        who = f"Typed by {attr(person)} at a terminal."
    else:
        who = f"From {attr(person)}'s agent."
    text = f"<hive-message {' '.join(attrs)}>\n{defang(message.body)}\n</hive-message>\n"
    record = verified_approval(message.approval)
    if record is not None:
        text += approval_frame(record) + "\n"
    if message.files:
        text += listing(message.id, message.sender, message.files) + "\n"
    return text + f'{who} Reply with send_message to "{attr(message.sender)}" if useful.'


def verified_approval(raw: str | None) -> dict[str, object] | None:
    """The approval record a message carries, if its sidecar verified it."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    record = data.get("record") if isinstance(data, dict) and data.get("verified") is True else None
    return record if isinstance(record, dict) else None


def approval_frame(record: dict[str, object]) -> str:
    # Attributes carry the facts an agent checks (who approved, which request); the texts the
    # pop-up showed are peer-influenced, so they are defanged like any body.
    attrs = (f'from="{attr(record.get("approver"))}" asker="{attr(record.get("asker"))}" '
             f'about="{attr(record.get("about"))}" decision="{attr(record.get("decision"))}"')
    lines = [f"Request, as shown: {defang(str(record.get('request') or ''))}",
             f"Question, as shown: {defang(str(record.get('question') or ''))}"]
    if record.get("note"):
        lines.append(f"Note: {defang(str(record['note']))}")
    return f"<hive-approval {attrs} verified>\n" + "\n".join(lines) + "\n</hive-approval>"


def frames(messages: list[Message]) -> str:
    return "\n\n".join(frame(m) for m in messages)

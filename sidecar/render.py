"""How mail looks to an agent: peer input in a ``<hive-message>`` frame, never the user's voice."""

from __future__ import annotations

from dataclasses import dataclass

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
    return (
        f"<hive-message {' '.join(attrs)}>\n{defang(message.body)}\n</hive-message>\n"
        f'{who} Reply with send_message to "{attr(message.sender)}" if useful.'
    )


def frames(messages: list[Message]) -> str:
    return "\n\n".join(frame(m) for m in messages)

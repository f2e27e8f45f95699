"""How mail looks to an agent: peer input in a ``<hive-message>`` frame, never the user's voice.

A message may carry an approval its sidecar verified (see ``approvals.py``): it follows the
message as a ``<hive-approval … verified>`` frame, which no message body can produce.

:func:`for_person` is how the same mail looks to a person reading ``hive inbox`` at a terminal:
sender, time, text and files, without the frames and the instructions meant for an agent.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..base.defang import attr, defang

if TYPE_CHECKING:
    # attachments loads the harness registry; `hive inbox` at a terminal renders mail without it.
    from .attachments import File

# Who a message is from, in the words an agent reads under its frame: one line per kind of sender.
# ``{person}`` and ``{sender}`` are filled in (defanged); a kind in REPLIES adds the reply line.
FOOTERS: dict[str, str] = {
    "agent": "From {person}'s agent {sender}.",  # a session
    "person": "Typed by {person} at a terminal.",  # a person's own words, from their terminal
    "script": "From {person}'s script {sender}.",  # a person's mailbox, sent from no terminal (bob/ci)
    "hive": "A notice from hive on this machine.",  # hive itself: nobody to answer
}
# Kinds whose sender is an address that takes mail (a session, or a person's mailbox).
REPLIES = frozenset({"agent", "person", "script"})
# How ``hive inbox`` names a sender kind to a person (an agent's is its agent and repo).
_PERSON_VIEW = {"person": "typed at a terminal", "script": "a script", "hive": "hive on this machine"}


@dataclass(frozen=True)
class Message:
    id: str
    sender: str  # address: person/name, or person/terminal
    sender_kind: str  # a key of FOOTERS: "agent", "person", "script" or "hive"
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
        from .attachments import saved_paths

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
    attrs = [f'from="{attr(message.sender)}"']
    if message.sender_kind == "agent" and message.sender_agent:
        attrs.append(f'agent="{attr(message.sender_agent)}"')
    if message.sender_repo:
        attrs.append(f'repo="{attr(message.sender_repo)}"')
    attrs.append(f'id="{attr(message.id)}"')
    if message.reply_to:
        attrs.append(f'reply_to="{attr(message.reply_to)}"')
    text = f"<hive-message {' '.join(attrs)}>\n{defang(message.body)}\n</hive-message>\n"
    record = verified_approval(message.approval)
    if record is not None:
        text += approval_frame(record) + "\n"
    if message.files:
        from .attachments import listing

        text += listing(message.id, message.sender, message.files) + "\n"
    return text + footer(message)


def footer(message: Message) -> str:
    """The line under a message's frame: who sent it and, where it can take mail, how to answer."""
    kind = message.sender_kind if message.sender_kind in FOOTERS else "agent"
    who = FOOTERS[kind].format(person=attr(message.sender.split("/", 1)[0]), sender=attr(message.sender))
    if kind not in REPLIES:
        return who
    return f'{who} Reply with send_message to "{attr(message.sender)}" if useful.'


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
    attrs = (
        f'from="{attr(record.get("approver"))}" asker="{attr(record.get("asker"))}" '
        f'about="{attr(record.get("about"))}" decision="{attr(record.get("decision"))}"'
    )
    lines = [
        f"Request, as shown: {defang(str(record.get('request') or ''))}",
        f"Question, as shown: {defang(str(record.get('question') or ''))}",
    ]
    if record.get("note"):
        lines.append(f"Note: {defang(str(record['note']))}")
    return f"<hive-approval {attrs} verified>\n" + "\n".join(lines) + "\n</hive-approval>"


def frames(messages: list[Message]) -> str:
    return "\n\n".join(frame(m) for m in messages)


def _when(at: float, now: float) -> str:
    same_day = time.localtime(at)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", time.localtime(at))


def for_person(messages: list[dict[str, object]], now: float | None = None) -> str:
    """Messages as :meth:`Message.public` gives them (already defanged), laid out for reading."""
    now = time.time() if now is None else now
    blocks = []
    for m in messages:
        sender = str(m.get("from") or "")
        by = (
            _PERSON_VIEW.get(str(m.get("kind")))
            or ", ".join(str(part) for part in (m.get("agent"), m.get("repo")) if part)
            or "an agent"
        )
        sent_at = m.get("sent_at")
        at = float(sent_at) if isinstance(sent_at, int | float | str) and sent_at else now
        head = f"from {sender} ({by}), {_when(at, now)}"
        if m.get("fyi"):
            head += ", fyi"
        if m.get("reply_to"):
            head += f", answering {m['reply_to']}"
        lines = [head + f"  [id {m.get('id')}]"]
        lines += ["    " + line for line in str(m.get("body") or "").splitlines() or [""]]
        approval = m.get("approval")
        if isinstance(approval, dict):
            lines.append(
                f"  approval: {defang(str(approval.get('decision') or ''))} by "
                f"{defang(str(approval.get('approver') or ''))} (verified)"
            )
        files = m.get("files")
        if isinstance(files, list) and files:
            lines.append("  files: " + "\n         ".join(str(f) for f in files))
        blocks.append("\n".join(lines))
    last = messages[-1]
    hint = f'reply with: hive send {last.get("from")} --reply-to {last.get("id")} "..."'
    return "\n\n".join(blocks) + "\n\n" + hint

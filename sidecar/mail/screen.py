"""What mail screens, and what a match does: hostile text is held before an agent reads it, and
secrets are held before they leave this machine.

- **Inbound** (:func:`inbound_hold`): a teammate's message (its body and the text of its files),
  and what one of this machine's sessions writes to another (:func:`hive.sidecar.mail.held.hold_local`),
  passes the rule set of :mod:`hive.sidecar.screening.inbound`. A match holds it for this
  machine's person, as the inbound policy's ``hold`` does (``hive held``, ``hive approve`` / ``hive
  drop``), with the rule and the matched span, and asks them (:data:`ASKERS`: the gate's pop-up);
  the sender hears ``held`` and the rule id. A sender the person allowed is not screened.
- **Outbound** (:func:`outbound_hold`): a message an agent or a script sends to a teammate's
  machine is checked for key material and credentials (:mod:`hive.sidecar.screening.outbound`),
  and a session that read a credential file (or ran a command naming one) in the last
  :data:`READ_THEN_SEND` seconds, or ran a command whose output showed one, has its message held
  whatever it says. Held here, nothing leaves
  until the person approves (the same pop-up, or ``hive held --outbound`` then ``hive approve``);
  the agent is told why. What the person types at their own terminal is theirs to send and is not
  held.

Whoever settles a held message, however (a pop-up, ``hive approve``, an agent's request the person
confirmed), is told to :data:`SETTLED`: the gate records it beside why it was held (``hive why``).
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import defang, one_line
from ..base.host import PerSidecar
from ..presence.activity import sensitive
from ..presence.observe import SECRET_PRINTED
from ..screening.inbound import Finding, screen
from ..screening.outbound import Secret, find_secrets

if TYPE_CHECKING:
    from ..sessions.registry import Session
    from .attachments import File
    from .host import MailHost

log = logging.getLogger("hive.sidecar.mail.screen")

READ_THEN_SEND = 120.0  # seconds between reading a credential file and a send that is held for it
# Text past this many characters is screened in a worker thread: a message of the largest size
# with its files takes up to a second, which must not stall the sidecar's other clients.
IN_THREAD = 32_000
ALLOWED = "screening.allowed."  # kv: + a sender's address, for a sender the person let past inbound screening
FRAME_FAMILY = "hive-frame"
# The inbound table's peer for a message one of this machine's own sessions wrote to another and
# screening held: it waits in `hive held` like a teammate's, and owes no receipt to any machine.
LOCAL = ""


def screened(text: str) -> list[Finding]:
    """The rules' findings in ``text``. Look-alike frames are looked for in what defang leaves of
    it, as an agent is shown it: a tag defang breaks (a file of hive's own code, a note quoting a
    frame) deceives nobody, so only one that survives it holds the message."""
    found = screen(text)
    shown = defang(text)
    if shown == text:  # nothing for defang to break: what matched is what an agent would see
        return found
    return [f for f in found if f.rule.split("/", 1)[0] != FRAME_FAMILY] + screen(shown, family=FRAME_FAMILY)


def approval_text(approval: str | None) -> str:
    """The words of a verified approval that came with a message (the request, the question and the
    approver's note, as its framing shows them to the agent); "" for none."""
    if not approval:
        return ""
    try:
        record = json.loads(approval).get("record") or {}
    except (ValueError, AttributeError):
        return ""
    return "\n".join(str(record.get(k) or "") for k in ("request", "question", "note") if record.get(k))


def inbound_hold(body: str, files: Sequence[File], approval: str = "") -> str | None:
    """Why a teammate's message is held for this machine's person, or None when nothing matched.

    ``approval``: the words of the approval that came with it (:func:`approval_text`). Says the most
    severe rule, its span and where (the text, a file or the approval), and how many more matched."""
    found: list[tuple[str, Finding]] = [("the message", f) for f in screened(body)]
    for file in files:
        found += [(f"the file {file.name}", f) for f in screened(file.content)]
    if approval:
        found += [("the approval that came with it", f) for f in screened(approval)]
    if not found:
        return None
    order = {"high": 0, "medium": 1, "low": 2}
    where, first = min(found, key=lambda pair: order.get(pair[1].severity, 3))
    more = f"; {len(found) - 1} more match{'es' if len(found) > 2 else ''}" if len(found) > 1 else ""
    return (
        f"held by screening: {first.rule} ({first.severity}) in {where}: “{first.excerpt}”{more}. "
        "The person sees it and approves or drops it before any session does"
    )


@dataclass(frozen=True)
class Held:
    """A message screening held here (a teammate's, or one of this machine's own before it left),
    as the person is asked about it."""

    id: str
    sender: str
    recipient: str
    why: str
    outbound: bool = False  # this machine's own message, held before it left


Asker = Callable[[Held], Awaitable[None]]
"""Puts a held message in front of the person (the gate's pop-up: hive.sidecar.gate.screening); the
person's answer settles it (hive.sidecar.mail.held.settle). The gate's feature adds its own at setup."""
ASKERS: PerSidecar[list[Asker]] = PerSidecar(lambda sidecar: [])


def ask_person(sidecar: MailHost, held: Held) -> None:
    """Ask the person about a held message, off the path of the frame that brought it."""
    for ask in ASKERS.of(sidecar):
        sidecar.tasks.start_soon(ask, held)


Settled = Callable[[str, bool, str], Awaitable[None]]
"""Told that a held message was settled: its id, whether it was approved, and by whom and how
("alice, with `hive approve`"). The gate's feature adds one at setup, so the ledger that says why a
message was held also says who let it through or dropped it (``hive why <message id>``)."""
SETTLED: PerSidecar[list[Settled]] = PerSidecar(lambda sidecar: [])


async def settled(sidecar: MailHost, message_id: str, approved: bool, by: str) -> None:
    for tell in SETTLED.of(sidecar):
        try:
            await tell(message_id, approved, by)
        except Exception:  # the message is settled either way; only its record is missing
            log.exception("could not record who settled held message %s", message_id)


async def allowed(sidecar: MailHost, sender: str) -> bool:
    """Whether the person let ``sender`` (a teammate's session or mailbox) past inbound screening."""
    return await sidecar.store.get_kv(ALLOWED + sender) is not None


async def allow(sidecar: MailHost, senders: Sequence[str]) -> None:
    """Let these senders past inbound screening from now on (``hive approve --allow-sender``)."""
    now = str(time.time())
    await sidecar.store.write(
        [("INSERT OR REPLACE INTO kv(key, value) VALUES (?, ?)", (ALLOWED + sender, now)) for sender in senders]
    )


async def allowed_senders(sidecar: MailHost) -> list[dict[str, Any]]:
    """The senders the person let past inbound screening, each with when, oldest first."""
    rows = await sidecar.store.fetchall(
        "SELECT key, value FROM kv WHERE key >= ? AND key < ?", (ALLOWED, ALLOWED + "\uffff")
    )
    found = [{"sender": key[len(ALLOWED) :], "since": float(value)} for key, value in rows]
    return sorted(found, key=lambda a: a["since"])


async def disallow(sidecar: MailHost, senders: Sequence[str]) -> list[str]:
    """Screen these senders again; returns those that had been allowed."""
    were = {a["sender"] for a in await allowed_senders(sidecar)}
    gone = [s for s in senders if s in were]
    await sidecar.store.write([("DELETE FROM kv WHERE key = ?", (ALLOWED + sender,)) for sender in gone])
    return gone


async def screened_inbound(body: str, files: Sequence[File], approval: str | None = None) -> str | None:
    """:func:`inbound_hold` (``approval``: the message's stored approval, if any), in a worker
    thread for a large message."""
    words = approval_text(approval)
    if len(body) + len(words) + sum(len(f.content) for f in files) <= IN_THREAD:
        return inbound_hold(body, files, words)
    return await anyio.to_thread.run_sync(inbound_hold, body, files, words)


def _secrets(body: str, files: Sequence[File]) -> list[tuple[str, Secret]]:
    found: list[tuple[str, Secret]] = [("the message", s) for s in find_secrets(body)]
    for file in files:
        found += [(f"the file {file.name}", s) for s in find_secrets(file.content)]
    return found


async def outbound_hold(sidecar: MailHost, session: Session | None, body: str, files: Sequence[File]) -> str | None:
    """Why a message to a teammate's machine is held here for this machine's person, or None."""
    if len(body) + sum(len(f.content) for f in files) <= IN_THREAD:
        secrets = _secrets(body, files)
    else:
        secrets = await anyio.to_thread.run_sync(_secrets, body, files)
    if secrets:
        where, first = secrets[0]
        kinds = sorted({s.kind for _, s in secrets})
        return (
            f"held on this machine: {where} carries what looks like a secret ({first.kind} on line "
            f"{first.line}: {first.masked}; kinds found: {', '.join(kinds)}). Nothing left this machine; "
            f"{sidecar.settings.person} approves it with `hive approve` or drops it with `hive drop` "
            "(see `hive held --outbound`). Send it again without the secret instead"
        )
    read = await credential_read(sidecar, session) if session is not None else None
    if read is not None:
        return (
            f"held on this machine: this session read {read} less than {int(READ_THEN_SEND)} s ago, so "
            f"its message waits for {sidecar.settings.person} to look at it before it leaves "
            "(`hive held --outbound`, then `hive approve` or `hive drop`)"
        )
    return None


async def credential_read(sidecar: MailHost, session: Session) -> str | None:
    """The credential file ``session`` read (or named in a command it ran), or the command whose
    output showed a secret, in the last :data:`READ_THEN_SEND` seconds, from its recorded events;
    None when there was none."""
    rows = await sidecar.store.fetchall(
        "SELECT action, path, command FROM events WHERE session = ? AND at > ? "
        "AND action IN ('file.read', 'command.executed', ?) ORDER BY id DESC LIMIT 500",
        (session.key, time.time() - READ_THEN_SEND, SECRET_PRINTED),
    )
    for action, path, command in rows:
        if action == SECRET_PRINTED:
            return f"what looks like a secret in the output of `{one_line(command, 80)}`"
        if action == "file.read" and path and sensitive(path):
            return path
        if action == "command.executed" and command:
            try:
                words = shlex.split(command)
            except ValueError:
                words = command.split()
            named = next((word for word in words[1:] if sensitive(word)), None)
            if named is not None:
                return named
    return None

"""The mail ops: send, read a mailbox (with a long poll), confirm what was read, and receipts."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import BadRequest, NotFound, TooLarge
from ..base.host import Connection
from ..base.ulid import new_ulid
from ..person.confirm import asks_person, confirm_group, group_question
from ..presence import observe
from ..sessions.registry import Session
from . import attachments, mailboxes
from .addresses import Target, is_group, is_remote, resolve
from .archivers import archived
from .delivery import after_deposit
from .guards import Guards
from .held import hold_local
from .notify import notify_person
from .remote import REMOTE
from .render import Message, frames
from .screen import Held, ask_person, outbound_hold

if TYPE_CHECKING:
    from .host import MailHost

MAX_WAIT = 600.0
MAX_RECEIPT_IDS = 500  # receipts asked for at once: one query binds them all, and its work stays bounded


def mailbox_of(sidecar: MailHost, request: dict[str, Any]) -> tuple[str, Session | None]:
    """The mailbox a request reads: a session's (``session``, or ``as`` naming one), the
    person's terminal, or a named mailbox of theirs (``as``: opened on first use)."""
    ref = request.get("session") or request.get("as")
    if ref in (None, "", "terminal", sidecar.terminal):
        return sidecar.terminal, None
    try:
        session = sidecar.sessions.find(ref)
    except NotFound:
        if request.get("session") or not isinstance(ref, str):
            raise
        name = ref.split("/", 1)[1] if ref.startswith(sidecar.settings.person + "/") else ref
        return mailboxes.open_named(sidecar, name), None
    return sidecar.sessions.address(session), session


@asks_person  # group sends and loop-guard overrides
async def op_send(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Send a message to a session, a person's mailbox or (from the person only) a group.

    Request: ``to`` (str, required): person/session, a session name, or a group. ``body`` (str,
    required, at most ``max_body`` bytes). ``from`` (str, optional): the sending session, or one of
    the person's mailboxes (default ``terminal``). ``reply_to`` (str, optional): the message id this
    answers. ``fyi`` (bool): do not wake the recipient. ``notify`` (bool): also a desktop notification.
    ``files`` (list of paths) and ``cwd`` (str): attachments. Returns ``{"from", "results": [{"to",
    "id", "state", "note"}]}``, plus ``notified`` and ``notify_note`` with ``notify``. Raises
    ``bad_request``, ``too_large``, ``not_found``/``ambiguous``, ``group_refused``, ``needs_person`` or
    ``confirm_on_terminal`` (group sends and loop-guard overrides), ``loop_guard``, ``rate_limited``,
    and ``attachment_*`` refusals.
    """
    body = request.get("body")
    to = request.get("to")
    if not isinstance(body, str) or not body.strip():
        raise BadRequest("send needs a non-empty 'body' string")
    if not isinstance(to, str):
        raise BadRequest("send needs 'to': person/session, a session name, or a group")
    size = len(body.encode("utf-8"))
    if size > sidecar.settings.max_body:
        raise TooLarge(
            f"the message is {size} bytes; the limit is {sidecar.settings.max_body}. "
            "Send the gist and attach or point to the rest"
        )
    reply_to = request.get("reply_to")
    if reply_to is not None and not isinstance(reply_to, str):
        raise BadRequest("reply_to must be a message id")
    ref = request.get("from")
    box = mailboxes.sending_as(sidecar, ref)
    sender_session = None if box is not None else sidecar.sessions.find(ref)
    if sender_session is not None:
        sender, kind = sidecar.sessions.address(sender_session), "agent"
        agent, repo = sender_session.agent, sender_session.repo
        sidecar.sessions.seen(sender_session)
    else:
        # From the person's own mailbox: typed at their terminal, or a script of theirs.
        sender, agent, repo = f"{sidecar.settings.person}/{box}", "", ""
        kind = "person" if conn.at_terminal else "script"
    carried = await attachments.for_send(
        sidecar, request, sender_session, by_agent=conn.by_agent, at_terminal=conn.at_terminal, caller_pid=conn.pid
    )
    # A group goes out only from the person's own mailbox, and only once they confirm it in a
    # pop-up (or, with no desktop, at this client's terminal): see ask.confirm_group.
    group = sender_session is None and is_group(to)
    targets = resolve(
        to,
        sidecar.directory(),
        {sidecar.settings.person} | sidecar.mesh.people(),
        sender,
        may_use_groups=group,
        mailboxes=mailboxes.entries(sidecar.mesh),
        own={f"{sidecar.settings.person}/{n}" for n in mailboxes.names(sidecar)},
    )
    targets = await mailboxes.route(sidecar, targets, reply_to if isinstance(reply_to, str) else None)
    if is_group(to) and not targets:
        raise NotFound(f"no live session matches {to}")
    if group:
        await confirm_group(conn, request, group_question(to, len(targets)), body)
        kind = "person"
    elif kind == "person" and reply_to:
        # A person's reply restarts the loop guard's count: a loop-guard override, confirmed the same way.
        await confirm_override(sidecar, conn, request, [t.address for t in targets], body)
    wake = not request.get("fyi")
    now = time.time()
    messages = [
        Message(
            id=new_ulid(),
            sender=sender,
            sender_kind=kind,
            sender_agent=agent,
            sender_repo=repo,
            recipient=t.address,
            reply_to=reply_to,
            body=body,
            wake=wake,
            sent_at=now,
            carried=carried,
        )
        for t in targets
    ]
    runs = await guard(sidecar, sender, kind, list(zip(targets, messages, strict=True)))
    waiting = {t.address for t in targets if sidecar.parked[t.address] > 0}
    sender_key = sender_session.key if sender_session else None
    copies: dict[str, list[str]] = {}  # one person's mailbox on several machines: each copy names the others
    for message in messages:
        copies.setdefault(message.recipient, []).append(message.id)
    leaving = [(t, m) for t, m in zip(targets, messages, strict=True) if is_remote(t)]
    held = await outbound_hold(sidecar, sender_session, body, carried) if leaving and kind != "person" else None
    # The results of the messages not put in a mailbox here now: those to teammates' machines, and
    # those screening holds here.
    decided = await REMOTE.of(sidecar).send(
        leaving,
        sender_key,
        held=held,
        notify=bool(request.get("notify")),
        runs=runs,
        copies={m.id: mailboxes.copies_of(copies[m.recipient], m.id) for m in messages if len(copies[m.recipient]) > 1},
    )
    if held is not None:
        for target, message in leaving:
            ask_person(sidecar, Held(message.id, sender, target.address, held, outbound=True))
    if kind != "person":  # what the person types is theirs; an agent's words may carry what it read
        decided.update(
            await hold_local(
                sidecar, [(t, m) for t, m in zip(targets, messages, strict=True) if m.id not in decided], sender_key
            )
        )
    local = [await attachments.keep(sidecar, m) for m in messages if m.id not in decided]  # files saved first
    # What the person sent goes to their archive (history) in this commit: not what never left here
    # (refused, or held by screening on this machine: outbound, for a secret, is never archived).
    leaving_ids = {m.id for _, m in leaving}
    stopped = {
        i
        for i, r in decided.items()
        if r["state"] == "refused" or (r["state"] == "held" and (held is not None or i not in leaving_ids))
    }
    also = await archived(sidecar, [m for m in messages if m.id not in stopped])
    await sidecar.mailbox.deposit(local, sender_key, also)
    results = []
    for target, message in zip(targets, messages, strict=True):
        if message.id in decided:
            results.append(decided[message.id])
            continue
        state, note = await after_deposit(sidecar, target, wake, target.address in waiting)
        results.append({"to": target.address, "id": message.id, "state": state, "note": note})
    reply = {"from": sender, "results": results}
    if request.get("notify"):
        reply.update(await notify_person(sidecar, request, sender, messages, decided))
    return reply


async def guard(sidecar: MailHost, sender: str, kind: str, sends: list[tuple[Target, Message]]) -> dict[str, int]:
    """Apply the mail guards (hive.sidecar.mail.guards) to a send, or raise; returns the loop guard's
    count for each message to a teammate's session, by id, for its frame. What the guards
    record is staged here and committed with the messages."""
    if kind == "person":  # human input to every session it goes to
        await sidecar.store.stage([s for target, _ in sends for s in Guards.human_input(target.address)])
        return {}
    steps = {
        message.id: await sidecar.guards.step(sender, target.address, enforce=not is_remote(target))
        for target, message in sends
        if kind == "agent" and not mailboxes.is_mailbox(target)
    }
    sidecar.guards.take_rate(sender)
    await sidecar.store.stage([s for step in steps.values() for s in step.statements])
    return {message_id: step.run for message_id, step in steps.items()}


async def op_inbox(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Fetch a mailbox's unread mail, waiting for some to arrive when asked to (a long poll).

    Request: ``session`` (str, optional): the session whose mailbox; or ``as`` (str, optional): a
    session, or a named mailbox of the person's (opened on first use); neither: the person's terminal.
    ``wait`` (number, optional): seconds to wait for mail, at most 600 (``stop_waiting`` ends it).
    ``peek`` (bool): show nothing and confirm nothing. ``keep_held`` (bool): a plugin taking mail,
    which does not confirm what the session's harness holds. Returns ``{"to", "messages", "ids",
    "text"}``: the mailbox's address, the messages, their ids and the framed text for a model.
    Raises ``bad_request`` for a ``wait`` that is not a number, ``not_found`` for an unknown session.
    """
    recipient, session = mailbox_of(sidecar, request)
    try:
        wait = min(max(float(request.get("wait") or 0), 0.0), MAX_WAIT)
    except (TypeError, ValueError) as exc:
        raise BadRequest("wait is a number of seconds, at most 600") from exc
    if session is not None:
        sidecar.sessions.seen(session)
        # The agent checking its inbox saw what its hooks showed it; a plugin taking mail for the
        # session (keep_held) proves nothing: what it holds is confirmed by its next model request.
        if not request.get("peek") and not request.get("keep_held"):
            await sidecar.mailbox.confirm_held(session.key)
    deadline = time.monotonic() + wait
    messages: list[Message] = []
    with anyio.CancelScope() as scope:
        sidecar.waits.setdefault(recipient, set()).add(scope)
        try:
            while True:
                arrival = sidecar.mailbox.watch(recipient)
                messages = await sidecar.mailbox.unread(recipient)
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0:
                    break
                sidecar.parked[recipient] += 1
                try:
                    await sidecar.mailbox.wait(recipient, arrival, remaining)
                finally:
                    sidecar.parked[recipient] -= 1
        finally:
            sidecar.waits[recipient].discard(scope)
    if scope.cancelled_caught:
        messages = await sidecar.mailbox.unread(recipient)
    if not request.get("peek"):
        sidecar.mailbox.mark_shown(messages)
    return {
        "to": recipient,
        "messages": [m.public() for m in messages],
        "ids": [m.id for m in messages],
        "text": frames(messages),
    }


async def op_unread(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Count a mailbox's unread mail still waiting to be shown.

    Request: ``session`` or ``as`` (str, optional), as for ``inbox``; neither: the person's
    terminal. Returns ``{"to", "count", "from"}``: the mailbox's address, how many messages, and the
    senders. Raises ``not_found`` for an unknown ``session``.
    """
    recipient, _ = mailbox_of(sidecar, request)
    count, senders = await sidecar.mailbox.counts(recipient)
    return {"to": recipient, "count": count, "from": senders}


async def op_delivered(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Mark messages read: the client passed them on to its agent or person.

    Request: ``session`` or ``as`` (str, optional), as for ``inbox``. ``ids`` (list of str, required):
    the message ids that arrived. Returns ``{"confirmed": n}``, the unread messages of that mailbox
    among ``ids`` now marked read. Raises ``bad_request`` without ``ids``, ``not_found`` for an
    unknown ``session``.
    """
    recipient, session = mailbox_of(sidecar, request)
    ids = request.get("ids")
    if not isinstance(ids, list):
        raise BadRequest("delivered needs 'ids': the message ids that reached the agent")
    confirmed = await sidecar.mailbox.confirm(recipient, ids)
    if session is not None and confirmed:  # check_inbox's result (or an agent's `hive inbox --as`)
        channel = "mcp" if conn.id in session.holders else "cli"
        await observe.injected(sidecar, session.key, [i for i in ids if isinstance(i, str)], channel, "check_inbox")
    return {"confirmed": confirmed}


async def op_undelivered(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A client was shown messages but could not pass them on: make them visible now.

    Request: ``ids`` (list of str, required): the messages. ``push_failed`` (bool, optional) with
    ``session`` (str): the session's push channel is broken: it drops to the turn tier (hooks or
    check_inbox show the mail instead) and senders are told so from then on. Returns
    ``{"released": len(ids), "tier"}``, the session's tier after a ``push_failed``, else None.
    Raises ``bad_request`` without ``ids``, ``not_found`` for an unknown ``session``.
    """
    ids = request.get("ids")
    if not isinstance(ids, list):
        raise BadRequest("undelivered needs 'ids'")
    sidecar.mailbox.unshow([i for i in ids if isinstance(i, str)])
    tier = None
    if request.get("push_failed") and request.get("session"):
        session = sidecar.sessions.find(request["session"])
        await sidecar.sessions.downgrade(session)
        conn.push_sessions.discard(session.key)
        tier = session.tier
    return {"released": len(ids), "tier": tier}


async def op_stop_waiting(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """End the long polls (``inbox`` with ``wait``) on a mailbox now; each answers with what it has.

    Request: ``session`` or ``as`` (str, optional), as for ``inbox``. Returns ``{"stopped": n}``,
    the polls ended. Raises ``not_found`` for an unknown ``session``.
    """
    recipient, _ = mailbox_of(sidecar, request)
    scopes = sidecar.waits.get(recipient, set())
    for scope in scopes:
        scope.cancel()
    return {"stopped": len(scopes)}


async def op_sent(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Receipts for what a session or the person's terminal sent: queued or read, and when.

    Request: ``session`` or ``from`` (str, optional): the sender; neither: the person's terminal.
    ``ids`` (list of str, optional): these messages; without them the sender's latest 50 here and
    their latest 50 to teammates' machines. Returns ``{"messages": [{"id", "to", "sent_at", "read_at",
    "state", ...}]}``, newest first without ``ids``; those to other machines add ``note``, ``remote``
    and ``in_outbox``. Raises ``bad_request`` for ``ids`` that are not strings or more than
    :data:`MAX_RECEIPT_IDS`, ``not_found`` for an unknown sender.
    """
    ref = request.get("session") or request.get("from")
    ids = request.get("ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest("ids must be a list of message ids")
    if len(ids) > MAX_RECEIPT_IDS:
        raise BadRequest(f"at most {MAX_RECEIPT_IDS} ids at a time")
    if ref in (None, "", "terminal", sidecar.terminal):
        key, address = None, sidecar.terminal
    else:
        session = sidecar.sessions.find(ref)
        key, address = session.key, sidecar.sessions.address(session)
    messages = await sidecar.mailbox.sent_by(key, address, ids) + await REMOTE.of(sidecar).sent_by(key, address, ids)
    return {"messages": sorted(messages, key=lambda m: m["id"], reverse=not ids)}


async def confirm_override(
    sidecar: MailHost, conn: Connection, request: Mapping[str, Any], recipients: list[str], body: str
) -> str:
    """A person's reply to sessions in a run of agent messages restarts the loop guard's count, so it
    is confirmed in the same dialog as a group send (not inferred from a ``…/terminal`` sender any
    process can claim).

    Returns "" when no recipient is in a run to restart, else how the person confirmed.
    """
    run = max([await sidecar.guards.busiest(address) for address in recipients], default=0)
    if run == 0:
        return ""
    limit = sidecar.guards.loop_limit
    question = (
        f"Reply as {sidecar.settings.person} in this thread? It restarts the loop guard, which stops agents "
        f"after {limit} messages in a row with no person in between (now {run})."
    )
    return await confirm_group(conn, request, question, body)


OPS = {
    "send": op_send,
    "inbox": op_inbox,
    "unread": op_unread,
    "delivered": op_delivered,
    "undelivered": op_undelivered,
    "stop_waiting": op_stop_waiting,
    "sent": op_sent,
}

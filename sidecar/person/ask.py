"""Everything that puts a dialog in front of this machine's person: ``ask``, group confirmation, notify.

``ask`` (op): ``{"op": "ask", "session", "question", "about"?, "wait"?, "expire"?}``.
The person sees a pop-up with Approve / Deny; the call answers with their choice. One question
per session is up at a time: the same question (and ``about``) again joins the wait, a different
one is refused until the first is answered. The call waits up to ``wait`` seconds (default and
most: 10 minutes); the pop-up stays up for ``expire`` (default and most: an hour), and an answer
that comes after every call gave up arrives in the session's mailbox as a message from the
person's terminal. With ``about`` (the id of a teammate's message to this session) the pop-up
shows that request first, in its sender's words, and the answer goes back to the sender as an
approval record (``approvals.py``) that the receiving side shows as ``<hive-approval>``.

The pop-up goes to the person's own desktop as the sidecar found it (``dialog.find_desktop``),
never to a bus the request names: an agent's private bus with a stand-in notification server
would click Approve for it. A ``desktop`` field older clients send is ignored.

No desktop: ``no_desktop`` within the 2 s preflight, telling the agent to ask in its own session.

Group sends (:func:`confirm_group`), a person's reply into an agents' thread, which restarts the
mesh's loop guard (:func:`confirm_override`, the same confirmation), and ``notify`` pop-ups
(:func:`notify_person`) are called from the ``send`` op. A notify pop-up is shown on every online
machine of the recipient person: the machine a message went to shows it on arrival (its ``msg``
frame carries ``notify``); the person's other linked machines get a ``notify {id, from, to,
body, sent_at}`` frame (feature ``notify``, :func:`attach`), checked like a ``msg`` (a machine
speaks only for its roster person) and cleaned and defanged; and this machine shows it itself
when it is one of that person's (an agent may notify its own person). On each machine the
person's gate there decides (source ``notify``, :meth:`Gate.offer_now`), after that machine's
limits: one per sending person per minute, none for a message older than 15 minutes, and one
per message (a ``msg`` and a frame about it never show twice).
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.config import slug
from ..base.defang import defang
from ..base.errors import BadRequest, Conflict, HiveError, NoDesktop, NotFound, Refused
from ..base.ulid import is_ulid, new_ulid
from ..mail.addresses import Target
from ..mail.delivery import after_deposit
from ..mail.render import Message
from ..mesh.transport import FrameError, Link, LinkClosed
from ..team.approvals import Approval, sign_approval, stored
from ..team.membership import team_of
from .confirm import confirm_by_person
from .dialog import Answer, Backend, Prompt, backend_for, clean, clip, find_desktop

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..daemon.server import Sidecar
    from ..mesh.links import Mesh
    from ..sessions.registry import Session

ASK_WAIT = 600.0  # the longest a call waits for the person
POPUP_TIME = 3600.0  # how long the pop-up stays up
REQUEST_LIMIT = 500  # characters of the teammate's request shown
QUESTION_LIMIT = 400  # characters of the agent's question shown
MAX_QUESTION = 8000  # a longer question is a mistake, not something to clip
SETTLE_TIMEOUT = 5.0  # preflight (2 s) plus showing it; past this something is wrong
NOTIFY_EVERY = 60.0  # at most one notification per sending person per minute...
NOTIFY_MAX_AGE = 15 * 60.0  # ...and never for a message older than this
NOTIFY_TIME = 10.0
NOTIFY_BODY_LIMIT = 300
NOTIFY_REMEMBER = 2 * NOTIFY_MAX_AGE  # a machine remembers the messages it notified about this long...
NOTIFY_REMEMBER_MAX = 10_000  # ...and at most this many
NOTIFY_FRAME = "notify"  # the mesh frame asking another machine of the recipient person to notify
NOTIFY_FEATURE = "notify"
MAX_ADDRESS = 200

log = logging.getLogger("hive.sidecar.person.ask")


@dataclass
class Question:
    """A question up on this machine's screen for one session."""

    key: str  # the asking session
    asker: str  # its address when it asked
    question: str  # as shown
    about: str | None
    request: str  # the teammate's request as shown ("" without about)
    requester: str | None  # who sent the `about` message
    prompt: Prompt
    settled: anyio.Event = field(default_factory=anyio.Event)  # shown, or failed to show
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None
    error: HiveError | None = None
    waiting: set[anyio.CancelScope] = field(default_factory=set)  # calls waiting for it right now
    approval: dict[str, Any] = field(default_factory=dict)  # where the approval went, if any
    late: bool = False  # answered after every call gave up: delivered as a message


@dataclass
class Desk:
    """Per-sidecar state of this module."""

    questions: dict[str, Question] = field(default_factory=dict)
    notified: dict[str, float] = field(default_factory=dict)  # sending person -> last notification
    shown: dict[str, float] = field(default_factory=dict)  # message id -> when it was offered here, oldest first


_desks: weakref.WeakKeyDictionary[Sidecar, Desk] = weakref.WeakKeyDictionary()


def desk(sidecar: Sidecar) -> Desk:
    found = _desks.get(sidecar)
    if found is None:
        found = _desks[sidecar] = Desk()
    return found


def _backend() -> Backend:
    return backend_for(find_desktop())


def _seconds(request: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = request.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{name} is a number of seconds, at most {high:g}")
    return min(max(float(value), low), high)


# ---- ask ---------------------------------------------------------------------------------


def _asker(sidecar: Sidecar, request: Mapping[str, Any]) -> tuple[str, str, Session | None]:
    """Who asks: (key for one-question-at-a-time, address, session); no session is the person's terminal."""
    ref = request.get("session")
    if ref in (None, "", "terminal", sidecar.terminal):
        return "terminal", sidecar.terminal, None
    session = sidecar.sessions.find(ref)
    return session.key, sidecar.sessions.address(session), session


async def _about(sidecar: Sidecar, address: str, about: Any) -> tuple[str | None, str, str | None]:
    """The teammate's request this question is about: (id, its text as shown, its sender)."""
    if about in (None, ""):
        return None, "", None
    if not isinstance(about, str) or len(about) > 64:
        raise BadRequest("about is the id of a teammate's message to this session")
    row = await sidecar.store.fetchone(
        "SELECT sender, body FROM messages WHERE id = ? AND recipient = ?", (about, address)
    )
    if row is None:
        raise NotFound(
            f"no message {about} was sent to {address}; `about` takes the id of a teammate's "
            "message to this session (the id in its <hive-message> frame)"
        )
    sender, body = str(row[0]), str(row[1])
    return about, clip(clean(body), REQUEST_LIMIT), sender


def _prompt(asker: str, question: str, requester: str | None, request: str, expire: float) -> Prompt:
    if requester:
        body = f"{clean(requester)} asks:\n“{request}”\n\n{question}"
    else:
        body = question
    return Prompt(title=f"hive · {asker} asks you", body=body, timeout=expire)


async def op_ask(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Ask this machine's person a yes/no question in a desktop pop-up, and wait for the answer.

    Request: ``session`` (str, optional): the asking session (none: the person's terminal).
    ``question`` (str, required, at most 8000 characters; the pop-up shows 400). ``about`` (str,
    optional): the id of a teammate's message to this session that the question is about; the answer
    goes back to its sender as an approval. ``wait`` (number, optional): seconds to wait, at most and
    by default 600. ``expire`` (number, optional): seconds the pop-up stays up, at most and by default
    3600. Returns ``{"answer", "question", "about", "request", "from", "approval", "note"}``;
    ``answer`` is approved, denied, dismissed, expired, closed or ``waiting`` (a later answer arrives
    as a message). Raises ``bad_request``, ``not_found`` (session or ``about``), ``conflict`` while
    another question of this session is up, and ``no_desktop`` (ask in your own session instead).
    """
    key, asker, session = _asker(sidecar, request)
    raw = request.get("question")
    if not isinstance(raw, str) or not clean(raw):
        raise BadRequest("ask needs a non-empty 'question' for your person")
    if len(raw) > MAX_QUESTION:
        raise BadRequest(f"a question is limited to {MAX_QUESTION} characters; the pop-up shows {QUESTION_LIMIT}")
    wait = _seconds(request, "wait", ASK_WAIT, 0.0, ASK_WAIT)
    expire = _seconds(request, "expire", POPUP_TIME, 1.0, POPUP_TIME)
    question = clip(clean(raw), QUESTION_LIMIT)
    try:
        about, shown_request, requester = await _about(sidecar, asker, request.get("about"))
    except NotFound:
        # With no desktop the agent asks in-session either way: that is the more useful answer.
        try:
            await _backend().available()
        except NoDesktop as exc:
            raise _in_session(exc, str(request.get("about"))) from exc
        raise
    if session is not None:
        sidecar.sessions.seen(session)
    questions = desk(sidecar).questions
    current = questions.get(key)
    if current is not None and not current.done.is_set():
        if (current.question, current.about) != (question, about):
            raise Conflict(
                f"your question “{clip(current.question, 120)}” is still up on your person's screen; "
                "wait for its answer (asking it again joins the wait) before asking another"
            )
    else:
        current = Question(
            key=key,
            asker=asker,
            question=question,
            about=about,
            request=shown_request,
            requester=requester,
            prompt=_prompt(asker, question, requester, shown_request, expire),
        )
        questions[key] = current
        sidecar.tasks.start_soon(_run_question, sidecar, current, _backend())
    with anyio.fail_after(SETTLE_TIMEOUT):
        await current.settled.wait()
    if current.error is not None:
        raise _in_session(current.error, about)
    with anyio.move_on_after(wait) as scope:
        current.waiting.add(scope)
        try:
            await current.done.wait()
        finally:
            current.waiting.discard(scope)
    return _result(sidecar, current)


async def op_ask_stop(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """A client abandoned its ``ask`` call: stop waiting, so a later answer comes as a message.

    Request: ``session`` (str, optional): the asking session (none: the person's terminal).
    Returns ``{"stopped": n}``, the waiting calls ended. Raises ``not_found`` for an unknown session.
    """
    key, _, _ = _asker(sidecar, request)
    current = desk(sidecar).questions.get(key)
    scopes = list(current.waiting) if current is not None else []
    for scope in scopes:
        scope.cancel()
    return {"stopped": len(scopes)}


def _in_session(error: HiveError, about: str | None) -> HiveError:
    if not isinstance(error, NoDesktop):
        return error
    regarding = f" Say that it is about message {about}." if about else ""
    return NoDesktop(
        f"hive cannot show your person a pop-up here ({error.message}). Ask them this question "
        f"yourself, in your own session, and wait for their answer.{regarding}"
    )


async def _run_question(sidecar: Sidecar, question: Question, backend: Backend) -> None:
    try:
        async with backend.show(question.prompt) as popup:
            question.settled.set()
            question.answer = await popup.answer()
    except HiveError as exc:
        question.error = exc
    except Exception:
        log.exception("the pop-up for %s failed", question.asker)
        question.error = HiveError("the pop-up failed; see sidecar.log")
    finally:
        question.settled.set()
        with anyio.CancelScope(shield=True):
            try:
                if question.answer is not None:
                    await _after_answer(sidecar, question)
            except Exception:
                log.exception("delivering the answer for %s failed", question.asker)
            finally:
                question.done.set()


async def _after_answer(sidecar: Sidecar, question: Question) -> None:
    if question.about and question.requester and question.answer in (Answer.APPROVED, Answer.DENIED):
        question.approval = await _send_approval(sidecar, question)
    if not question.waiting:
        question.late = True
        await _deliver_late(sidecar, question)


def _decision(answer: Answer) -> str:
    return "approved" if answer is Answer.APPROVED else "denied"


NOTES = {
    Answer.APPROVED: "Your person approved.",
    Answer.DENIED: "Your person denied it.",
    Answer.DISMISSED: "Your person closed the pop-up without choosing: that is not a yes.",
    Answer.EXPIRED: "The pop-up expired without an answer: that is not a yes.",
    Answer.CLOSED: "The pop-up was taken away before your person answered (their desktop session or its "
    "notification service went away): that is not a yes.",
}


def _result(sidecar: Sidecar, question: Question) -> dict[str, Any]:
    answer = question.answer
    if answer is None:
        note = (
            f"No answer yet. The pop-up stays up for {question.prompt.timeout / 60:g} minutes; if your person "
            f"answers, the answer arrives as a message from {sidecar.terminal}. Asking the same question "
            "again joins this wait; a different one is refused until this one is answered."
        )
    else:
        note = NOTES[answer]
    if question.approval.get("note"):
        note += " " + question.approval["note"]
    return {
        "answer": answer.value if answer else "waiting",
        "question": question.question,
        "about": question.about,
        "request": question.request,
        "from": question.requester,
        "approval": question.approval or None,
        "note": note,
    }


async def _deliver_late(sidecar: Sidecar, question: Question) -> None:
    assert question.answer is not None
    session = sidecar.sessions.by_key.get(question.key)
    address = sidecar.sessions.address(session) if session is not None else question.asker  # renamed since
    body = (
        f"Your person answered your question after your ask_user call had stopped waiting: "
        f"{NOTES[question.answer]}\nQuestion, as shown: “{question.question}”"
    )
    if question.about:
        body += f"\nIt was about message {question.about}."
    message = Message(
        id=new_ulid(),
        sender=sidecar.terminal,
        sender_kind="person",
        sender_agent="",
        sender_repo="",
        recipient=address,
        reply_to=None,
        body=body,
        wake=True,
        sent_at=time.time(),
    )
    await deliver_local(sidecar, message, None)


async def deliver_local(sidecar: Sidecar, message: Message, sender_key: str | None) -> tuple[str, str]:
    """Deposit one message for a mailbox on this machine and wake its session as ``send`` would."""
    waiting = sidecar.parked[message.recipient] > 0
    await sidecar.mailbox.deposit([message], sender_key)
    entry = next((e for e in sidecar.directory() if e.address == message.recipient), None)
    return await after_deposit(sidecar, Target(message.recipient, entry), message.wake, waiting)


async def _send_approval(sidecar: Sidecar, question: Question) -> dict[str, Any]:
    """Send the answer to the requesting session as an approval record; say where it went."""
    assert question.answer is not None and question.requester and question.about
    session = sidecar.sessions.by_key.get(question.key)
    live = session is not None and sidecar.sessions.is_live(session)
    sender = sidecar.sessions.address(session) if live and session is not None else sidecar.terminal
    record = Approval(
        about=question.about,
        asker=question.requester,
        approver=sidecar.settings.person,
        decision=_decision(question.answer),
        request=question.request,
        question=question.question,
        note="answered in a desktop pop-up",
        at=int(time.time() * 1000),
    )
    body = f"{sidecar.settings.person} {record.decision} your request (message {question.about})."
    person = question.requester.split("/", 1)[0]
    remote = person != sidecar.settings.person
    if remote:
        # Another machine's session: the record travels signed by this machine, over the mesh.
        entry = next((e for e in sidecar.directory() if e.address == question.requester), None)
        team = team_of(sidecar)
        team_id = team.team_id()
        if team_id is None or entry is None or not sidecar.mesh.is_remote(Target(question.requester, entry)):
            return {
                "to": question.requester,
                "state": "not_sent",
                "record": record.to_dict(),
                "note": f"The approval could not be sent: {question.requester} is not a session this machine "
                "can reach. Tell them the answer yourself.",
            }
        approval = stored(sign_approval(await team.ensure_identity(), team_id, record))
    else:
        # On this machine the sidecar made the record itself: verified by construction, nothing to sign.
        entry = None
        approval = json.dumps({"record": record.to_dict(), "by": "", "sig": "", "verified": True}, ensure_ascii=False)
    message = Message(
        id=new_ulid(),
        sender=sender,
        sender_kind="agent" if live else "person",
        sender_agent=session.agent if live and session else "",
        sender_repo=session.repo if live and session else "",
        recipient=question.requester,
        reply_to=question.about,
        body=body,
        wake=True,
        sent_at=time.time(),
        approval=approval,
    )
    sender_key = question.key if live else None
    try:
        if remote:
            result = (await sidecar.mesh.send([(Target(question.requester, entry), message)], sender_key))[message.id]
            state, detail = str(result["state"]), str(result.get("note", ""))
        else:
            state, detail = await deliver_local(sidecar, message, sender_key)
    except HiveError as exc:
        return {"to": question.requester, "state": "failed", "note": f"The approval was not sent: {exc.message}"}
    if state in ("refused", "failed"):
        return {
            "to": question.requester,
            "id": message.id,
            "state": state,
            "record": record.to_dict(),
            "note": f"The approval to {question.requester} was {state}: {detail}",
        }
    return {
        "to": question.requester,
        "id": message.id,
        "state": state,
        "record": record.to_dict(),
        "note": f"The approval went to {question.requester}.",
    }


# ---- group sends -------------------------------------------------------------------------


def group_question(to: str, count: int) -> str:
    sessions = "session" if count == 1 else "sessions"
    every = "the" if count == 1 else "all"
    if to == "*":
        return f"Send this to {every} {count} {sessions} on your team?"
    if to.startswith("repo:"):
        return f"Send this to {every} {count} {sessions} in {to[5:].strip().strip('/')}?"
    return f"Send this to {every} {count} of {to[:-2]}'s {sessions}?"


async def confirm_group(
    sidecar: Sidecar, conn: Connection, request: Mapping[str, Any], question: str, body: str
) -> str:
    """Return how the person confirmed ``question`` ("desktop" or "terminal"), or raise.

    A group address or a loop-guard override from the person's own mailbox is confirmed in a
    pop-up, not inferred from a ``…/terminal`` sender any process can claim.
    """
    return await confirm_by_person(
        conn,
        request,
        question,
        title="hive · confirm a send",
        quote=body,
        outcome="not sent",
        refused=Refused,
        hint="Send to one session at a time, or run `hive send` in a terminal.",
    )


# ---- loop-guard overrides ----------------------------------------------------------------


async def confirm_override(
    sidecar: Sidecar, conn: Connection, request: Mapping[str, Any], recipients: list[str], body: str
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
    return await confirm_group(sidecar, conn, request, question, body)


# ---- notify ------------------------------------------------------------------------------


def _person_of(address: str) -> str:
    return address.split("/", 1)[0]


def _machine_of(sidecar: Sidecar, message: Message) -> str:
    """The key of the machine a remote message went to ("" when it is not known)."""
    entry = next((e for e in sidecar.directory() if e.address == message.recipient and e.key is None), None)
    return sidecar.mesh.peer_of(entry) or ""


async def notify_person(
    sidecar: Sidecar,
    request: Mapping[str, Any],
    sender: str,
    messages: list[Message],
    remote: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Show a sent message as a notification on every online machine of its recipient person, each
    subject to that person's gate there; say which machines were asked. ``remote``: the mesh's
    results for the messages that went to other machines, by id.

    A machine a message went to shows it when the message arrives (the ``notify`` flag on its
    ``msg`` frame); the recipient person's other linked machines get a ``notify`` frame about the
    first of their messages; this machine shows it itself when it is one of that person's.
    """
    mesh = sidecar.mesh
    me = sidecar.settings.person
    reached: dict[str, list[Message]] = {}  # recipient person -> their messages that are on the way
    for message in messages:
        person = _person_of(message.recipient)
        if message.id in remote:
            # Held: its person approves it before any pop-up, as on the machine it went to.
            on_the_way = remote[message.id].get("state") not in ("refused", "held", "failed")
        else:
            on_the_way = person == me  # in a mailbox here
        if on_the_way:
            reached.setdefault(person, []).append(message)
    if not reached:
        return {"notified": False, "notify_note": "No notification: the message did not reach anyone's machine."}
    notified = False
    notes: list[str] = []
    for person, sent in reached.items():
        with_message = {_machine_of(sidecar, m) for m in sent if m.id in remote}
        asked = [_machine_name(sidecar, peer) + " (with the message)" for peer in sorted(with_message)]
        others = [
            m
            for m in mesh.team.members()
            if m.active
            and m.person == person
            and m.key in mesh.links
            and m.key not in with_message
            and m.key != mesh.team.my_key()
        ]
        frame = _notify_frame(sent[0])
        for member in others:
            if not mesh.peer_has(member.key, NOTIFY_FEATURE):
                notes.append(f"{person}'s machine {member.machine} runs a hive too old to be asked.")
                continue
            if await _send_frame(mesh.links.get(member.key), frame):
                asked.append(member.machine)
            else:
                notes.append(f"{person}'s machine {member.machine} went offline before it could be asked.")
        if asked:
            one = len(asked) == 1
            notes.append(
                f"Asked {person}'s machine{'' if one else 's'} to show a notification: {', '.join(asked)}. "
                f"{'It shows' if one else 'Each shows'} it if {person}'s gate there lets it through "
                "(`hive gate ledger` there)."
            )
        if person == me:
            local = [m for m in sent if m.id not in remote]
            shown, note = await notify_here(sidecar, (local or sent)[0], sent[0].sent_at)
            notified = notified or shown
            notes.append(f"Here ({sidecar.settings.machine}): {note}")
        elif not asked:
            notes.append(f"No notification for {person}: none of their machines is online.")
    return {"notified": notified, "notify_note": " ".join(notes)}


async def _send_frame(link: Link | None, frame: dict[str, Any]) -> bool:
    if link is None:
        return False
    try:
        await link.send(frame)
    except (LinkClosed, FrameError):
        return False
    return True


def _machine_name(sidecar: Sidecar, peer: str) -> str:
    member = sidecar.mesh.team.member(peer) if peer else None
    return member.machine if member is not None else "their machine"


def _notify_frame(message: Message) -> dict[str, Any]:
    return {
        "t": NOTIFY_FRAME,
        "id": message.id,
        "from": message.sender,
        "to": message.recipient,
        "body": clip(clean(message.body), NOTIFY_BODY_LIMIT),
        "sent_at": message.sent_at,
    }


def _notify_from_wire(sidecar: Sidecar, person: str, frame: Mapping[str, Any]) -> Message | str:
    """The message a teammate's ``notify`` frame is about, or why it is ignored. ``person``: the
    roster's person of the machine that sent it, the only person that machine speaks for."""
    message_id, sender, recipient = frame.get("id"), frame.get("from"), frame.get("to")
    body, sent_at = frame.get("body"), frame.get("sent_at")
    if (
        not is_ulid(message_id)
        or not isinstance(body, str)
        or isinstance(sent_at, bool)
        or not isinstance(sent_at, int | float)
    ):
        return "malformed"
    if (
        not isinstance(sender, str)
        or not isinstance(recipient, str)
        or "/" not in sender
        or "/" not in recipient
        or len(sender) > MAX_ADDRESS
        or len(recipient) > MAX_ADDRESS
    ):
        return "malformed addresses"
    sender_person, sender_name = sender.split("/", 1)
    if slug(sender_person) != person:
        return f"a machine of {person}'s speaks only for {person}"
    to_person, to_name = recipient.split("/", 1)
    if slug(to_person) != sidecar.settings.person:
        return f"not for {sidecar.settings.person}"
    to_name = slug(to_name) or "terminal"
    if to_name == "terminal" and person != sidecar.settings.person:
        return "messages from teammates go to sessions, not to the person"
    # Peer text: cut before the work of cleaning it, and never able to open a hive frame in the ledger.
    text = defang(clip(clean(body[: NOTIFY_BODY_LIMIT * 4]), NOTIFY_BODY_LIMIT))
    return Message(
        id=str(message_id),
        sender=f"{person}/{slug(sender_name) or 'terminal'}",
        sender_kind="agent",
        sender_agent="",
        sender_repo="",
        recipient=f"{sidecar.settings.person}/{to_name}",
        reply_to=None,
        body=text,
        wake=False,
        sent_at=float(sent_at),
    )


def attach(mesh: Mesh) -> None:
    """Its feature's ``frames`` (daemon.features): this module speaks ``notify`` frames."""
    sidecar = mesh.sc

    async def handle(link: Link, member: Any, frame: dict[str, Any]) -> None:
        found = _notify_from_wire(sidecar, member.person, frame)
        if isinstance(found, str):
            log.info("ignored a notify frame from %s (%s): %s", member.machine, link.peer[:12], found)
            return
        if mesh.inbound.of(member.person) != "accept":  # as for their messages: held or refused, no pop-up
            log.info("no notify for %s: %s's messages are not accepted here as they come", found.id, member.person)
            return
        notify_received(sidecar, found, frame.get("sent_at"))

    mesh.add_frames(NOTIFY_FEATURE, {NOTIFY_FRAME: handle})


def notify_received(sidecar: Sidecar, message: Message, sent_at: Any) -> None:
    """A teammate's message (or a ``notify`` frame about one) arrived asking to notify this machine's
    person: show it, off the mesh's path."""
    when = float(sent_at) if isinstance(sent_at, int | float) and not isinstance(sent_at, bool) else 0.0

    async def run() -> None:
        try:
            note = (await notify_here(sidecar, message, min(when, time.time())))[1]
        except Exception:
            log.exception("the notification for %s failed", message.id)
            return
        log.info("notify for %s from %s: %s", message.id, message.sender, note)

    sidecar.tasks.start_soon(run)


def _remember_shown(shown: dict[str, float], message_id: str, now: float) -> None:
    while shown:
        oldest = next(iter(shown))
        if now - shown[oldest] < NOTIFY_REMEMBER and len(shown) < NOTIFY_REMEMBER_MAX:
            break
        del shown[oldest]
    shown[message_id] = now


async def notify_here(sidecar: Sidecar, message: Message, sent_at: float) -> tuple[bool, str]:
    """One notification on this machine's desktop for its person, through the gate: (shown, why)."""
    from ..gate.engine import Item, gate_of

    now = time.time()
    mine = desk(sidecar)
    if message.id in mine.shown:
        return False, "No notification: this machine already offered one for this message."
    if now - sent_at > NOTIFY_MAX_AGE:
        return False, "No notification: the message is older than 15 minutes."
    person = message.sender.split("/", 1)[0]
    notified = mine.notified
    if now - notified.get(person, 0.0) < NOTIFY_EVERY:
        return False, f"No notification: {person} already notified this person in the last minute."
    notified[person] = now  # counted on the attempt, so a failing desktop is not retried in a loop
    _remember_shown(mine.shown, message.id, now)
    sender, body = clean(message.sender), defang(clean(message.body))
    prompt = Prompt(title=f"hive · {sender}", body=clip(body, NOTIFY_BODY_LIMIT), timeout=NOTIFY_TIME, question=False)
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

    async def show(_item: Item, _decision: Any) -> None:
        await _show(sidecar, prompt, message.id)

    decision = await gate_of(sidecar).offer_now(item, show)
    if decision.outcome == "deliver":
        return True, f"{sidecar.settings.person} was shown a desktop notification."
    if decision.rule == "deliver.failed":
        return False, f"No notification was shown: {decision.reason}"
    return False, (
        f"No notification: {sidecar.settings.person}'s gate held it back ({decision.rule}: {decision.reason})."
    )


async def _show(sidecar: Sidecar, prompt: Prompt, message_id: str) -> None:
    """Put the notification up; return once it is on screen, raise if it cannot be shown."""
    shown = anyio.Event()
    failure: list[HiveError] = []

    async def run() -> None:
        try:
            async with _backend().show(prompt) as popup:
                shown.set()
                await popup.answer()
        except HiveError as exc:
            failure.append(exc)
        except Exception:
            log.exception("the notification for %s failed", message_id)
            failure.append(HiveError("the notification failed; see sidecar.log"))
        finally:
            shown.set()

    sidecar.tasks.start_soon(run)
    with anyio.move_on_after(SETTLE_TIMEOUT):
        await shown.wait()
    if failure:
        raise failure[0]
    if not shown.is_set():
        raise HiveError("the notification was not on screen in time")


OPS = {"ask": op_ask, "ask_stop": op_ask_stop}

"""``ask``: an agent asks its person a question in a desktop pop-up and waits for the answer.

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

Group sends (:func:`hive.sidecar.person.confirm.confirm_group`) and a person's reply into an agents'
thread (:func:`hive.sidecar.mail.ops.confirm_override`) use the same confirmation; ``notify`` pop-ups
are :mod:`hive.sidecar.mail.notify`'s.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.errors import BadRequest, Conflict, HiveError, NoDesktop, NotFound
from ..base.host import PerSidecar
from ..base.ulid import new_ulid
from ..mail.addresses import Target, is_remote
from ..mail.delivery import deliver_local, deliver_note
from ..mail.remote import REMOTE
from ..mail.render import Message
from ..person.dialog import Answer, Backend, Prompt, backend_for, clean, clip, find_desktop
from ..team.approvals import Approval, sign_approval, stored
from ..team.membership import team_of

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..sessions.registry import Session
    from .sessions import AgentsHost

ASK_WAIT = 600.0  # the longest a call waits for the person
POPUP_TIME = 3600.0  # how long the pop-up stays up
REQUEST_LIMIT = 500  # characters of the teammate's request shown
QUESTION_LIMIT = 400  # characters of the agent's question shown
MAX_QUESTION = 8000  # a longer question is a mistake, not something to clip
SETTLE_TIMEOUT = 5.0  # preflight (2 s) plus showing it; past this something is wrong

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


DESKS: PerSidecar[Desk] = PerSidecar(lambda sidecar: Desk())


def desk(sidecar: AgentsHost) -> Desk:
    return DESKS.of(sidecar)


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


def _asker(sidecar: AgentsHost, request: Mapping[str, Any]) -> tuple[str, str, Session | None]:
    """Who asks: (key for one-question-at-a-time, address, session); no session is the person's terminal."""
    ref = request.get("session")
    if ref in (None, "", "terminal", sidecar.terminal):
        return "terminal", sidecar.terminal, None
    session = sidecar.sessions.find(ref)
    return session.key, sidecar.sessions.address(session), session


async def _about(sidecar: AgentsHost, address: str, about: Any) -> tuple[str | None, str, str | None]:
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


async def op_ask(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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


async def op_ask_stop(sidecar: AgentsHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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


async def _run_question(sidecar: AgentsHost, question: Question, backend: Backend) -> None:
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


async def _after_answer(sidecar: AgentsHost, question: Question) -> None:
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


def _result(sidecar: AgentsHost, question: Question) -> dict[str, Any]:
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


async def _deliver_late(sidecar: AgentsHost, question: Question) -> None:
    assert question.answer is not None
    session = sidecar.sessions.by_key.get(question.key)
    address = sidecar.sessions.address(session) if session is not None else question.asker  # renamed since
    body = (
        f"Your person answered your question after your ask_user call had stopped waiting: "
        f"{NOTES[question.answer]}\nQuestion, as shown: “{question.question}”"
    )
    if question.about:
        body += f"\nIt was about message {question.about}."
    await deliver_note(sidecar, address, body, sender=sidecar.terminal, kind="person")


async def _send_approval(sidecar: AgentsHost, question: Question) -> dict[str, Any]:
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
        if team_id is None or entry is None or not is_remote(Target(question.requester, entry)):
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
            result = (await REMOTE.of(sidecar).send([(Target(question.requester, entry), message)], sender_key))[
                message.id
            ]
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


OPS = {"ask": op_ask, "ask_stop": op_ask_stop}

"""The lessons' local protocol ops: what ``hive lessons``, the MCP tools and the hooks ask the sidecar.

Ops (each a request ``{"op": ..., ...}``; ``session`` is the asking session, absent for the person's
own terminal; ``lesson`` is a lesson id or its first 6+ characters (``id`` is the request's own);
``cwd`` locates the repository when there is no session):

``lesson_propose``  {kind, text, applicability?, scope?, evidence, tags?, quote?, supersedes?}
                    files a proposal, chooses its reviewer (:mod:`hive.sidecar.review`) and, when that is
                    this machine's person, offers the review pop-up to their gate (source ``review``,
                    ``Gate.offer_now``: now or not at all, spending the review share of their budget);
                    the pop-up goes up when the gate delivers it (it never waits for the answer), and
                    one the gate holds back waits in their digest. A proposal that arrives from a
                    teammate is weighed the same way on the receiving machine, whose person is asked
                    when they are its reviewer there (a clone's CODEOWNERS, their touches). A proposal
                    nobody answered for a day reads as held: it is not asked again, and is offered to
                    its reviewer's gate once more when their digest is read, which lists it there.
``lesson_list``     {state?, limit?}     ``lesson_show`` {lesson}     ``lesson_pending`` {}
``lesson_search``   {q, files?, limit?}  ranked verified lessons, framed and defanged (:mod:`recall`)
``lesson_context``  {task, files?}       the same for a task, at most 5, with the session's own files
``lesson_cite``     {lesson, worked?}        an agent used a lesson (counts toward its outcome rate)
``lesson_review``   {lesson, verdict, text?, scope?, note?, confirmed_on_terminal?}
                    records a verdict only once the person confirmed it (pop-up, or typed at the
                    command's own terminal); an agent's connection has neither and is refused.
``lesson_retract``  {lesson, reason?}    ``lesson_promote`` {lesson, force?, cwd}
``lesson_import``   {path?}              Beacon lessons as proposals (:mod:`lesson_import`)

Skills this machine promoted are remembered (``kv``: ``lesson.skill.<root>.<lesson>``) and follow
their lesson: the skill of a lesson a verified successor superseded is re-rendered and that of a
retracted one removed (:func:`follow_skills`) as soon as the store reports the change, whether it
was made here or arrived from a teammate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from . import lesson_import, lesson_store, promote, recall, review
from .defang import defang, one_line
from .dialog import Answer
from .errors import BadRequest, HiveError, LessonBadScope, LessonState, NotFound, Refused
from .gate import BEFORE_DIGEST, MAX_EVIDENCE, MAX_REF, MAX_TITLE, Evidence, Item, gate_of
from .hooks import git_facts
from .lesson_store import LessonView
from .lessons import EVIDENCE_KINDS
from .person import asks_person

if TYPE_CHECKING:
    from .server import Connection, Sidecar
    from .sessions import Session

log = logging.getLogger("hive.sidecar.lessons")

SEARCH_LIMIT = 20
CONTEXT_LIMIT = 5
SKILL_KEY = "lesson.skill."
REVIEWER_KEY = "lesson.reviewer."
HELD_KEY = "lesson.held."  # asked_at of the held time a proposal was last put in its reviewer's digest for
IMPORT_KEY = "lesson.beacon."  # a Beacon record imported once stays one lesson


@dataclass
class Desk:
    """Per-sidecar state: proposals whose pop-up is up (not asked twice at once)."""

    asking: set[str] = field(default_factory=set)


def desk(sidecar: Sidecar) -> Desk:
    found = sidecar.__dict__.get("lesson_desk")
    if found is None:
        found = sidecar.__dict__["lesson_desk"] = Desk()
    return found


# ---- who and where ----------------------------------------------------------------------------

def _session(sidecar: Sidecar, request: dict[str, Any]) -> Session | None:
    ref = request.get("session")
    if ref in (None, "", "terminal", sidecar.terminal):
        return None
    return sidecar._session_ref(ref)


def _cwd(sidecar: Sidecar, request: dict[str, Any], session: Session | None) -> str:
    if session is not None and session.cwd:
        return session.cwd
    cwd = request.get("cwd")
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else ""


def project_here(cwd: str) -> tuple[str, str]:
    """``(project id, repository root)`` for a folder ("" for either when unknown)."""
    from .projects import project_id

    facts = git_facts(cwd) if cwd else {}
    root = facts.get("repo_root", "")
    origin = facts.get("repo", "")
    if origin:
        return project_id(origin), root
    return (project_id(root), root) if root else ("", "")


def origins(sidecar: Sidecar) -> dict[str, str]:
    """Machine key id -> person@machine, for showing where a lesson came from."""
    from .team import team_of

    team = team_of(sidecar)
    found = {m.key: f"{m.person}@{m.machine}" for m in team.members()}
    try:
        found.setdefault(team.my_key(), f"{sidecar.settings.person}@{sidecar.settings.machine}")
    except Exception:  # no readable machine key yet: nothing of this machine's is stored either
        pass
    return found


def _view_dict(view: LessonView, origin: dict[str, str], *, agent: bool = False) -> dict[str, Any]:
    """A lesson for a client; with ``agent`` every peer-written string is defanged (a person's terminal
    may be an agent's shell, so the ops that print lessons always ask for it)."""
    out = view.to_dict()
    out["author"] = view.author_session
    out["origin"] = origin.get(view.author_machine, view.author_person)
    if agent:
        for key in ("text", "original_text", "applicability", "retract_reason", "author", "origin"):
            out[key] = defang(str(out[key] or ""))
        out["tags"] = [one_line(t, 40) for t in view.tags]
        out["evidence"] = [{k: one_line(v, 400) for k, v in e.items()} for e in view.evidence]
        if view.quote:
            out["quote"] = {k: defang(str(v)) if isinstance(v, str) else v for k, v in view.quote.items()}
    return out


# ---- propose ----------------------------------------------------------------------------------

async def op_lesson_propose(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Propose a lesson for review: file it, choose its reviewer, and ask them when that is this person.

    Request: ``session`` (str, optional): the author (none: the terminal); ``cwd`` (str): finds the
    repository when no session does. ``kind`` and ``text`` (str, required); ``evidence`` (list,
    required): ``{kind, ref}``, ``kind:ref`` or a file path; ``scope`` (personal, project (default) or
    team); ``project``, ``applicability``, ``tags``, ``quote`` (``{speaker, words}``, required for a
    preference or decision), ``supersedes`` (a verified lesson's id), all optional. Returns ``{"id",
    "state", "reviewer", "reviewer_why", "scope", "project", "note"}``. Raises the ``lesson_*``
    codes for an invalid lesson (``lesson_bad_scope`` for a project lesson outside a repository),
    ``not_member``, ``not_found`` (a session or the lesson it supersedes).
    """
    session = _session(sidecar, request)
    author = sidecar.sessions.address(session) if session is not None else sidecar.terminal
    fields: dict[str, Any] = {k: request[k] for k in ("kind", "text", "applicability", "scope", "project", "evidence",
                                                      "tags", "quote", "supersedes")
                              if k in request and request[k] is not None}
    fields.setdefault("scope", "project")
    if isinstance(fields.get("evidence"), list):
        fields["evidence"] = [evidence_item(e) for e in fields["evidence"]]
    project, root = project_here(_cwd(sidecar, request, session))
    if fields["scope"] == "project" and not fields.get("project"):
        if not project:
            raise LessonBadScope("a project lesson is proposed from inside its repository (no git repository here); "
                                 "or choose scope team or personal")
        fields["project"] = project
    store = lesson_store.of(sidecar)
    ctx = await lesson_store.context_of(sidecar)
    body = lesson_store.new_lesson_here(ctx, fields, session=author)
    view = await (store.supersede(body.supersedes, body) if body.supersedes else store.propose(body))
    choice = await review.choose_reviewer(sidecar, scope=view.scope, author_person=view.author_person,
                                          files=review.file_refs(view.evidence), repo_root=root)
    await sidecar.store.set_kv(REVIEWER_KEY + view.id, json.dumps({"person": choice.person, "why": choice.why}))
    note = f"proposed; {choice.person} reviews it ({_why(choice.why)})."
    if view.state == "verified":
        note = "already verified."
    elif choice.person == sidecar.settings.person:
        note += " " + await _offer_review(sidecar, view)
    else:
        note += (" It waits in their `hive lessons pending` once it reaches their machine. Until then no agent "
                 "sees it.")
    return {"id": view.id, "state": view.state, "reviewer": choice.person, "reviewer_why": choice.why,
            "scope": view.scope, "project": view.project, "note": note}


def evidence_item(item: Any) -> Any:
    """``{kind, ref}`` as is; ``kind:ref`` (``file:src/a.py``, ``commit:abc``) split; a bare path is a file."""
    if not isinstance(item, str):
        return item
    kind, sep, ref = item.partition(":")
    if sep and kind in EVIDENCE_KINDS and ref.strip():
        return {"kind": kind, "ref": ref.strip()}
    return {"kind": "file", "ref": item.strip()}


def _why(why: str) -> str:
    return {"personal": "a personal lesson is its own person's", "codeowners": "CODEOWNERS of its evidence files",
            "touches": "whose sessions touched its evidence files most in 30 days",
            "proposer": "no owner of its evidence files is known"}.get(why, why)


def review_item(sidecar: Sidecar, view: LessonView, *, held: bool = False) -> Item:
    """The gate item (source ``review``) that asks this machine's person to review ``view``; ``held``:
    nobody answered it for a day, and it is listed in their digest instead of asked again."""
    author = one_line(view.author_session or view.author_person, 80)
    text = one_line(view.text, 4000)
    what = "held for your review: nobody answered it for a day" if held else "asks for your review"
    files = [Evidence("file", (f"{view.project}:{f}" if view.project else f)[:MAX_REF])
             for f in review.file_refs(view.evidence)[:MAX_EVIDENCE - 1]]
    # A held proposal is named apart from its pop-up, and by when it was last asked for, so it is
    # listed once per time it was held; the pop-up's own fingerprint keeps a proposal asked once a day.
    key = f"review:{view.id}" + (f":held:{int(view.asked_at)}" if held else "")
    return Item(source="review", person=sidecar.settings.person,
                title=f"Lesson {view.id[:12]} by {author} {what}: {text}"[:MAX_TITLE], body=text,
                evidence=(Evidence("lesson", view.id), *files), key=key, proposer=author,
                data={"lesson": view.id})


async def _offer_review(sidecar: Sidecar, view: LessonView) -> str:
    """Offer the review pop-up for this machine's person to their gate; what became of it, for the note."""
    if view.id in desk(sidecar).asking:
        return "Its pop-up is already up."
    pending = "unanswered, it waits in `hive lessons pending`."
    # A machine with no desktop spends none of the person's budget on a pop-up that cannot go up.
    can_show = await review.desktop_available()

    async def show(_item: Item | None, _decision: Any) -> None:
        await _pop_up(sidecar, view)

    try:
        gate = gate_of(sidecar)
    except HiveError:  # no gate in this sidecar: the pop-up as it was before the gate
        gate = None
    if gate is None:
        try:
            await show(None, None)
        except HiveError:
            return "There is no desktop to ask on: it waits in `hive lessons pending`."
        return f"A pop-up asks them now; {pending}"
    decision = await gate.offer_now(review_item(sidecar, view), show, budget=can_show)
    if decision.outcome == "deliver":
        return f"A pop-up asks them now; {pending}"
    if decision.rule == "deliver.failed":
        return "There is no desktop to ask on: it waits in `hive lessons pending` and their `hive digest`."
    return (f"Their gate did not put the pop-up up ({decision.rule}: {decision.reason}); it waits in "
            "`hive lessons pending`" + (" and their `hive digest`." if decision.outcome == "digest" else "."))


async def _pop_up(sidecar: Sidecar, view: LessonView) -> None:
    """The review pop-up as the gate's deliverer: returns once it is on screen, while the answer is
    awaited in the background; raises when it cannot be shown (the gate then keeps it in the digest)."""
    on_screen = anyio.Event()
    failed: list[HiveError] = []
    desk(sidecar).asking.add(view.id)
    sidecar.tasks.start_soon(_ask_here, sidecar, view, on_screen, failed)
    with anyio.move_on_after(review.SETTLE_TIME):
        await on_screen.wait()
    if failed:
        raise failed[0]
    if not on_screen.is_set():
        raise HiveError("the review pop-up was not on screen in time")


async def _ask_here(sidecar: Sidecar, view: LessonView, on_screen: anyio.Event,
                    failed: list[HiveError]) -> None:
    """The review pop-up for this machine's person; a click is their verdict, silence changes nothing."""
    try:
        origin = origins(sidecar)
        answer = await review.ask_reviewer(sidecar, _view_dict(view, origin), on_screen)
        if answer in (Answer.APPROVED, Answer.DENIED):
            verdict = "approve" if answer is Answer.APPROVED else "reject"
            after = await lesson_store.of(sidecar).review(view.id, verdict, note="answered in a desktop pop-up")
            await follow_skills(sidecar)
            log.info("lesson %s %s in a pop-up: %s", view.id[:12], verdict, after.state)
    except LessonState:
        pass  # decided meanwhile (at a terminal, or by a teammate)
    except HiveError as exc:
        failed.append(exc)  # no desktop after all: the gate's deliverer says so
    except Exception:
        log.exception("the review pop-up for lesson %s failed", view.id[:12])
        failed.append(HiveError("the review pop-up failed; see sidecar.log"))
    finally:
        on_screen.set()
        desk(sidecar).asking.discard(view.id)


async def offer_held_reviews(sidecar: Sidecar, person: str) -> None:
    """Before ``person``'s digest: each proposal they review that nobody answered for a day (it reads as
    held) is offered to their gate once, which lists it in the digest; no pop-up asks again."""
    if person != sidecar.settings.person:
        return
    gate = gate_of(sidecar)
    for view in await lesson_store.of(sidecar).pending():
        if view.state != "held" or await _suggested(sidecar, view.id) != person:
            continue
        if view.scope == "personal" and view.author_person != person:
            continue
        marker = HELD_KEY + view.id
        if await sidecar.store.get_kv(marker) == repr(view.asked_at):
            continue  # offered for this time it was held
        await gate.offer(review_item(sidecar, view, held=True))
        await sidecar.store.set_kv(marker, repr(view.asked_at))


# ---- reading ----------------------------------------------------------------------------------

async def _suggested(sidecar: Sidecar, lesson_id: str) -> str:
    raw = await sidecar.store.get_kv(REVIEWER_KEY + lesson_id)
    if not raw:
        return ""
    try:
        return str(json.loads(raw).get("person") or "")
    except ValueError:
        return ""


def _limit(request: dict[str, Any], default: int, high: int) -> int:
    value = request.get("limit", default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"limit is a whole number, at most {high}")
    return min(max(value, 1), high)


async def op_lesson_list(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """List lessons, newest first, peer-written text defanged.

    Request: ``state`` (str, optional): only lessons in that state (proposed, held, verified, ...).
    ``limit`` (int, optional): default 100, at most 1000. Returns ``{"lessons": [lesson]}``, each
    with ``suggested_reviewer`` while proposed or held. Raises ``bad_request`` for a bad ``limit``.
    """
    await follow_skills(sidecar)
    state = request.get("state")
    states = [state] if isinstance(state, str) and state else None
    views = await lesson_store.of(sidecar).list(states=states, limit=_limit(request, 100, 1000))
    origin = origins(sidecar)
    rows = []
    for v in views:
        row = _view_dict(v, origin, agent=True)
        row["suggested_reviewer"] = await _suggested(sidecar, v.id) if v.state in ("proposed", "held") else ""
        rows.append(row)
    return {"lessons": rows}


async def op_lesson_show(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show one lesson, peer-written text defanged.

    Request: ``lesson`` (str, required): its id or its first 6+ hex digits. Returns ``{"lesson"}``
    with ``suggested_reviewer``. Raises ``bad_request`` without ``lesson``, ``not_found`` for no
    lesson or several by that prefix.
    """
    view = await _find(sidecar, request)
    row = _view_dict(view, origins(sidecar), agent=True)  # an agent may run `hive lessons show` too
    row["suggested_reviewer"] = await _suggested(sidecar, view.id)
    return {"lesson": row}


async def op_lesson_pending(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """List the proposals this person may decide: every pending one, those suggested to them first.

    Reads no fields. Returns ``{"person", "lessons": [lesson]}``, each with
    ``suggested_reviewer``; another person's personal lessons are left out.
    """
    await follow_skills(sidecar)
    origin = origins(sidecar)
    me = sidecar.settings.person
    rows = []
    for v in await lesson_store.of(sidecar).pending():
        if v.scope == "personal" and v.author_person != me:
            continue
        row = _view_dict(v, origin, agent=True)
        row["suggested_reviewer"] = await _suggested(sidecar, v.id)
        rows.append(row)
    rows.sort(key=lambda r: (r["suggested_reviewer"] not in ("", me), r["received_at"]))
    return {"person": me, "lessons": rows}


async def _find(sidecar: Sidecar, request: dict[str, Any]) -> LessonView:
    ref = request.get("lesson")  # not "id": that names the request itself
    if not isinstance(ref, str) or not ref:
        raise BadRequest("name a lesson by its id (at least its first 6 characters)")
    return await lesson_store.of(sidecar).find(ref.strip().lower())


# ---- recall -----------------------------------------------------------------------------------

def _files(request: dict[str, Any], name: str = "files") -> tuple[str, ...]:
    value = request.get(name) or []
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise BadRequest(f"{name} is a list of paths")
    return tuple(f for f in value[:64] if f.strip())


async def _recall(sidecar: Sidecar, request: dict[str, Any], text: str, limit: int,
                  with_session_files: bool) -> dict[str, Any]:
    from .observe import recent_files

    session = _session(sidecar, request)
    files = _files(request)
    if with_session_files and session is not None:
        files = files + tuple(recent_files(session.key))
    project, _ = project_here(_cwd(sidecar, request, session))
    now_ms = int(time.time() * 1000)
    viewer = await lesson_store.of(sidecar).viewer()
    ranked = await recall.search(sidecar.store, viewer, text=text, files=files, project=project,
                                 origins=origins(sidecar), limit=limit, now_ms=now_ms)
    return {"lessons": [r.to_dict(now_ms) for r in ranked], "text": recall.frames(ranked, now_ms),
            "project": project}


async def op_lesson_search(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Search the verified lessons this person may see, ranked, framed and defanged for a model.

    Request: ``q`` (str, optional): the text to search for; ``files`` (list of str, optional): paths
    the lessons should touch; ``limit`` (int, optional): default 20, at most 100; ``session`` or
    ``cwd`` (str, optional): place the search in a project. Returns ``{"lessons", "text",
    "project"}``. Raises ``bad_request`` for ill-typed fields, ``not_found`` for an unknown session.
    """
    q = request.get("q") or ""
    if not isinstance(q, str):
        raise BadRequest("q is the text to search for")
    return await _recall(sidecar, request, q, _limit(request, SEARCH_LIMIT, 100), with_session_files=False)


async def op_lesson_context(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The lessons for a task: at most 5, ranked with the session's own recent files.

    Request: ``task`` (str, optional): the task in plain words; ``files`` (list of str, optional);
    ``session`` or ``cwd`` (str, optional), as for ``lesson_search``. Returns ``{"lessons", "text",
    "project"}``. Raises ``bad_request`` for ill-typed fields, ``not_found`` for an unknown session.
    """
    task = request.get("task") or ""
    if not isinstance(task, str):
        raise BadRequest("task is the task in plain words")
    return await _recall(sidecar, request, task, CONTEXT_LIMIT, with_session_files=True)


async def op_lesson_cite(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record that an agent used a verified lesson, and whether it worked.

    Request: ``lesson`` (str, required): its id or prefix. ``worked`` (bool, optional): left out
    while unknown. Returns ``{"id", "citations", "successes", "outcome_rate", "note"}``. Raises
    ``bad_request``, ``not_found``, ``lesson_state`` for a lesson that is not verified.
    """
    worked = request.get("worked")
    if worked is not None and not isinstance(worked, bool):
        raise BadRequest("worked is true, false, or left out while unknown")
    view = await _find(sidecar, request)
    if view.state != "verified":
        raise LessonState(f"lesson {view.id[:12]} is {view.state}; only verified lessons are cited")
    after = await lesson_store.of(sidecar).cite(view.id, success=worked)
    return {"id": after.id, "citations": after.citations, "successes": after.successes,
            "outcome_rate": round(after.outcome_rate, 4), "note": "Thanks: recorded."}


# ---- verdicts and retraction ------------------------------------------------------------------

@asks_person
async def op_lesson_review(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Record the person's verdict on a proposed or held lesson, only once they confirm it in person.

    Request: ``lesson`` (str, required): its id or prefix. ``verdict`` (str, required): approve,
    reject or edit. ``text`` (str): the replacement, required for edit. ``scope`` (str, optional):
    personal, project or team. ``note`` (str, optional). ``confirmed_on_terminal`` (str): the
    question typed back at the terminal. Returns ``{"id", "state", "reviewer", "confirmed",
    "note"}``. Raises ``bad_request``, ``not_found``, ``lesson_state`` (not proposed or held),
    ``not_member``, ``refused``/``confirm_on_terminal`` when the person does not confirm.
    """
    verdict = request.get("verdict")
    if verdict not in ("approve", "reject", "edit"):
        raise BadRequest("verdict is approve, reject or edit")
    view = await _find(sidecar, request)
    if view.state not in ("proposed", "held"):
        raise LessonState(f"lesson {view.id[:12]} is {view.state}; only a proposed or held lesson is reviewed")
    text = request.get("text") if verdict == "edit" else None
    if verdict == "edit" and (not isinstance(text, str) or not text.strip()):
        raise BadRequest("an edit needs the replacement text")
    scope = request.get("scope") or None
    if scope is not None and scope not in ("personal", "project", "team"):
        raise BadRequest("scope is personal, project or team")
    note = request.get("note") or ""
    if not isinstance(note, str):
        raise BadRequest("note is text")
    how = await review.confirm(sidecar, conn, request, _view_dict(view, origins(sidecar)), verdict, text=text,
                               scope=scope)
    where = "in a desktop pop-up" if how == "desktop" else "at a terminal"
    note = (note + " " if note else "") + f"(confirmed {where})"
    after = await lesson_store.of(sidecar).review(view.id, verdict, scope=scope, text=text, note=note[:600])
    await follow_skills(sidecar)
    word = {"approve": "approved", "reject": "rejected", "edit": "approved with your text"}[verdict]
    return {"id": after.id, "state": after.state, "reviewer": after.reviewer, "confirmed": how,
            "note": f"lesson {after.id[:12]} {word}; it is {after.state}."}


async def op_lesson_retract(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Retract a lesson everywhere it went, and remove the skills this machine made of it.

    Request: ``lesson`` (str, required): its id or prefix. ``reason`` (str, optional, kept to 600
    characters). Returns ``{"id", "state", "removed", "note"}``; ``removed`` lists the skill folders
    deleted. Raises ``bad_request``, ``not_found``, ``lesson_state`` when already retracted,
    ``not_member`` unless this person wrote or reviewed it.
    """
    view = await _find(sidecar, request)
    reason = request.get("reason") or ""
    if not isinstance(reason, str):
        raise BadRequest("reason is text")
    promoted = await _skills_of(sidecar, view.id)
    after = await lesson_store.of(sidecar).retract(view.id, reason[:600])
    await follow_skills(sidecar)  # the store's listener may have done it already
    removed = [str(path) for path in promoted if not (path / "SKILL.md").exists()]
    note = (f"lesson {after.id[:12]} retracted: its text is deleted here and on each teammate's machine as the "
            "retraction reaches it; a copy someone saved outside hive is not.")
    if removed:
        note += f" Removed {len(removed)} skill folder(s)."
    return {"id": after.id, "state": after.state, "removed": removed, "note": note}


# ---- skills -----------------------------------------------------------------------------------

def _skill_key(root: Path, lesson_id: str) -> str:
    return f"{SKILL_KEY}{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.{lesson_id}"


def _source(view: LessonView, origin: dict[str, str]) -> promote.SkillSource:
    return promote.SkillSource(
        id=view.id, kind=view.kind, text=view.text, applicability=view.applicability, scope=view.effective_scope,
        reviewer=view.reviewer, author=view.author_session or view.author_person, tags=view.tags,
        project=view.effective_project, quote=str((view.quote or {}).get("words", "")),
        evidence=tuple(f"{e.get('kind')}: {e.get('ref')}" for e in view.evidence), supersedes=view.supersedes)


async def op_lesson_promote(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Write a verified lesson into a repository as an agent skill.

    Request: ``lesson`` (str, required): its id or prefix. ``cwd`` (str, required): an absolute
    folder inside the project. ``force`` (bool, optional): overwrite a skill edited by hand.
    Returns ``{"lesson", "skill", "path", "claude", "notes"}``. Raises ``bad_request``,
    ``not_found`` (no lesson, no repository), ``lesson_state`` when not verified, ``refused`` (another
    project's lesson, or a personal one), ``conflict`` for a skill edited by hand without ``force``.
    """
    await follow_skills(sidecar)
    view = await _find(sidecar, request)
    if view.state != "verified":
        raise LessonState(f"lesson {view.id[:12]} is {view.state}; only a verified lesson becomes a skill")
    cwd = request.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise BadRequest("promote needs 'cwd': a folder of the project")
    project, root = project_here(cwd)
    if not root:
        raise NotFound(f"no git repository at or above {cwd}: a skill is written into a project")
    if view.effective_scope == "project" and view.effective_project != project:
        raise Refused("that lesson belongs to another project; promote it from inside that project's repository")
    folder = await _skill_record(sidecar, Path(root), view.id)
    written = promote.write_skill(Path(root), _source(view, origins(sidecar)), folder=folder,
                                  force=bool(request.get("force")))
    await _remember_skill(sidecar, Path(root), view.id, written.skill)
    return written.to_dict()


async def _skills_of(sidecar: Sidecar, lesson_id: str) -> list[Path]:
    """The skill folders this machine wrote for a lesson."""
    rows = await sidecar.store.fetchall("SELECT value FROM kv WHERE key >= ? AND key < ?",
                                        (SKILL_KEY, SKILL_KEY[:-1] + "/"))
    records = [json.loads(r[0]) for r in rows]
    return [Path(r["root"]) / promote.SKILLS_DIR / r["folder"] for r in records if r["lesson"] == lesson_id]


async def _skill_record(sidecar: Sidecar, root: Path, lesson_id: str) -> str | None:
    raw = await sidecar.store.get_kv(_skill_key(root, lesson_id))
    return json.loads(raw)["folder"] if raw else None


async def _remember_skill(sidecar: Sidecar, root: Path, lesson_id: str, folder: str) -> None:
    await sidecar.store.set_kv(_skill_key(root, lesson_id),
                               json.dumps({"root": str(root), "folder": folder, "lesson": lesson_id}))


_skill_locks: weakref.WeakKeyDictionary[Sidecar, anyio.Lock] = weakref.WeakKeyDictionary()


async def follow_skills(sidecar: Sidecar) -> list[str]:
    """Bring every skill this machine promoted in line with its lesson; returns the folders removed.

    One pass at a time: the store's listener and the op that made the change both call this, and
    a pass that read the records before a retraction must not re-render a skill the other removed.
    """
    lock = _skill_locks.get(sidecar)
    if lock is None:
        lock = _skill_locks[sidecar] = anyio.Lock()
    async with lock:
        return await _follow_skills(sidecar)


async def _follow_skills(sidecar: Sidecar) -> list[str]:
    rows = await sidecar.store.fetchall("SELECT key, value FROM kv WHERE key >= ? AND key < ?",
                                        (SKILL_KEY, SKILL_KEY[:-1] + "/"))
    if not rows:
        return []
    store = lesson_store.of(sidecar)
    removed: list[str] = []
    origin: dict[str, str] | None = None
    for row in rows:
        record = json.loads(row[1])
        root, folder, lesson_id = Path(record["root"]), record["folder"], record["lesson"]
        view = await store.get(lesson_id)
        if view is None or view.state == "retracted":
            promote.remove_skill(root, folder, (lesson_id,))
            await sidecar.store.write([("DELETE FROM kv WHERE key = ?", (row[0],))])
            removed.append(str(root / promote.SKILLS_DIR / folder))
            continue
        if view.state != "superseded" or not view.superseded_by:
            continue
        successor = await store.get(view.superseded_by)
        if successor is None or successor.state != "verified":
            continue
        origin = origin if origin is not None else origins(sidecar)
        try:
            promote.write_skill(root, _source(successor, origin), folder=folder, replaces=lesson_id)
        except Exception as exc:  # a hand-edited file, or a folder gone: say so in the log, keep the record
            log.warning("could not re-render %s for lesson %s: %s", folder, successor.id[:12], exc)
            continue
        await sidecar.store.write([("DELETE FROM kv WHERE key = ?", (row[0],))])
        await _remember_skill(sidecar, root, successor.id, folder)
    return removed


# ---- import -----------------------------------------------------------------------------------

async def op_lesson_import(sidecar: Sidecar, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Import a Beacon memory database's records as lesson proposals, each once.

    Request: ``path`` (str, optional): the absolute path of its memory.db (default Beacon's own).
    Returns ``{"path", "proposed": [{"id", "beacon_id", "state", "scope"}], "skipped": [{"id",
    "reason"}]}``. Raises ``bad_request`` for a relative path, ``not_found`` when there is no such file.
    """
    path = request.get("path")
    if path is not None and (not isinstance(path, str) or not os.path.isabs(path)):
        raise BadRequest("path is the absolute path of a Beacon memory.db")
    report = lesson_import.read(path)
    store = lesson_store.of(sidecar)
    ctx = await lesson_store.context_of(sidecar)
    project_cache: dict[str, str] = {}
    proposed, skipped = [], list(report.skipped)
    for item in report.found:
        done = await sidecar.store.get_kv(IMPORT_KEY + item.beacon_id)
        if done:
            skipped.append({"id": item.beacon_id, "reason": f"already imported as lesson {done[:12]}"})
            continue
        project = ""
        if item.remote_url:
            from .projects import project_id

            project = project_cache.setdefault(item.remote_url, project_id(item.remote_url))
        fields: dict[str, Any] = {
            "kind": item.kind, "text": item.text, "applicability": item.applicability,
            "scope": "project" if project else "personal", "project": project,
            "evidence": [{"kind": e["kind"], "ref": e["ref"]} for e in item.evidence],
            "tags": [t for t in (lesson_import_tag(t) for t in item.tags) if t],
        }
        try:
            body = lesson_store.new_lesson_here(ctx, fields, session=f"{sidecar.terminal} (beacon import)")
            view = await store.propose(body)
        except Exception as exc:
            code = getattr(exc, "code", "internal")
            skipped.append({"id": item.beacon_id, "reason": f"{code}: {getattr(exc, 'message', exc)}"})
            continue
        await sidecar.store.set_kv(REVIEWER_KEY + view.id, json.dumps({"person": sidecar.settings.person,
                                                                       "why": "proposer"}))
        await sidecar.store.set_kv(IMPORT_KEY + item.beacon_id, view.id)
        proposed.append({"id": view.id, "beacon_id": item.beacon_id, "state": view.state, "scope": view.scope})
    return {"path": str(path or lesson_import.default_path()), "proposed": proposed, "skipped": skipped}


def lesson_import_tag(tag: str) -> str:
    from .config import slug

    return slug(tag, 40)


def _follow_changes(sidecar: Sidecar, store: lesson_store.LessonStore) -> None:
    """A retraction or a verified successor, made here or replicated, re-renders or removes promoted skills."""

    async def changed(lesson_id: str, state: str) -> None:
        if state in ("retracted", "verified", "superseded"):
            await follow_skills(sidecar)
        elif state == "proposed":
            await _arrived(sidecar, store, lesson_id)

    store.state_listeners.append(changed)


async def _arrived(sidecar: Sidecar, store: lesson_store.LessonStore, lesson_id: str) -> None:
    """A teammate's project or team proposal reached this machine: when this machine's person is the one to
    review it (by the CODEOWNERS of a local clone, or their own sessions' touches), their pop-up asks them."""
    from .projects import project_of_session

    view = await store.get(lesson_id)
    if view is None or view.local or view.scope == "personal" or view.state != "proposed":
        return
    root = ""
    for session in list(sidecar.sessions.by_key.values()):
        if view.project and project_of_session(session.repo, session.cwd) == view.project:
            root = git_facts(session.cwd).get("repo_root", "")
            if root:
                break
    choice = await review.choose_reviewer(sidecar, scope=view.scope, author_person=view.author_person,
                                          files=review.file_refs(view.evidence), repo_root=root)
    await sidecar.store.set_kv(REVIEWER_KEY + view.id, json.dumps({"person": choice.person, "why": choice.why}))
    if choice.person == sidecar.settings.person:
        # Not awaited here: the gate's decision and the pop-up going up must not hold up replication.
        sidecar.tasks.start_soon(_offer_arrived, sidecar, view)


async def _offer_arrived(sidecar: Sidecar, view: LessonView) -> None:
    try:
        await _offer_review(sidecar, view)
    except Exception:
        log.exception("offering the review of lesson %s failed", view.id[:12])


lesson_store.ON_OPEN.append(_follow_changes)
BEFORE_DIGEST.append(offer_held_reviews)


OPS = {
    "lesson_propose": op_lesson_propose,
    "lesson_list": op_lesson_list,
    "lesson_show": op_lesson_show,
    "lesson_pending": op_lesson_pending,
    "lesson_search": op_lesson_search,
    "lesson_context": op_lesson_context,
    "lesson_cite": op_lesson_cite,
    "lesson_review": op_lesson_review,
    "lesson_retract": op_lesson_retract,
    "lesson_promote": op_lesson_promote,
    "lesson_import": op_lesson_import,
}

"""The lessons' local protocol ops: what ``hive lessons``, the MCP tools and the hooks ask the sidecar.

Ops (each a request ``{"op": ..., ...}``; ``session`` is the asking session, absent for the person's
own terminal; ``lesson`` is a lesson id or its first 6+ characters (``id`` is the request's own);
``cwd`` locates the repository when there is no session):

``lesson_propose``  {kind, text, applicability?, scope?, evidence, tags?, quote?, supersedes?}
                    files a proposal, chooses its reviewer (:mod:`hive.sidecar.lessons.review`) and, when that is
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
``lesson_import``   {path?}              Beacon lessons as proposals (:mod:`hive.sidecar.lessons.beacon`)

The review pop-up and the digest's held proposals are :mod:`hive.sidecar.lessons.desk`'s; promoted
skills follow their lessons in :mod:`hive.sidecar.lessons.promoted`. :func:`follow_changes` wires both
to the store's state changes: it is the lessons feature's setup.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest, LessonBadScope, LessonState, NotFound, Refused
from ..base.git import git_facts
from ..person.confirm import asks_person
from . import beacon as lesson_import
from . import promote, recall, review
from . import store as lesson_store
from .desk import REVIEWER_KEY, arrived, assign_reviewer, offer_review, suggested_reviewer
from .desk import offer_held_reviews as offer_held_reviews
from .promoted import follow_skills, remember_skill, skill_record, skill_source, skills_of
from .records import EVIDENCE_KINDS
from .views import LessonView, view_dict
from .views import origins as origins

if TYPE_CHECKING:
    from ..base.host import Connection
    from ..mail.host import MailHost
    from ..sessions.registry import Session

SEARCH_LIMIT = 20
CONTEXT_LIMIT = 5
IMPORT_KEY = "lesson.beacon."  # a Beacon record imported once stays one lesson


# ---- who and where ----------------------------------------------------------------------------


def _session(sidecar: MailHost, request: dict[str, Any]) -> Session | None:
    ref = request.get("session")
    if ref in (None, "", "terminal", sidecar.terminal):
        return None
    return sidecar.sessions.find(ref)


def _cwd(sidecar: MailHost, request: dict[str, Any], session: Session | None) -> str:
    if session is not None and session.cwd:
        return session.cwd
    cwd = request.get("cwd")
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else ""


def project_here(cwd: str) -> tuple[str, str]:
    """``(project id, repository root)`` for a folder ("" for either when unknown)."""
    from ..team.projects import project_id

    facts = git_facts(cwd) if cwd else {}
    root = facts.get("repo_root", "")
    origin = facts.get("repo", "")
    if origin:
        return project_id(origin), root
    return (project_id(root), root) if root else ("", "")


# ---- propose ----------------------------------------------------------------------------------


async def op_lesson_propose(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    fields: dict[str, Any] = {
        k: request[k]
        for k in ("kind", "text", "applicability", "scope", "project", "evidence", "tags", "quote", "supersedes")
        if k in request and request[k] is not None
    }
    fields.setdefault("scope", "project")
    if isinstance(fields.get("evidence"), list):
        fields["evidence"] = [evidence_item(e) for e in fields["evidence"]]
    project, root = project_here(_cwd(sidecar, request, session))
    if fields["scope"] == "project" and not fields.get("project"):
        if not project:
            raise LessonBadScope(
                "a project lesson is proposed from inside its repository (no git repository here); "
                "or choose scope team or personal"
            )
        fields["project"] = project
    store = lesson_store.of(sidecar)
    ctx = await lesson_store.context_of(sidecar)
    body = lesson_store.new_lesson_here(ctx, fields, session=author)
    view = await (store.supersede(body.supersedes, body) if body.supersedes else store.propose(body))
    choice = await assign_reviewer(sidecar, view, root)
    note = f"proposed; {choice.person} reviews it ({_why(choice.why)})."
    if view.state == "verified":
        note = "already verified."
    elif choice.person == sidecar.settings.person:
        note += " " + await offer_review(sidecar, view)
    else:
        note += " It waits in their `hive lessons pending` once it reaches their machine. Until then no agent sees it."
    return {
        "id": view.id,
        "state": view.state,
        "reviewer": choice.person,
        "reviewer_why": choice.why,
        "scope": view.scope,
        "project": view.project,
        "note": note,
    }


def evidence_item(item: Any) -> Any:
    """``{kind, ref}`` as is; ``kind:ref`` (``file:src/a.py``, ``commit:abc``) split; a bare path is a file."""
    if not isinstance(item, str):
        return item
    kind, sep, ref = item.partition(":")
    if sep and kind in EVIDENCE_KINDS and ref.strip():
        return {"kind": kind, "ref": ref.strip()}
    return {"kind": "file", "ref": item.strip()}


def _why(why: str) -> str:
    return {
        "personal": "a personal lesson is its own person's",
        "codeowners": "CODEOWNERS of its evidence files",
        "touches": "whose sessions touched its evidence files most in 30 days",
        "proposer": "no owner of its evidence files is known",
    }.get(why, why)


# ---- reading ----------------------------------------------------------------------------------


def _limit(request: dict[str, Any], default: int, high: int) -> int:
    value = request.get("limit", default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"limit is a whole number, at most {high}")
    return min(max(value, 1), high)


async def op_lesson_list(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
        row = view_dict(v, origin, agent=True)
        row["suggested_reviewer"] = await suggested_reviewer(sidecar, v.id) if v.state in ("proposed", "held") else ""
        rows.append(row)
    return {"lessons": rows}


async def op_lesson_show(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Show one lesson, peer-written text defanged.

    Request: ``lesson`` (str, required): its id or its first 6+ hex digits. Returns ``{"lesson"}``
    with ``suggested_reviewer`` and ``screening``: None, or the rule its text matches and the
    matched text (``{"rule", "excerpt"}``), for which it is never recalled. Raises ``bad_request``
    without ``lesson``, ``not_found`` for no lesson or several by that prefix.
    """
    view = await _find(sidecar, request)
    row = view_dict(view, origins(sidecar), agent=True)  # an agent may run `hive lessons show` too
    row["suggested_reviewer"] = await suggested_reviewer(sidecar, view.id)
    found = recall.screened_out(view.text, view.applicability)
    row["screening"] = None if found is None else {"rule": found.rule, "excerpt": found.excerpt}
    return {"lesson": row}


async def op_lesson_pending(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
        row = view_dict(v, origin, agent=True)
        row["suggested_reviewer"] = await suggested_reviewer(sidecar, v.id)
        rows.append(row)
    rows.sort(key=lambda r: (r["suggested_reviewer"] not in ("", me), r["received_at"]))
    return {"person": me, "lessons": rows}


async def _find(sidecar: MailHost, request: dict[str, Any]) -> LessonView:
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


async def _recall(
    sidecar: MailHost, request: dict[str, Any], text: str, limit: int, with_session_files: bool
) -> dict[str, Any]:
    from ..presence.observe import recent_files

    session = _session(sidecar, request)
    files = _files(request)
    if with_session_files and session is not None:
        files = files + tuple(recent_files(sidecar, session.key))
    project, _ = project_here(_cwd(sidecar, request, session))
    now_ms = int(time.time() * 1000)
    viewer = await lesson_store.of(sidecar).viewer()
    ranked = await recall.search(
        sidecar.store,
        viewer,
        text=text,
        files=files,
        project=project,
        origins=origins(sidecar),
        limit=limit,
        now_ms=now_ms,
    )
    return {"lessons": [r.to_dict(now_ms) for r in ranked], "text": recall.frames(ranked, now_ms), "project": project}


async def op_lesson_search(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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


async def op_lesson_context(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """The lessons for a task: at most 5, ranked with the session's own recent files.

    Request: ``task`` (str, optional): the task in plain words; ``files`` (list of str, optional);
    ``session`` or ``cwd`` (str, optional), as for ``lesson_search``. Returns ``{"lessons", "text",
    "project"}``. Raises ``bad_request`` for ill-typed fields, ``not_found`` for an unknown session.
    """
    task = request.get("task") or ""
    if not isinstance(task, str):
        raise BadRequest("task is the task in plain words")
    return await _recall(sidecar, request, task, CONTEXT_LIMIT, with_session_files=True)


async def op_lesson_cite(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    return {
        "id": after.id,
        "citations": after.citations,
        "successes": after.successes,
        "outcome_rate": round(after.outcome_rate, 4),
        "note": "Thanks: recorded.",
    }


# ---- verdicts and retraction ------------------------------------------------------------------


@asks_person
async def op_lesson_review(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    how = await review.confirm(
        sidecar, conn, request, view_dict(view, origins(sidecar)), verdict, text=text, scope=scope
    )
    where = "in a desktop pop-up" if how == "desktop" else "at a terminal"
    note = (note + " " if note else "") + f"(confirmed {where})"
    after = await lesson_store.of(sidecar).review(view.id, verdict, scope=scope, text=text, note=note[:600])
    await follow_skills(sidecar)
    word = {"approve": "approved", "reject": "rejected", "edit": "approved with your text"}[verdict]
    return {
        "id": after.id,
        "state": after.state,
        "reviewer": after.reviewer,
        "confirmed": how,
        "note": f"lesson {after.id[:12]} {word}; it is {after.state}.",
    }


async def op_lesson_retract(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    promoted = await skills_of(sidecar, view.id)
    after = await lesson_store.of(sidecar).retract(view.id, reason[:600])
    await follow_skills(sidecar)  # the store's listener may have done it already
    removed = [str(path) for path in promoted if not (path / "SKILL.md").exists()]
    note = (
        f"lesson {after.id[:12]} retracted: its text is deleted here and on each teammate's machine as the "
        "retraction reaches it; a copy someone saved outside hive is not."
    )
    if removed:
        note += f" Removed {len(removed)} skill folder(s)."
    return {"id": after.id, "state": after.state, "removed": removed, "note": note}


# ---- skills -----------------------------------------------------------------------------------


async def op_lesson_promote(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
    folder = await skill_record(sidecar, Path(root), view.id)
    written = promote.write_skill(
        Path(root), skill_source(view, origins(sidecar)), folder=folder, force=bool(request.get("force"))
    )
    await remember_skill(sidecar, Path(root), view.id, written.skill)
    return written.to_dict()


# ---- import -----------------------------------------------------------------------------------


async def op_lesson_import(sidecar: MailHost, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
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
            from ..team.projects import project_id

            project = project_cache.setdefault(item.remote_url, project_id(item.remote_url))
        fields: dict[str, Any] = {
            "kind": item.kind,
            "text": item.text,
            "applicability": item.applicability,
            "scope": "project" if project else "personal",
            "project": project,
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
        await sidecar.store.set_kv(
            REVIEWER_KEY + view.id, json.dumps({"person": sidecar.settings.person, "why": "proposer"})
        )
        await sidecar.store.set_kv(IMPORT_KEY + item.beacon_id, view.id)
        proposed.append({"id": view.id, "beacon_id": item.beacon_id, "state": view.state, "scope": view.scope})
    return {"path": str(path or lesson_import.default_path()), "proposed": proposed, "skipped": skipped}


def lesson_import_tag(tag: str) -> str:
    from ..base.config import slug

    return slug(tag, 40)


def follow_changes(sidecar: MailHost) -> None:
    """The lessons feature's setup: a retraction or a verified successor, made here or replicated,
    re-renders or removes promoted skills, and a teammate's proposal this person reviews asks them."""
    store = lesson_store.of(sidecar)

    async def changed(lesson_id: str, state: str) -> None:
        if state in ("retracted", "verified", "superseded"):
            await follow_skills(sidecar)
        elif state == "proposed":
            await arrived(sidecar, store, lesson_id)

    store.state_listeners.append(changed)


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

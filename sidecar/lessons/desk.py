"""The review desk: asking this machine's person to review a lesson proposal, through their gate.

A proposal this person reviews, filed here (:func:`~hive.sidecar.lessons.ops.op_lesson_propose`) or
arrived from a teammate (:func:`arrived`), is offered to their gate as a ``review`` item
(:func:`offer_review`, ``Gate.offer_now``: now or not at all, spending the review share of their
budget). When the gate delivers it the pop-up goes up (it never waits for the answer), and a click
is their verdict; one the gate holds back waits in their digest. A proposal nobody answered for a day
reads as held: it is not asked again, and is offered once more before their digest is read
(:func:`offer_held_reviews`), which lists it there. Who was suggested as a proposal's reviewer is
remembered in ``kv`` (``lesson.reviewer.<lesson>``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import one_line
from ..base.errors import HiveError, LessonState
from ..base.git import git_facts
from ..base.host import PerSidecar
from ..gate.engine import MAX_EVIDENCE, MAX_REF, MAX_TITLE, Evidence, Item, gate_of
from ..person.dialog import Answer
from . import review
from . import store as lesson_store
from .promoted import follow_skills
from .views import LessonView, origins, view_dict

if TYPE_CHECKING:
    from ..mail.host import MailHost

log = logging.getLogger("hive.sidecar.lessons.desk")

REVIEWER_KEY = "lesson.reviewer."
HELD_KEY = "lesson.held."  # asked_at of the held time a proposal was last put in its reviewer's digest for


@dataclass
class Desk:
    """Per-sidecar state: proposals whose pop-up is up (not asked twice at once)."""

    asking: set[str] = field(default_factory=set)


DESKS: PerSidecar[Desk] = PerSidecar(lambda sidecar: Desk())


def desk(sidecar: MailHost) -> Desk:
    return DESKS.of(sidecar)


def review_item(sidecar: MailHost, view: LessonView, *, held: bool = False) -> Item:
    """The gate item (source ``review``) that asks this machine's person to review ``view``; ``held``:
    nobody answered it for a day, and it is listed in their digest instead of asked again."""
    author = one_line(view.author_session or view.author_person, 80)
    text = one_line(view.text, 4000)
    what = "held for your review: nobody answered it for a day" if held else "asks for your review"
    files = [
        Evidence("file", (f"{view.project}:{f}" if view.project else f)[:MAX_REF])
        for f in review.file_refs(view.evidence)[: MAX_EVIDENCE - 1]
    ]
    # A held proposal is named apart from its pop-up, and by when it was last asked for, so it is
    # listed once per time it was held; the pop-up's own fingerprint keeps a proposal asked once a day.
    key = f"review:{view.id}" + (f":held:{int(view.asked_at)}" if held else "")
    return Item(
        source="review",
        person=sidecar.settings.person,
        title=f"Lesson {view.id[:12]} by {author} {what}: {text}"[:MAX_TITLE],
        body=text,
        evidence=(Evidence("lesson", view.id), *files),
        key=key,
        proposer=author,
        data={"lesson": view.id},
    )


async def offer_review(sidecar: MailHost, view: LessonView) -> str:
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
    return (
        f"Their gate did not put the pop-up up ({decision.rule}: {decision.reason}); it waits in "
        "`hive lessons pending`" + (" and their `hive digest`." if decision.outcome == "digest" else ".")
    )


async def _pop_up(sidecar: MailHost, view: LessonView) -> None:
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


async def _ask_here(sidecar: MailHost, view: LessonView, on_screen: anyio.Event, failed: list[HiveError]) -> None:
    """The review pop-up for this machine's person; a click is their verdict, silence changes nothing."""
    try:
        origin = origins(sidecar)
        answer = await review.ask_reviewer(sidecar, view_dict(view, origin), on_screen)
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


async def offer_held_reviews(sidecar: MailHost, person: str) -> None:
    """Before ``person``'s digest: each proposal they review that nobody answered for a day (it reads as
    held) is offered to their gate once, which lists it in the digest; no pop-up asks again."""
    if person != sidecar.settings.person:
        return
    gate = gate_of(sidecar)
    for view in await lesson_store.of(sidecar).pending():
        if view.state != "held" or await suggested_reviewer(sidecar, view.id) != person:
            continue
        if view.scope == "personal" and view.author_person != person:
            continue
        marker = HELD_KEY + view.id
        if await sidecar.store.get_kv(marker) == repr(view.asked_at):
            continue  # offered for this time it was held
        await gate.offer(review_item(sidecar, view, held=True))
        await sidecar.store.set_kv(marker, repr(view.asked_at))


async def assign_reviewer(sidecar: MailHost, view: LessonView, repo_root: str) -> review.Choice:
    """Choose who reviews ``view`` (its evidence's code owners in ``repo_root``, else the team's
    rules) and remember it for the lesson, where :func:`suggested_reviewer` reads it."""
    choice = await review.choose_reviewer(
        sidecar,
        scope=view.scope,
        author_person=view.author_person,
        files=review.file_refs(view.evidence),
        repo_root=repo_root,
    )
    await sidecar.store.set_kv(REVIEWER_KEY + view.id, json.dumps({"person": choice.person, "why": choice.why}))
    return choice


async def suggested_reviewer(sidecar: MailHost, lesson_id: str) -> str:
    """The person chosen to review a lesson on this machine ("" when none was recorded)."""
    raw = await sidecar.store.get_kv(REVIEWER_KEY + lesson_id)
    if not raw:
        return ""
    try:
        return str(json.loads(raw).get("person") or "")
    except ValueError:
        return ""


async def arrived(sidecar: MailHost, store: lesson_store.LessonStore, lesson_id: str) -> None:
    """A teammate's project or team proposal reached this machine: when this machine's person is the one to
    review it (by the CODEOWNERS of a local clone, or their own sessions' touches), their pop-up asks them."""
    from ..team.projects import project_of_session

    view = await store.get(lesson_id)
    if view is None or view.local or view.scope == "personal" or view.state != "proposed":
        return
    root = ""
    for session in list(sidecar.sessions.by_key.values()):
        if view.project and project_of_session(session.repo, session.cwd) == view.project:
            root = git_facts(session.cwd).get("repo_root", "")
            if root:
                break
    choice = await assign_reviewer(sidecar, view, root)
    if choice.person == sidecar.settings.person:
        # Not awaited here: the gate's decision and the pop-up going up must not hold up replication.
        sidecar.tasks.start_soon(_offer_arrived, sidecar, view)


async def _offer_arrived(sidecar: MailHost, view: LessonView) -> None:
    try:
        await offer_review(sidecar, view)
    except Exception:
        log.exception("offering the review of lesson %s failed", view.id[:12])

"""Turn-tier recall: a verified lesson put in front of a session at its next hook point, when it matters.

A lesson matters to a session when its evidence files (or folders) hold files the session touched
in the last half hour (:func:`hive.sidecar.presence.observe.recent_files`), or when the session's words match
it well: what its person typed for this turn (the prompt hook), what the session says it is doing
(its ``doing`` line) and the error text of a command that failed
(:func:`hive.sidecar.lessons.recall.for_turn`, the same search as ``search_memory``). Then one
framed line, ``<hive-lesson id=… reviewed-by=… why=…>text</hive-lesson>``, goes out with the next
hook reply that can carry text to the model (:func:`hive.sidecar.agents.hooks.hook`): a prompt, session start
or tool point, never a stop point, whose only way to carry text is to keep the agent running.

Limits, so recall informs rather than interrupts: each lesson at most once per session, at most
:data:`HOURLY_CAP` lessons per session per hour, and only lessons of the session's own project
(another project's lesson is a hypothesis: the agent finds it with ``search_memory`` if it looks).

Each lesson that passes them is then offered to the person's gate (:mod:`hive.sidecar.gate.engine`, source
``lesson``, :meth:`~hive.sidecar.gate.engine.Gate.offer_now` on the session channel: now or not at all),
and its line goes out only when the gate delivers it; a lesson the gate holds back (a mute, the
digest-only channel, quiet hours, shadow, a duplicate) is not put in front of the session this
time, and the ledger and the digest say why. It does not spend the person's daily budget: the line
rides on a reply the agent gets anyway and interrupts nobody, and the cap above limits it where it is
made. Only a lesson that matched reaches the gate, so a hook with nothing to recall costs no more.
The told sets are memory only, but the gate's dedupe is not: after a restart, a lesson told to a
session in the last day is a duplicate (the gate's window) and not told again.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.defang import one_line
from ..base.host import PerSidecar
from . import recall

if TYPE_CHECKING:
    from hive.integrations.descriptor import HookPoint

    from ..mail.host import MailHost
    from ..sessions.registry import Session

log = logging.getLogger("hive.sidecar.lessons.turn")

HOURLY_CAP = 3
PROPOSER = "hive/recall"  # who offers recalled lessons to the gate (the ledger's proposer)
ERROR_TEXT = 2000  # characters of a failure's output matched against lessons
PROMPT_TEXT = 2000  # characters of the person's prompt matched against lessons
_ERROR_KEYS = ("stderr", "error", "output", "stdout", "message")


@dataclass
class Told:
    """What one session was told: lesson ids, and when (for the hourly cap)."""

    ids: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)  # lesson ids the gate held back here: not offered twice
    times: deque[float] = field(default_factory=deque)
    waiting: dict[str, str] = field(default_factory=dict)  # lesson id -> its line, for the next point that can carry it
    prompt: str = ""  # what the person last typed into the session: the turn's words
    # The recent files and prompt a look found nothing new for, and the lesson state changes seen
    # then: the same with no change since find nothing new again (told ids only grow), so no query.
    quiet: tuple[frozenset[str], str, int] | None = None


@dataclass(frozen=True)
class Due:
    session: str
    lines: dict[str, str]  # lesson id -> framed line

    @property
    def text(self) -> str:
        return "\n".join(self.lines.values())


@dataclass
class Verified:
    """How many verified lessons this machine holds (``None``: to count again). Every hook of every
    session would otherwise query for lessons even where there are none to find."""

    count: int | None = None
    changes: int = 0  # lesson state changes seen, so a count read across a change is not kept

    async def changed(self, lesson_id: str, state: str) -> None:
        self.count = None
        self.changes += 1


def _verified(sidecar: MailHost) -> Verified:
    from . import store as lesson_store

    verified = Verified()
    # Every state change here or replicated goes through the lesson store's state listeners.
    lesson_store.of(sidecar).state_listeners.append(verified.changed)
    return verified


VERIFIED: PerSidecar[Verified] = PerSidecar(_verified)
TOLD: PerSidecar[dict[str, Told]] = PerSidecar(lambda sidecar: {})


async def verified_count(sidecar: MailHost) -> int:
    """The number of verified lessons here, counted again only after a lesson's state changed."""
    verified = VERIFIED.of(sidecar)
    if verified.count is not None:
        return verified.count
    changes = verified.changes
    row = await sidecar.store.fetchone("SELECT COUNT(*) FROM lessons WHERE state = 'verified'")
    count = int(row[0]) if row is not None else 0
    if verified.changes == changes:
        verified.count = count
    return count


def _told(sidecar: MailHost) -> dict[str, Told]:
    return TOLD.of(sidecar)


def failure_text(payload: dict[str, Any]) -> str:
    """The error output of a tool call that failed (a non-zero exit, an error field), else ""."""
    response = next(
        (
            payload[k]
            for k in ("tool_response", "tool_output", "toolResult", "result")
            if isinstance(payload.get(k), dict | str)
        ),
        None,
    )
    failed = False
    for holder in (response, payload):
        if isinstance(holder, dict):
            for key in ("exit_code", "exitCode", "returncode"):
                value = holder.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value != 0:
                    failed = True
            if holder.get("is_error") is True or holder.get("success") is False or holder.get("error"):
                failed = True
    if not failed:
        return ""
    parts: list[str] = []
    if isinstance(response, str):
        parts.append(response)
    elif isinstance(response, dict):
        parts += [response[k] for k in _ERROR_KEYS if isinstance(response.get(k), str)]
    if isinstance(payload.get("error"), str):
        parts.append(payload["error"])
    return "\n".join(parts)[-ERROR_TEXT:]


async def due(sidecar: MailHost, session: Session, point: HookPoint, payload: dict[str, Any]) -> Due:
    """The lesson lines this hook point should carry to the session (nothing if it cannot carry text)."""
    if point.inject is None or point.event in ("session.end", "turn.stop"):
        return Due(session.key, {})  # a stop point carries text by blocking the stop: a lesson never does that
    told = _told(sidecar).setdefault(session.key, Told())
    try:
        await _look(sidecar, session, point, payload, told)
    except Exception:  # recall must never cost the hook its mail
        log.exception("turn-tier recall failed for %s", session.key)
    return Due(session.key, dict(told.waiting))


async def _look(sidecar: MailHost, session: Session, point: HookPoint, payload: dict[str, Any], told: Told) -> None:
    from ..presence.observe import recent_files
    from ..team.projects import project_of_session

    if point.event == "prompt.submitted" and isinstance(payload.get("prompt"), str):
        told.prompt = payload["prompt"][:PROMPT_TEXT]  # the person's words hold for the whole turn
    now = time.time()
    while told.times and now - told.times[0] > 3600:
        told.times.popleft()
    room = HOURLY_CAP - len(told.times) - len(told.waiting)
    if room <= 0 or await verified_count(sidecar) == 0:  # recall finds verified lessons only
        return
    files = tuple(recent_files(sidecar, session.key, now))
    error = failure_text(payload) if point.event == "tool.after" else ""
    # The session's words: what its person typed for this turn, what it says it is doing (its
    # harness's task line or todo item) and a failed command's output.
    words = "\n".join(part for part in (told.prompt, session.doing) if part)
    if not files and not words and not error:
        return
    # taken before the queries
    quiet = (frozenset(files), words, VERIFIED.of(sidecar).changes)
    if not error and told.quiet == quiet:
        return
    from . import store as lesson_store
    from .ops import origins

    project = project_of_session(session.repo, session.cwd) or ""  # reads the repository when there is no remote
    now_ms = int(now * 1000)
    viewer = await lesson_store.of(sidecar).viewer()
    found = await recall.for_turn(
        sidecar.store,
        viewer,
        words=words,
        error=error,
        files=files,
        project=project,
        origins=origins(sidecar),
        now_ms=now_ms,
    )
    fresh = [
        (r, why)
        for r, why in found
        if r.lesson.id not in told.ids and r.lesson.id not in told.waiting and r.lesson.id not in told.held
    ]
    if not fresh:
        told.quiet = quiet  # every lesson found is told, waiting or held back already
        return
    for ranked, why in fresh[:room]:
        await _offer(sidecar, session, told, ranked, why, recall.turn_line(ranked, why, now_ms), project)


async def _offer(
    sidecar: MailHost, session: Session, told: Told, ranked: recall.Ranked, why: str, line: str, project: str
) -> None:
    """Through the gate: the line waits for the hook's reply only when the gate delivers it now."""
    from ..base.errors import HiveError
    from ..gate.engine import MAX_BODY, MAX_EVIDENCE, MAX_REF, MAX_TITLE, Evidence, Item, gate_of

    lesson = ranked.lesson
    try:
        gate = gate_of(sidecar)
    except HiveError:  # no gate in this sidecar: the limits above are all there is
        told.waiting[lesson.id] = line
        return

    async def deliver(_item: Item, _decision: Any) -> None:
        told.waiting[lesson.id] = line  # the reply of this hook (or the next that can carry text) takes it

    address = sidecar.sessions.address(session)
    where = lesson.project or project
    files = [Evidence("file", (f"{where}:{f}" if where else f)[:MAX_REF]) for f in lesson.files[: MAX_EVIDENCE - 1]]
    text = one_line(lesson.text, MAX_BODY)
    decision = await gate.offer_now(
        Item(
            source="lesson",
            person=sidecar.settings.person,
            session=address,
            title=f"Lesson {lesson.id[:12]} for {address}: {text}"[:MAX_TITLE],
            body=text,
            evidence=(Evidence("lesson", lesson.id), *files),
            key=f"lesson:{lesson.id}:{address}",
            proposer=PROPOSER,
            data={"lesson": lesson.id, "session": session.key, "why": why},
        ),
        deliver,
        channel="session",
    )
    if decision.outcome != "deliver":
        told.held.add(lesson.id)  # asked once per session, as a told one; the gate's ledger says why not


async def shown(sidecar: MailHost, session: Session, lessons: Due) -> None:
    """The reply carrying ``lessons`` went out: never again in this session; counted against the cap."""
    if not lessons.lines:
        return
    from ..presence.observe import Event, store_events

    told = _told(sidecar).setdefault(session.key, Told())
    now = time.time()
    for lesson_id in lessons.lines:
        told.waiting.pop(lesson_id, None)
        told.ids.add(lesson_id)
        told.times.append(now)
    await store_events(
        sidecar.store,
        [
            Event(
                at=now,
                session=session.key,
                harness=session.agent,
                action="lesson.injected",
                method="hook",
                fidelity="observed",
                detail=json.dumps({"lesson": lesson_id}),
            )
            for lesson_id in lessons.lines
        ],
    )

"""Recall: which lessons an agent sees for a query and its files, in what order, and how they are shown.

One search path (:func:`search`) serves the pull tier (``search_memory``, ``lesson_context``), the
CLI and the turn tier (:func:`for_turn`), and its candidates are only lessons the viewer may be
shown (:class:`Viewer`: team lessons, their own personal ones, project lessons of projects they are
a member of) and only verified, current ones (the index holds nothing else), before any cut.

Ranking (seed Part 3 §5) adds five signals, each scaled to 0..1, with these weights::

    score = 1.0 × relevance   how well its words answer the request (:mod:`hive.sidecar.lessons.relevance`:
                              half the weighted share of the request's words it holds, half BM25
                              over its text, applicability and tags), absolute, not scaled by the best
          + 0.6 × overlap     1 when the session touched a file the lesson's evidence names, ½ when
                              only files beneath a folder it names (recently: the last half hour)
          + 0.4 × outcome     (successes + 1) / (citations + 2): a new lesson starts at ½
          + 0.3 × scope       narrowest first: personal 1, this project ⅔, team ⅓, another project 0
          + 0.2 × freshness   ½ ** (age in days / 90)

Ties go to the newer lesson, then the smaller id, so an order is always the same. A lesson from
another project is marked a hypothesis: it was verified there, not here; the turn tier never
offers one.

Every string of a lesson was written by some agent or person, so everything shown to an agent is
defanged (:mod:`hive.sidecar.base.defang`) and framed as ``<hive-lesson …>``, which no lesson text can
open or close.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from ..base.defang import attr, defang, one_line
from ..mail.screen import screened
from ..screening.inbound import Finding
from . import relevance

if TYPE_CHECKING:
    from ..base.store import Store

log = logging.getLogger("hive.sidecar.lessons.recall")

W_RELEVANCE = 1.0
W_OVERLAP = 0.6
W_OUTCOME = 0.4
W_SCOPE = 0.3
W_FRESHNESS = 0.2
HALF_LIFE_DAYS = 90.0
DAY_MS = 86_400_000
SCOPE_SCORES = {"personal": 1.0, "project": 2 / 3, "team": 1 / 3, "other": 0.0}
TURN_RELEVANCE = 0.3  # the turn tier offers a lesson no file of the session names only at this coverage


@dataclass(frozen=True)
class Viewer:
    """Whom a search is for: only lessons this person may be shown are ever candidates.

    By their effective scope: team lessons; their own personal ones; project lessons of projects
    they are a confirmed member of, and their own. A lesson a reviewer narrowed after it had
    travelled stays on machines it reached, so reading must filter too.
    """

    person: str
    projects: tuple[str, ...] = ()

    def sql(self, alias: str = "l") -> tuple[str, list[Any]]:
        """A WHERE fragment and its parameters."""
        marks = ",".join("?" * len(self.projects))
        return (
            f"({alias}.eff_scope = 'team' OR {alias}.author_person = ? "
            f"OR ({alias}.eff_scope = 'project' AND {alias}.eff_project IN ({marks})))",
            [self.person, *self.projects],
        )


@dataclass(frozen=True)
class Candidate:
    """A verified lesson as ranking sees it."""

    id: str
    kind: str
    text: str
    applicability: str
    scope: str  # personal | project | team
    project: str  # its project id ("" unless project scope)
    created_at: int  # ms
    author: str  # the author's session address
    origin: str  # the machine (person@machine) its entry came from
    reviewer: str
    tags: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # repo-relative paths among its evidence
    citations: int = 0
    successes: int = 0
    relevance: float = 0.0  # 0..1, see the module's notes; 0 without a query or a match
    coverage: float = 0.0  # 0..1: the weighted share of the query's words it holds (the turn tier's bar)


@dataclass(frozen=True)
class Ranked:
    lesson: Candidate
    score: float
    signals: dict[str, float] = field(default_factory=dict)
    hypothesis: bool = False
    overlap: tuple[str, ...] = ()

    def to_dict(self, now_ms: int) -> dict[str, object]:
        c = self.lesson
        return {
            "id": c.id,
            "kind": c.kind,
            "scope": c.scope,
            "text": defang(c.text),
            "applicability": defang(c.applicability),
            "tags": [one_line(t, 40) for t in c.tags],
            "author": one_line(c.author, 120),
            "origin": one_line(c.origin, 120),
            "reviewer": one_line(c.reviewer, 64),
            "verified": True,
            "hypothesis": self.hypothesis,
            "age_days": round(max(now_ms - c.created_at, 0) / DAY_MS, 1),
            "score": round(self.score, 4),
            "signals": {k: round(v, 4) for k, v in self.signals.items()},
            "outcome": {"citations": c.citations, "successes": c.successes},
            "files": [one_line(f, 300) for f in self.overlap],
        }


def normal_path(path: str) -> str:
    value = path.replace("\\", "/").strip()
    while value.startswith("./"):
        value = value[2:]
    return value.strip("/")


FOLDER_CREDIT = 0.5  # a folder in the evidence covers many files: touching one says less than the file itself


def _touch(evidence: str, touched: str) -> float:
    """1 when ``touched`` is the evidence's file, FOLDER_CREDIT when it lies beneath the evidence's folder.

    A session may report an absolute path and a lesson a repo-relative one: compare by whole segments.
    """
    if evidence == touched or evidence.endswith("/" + touched) or touched.endswith("/" + evidence):
        return 1.0
    if touched.startswith(evidence + "/") or f"/{evidence}/" in touched:
        return FOLDER_CREDIT
    return 0.0


def overlap(lesson_files: tuple[str, ...], session_files: tuple[str, ...]) -> tuple[str, ...]:
    return _overlap(lesson_files, [normal_path(f) for f in session_files if f])[0]


def _overlap(lesson_files: tuple[str, ...], mine: list[str]) -> tuple[tuple[str, ...], float]:
    """The lesson's evidence files the session touched, and the overlap signal: the best credit of
    any of them (a lesson that cites more evidence is not the less relevant for it)."""
    hits, best = [], 0.0
    for f in lesson_files:
        evidence = normal_path(f) if f and mine else ""
        credit = max((_touch(evidence, s) for s in mine), default=0.0) if evidence else 0.0
        if credit:
            hits.append(f)
            best = max(best, credit)
    return tuple(hits), best


def scope_key(c: Candidate, project: str) -> str:
    if c.scope == "project" and c.project != project:
        return "other"
    return c.scope


def rank(
    candidates: list[Candidate],
    *,
    project: str = "",
    files: tuple[str, ...] = (),
    now_ms: int | None = None,
    limit: int = 20,
) -> list[Ranked]:
    """The candidates in recall order, best first, at most ``limit``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    mine = [normal_path(f) for f in files if f]  # once, not once per candidate
    ranked = []
    for c in candidates:
        hit, share = _overlap(c.files, mine)
        outcome = (c.successes + 1) / (c.citations + 2)
        where = scope_key(c, project)
        freshness = 0.5 ** (max(now_ms - c.created_at, 0) / DAY_MS / HALF_LIFE_DAYS)
        signals = {
            "relevance": c.relevance,
            "overlap": share,
            "outcome": outcome,
            "scope": SCOPE_SCORES[where],
            "freshness": freshness,
        }
        score = (
            W_RELEVANCE * c.relevance
            + W_OVERLAP * share
            + W_OUTCOME * outcome
            + W_SCOPE * SCOPE_SCORES[where]
            + W_FRESHNESS * freshness
        )
        ranked.append(Ranked(c, score, signals, hypothesis=where == "other", overlap=hit))
    ranked.sort(key=lambda r: (-r.score, -r.lesson.created_at, r.lesson.id))
    return ranked[:limit]


# ---- showing ----------------------------------------------------------------------------------


def _age(days: float) -> str:
    if days < 1:
        return "today"
    if days < 60:
        return f"{int(days)}d"
    return f"{int(days // 30)}mo"


def frame(r: Ranked, now_ms: int) -> str:
    """One lesson as an agent reads it: a ``<hive-lesson>`` frame with its provenance as attributes."""
    c = r.lesson
    days = max(now_ms - c.created_at, 0) / DAY_MS
    attrs = [
        f'id="{attr(c.id[:12])}"',
        f'kind="{attr(c.kind)}"',
        f'scope="{attr(c.scope)}"',
        f'reviewed-by="{attr(c.reviewer)}"',
        f'from="{attr(c.origin)}"',
        f'age="{_age(days)}"',
    ]
    attrs.append("hypothesis" if r.hypothesis else "verified")
    lines = [defang(" ".join(c.text.split()))]
    if c.applicability.strip():
        lines.append(f"Applies when: {defang(' '.join(c.applicability.split()))}")
    if r.hypothesis:
        lines.append("Verified in another project, not this one: treat it as a hypothesis and check it.")
    return f"<hive-lesson {' '.join(attrs)}>\n" + "\n".join(lines) + "\n</hive-lesson>"


def frames(ranked: list[Ranked], now_ms: int | None = None) -> str:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if not ranked:
        return ""
    tail = (
        "If one of these helps, say so with cite_lesson(id) when you use it, and whether it worked: "
        "that is how lessons earn their rank."
    )
    return "\n\n".join(frame(r, now_ms) for r in ranked) + "\n" + tail


def turn_line(r: Ranked, why: str, now_ms: int | None = None) -> str:
    """The one framed line turn-tier recall injects."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    c = r.lesson
    days = max(now_ms - c.created_at, 0) / DAY_MS
    mark = "hypothesis" if r.hypothesis else "verified"
    text = defang(" ".join(c.text.split()))
    return (
        f'<hive-lesson id="{attr(c.id[:12])}" kind="{attr(c.kind)}" scope="{attr(c.scope)}" '
        f'reviewed-by="{attr(c.reviewer)}" age="{_age(days)}" why="{attr(why)}" {mark}>{text}</hive-lesson>'
    )


# ---- reading candidates -----------------------------------------------------------------------
#
# Plain joins over the lesson store's tables (hive.sidecar.lessons.store). The text shown comes from the
# body blob (or the deciding edit's), by hash: FTS5 columns read in a join would be read for every match
# before the sort. An FTS row's rowid is its lesson's.

_COLUMNS = (
    "l.rowid AS rowid, l.id, l.kind, l.eff_scope, l.eff_project, l.author, l.reviewer, l.created_at, "
    "l.citations, l.successes, l.header, b.blob AS body, e.blob AS edit"
)
_BLOBS = (
    "JOIN lesson_blobs b ON b.hash = l.body_hash LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != ''"
)


@dataclass(frozen=True)
class _Content:
    text: str
    applicability: str
    author: str
    author_person: str
    tags: tuple[str, ...]
    files: tuple[str, ...]


@lru_cache(maxsize=4096)
def _content(header: str, body: str, edit: str | None) -> _Content:
    """What a lesson's signed parts say; parsed once while the lesson is among the recently shown
    (a search reads tens of them, and JSON was half its time on the event loop)."""
    head, content = json.loads(header), json.loads(body)
    text = json.loads(edit).get("text") if edit else None
    files = tuple(
        normal_path(str(e.get("ref", "")).split("#", 1)[0])
        for e in head.get("evidence", ())
        if isinstance(e, dict) and e.get("kind") == "file"
    )
    return _Content(
        text=str(content.get("text", "") if text is None else text),
        applicability=str(content.get("applicability", "")),
        author=str(head.get("author_session", "")),
        author_person=str(head.get("author_person", "?")),
        tags=tuple(str(t) for t in head.get("tags", ())),
        files=files,
    )


def _candidate(row: Any, match: relevance.Match | None, origins: Mapping[str, str]) -> Candidate:
    content = _content(row["header"], row["body"], row["edit"])
    origin = origins.get(row["author"]) or f"{content.author_person}@{str(row['author'])[:8]}"
    return Candidate(
        id=row["id"],
        kind=row["kind"],
        text=content.text,
        applicability=content.applicability,
        scope=row["eff_scope"],
        project=row["eff_project"],
        created_at=row["created_at"],
        author=content.author,
        origin=origin,
        reviewer=row["reviewer"],
        tags=content.tags,
        files=content.files,
        citations=row["citations"],
        successes=row["successes"],
        relevance=match.relevance if match else 0.0,
        coverage=match.coverage if match else 0.0,
    )


_POSTINGS: WeakKeyDictionary[Store, relevance.Postings] = WeakKeyDictionary()  # the words' lessons, per store


def _filters(viewer: Viewer, project: str, others: bool) -> tuple[str, list[Any]]:
    seen, params = viewer.sql()
    # "+": never the state index for this; the planner took it over a list of rowids (30 ms at 100,000)
    where = f"+l.state = 'verified' AND {seen}"
    if not others:  # the turn tier: this project's lessons, the team's and the person's own
        where += " AND (l.eff_scope != 'project' OR l.eff_project = ?)"
        params.append(project)
    return where, params


def _by_text_sync(
    conn: sqlite3.Connection, postings: relevance.Postings, text: str, where: str, params: list[Any], limit: int
) -> list[tuple[Any, relevance.Match]]:
    """The ``limit`` best matches the viewer may see: the best first, asked again for more while lessons
    they may not see took places."""
    if limit <= 0:
        return []
    want = limit * 2
    while True:
        found = relevance.best(conn, postings, text, want)
        best = sorted(found, key=lambda rowid: (-found[rowid].relevance, -rowid))[:want]
        marks = ",".join("?" * len(best))
        rows = (
            conn.execute(
                f"SELECT {_COLUMNS} FROM lessons l {_BLOBS} WHERE l.rowid IN ({marks}) AND {where}", (*best, *params)
            ).fetchall()
            if best
            else []
        )
        if len(rows) >= limit or len(found) < want:
            rows.sort(key=lambda r: (-found[int(r["rowid"])].relevance, -int(r["rowid"])))
            return [(r, found[int(r["rowid"])]) for r in rows[:limit]]
        want *= 4


def _wanted(files: Iterable[str]) -> list[str]:
    """The session's files and the folders above them (evidence may name a folder)."""
    out: set[str] = set()
    for f in files:
        path = normal_path(f) if f else ""
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            out.add("/".join(parts[:n]))
    return sorted(out)[:256]


def _by_files_sync(conn: sqlite3.Connection, wanted: list[str], where: str, params: list[Any], limit: int) -> list[Any]:
    if not wanted:
        return []
    paths = wanted + [f"./{p}" for p in wanted] + [f"{p}/" for p in wanted]  # an evidence ref may be written so
    # The newest ``limit`` per path from the index on (path, time), which stops there however many
    # lessons name a file such as README.md; then the newest ``limit`` of those.
    newest: dict[str, int] = {}
    for path in paths:
        for lesson, at in conn.execute(
            f"SELECT x.lesson, x.at FROM lesson_files x CROSS JOIN lessons l ON l.id = x.lesson "
            f"WHERE x.path = ? AND {where} ORDER BY x.at DESC LIMIT ?",
            (path, *params, limit),
        ):
            newest[lesson] = at
    chosen = sorted(newest, key=lambda lesson: (-newest[lesson], lesson))[:limit]
    rows = (
        conn.execute(
            f"SELECT {_COLUMNS} FROM lessons l {_BLOBS} WHERE l.id IN ({','.join('?' * len(chosen))})", chosen
        ).fetchall()
        if chosen
        else []
    )
    return sorted(rows, key=lambda r: (-newest[r["id"]], r["id"]))


async def search(
    store: Store,
    viewer: Viewer,
    *,
    text: str = "",
    files: Iterable[str] = (),
    project: str = "",
    origins: Mapping[str, str] | None = None,
    limit: int = 20,
    now_ms: int | None = None,
    pool: int | None = None,
    others: bool = True,
) -> list[Ranked]:
    """Ranked lessons ``viewer`` may see for a query and the session's files, best first.

    ``pool``: text and file candidates each (at least ``limit``). ``others``: whether lessons of
    other projects (hypotheses) may be candidates. Both reads share one hop to the database
    thread: on a loaded machine each hop waits for the event loop to turn.
    """
    origins = origins or {}
    pool = max(pool or 0, limit, 10)
    files = tuple(files)
    wanted = _wanted(files)
    where, params = _filters(viewer, project, others)
    postings = _POSTINGS.setdefault(store, relevance.Postings())

    def work(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
        return (
            _by_text_sync(conn, postings, text, where, params, pool) if text else [],
            _by_files_sync(conn, wanted, where, params, pool),
        )

    by_text_rows, by_file_rows = await store.run(work)
    merged: dict[str, Candidate] = {}
    for r, match in by_text_rows:
        merged[r["id"]] = _candidate(r, match, origins)
    for r in by_file_rows:
        if r["id"] not in merged:  # a text match keeps its relevance
            merged[r["id"]] = _candidate(r, None, origins)
    return [
        r for r in rank(list(merged.values()), project=project, files=files, now_ms=now_ms, limit=limit) if _safe(r)
    ]


@lru_cache(maxsize=4096)
def screened_out(text: str, applicability: str) -> Finding | None:
    """The screening rule a lesson's text matches, or None: a lesson is retrieved again and again,
    so one that a reviewer let through with hostile text in it never reaches an agent."""
    found = screened(f"{text}\n{applicability}")
    return found[0] if found else None


def _safe(ranked: Ranked) -> bool:
    found = screened_out(ranked.lesson.text, ranked.lesson.applicability)
    if found is not None:
        log.warning("lesson %s is not recalled: its text matches screening rule %s", ranked.lesson.id[:12], found.rule)
    return found is None


async def for_turn(
    store: Store,
    viewer: Viewer,
    *,
    words: str,
    files: Iterable[str],
    project: str,
    error: str = "",
    origins: Mapping[str, str] | None = None,
    now_ms: int | None = None,
    limit: int = 20,
) -> list[tuple[Ranked, str]]:
    """What the turn tier may offer a session, best first, each with why: lessons of its project, the
    team's and its person's that a failed command's ``error`` text matches well ("error"), that its
    files name ("files:<path>"), or that its ``words`` (the prompt, its doing line) match well
    ("words"); well is a coverage of at least :data:`TURN_RELEVANCE`. Never another project's.

    The error text is searched on its own: what just failed is the session's most specific words,
    and the person's longer request would dilute it."""
    found: dict[str, tuple[Ranked, str]] = {}
    if error:
        for r in await search(
            store, viewer, text=error, project=project, origins=origins, limit=3, now_ms=now_ms, others=False
        ):
            if r.lesson.coverage >= TURN_RELEVANCE:
                found.setdefault(r.lesson.id, (r, "error"))
    for r in await search(
        store,
        viewer,
        text=words,
        files=files,
        project=project,
        origins=origins,
        limit=limit,
        now_ms=now_ms,
        others=False,
    ):
        if r.overlap:
            found.setdefault(r.lesson.id, (r, f"files:{r.overlap[0]}"))
        elif r.lesson.coverage >= TURN_RELEVANCE:
            found.setdefault(r.lesson.id, (r, "words"))
    return list(found.values())[:limit]

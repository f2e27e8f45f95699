"""Recall: which lessons an agent sees for a query and its files, in what order, and how they are shown.

One search path (:func:`search`) serves the pull tier (``search_memory``, ``lesson_context``), the
CLI and the turn tier (:func:`for_turn`), and its candidates are only lessons the viewer may be
shown (:class:`Viewer`: team lessons, their own personal ones, project lessons of projects they are
a member of) and only verified, current ones (the index holds nothing else), before any cut.

Ranking (seed Part 3 §5) adds five signals, each scaled to 0..1, with these weights::

    score = 1.0 × relevance   half coverage, half bm25. Coverage: the share of the request's words the
                              lesson holds (porter-stemmed, in its text, applicability or tags), each
                              weighted by its smoothed idf, a word no lesson holds weighing the most:
                              absolute, so one generic word in common is a small share however few
                              lessons there are. bm25 (FTS5's, which also chooses the lessons scored)
                              as a share of a lesson holding each word once: how often and how densely.
          + 0.6 × overlap     1 when the session touched a file the lesson's evidence names, ½ when
                              only files beneath a folder it names (recently: the last half hour)
          + 0.4 × outcome     (successes + 1) / (citations + 2): a new lesson starts at ½
          + 0.3 × scope       narrowest first: personal 1, this project ⅔, team ⅓, another project 0
          + 0.2 × freshness   ½ ** (age in days / 90)

Query words are the text's words of two letters or more (a possessive's ``s`` is not one), without
stop words and the generic words of any task ("fix", "update", "please"). At most about
:data:`SCORE_BUDGET` lessons are scored: the rarest words first, and a word that would take the
search past the budget is left out (bm25 gives such a common word the least weight).

Ties go to the newer lesson, then the smaller id, so an order is always the same. A lesson from
another project is marked a hypothesis: it was verified there, not here; the turn tier never
offers one.

Every string of a lesson was written by some agent or person, so everything shown to an agent is
defanged (:mod:`hive.sidecar.defang`) and framed as ``<hive-lesson …>``, which no lesson text can
open or close.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .defang import attr, defang, one_line

if TYPE_CHECKING:
    from .store import Store

W_RELEVANCE = 1.0
W_OVERLAP = 0.6
W_OUTCOME = 0.4
W_SCOPE = 0.3
W_FRESHNESS = 0.2
HALF_LIFE_DAYS = 90.0
DAY_MS = 86_400_000
SCOPE_SCORES = {"personal": 1.0, "project": 2 / 3, "team": 1 / 3, "other": 0.0}
MAX_TERMS = 16
TURN_RELEVANCE = 0.3  # the turn tier offers a lesson no file of the session names only at this coverage
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a an the to of and or in on for is are be been being it its with when that this these those by as at from not "
    "no nor do does did doing done how what why which who whom whose where i you we our ours my me us your yours "
    "he him his she her hers they them their theirs myself yourself itself themselves so if then than there here "
    "into onto out up down over under about after before again also just only very can could would should will "
    "shall may might must has have had having was were am but any all some each every more most other such own "
    "same too both either neither while until because since though although once off say says said tell told "
    "yes ok okay hi hey thanks "
    # the generic words of a task, which say nothing about which lesson it needs
    "fix fixes fixed fixing add adds added adding update updates updated updating change changes changed changing "
    "make makes making made check checks checking look looking see work working works need needs want wants try "
    "trying get gets getting got use uses using used please help let lets thing things stuff something issue "
    "issues problem problems bug bugs now still right new way currently seems seem".split())


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
        return (f"({alias}.eff_scope = 'team' OR {alias}.author_person = ? "
                f"OR ({alias}.eff_scope = 'project' AND {alias}.eff_project IN ({marks})))",
                [self.person, *self.projects])


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
            "id": c.id, "kind": c.kind, "scope": c.scope, "text": defang(c.text),
            "applicability": defang(c.applicability), "tags": [one_line(t, 40) for t in c.tags],
            "author": one_line(c.author, 120), "origin": one_line(c.origin, 120),
            "reviewer": one_line(c.reviewer, 64), "verified": True, "hypothesis": self.hypothesis,
            "age_days": round(max(now_ms - c.created_at, 0) / DAY_MS, 1), "score": round(self.score, 4),
            "signals": {k: round(v, 4) for k, v in self.signals.items()},
            "outcome": {"citations": c.citations, "successes": c.successes},
            "files": [one_line(f, 300) for f in self.overlap],
        }


def query_words(text: str) -> list[str]:
    """The words a search looks for, in order, each once (see the module's notes)."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in _STOP or word in words or len(word) > 64:
            continue
        words.append(word)
        if len(words) == MAX_TERMS:
            break
    return words


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its words, each quoted, OR-ed (bm25 favours more matches)."""
    return " OR ".join(f'"{w}"' for w in query_words(text))


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
        credit = max((_touch(normal_path(f), s) for s in mine), default=0.0) if f else 0.0
        if credit:
            hits.append(f)
            best = max(best, credit)
    return tuple(hits), best


def scope_key(c: Candidate, project: str) -> str:
    if c.scope == "project" and c.project != project:
        return "other"
    return c.scope


def rank(candidates: list[Candidate], *, project: str = "", files: tuple[str, ...] = (), now_ms: int | None = None,
         limit: int = 20) -> list[Ranked]:
    """The candidates in recall order, best first, at most ``limit``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    mine = [normal_path(f) for f in files if f]  # once, not once per candidate
    ranked = []
    for c in candidates:
        hit, share = _overlap(c.files, mine)
        outcome = (c.successes + 1) / (c.citations + 2)
        where = scope_key(c, project)
        freshness = 0.5 ** (max(now_ms - c.created_at, 0) / DAY_MS / HALF_LIFE_DAYS)
        signals = {"relevance": c.relevance, "overlap": share, "outcome": outcome, "scope": SCOPE_SCORES[where],
                   "freshness": freshness}
        score = (W_RELEVANCE * c.relevance + W_OVERLAP * share + W_OUTCOME * outcome
                 + W_SCOPE * SCOPE_SCORES[where] + W_FRESHNESS * freshness)
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
    attrs = [f'id="{attr(c.id[:12])}"', f'kind="{attr(c.kind)}"', f'scope="{attr(c.scope)}"',
             f'reviewed-by="{attr(c.reviewer)}"', f'from="{attr(c.origin)}"', f'age="{_age(days)}"']
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
    tail = ("If one of these helps, say so with cite_lesson(id) when you use it, and whether it worked: "
            "that is how lessons earn their rank.")
    return "\n\n".join(frame(r, now_ms) for r in ranked) + "\n" + tail


def turn_line(r: Ranked, why: str, now_ms: int | None = None) -> str:
    """The one framed line turn-tier recall injects."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    c = r.lesson
    days = max(now_ms - c.created_at, 0) / DAY_MS
    mark = "hypothesis" if r.hypothesis else "verified"
    text = defang(" ".join(c.text.split()))
    return (f'<hive-lesson id="{attr(c.id[:12])}" kind="{attr(c.kind)}" scope="{attr(c.scope)}" '
            f'reviewed-by="{attr(c.reviewer)}" age="{_age(days)}" why="{attr(why)}" {mark}>{text}</hive-lesson>')


# ---- reading candidates -----------------------------------------------------------------------
#
# Plain joins over the lesson store's tables (hive.sidecar.lesson_store). The text shown comes from the
# body blob (or the deciding edit's), by hash: FTS5 columns read in a join would be read for every match
# before the sort. An FTS row's rowid is its lesson's.

_COLUMNS = ("l.rowid AS rowid, l.id, l.kind, l.eff_scope, l.eff_project, l.author, l.reviewer, l.created_at, "
            "l.citations, l.successes, l.header, b.blob AS body, e.blob AS edit")
_BLOBS = ("JOIN lesson_blobs b ON b.hash = l.body_hash "
          "LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != ''")


def _candidate(row: Any, relevance: float, coverage: float, origins: Mapping[str, str]) -> Candidate:
    header = json.loads(row["header"])
    body = json.loads(row["body"])
    edit = json.loads(row["edit"]) if row["edit"] else {}
    files = tuple(normal_path(str(e.get("ref", "")).split("#", 1)[0]) for e in header.get("evidence", ())
                  if isinstance(e, dict) and e.get("kind") == "file")
    origin = origins.get(row["author"]) or f"{header.get('author_person', '?')}@{str(row['author'])[:8]}"
    return Candidate(id=row["id"], kind=row["kind"], text=str(edit.get("text", body.get("text", ""))),
                     applicability=str(body.get("applicability", "")), scope=row["eff_scope"],
                     project=row["eff_project"], created_at=row["created_at"],
                     author=str(header.get("author_session", "")), origin=origin, reviewer=row["reviewer"],
                     tags=tuple(str(t) for t in header.get("tags", ())), files=files, citations=row["citations"],
                     successes=row["successes"], relevance=relevance, coverage=coverage)


# At most about this many lessons are scored for one search. FTS5 scores every lesson a MATCH finds
# before it sorts, so a word held by a large share of them costs the most while bm25 gives it the least
# weight. The query's rarest words, while their lessons fit the budget, choose the lessons scored;
# those are scored for every word, exactly as without the budget. Only a lesson holding none of the
# rare words goes unscored; when even the rarest word is held by more, only its most recently stored
# lessons are.
SCORE_BUDGET = 1000
FEW_LESSONS = 100
_HELD_UPTO = "(SELECT count(*) FROM (SELECT 1 FROM lesson_fts WHERE lesson_fts MATCH ? LIMIT ?))"


@dataclass(frozen=True)
class Query:
    """A text search as run: the words that choose the lessons scored (``rare``), the other words
    that score them too (``common``), the lowest rowid scored, and for relevance each rare word's
    weight with the lessons (rowids) holding it, over the weight of all the query's words (``ideal``)."""

    rare: tuple[str, ...] = ()
    common: tuple[str, ...] = ()
    ideal: float = 0.0
    since: int = 0
    holders: dict[str, tuple[float, frozenset[int]]] = field(default_factory=dict)
    full_bm25: float = 0.0  # what FTS5's bm25 gives a lesson holding each word the index has once

    def coverage(self, rowid: int) -> float:
        """The weighted share of the query's words the lesson holds (see the module's notes)."""
        if self.ideal <= 0:
            return 0.0
        return sum(weight for weight, rows in self.holders.values() if rowid in rows) / self.ideal

    def relevance(self, rowid: int, bm25: float) -> float:
        """Half the coverage, half bm25 as a share of ``full_bm25``: bm25 adds how often a word is
        there and in how short a text, which tells apart lessons holding the same words."""
        scored = min(-bm25 / self.full_bm25, 1.0) if self.full_bm25 > 0 else 0.0
        return (self.coverage(rowid) + scored) / 2

    def matches(self) -> list[str]:
        """The MATCH expressions that together find every lesson holding a rare word, each scored
        by bm25 over all the words (a word under NOT is still one of the query's phrases)."""
        if not self.rare:
            return []
        rare = " OR ".join(f'"{w}"' for w in self.rare)
        if not self.common:
            return [rare]
        common = " OR ".join(f'"{w}"' for w in self.common)
        return [f"({rare}) AND ({common})", f"({rare}) NOT ({common})"]


def _weight(total: int, held: int) -> float:
    """How much a word says about a lesson that holds it: its idf, smoothed so it stays above zero
    (ln(1 + (N - n + ½) / (n + ½)); a word no lesson holds weighs most), with N at least
    :data:`FEW_LESSONS`: among a team's first lessons every word is held by a large share, which says
    nothing yet about how common it is."""
    total = max(total, held, FEW_LESSONS)
    return math.log(1 + (total - held + 0.5) / (held + 0.5))


def _fts5_idf(total: int, held: int) -> float:
    """FTS5's own bm25 idf, floored as FTS5 floors it: what a word adds to bm25 when held once."""
    return max(math.log((max(total, held) - held + 0.5) / (held + 0.5)), 1e-6)


_TOTALS: dict[int, tuple[float, int]] = {}  # id(store) -> (when counted, lessons in the index)


async def _total(store: Store) -> int:
    """How many lessons the index holds, counted at most once a minute (bm25's N; a count walks them)."""
    seen = _TOTALS.get(id(store))
    if seen is None or time.monotonic() - seen[0] > 60:
        row = await store.fetchone("SELECT count(*) FROM lessons WHERE state = 'verified'")
        seen = _TOTALS[id(store)] = (time.monotonic(), int(row[0]) if row else 0)
    return seen[1]


def _query_sync(conn: sqlite3.Connection, text: str, total: int) -> Query:
    """The search for ``text`` within :data:`SCORE_BUDGET`. A word's count is needed only up to the
    budget: a MATCH with a LIMIT stops there, whereas an fts5vocab table would walk its whole doclist."""
    words = query_words(text)
    if not words:
        return Query()
    upto = SCORE_BUDGET + 1
    counts = conn.execute("SELECT " + ", ".join([_HELD_UPTO] * len(words)),
                          [p for w in words for p in (f'"{w}"', upto)]).fetchone()
    counted = [int(n) for n in counts]
    held = {w: n for w, n in zip(words, counted, strict=True) if n}
    rare: list[str] = []
    spent = 0
    for word in sorted(held, key=held.__getitem__):  # rarest first; a tie keeps the text's order
        if rare and spent + held[word] > SCORE_BUDGET:
            break
        rare.append(word)
        spent += held[word]
    since = 0
    if rare and held[rare[0]] > SCORE_BUDGET:
        row = conn.execute("SELECT rowid FROM lesson_fts WHERE lesson_fts MATCH ? ORDER BY rowid DESC "
                           "LIMIT 1 OFFSET ?", (f'"{rare[0]}"', SCORE_BUDGET - 1)).fetchone()
        since = int(row[0]) if row else 0
    common = [w for w in held if w not in rare]
    # Relevance weighs every word of the request, a word no lesson holds the most, so a lesson holding
    # one generic word of a long request is a small share of it, however few lessons there are. Words
    # past the budget are left out of it as of the search: they weigh little, and their lessons are many.
    holders: dict[str, tuple[float, frozenset[int]]] = {}
    for word in rare:
        rows = conn.execute("SELECT rowid FROM lesson_fts WHERE lesson_fts MATCH ? AND rowid >= ?",
                            (f'"{word}"', since)).fetchall()
        holders[word] = (_weight(total, held[word]), frozenset(int(r[0]) for r in rows))
    unheld = sum(_weight(total, 0) for w, n in zip(words, counted, strict=True) if not n)
    ideal = sum(weight for weight, _ in holders.values()) + unheld
    full = sum(_fts5_idf(total, n) for n in held.values())
    return Query(tuple(rare), tuple(common), ideal, since, holders, full)


def _filters(viewer: Viewer, project: str, others: bool) -> tuple[str, list[Any]]:
    seen, params = viewer.sql()
    where = f"l.state = 'verified' AND {seen}"
    if not others:  # the turn tier: this project's lessons, the team's and the person's own
        where += " AND (l.eff_scope != 'project' OR l.eff_project = ?)"
        params.append(project)
    return where, params


def _by_text_sync(conn: sqlite3.Connection, query: Query, where: str, params: list[Any], limit: int) -> list[Any]:
    """The ``limit`` best visible matches: the index's best first, asked again for more while the
    lessons the viewer may not see took places (rare: the index holds only verified lessons)."""
    expressions = query.matches()
    if not expressions or limit <= 0:
        return []
    want = limit * 2
    while True:
        ranks: dict[int, float] = {}
        full = False
        for expression in expressions:
            top = conn.execute("SELECT rowid, rank FROM lesson_fts WHERE lesson_fts MATCH ? AND rowid >= ? "
                               "ORDER BY rank LIMIT ?", (expression, query.since, want)).fetchall()
            ranks.update((int(r[0]), float(r[1])) for r in top)
            full = full or len(top) == want
        best = sorted(ranks, key=ranks.__getitem__)[:want]
        marks = ",".join("?" * len(best))
        rows = conn.execute(f"SELECT {_COLUMNS} FROM lessons l {_BLOBS} WHERE l.rowid IN ({marks}) AND {where}",
                            (*best, *params)).fetchall() if best else []
        if len(rows) >= limit or not full:
            rows.sort(key=lambda r: ranks[int(r["rowid"])])
            return [(r, ranks[int(r["rowid"])]) for r in rows[:limit]]
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


def _by_files_sync(conn: sqlite3.Connection, wanted: list[str], where: str, params: list[Any],
                   limit: int) -> list[Any]:
    if not wanted:
        return []
    paths = wanted + [f"./{p}" for p in wanted] + [f"{p}/" for p in wanted]  # an evidence ref may be written so
    # The newest ``limit`` first, by the lessons table alone; only their blobs are read.
    return conn.execute(
        f"SELECT {_COLUMNS} FROM (SELECT l.id AS id, l.created_at AS at FROM lesson_files x CROSS JOIN lessons l "
        f"ON l.id = x.lesson WHERE x.path IN ({','.join('?' * len(paths))}) AND {where} "
        f"GROUP BY l.id ORDER BY l.created_at DESC LIMIT ?) AS top CROSS JOIN lessons l ON l.id = top.id {_BLOBS} "
        "ORDER BY top.at DESC", (*paths, *params, limit)).fetchall()


async def search(store: Store, viewer: Viewer, *, text: str = "", files: Iterable[str] = (), project: str = "",
                 origins: Mapping[str, str] | None = None, limit: int = 20, now_ms: int | None = None,
                 pool: int | None = None, others: bool = True) -> list[Ranked]:
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
    total = await _total(store) if text else 0

    def work(conn: sqlite3.Connection) -> tuple[Query, list[Any], list[Any]]:
        query = _query_sync(conn, text, total) if text else Query()
        return query, _by_text_sync(conn, query, where, params, pool), _by_files_sync(conn, wanted, where, params, pool)

    query, by_text_rows, by_file_rows = await store.run(work)
    merged: dict[str, Candidate] = {}
    for r, bm25 in by_text_rows:
        rowid = int(r["rowid"])
        merged[r["id"]] = _candidate(r, query.relevance(rowid, bm25), query.coverage(rowid), origins)
    for r in by_file_rows:
        if r["id"] not in merged:  # a text match keeps its relevance
            merged[r["id"]] = _candidate(r, 0.0, 0.0, origins)
    return rank(list(merged.values()), project=project, files=files, now_ms=now_ms, limit=limit)


async def for_turn(store: Store, viewer: Viewer, *, words: str, files: Iterable[str], project: str,
                   error: str = "", origins: Mapping[str, str] | None = None, now_ms: int | None = None,
                   limit: int = 20) -> list[tuple[Ranked, str]]:
    """What the turn tier may offer a session, best first, each with why: lessons of its project, the
    team's and its person's that a failed command's ``error`` text matches well ("error"), that its
    files name ("files:<path>"), or that its ``words`` (the prompt, its doing line) match well
    ("words"); well is a coverage of at least :data:`TURN_RELEVANCE`. Never another project's.

    The error text is searched on its own: what just failed is the session's most specific words,
    and the person's longer request would dilute it."""
    found: dict[str, tuple[Ranked, str]] = {}
    if error:
        for r in await search(store, viewer, text=error, project=project, origins=origins, limit=3, now_ms=now_ms,
                              others=False):
            if r.lesson.coverage >= TURN_RELEVANCE:
                found.setdefault(r.lesson.id, (r, "error"))
    for r in await search(store, viewer, text=words, files=files, project=project, origins=origins, limit=limit,
                          now_ms=now_ms, others=False):
        if r.overlap:
            found.setdefault(r.lesson.id, (r, f"files:{r.overlap[0]}"))
        elif r.lesson.coverage >= TURN_RELEVANCE:
            found.setdefault(r.lesson.id, (r, "words"))
    return list(found.values())[:limit]

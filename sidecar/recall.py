"""Recall: which lessons an agent sees for a query and its files, in what order, and how they are shown.

Ranking (seed Part 3 §5) adds five signals, each scaled to 0..1, with these weights::

    score = 1.0 × relevance   FTS5 bm25 over text, applicability and tags, divided by the best match's
                              (the best text match gets 1; no query: 0 for all)
          + 0.6 × overlap     the share of the lesson's evidence files the session touched recently
          + 0.4 × outcome     (successes + 1) / (citations + 2): a new lesson starts at ½
          + 0.3 × scope       narrowest first: personal 1, this project ⅔, team ⅓, another project 0
          + 0.2 × freshness   ½ ** (age in days / 90)

Ties go to the newer lesson, then the smaller id, so an order is always the same. Only verified
lessons are ranked: superseded, retracted, rejected and unreviewed ones never appear. A lesson from
another project is marked a hypothesis: it was verified there, not here.

Every string of a lesson was written by some agent or person, so everything shown to an agent is
defanged (:mod:`hive.sidecar.defang`) and framed as ``<hive-lesson …>``, which no lesson text can
open or close.
"""

from __future__ import annotations

import json
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
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset("a an the to of and or in on for is are be it its with when that this by as at from not do does "
                  "how what why which i you we".split())


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
    bm25: float | None = None  # SQLite's bm25(): negative, lower is better; None without a query


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


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its words, each quoted, OR-ed (bm25 favours more matches)."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOP or word in words or len(word) > 64:
            continue
        words.append(word)
        if len(words) == MAX_TERMS:
            break
    return " OR ".join(f'"{w}"' for w in words)


def normal_path(path: str) -> str:
    value = path.replace("\\", "/").strip()
    while value.startswith("./"):
        value = value[2:]
    return value.strip("/")


def _same_file(a: str, b: str) -> bool:
    # A session may report an absolute path and a lesson a repo-relative one: compare by whole segments.
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def overlap(lesson_files: tuple[str, ...], session_files: tuple[str, ...]) -> tuple[str, ...]:
    return _overlap(lesson_files, [normal_path(f) for f in session_files if f])


def _overlap(lesson_files: tuple[str, ...], mine: list[str]) -> tuple[str, ...]:
    return tuple(f for f in lesson_files if f and any(_same_file(normal_path(f), s) for s in mine))


def scope_key(c: Candidate, project: str) -> str:
    if c.scope == "project" and c.project != project:
        return "other"
    return c.scope


def rank(candidates: list[Candidate], *, project: str = "", files: tuple[str, ...] = (), now_ms: int | None = None,
         limit: int = 20) -> list[Ranked]:
    """The candidates in recall order, best first, at most ``limit``."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    best = min((c.bm25 for c in candidates if c.bm25 is not None), default=None)
    mine = [normal_path(f) for f in files if f]  # once, not once per candidate
    ranked = []
    for c in candidates:
        relevance = (c.bm25 / best) if (c.bm25 is not None and best is not None and best < 0) else 0.0
        hit = _overlap(c.files, mine)
        share = len(hit) / len(c.files) if c.files else 0.0
        outcome = (c.successes + 1) / (c.citations + 2)
        where = scope_key(c, project)
        freshness = 0.5 ** (max(now_ms - c.created_at, 0) / DAY_MS / HALF_LIFE_DAYS)
        signals = {"relevance": relevance, "overlap": share, "outcome": outcome, "scope": SCOPE_SCORES[where],
                   "freshness": freshness}
        score = (W_RELEVANCE * relevance + W_OVERLAP * share + W_OUTCOME * outcome + W_SCOPE * SCOPE_SCORES[where]
                 + W_FRESHNESS * freshness)
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
# before the sort, and the FTS table cannot be looked up by lesson id.

_COLUMNS = ("l.id, l.kind, l.eff_scope, l.eff_project, l.author, l.reviewer, l.created_at, l.citations, l.successes, "
            "l.header, b.blob AS body, e.blob AS edit")
_BLOBS = ("JOIN lesson_blobs b ON b.hash = l.body_hash "
          "LEFT JOIN lesson_blobs e ON e.hash = l.text_hash AND l.text_hash != ''")
OVERFETCH = 2  # FTS rows of proposed, rejected or superseded lessons are dropped after the text search


def _candidate(row: Any, bm25: float | None, origins: Mapping[str, str]) -> Candidate:
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
                     successes=row["successes"], bm25=bm25)


COMMON_SHARE = 0.02  # a word in more than 2% of lessons...
COMMON_FLOOR = 50  # ...and in more than 50 of them is common
_TOTALS: dict[int, tuple[float, int]] = {}  # id(store) -> (when counted, lessons with text)


async def _total(store: Store) -> int:
    seen = _TOTALS.get(id(store))
    if seen is None or time.monotonic() - seen[0] > 60:
        row = await store.fetchone("SELECT count(*) FROM lessons")
        seen = _TOTALS[id(store)] = (time.monotonic(), int(row[0]) if row else 0)
    return seen[1]


# Whether a word is common needs its count only up to the threshold: a MATCH with a LIMIT stops there,
# whereas lesson_vocab walks the word's whole doclist, which costs most for exactly the words dropped.
_HELD_UPTO = "(SELECT count(*) FROM (SELECT 1 FROM lesson_fts WHERE lesson_fts MATCH ? LIMIT ?))"


def _match_sync(conn: sqlite3.Connection, text: str, total: int) -> str:
    """The FTS5 query for ``text`` without its common words, when it has rarer ones.

    bm25 gives a word held by a large share of lessons almost no weight, yet FTS5 scores every lesson
    it matches: dropping it keeps the order and saves most of the time. A query of common words only
    keeps its two rarest.
    """
    query = fts_query(text)
    words = [w.strip('"') for w in query.split(" OR ") if w]
    if len(words) < 2:
        return query
    common = max(COMMON_FLOOR, COMMON_SHARE * total)
    upto = int(common) + 1
    counts = conn.execute("SELECT " + ", ".join([_HELD_UPTO] * len(words)),
                          [p for w in words for p in (f'"{w}"', upto)]).fetchone()
    kept = [w for w, n in zip(words, counts, strict=True) if n <= common]
    if not kept:  # all common: only now are whole counts worth their cost, to keep the two rarest
        rows = conn.execute(f"SELECT term, doc FROM lesson_vocab WHERE term IN ({','.join('?' * len(words))})",
                            words).fetchall()
        held = {str(r[0]): int(r[1]) for r in rows}
        kept = sorted(words, key=lambda w: held.get(w, 0))[:2]
    return " OR ".join(f'"{w}"' for w in kept)


_BY_TEXT = (f"SELECT {_COLUMNS}, top.rank AS rank FROM (SELECT id, rank FROM lesson_fts WHERE lesson_fts MATCH ? "
            f"ORDER BY rank LIMIT ?) AS top CROSS JOIN lessons l ON l.id = top.id {_BLOBS} "
            "WHERE l.state = 'verified' ORDER BY top.rank LIMIT ?")


def _by_text_sync(conn: sqlite3.Connection, text: str, total: int, limit: int) -> list[Any]:
    match = _match_sync(conn, text, total)
    return conn.execute(_BY_TEXT, (match, limit * OVERFETCH, limit)).fetchall() if match else []


async def by_text(store: Store, text: str, origins: Mapping[str, str], limit: int = 50) -> list[Candidate]:
    """Verified lessons matching free text, best bm25 first (the words' counts and the search in one hop)."""
    total = await _total(store)
    rows = await store.run(lambda conn: _by_text_sync(conn, text, total, limit))
    return [_candidate(r, float(r["rank"]), origins) for r in rows]


def _wanted(files: Iterable[str]) -> list[str]:
    return sorted({normal_path(f) for f in files if f and normal_path(f)})[:64]


def _by_files_sync(conn: sqlite3.Connection, wanted: list[str], limit: int) -> list[Any]:
    if not wanted:
        return []
    paths = wanted + [f"./{p}" for p in wanted]  # an evidence ref may be written either way
    # The newest ``limit`` first, by the lessons table alone; only their blobs are read.
    return conn.execute(
        f"SELECT {_COLUMNS} FROM (SELECT l.id AS id, l.created_at AS at FROM lesson_files x CROSS JOIN lessons l "
        f"ON l.id = x.lesson WHERE x.path IN ({','.join('?' * len(paths))}) AND l.state = 'verified' "
        f"GROUP BY l.id ORDER BY l.created_at DESC LIMIT ?) AS top CROSS JOIN lessons l ON l.id = top.id {_BLOBS} "
        "ORDER BY top.at DESC", (*paths, limit)).fetchall()


async def by_files(store: Store, files: Iterable[str], origins: Mapping[str, str], limit: int = 50) -> list[Candidate]:
    """Verified lessons whose evidence names one of ``files`` (repository-relative paths, as sessions report them).

    ``CROSS JOIN`` keeps SQLite starting from the few file rows rather than from every verified lesson.
    """
    wanted = _wanted(files)
    if not wanted:
        return []
    rows = await store.run(lambda conn: _by_files_sync(conn, wanted, limit))
    return [_candidate(r, None, origins) for r in rows]


async def search(store: Store, *, text: str = "", files: Iterable[str] = (), project: str = "",
                 origins: Mapping[str, str] | None = None, limit: int = 20, now_ms: int | None = None,
                 pool: int | None = None) -> list[Ranked]:
    """Ranked verified lessons for a query and the session's files (``pool`` text and file candidates each).

    Both reads share one hop to the database thread: on a loaded machine each hop waits for the event
    loop to turn.
    """
    origins = origins or {}
    pool = pool or max(limit, 10)
    files = tuple(files)
    wanted = _wanted(files)
    total = await _total(store)

    def work(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
        return _by_text_sync(conn, text, total, pool), _by_files_sync(conn, wanted, pool)

    by_text_rows, by_file_rows = await store.run(work)
    merged: dict[str, Candidate] = {}
    for r in by_text_rows:
        merged[r["id"]] = _candidate(r, float(r["rank"]), origins)
    for r in by_file_rows:
        if r["id"] not in merged:  # a text match keeps its bm25
            merged[r["id"]] = _candidate(r, None, origins)
    return rank(list(merged.values()), project=project, files=files, now_ms=now_ms, limit=limit)

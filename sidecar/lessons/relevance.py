"""Text relevance: how well a lesson's words answer a request, read from recall's FTS5 index.

Each lesson gets a relevance for a request::

    relevance = ½ coverage + ½ fields                                  (0 to 1.5)

- coverage: the share of the request's words the lesson holds (porter-stemmed, anywhere in it),
  each weighted by its smoothed idf ln(1 + (N - n + ½) / (n + ½)) with N at least
  :data:`FEW_LESSONS`; a word no lesson holds weighs the most. Absolute: one generic word in
  common is a small share of a long request, however few lessons there are.
- fields: BM25's idf of each word it holds, counted once for its text and once for what says when
  it applies (its applicability line or tags), as a share of the idf of every word of the request
  the index holds: 1 for a lesson holding each word once, up to 2 when it also names each where it
  says when it applies, which makes it more about them than a lesson mentioning them in passing.

Which lessons hold a word, and in which part, is the word's doclist, cheap to read; how often it
occurs in each would be their position lists, which is what FTS5's own bm25 reads for every lesson
a MATCH finds (30-60 ms a search at 100,000 lessons). Counting occurrences or weighing the length
of a text changed nothing on the evaluation corpus (tests/bench/bench_recall_quality.py).

So a lesson's relevance depends only on which of the request's words it holds where, and
:func:`best` finds the best lessons without scoring every one. The words' lessons are kept as bit
sets of rowids (:class:`Postings`, until the index changes); a commoner word's are read only when
its lessons could matter. Every lesson holding one of the request's rarest words, while they fit
:data:`SCORE_BUDGET`, is scored (a word more than half the lessons hold is not searched for at all);
the lessons holding only commoner words fall into classes of equal relevance (each word absent, in
the text, in what says when, or in both), visited best first, each for its newest lessons, until no
class left can reach the lessons kept. Ties go to the newer lesson, so the result is what scoring
every lesson gives.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import product

MAX_TERMS = 16
SCORE_BUDGET = 500  # lessons holding the rarest words, scored one by one
COMMON_WORDS = 6  # the commoner words combined into classes, the weightiest first
FEW_LESSONS = 100
POSTINGS_BYTES = 32 << 20  # bit sets kept per store, at most
TEXT, WHEN = 1, 2  # where a lesson holds a word: its text, what says when it applies (applicability, tags)
PARTS = ((TEXT, "{text}"), (WHEN, "{applicability tags}"))  # as FTS5 column filters

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
    "issues problem problems bug bugs now still right new way currently seems seem".split()
)


def query_words(text: str) -> list[str]:
    """The words a search looks for, in order, each once: two letters or more (a possessive's ``s``
    is not one), no stop words and none of the generic words of any task ("fix", "please")."""
    words: list[str] = []
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in _STOP or word in words or len(word) > 64:
            continue
        words.append(word)
        if len(words) == MAX_TERMS:
            break
    return words


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its words, each quoted, OR-ed."""
    return _any(query_words(text))


def _any(words: Iterable[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def weight(total: int, held: int) -> float:
    """How much a word says about a lesson that holds it, for coverage: its idf, smoothed so it stays
    above zero, with N at least :data:`FEW_LESSONS`: among a team's first lessons every word is held
    by a large share, which says nothing yet about how common it is."""
    total = max(total, held, FEW_LESSONS)
    return math.log(1 + (total - held + 0.5) / (held + 0.5))


def bm25_idf(total: int, held: int) -> float:
    """BM25's idf as FTS5 computes it, floored as FTS5 floors it (a word most lessons hold: ~0)."""
    return max(math.log((max(total, held) - held + 0.5) / (held + 0.5)), 1e-6)


def _bits(rowids: str | None) -> int:
    """A bit set of rowids (given comma-separated, as ``group_concat`` makes them in C: a row object
    per lesson would cost more than the set): bit r is set for rowid r."""
    raw = bytearray()
    for rowid in map(int, rowids.split(",") if rowids else ()):
        if rowid >> 3 >= len(raw):
            raw.extend(bytes((rowid >> 3) - len(raw) + 4096))
        raw[rowid >> 3] |= 1 << (rowid & 7)
    return int.from_bytes(raw, "little")


def members(bits: int) -> list[int]:
    """The rowids in a bit set, in order (fast for a sparse one: whole zero bytes are skipped in C)."""
    raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
    return [i * 8 + b for i in _nonzero(raw) for b in range(8) if raw[i] >> b & 1]


def newest(bits: int, count: int) -> list[int]:
    """The ``count`` highest rowids in a bit set, highest first."""
    out: list[int] = []
    while bits and len(out) < count:
        top = bits.bit_length() - 1
        out.append(top)
        bits ^= 1 << top
    return out


_NONZERO = re.compile(rb"[^\x00]")


def _nonzero(raw: bytes) -> list[int]:
    return [m.start() for m in _NONZERO.finditer(raw)]


def _first_varint(blob: bytes) -> int:
    """The first of SQLite's varints in ``blob``, as FTS5 writes its counts."""
    value = 0
    for byte in blob[:8]:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            break
    return value


@dataclass
class Postings:
    """Per store: for each word searched for lately, the lessons holding it in their text and in what
    says when they apply, as bit sets of rowids; all dropped when the index changes (FTS5 rewrites its
    structure record at every write), the least recently used first past :data:`POSTINGS_BYTES`."""

    version: bytes = b""
    total: int = 0  # lessons in the index
    counts: dict[str, int | None] = field(default_factory=dict)  # lessons holding a word; None: too many
    words: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)
    size: int = 0

    def sync(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT block FROM lesson_fts_data WHERE id = 10").fetchone()
        version = bytes(row[0]) if row and row[0] else b""
        if version != self.version:
            self.version, self.size = version, 0
            self.counts.clear()
            self.words.clear()
            # FTS5's averages record: its row count first, then each column's total length.
            row = conn.execute("SELECT block FROM lesson_fts_data WHERE id = 1").fetchone()
            self.total = _first_varint(row[0]) if row and row[0] else 0

    def count(self, conn: sqlite3.Connection, word: str) -> int | None:
        """How many lessons hold ``word``; None for a word more than half of them hold: BM25's idf for
        it is below zero, it says nothing about which lesson a request needs, and its lessons are the
        costliest to read (at least :data:`FEW_LESSONS` lessons count, so a team's first lessons keep
        all their words)."""
        if word not in self.counts:
            half = max(self.total, FEW_LESSONS) // 2
            held = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM lesson_fts WHERE lesson_fts MATCH ? LIMIT ?)",
                (f'"{word}"', half + 1),
            ).fetchone()[0]
            self.counts[word] = None if held > half else int(held)
        return self.counts[word]

    def known(self, word: str) -> bool:
        return word in self.words

    def get(self, conn: sqlite3.Connection, word: str) -> tuple[int, int]:
        """The bit sets of the lessons holding ``word`` (one :meth:`count` did not refuse) in their
        text and in what says when."""
        if word in self.words:
            self.words.move_to_end(word)
            return self.words[word]
        text, when = (
            _bits(
                conn.execute(
                    "SELECT group_concat(rowid) FROM lesson_fts WHERE lesson_fts MATCH ?", (f'{part} : "{word}"',)
                ).fetchone()[0]
            )
            for _, part in PARTS
        )
        self.words[word] = (text, when)
        self.size += 64 + (text.bit_length() + when.bit_length()) // 8
        while self.size > POSTINGS_BYTES and len(self.words) > 1:
            _, (a, b) = self.words.popitem(last=False)
            self.size -= 64 + (a.bit_length() + b.bit_length()) // 8
        return text, when


@dataclass(frozen=True)
class Match:
    relevance: float
    coverage: float


@dataclass(frozen=True)
class _Request:
    weights: dict[str, float]  # coverage weight of each word of the request
    ideal: float  # their sum
    idf: dict[str, float]  # bm25 idf of each word the index holds
    full: float  # their sum

    def match(self, held: dict[str, int]) -> Match:
        """A lesson's relevance from where it holds each word (``held``: word -> TEXT and WHEN bits)."""
        # in the request's order, whatever the order of ``held``: equal places give equal sums to the bit
        coverage = sum(self.weights[w] for w in self.weights if held.get(w)) / self.ideal
        fields = sum(self.idf[w] * ((held[w] & TEXT) + (held[w] & WHEN) // WHEN) for w in self.idf if w in held)
        return Match((coverage + fields / self.full) / 2, coverage)


def _classes(request: _Request, sets: dict[str, tuple[int, int]]) -> list[tuple[Match, dict[str, int]]]:
    """Every class of lessons holding some of these words (word -> where), best first; a word goes
    only where some lesson holds it."""
    places = []
    for text, when in sets.values():
        both = [TEXT | WHEN] if text & when else []
        places.append([0, *([TEXT] if text else []), *([WHEN] if when else []), *both])
    classes = []
    for choice in product(*places):
        if any(choice):
            held = dict(zip(sets, choice, strict=True))
            classes.append((request.match(held), held))
    classes.sort(key=lambda c: -c[0].relevance)
    return classes


def best(
    conn: sqlite3.Connection, postings: Postings, text: str, want: int, budget: int | None = None
) -> dict[int, Match]:
    """Lessons (by rowid) answering ``text``, each with its relevance: at least the ``want`` best and
    their equals, when that many hold a word of it (see the module's notes). ``budget``: the lessons
    holding the rarest words scored one by one, :data:`SCORE_BUDGET` when None."""
    words = query_words(text)
    if not words or want <= 0:
        return {}
    postings.sync(conn)
    every = {w: postings.count(conn, w) for w in words}
    counts = {w: n for w, n in every.items() if n is not None}  # a word most lessons hold is not searched for
    words = list(counts)
    held = [w for w in words if counts[w]]
    if not held:
        return {}
    total = postings.total
    weights = {w: weight(total, counts[w]) for w in words}
    idf = {w: bm25_idf(total, counts[w]) for w in held}
    request = _Request(weights, sum(weights.values()), idf, sum(idf.values()))
    budget = SCORE_BUDGET if budget is None else budget
    rare: list[str] = []
    spent = 0
    for word in sorted(held, key=counts.__getitem__):  # rarest first; a tie keeps the request's order
        if spent + counts[word] > budget:
            break
        rare.append(word)
        spent += counts[word]
    scored = 0  # the lessons scored one by one: those holding a rare word
    for word in rare:
        in_text, in_when = postings.get(conn, word)
        scored |= in_text | in_when
    places: dict[int, dict[str, int]] = {}
    for word in held if rare else ():
        if postings.known(word) or word in rare:
            parts: list[int] = list(postings.get(conn, word))
        else:  # where a commoner word stands in these lessons: a MATCH within them, not all its lessons
            parts = [
                _bits(
                    conn.execute(
                        "SELECT group_concat(rowid) FROM lesson_fts WHERE lesson_fts MATCH ?",
                        (f'({part} : "{word}") AND ({_any(rare)})',),
                    ).fetchone()[0]
                )
                for _, part in PARTS
            ]
        for bit, part_bits in zip((TEXT, WHEN), parts, strict=True):
            for rowid in members(part_bits & scored):
                where = places.setdefault(rowid, {})
                where[word] = where.get(word, 0) | bit
    found = {rowid: request.match(where) for rowid, where in places.items()}
    # The commoner words' classes. Only the weightiest are combined: a lesson also holding another
    # ranks in its class as if it did not (a request rarely has more common words than that).
    common = sorted((w for w in held if w not in rare), key=lambda w: -weights[w])[:COMMON_WORDS]
    if not common:
        return found
    best_class = request.match(dict.fromkeys(common, TEXT | WHEN))
    if len(found) >= want and best_class.relevance < floor(found, want):
        return found  # no class can reach the lessons kept: the commoner words' lessons are never read
    sets = {w: postings.get(conn, w) for w in common}
    for match, where in _classes(request, sets):
        if len(found) >= want and match.relevance < floor(found, want):
            break
        lessons = ~scored
        for word, bits in where.items():
            in_text, in_when = sets[word]
            lessons &= in_text if bits & TEXT else ~in_text
            lessons &= in_when if bits & WHEN else ~in_when
        for rowid in newest(lessons, want):
            found[rowid] = match
    return found


def floor(found: dict[int, Match], want: int) -> float:
    """The relevance of the ``want``-th best lesson found (there are at least ``want``)."""
    return sorted(m.relevance for m in found.values())[-want]

"""Text relevance over recall's real FTS5 index (hive.sidecar.lessons.relevance): the capped search finds
what scoring every lesson finds, the words' cached lessons follow the index, and words most lessons
hold are not searched for."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hive.sidecar.base.store import migrate
from hive.sidecar.lessons import relevance


@pytest.fixture
def index(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "hive.db")
    migrate(conn)
    yield conn
    conn.close()


def add(conn: sqlite3.Connection, rowid: int, text: str, applicability: str = "", tags: str = "") -> None:
    conn.execute(
        "INSERT INTO lesson_fts (rowid, id, text, applicability, tags) VALUES (?, ?, ?, ?, ?)",
        (rowid, f"{rowid:064x}", text, applicability, tags),
    )
    conn.commit()


def top(found: dict[int, relevance.Match], count: int) -> list[tuple[int, float]]:
    order = sorted(found, key=lambda rowid: (-found[rowid].relevance, -rowid))[:count]
    return [(rowid, round(found[rowid].relevance, 12)) for rowid in order]


def test_the_capped_search_puts_the_same_lessons_first_as_scoring_every_lesson_that_holds_a_word(
    index: sqlite3.Connection,
) -> None:
    rng = random.Random(5)
    vocabulary = [f"word{n}" for n in range(300)]

    def draw() -> str:  # word n with weight ~1/n: a few words most lessons hold, many few do
        return vocabulary[int(len(vocabulary) ** rng.random()) - 1]

    for rowid in range(1, 3001):
        add(
            index,
            rowid,
            " ".join(draw() for _ in range(rng.randint(6, 20))),
            f"when {draw()}",
            draw() if rowid % 7 == 0 else "",
        )
    queries = [" ".join(draw() for _ in range(rng.choice((1, 2, 3)))) for _ in range(120)]
    capped, whole = relevance.Postings(), relevance.Postings()
    compared = 0
    for query in queries:
        mine = relevance.best(index, capped, query, 20, budget=60)
        every = relevance.best(index, whole, query, 20, budget=10**9)
        assert top(mine, 20) == top(every, 20), query
        compared += len(every) > len(mine)  # the cap left lessons unscored, yet the best are the same
    assert compared > 30


def test_a_lesson_added_after_a_search_is_found_by_the_next_search(index: sqlite3.Connection) -> None:
    postings = relevance.Postings()
    add(index, 1, "Alembic enum values need a manual migration.")
    assert set(relevance.best(index, postings, "alembic migration", 10)) == {1}
    add(index, 2, "Name each alembic migration after its ticket.", "when writing migrations")
    found = relevance.best(index, postings, "alembic migration", 10)
    assert set(found) == {1, 2}
    assert found[2].relevance > found[1].relevance  # it also says it applies to migrations
    index.execute("DELETE FROM lesson_fts WHERE rowid = 1")
    index.commit()
    assert set(relevance.best(index, postings, "alembic migration", 10)) == {2}


def test_a_word_more_than_half_the_lessons_hold_is_not_searched_for_once_there_are_enough_lessons(
    index: sqlite3.Connection,
) -> None:
    postings = relevance.Postings()
    for rowid in range(1, 41):  # a team's first lessons: "service" in most of them still counts
        add(index, rowid, f"The service note {rowid}" if rowid % 4 else f"Note {rowid}")
    assert len(relevance.best(index, postings, "service", 100)) == 30
    for rowid in range(41, 201):
        add(index, rowid, f"The service runs job {rowid}" + (" and the cache flakes" if rowid == 150 else ""))
    assert relevance.best(index, postings, "service", 100) == {}
    found = relevance.best(index, postings, "service cache", 100)
    assert list(found) == [150]


def test_a_lesson_naming_the_words_where_it_says_when_it_applies_ranks_above_one_mentioning_them_in_passing(
    index: sqlite3.Connection,
) -> None:
    add(index, 1, "Retries in the payment client use exponential backoff.")
    add(index, 2, "Retries in the payment client use a budget.", "when changing payment retries")
    add(index, 3, "Retries in the payment client keep one pool.", "", "retries")
    found = relevance.best(index, relevance.Postings(), "payment retries", 10)
    assert found[2].relevance > found[3].relevance > found[1].relevance
    assert found[1].coverage == found[2].coverage == found[3].coverage == 1.0

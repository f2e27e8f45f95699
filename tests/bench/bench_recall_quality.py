"""How often recall puts the right lesson first: hit@1, hit@3 and MRR on a corpus of team lessons
with look-alike distractors and tasks phrased as agents and people phrase them, next to plain FTS5
bm25 on the same data in the same run.

    .venv/bin/python tests/bench/bench_recall_quality.py            # the table
    .venv/bin/python tests/bench/bench_recall_quality.py --json     # the figures, for the test suite

The corpus is ``tests/bench/recall_corpus.yaml`` (two projects and the team's lessons; each task has
the agent's own description of its work, the files it touched, what its person typed and, for some,
a failing command's output, and the one lesson it should get). The lessons are written into a real
sidecar database (all migrations) as verified rows in the shape :mod:`hive.sidecar.lessons.store`
keeps them, with each lesson's age drawn once from a fixed seed, so freshness plays its usual part.

Rows:

- pull, with files: :func:`hive.sidecar.lessons.recall.search` with the task's words and files
  (``search_memory(q, files)``, ``lesson_context``);
- pull, words only: the same without files (``search_memory(q)``, ``hive lessons search``);
- turn tier: :func:`hive.sidecar.lessons.recall.for_turn` with the session's words as a hook gathers them
  (the person's prompt, the session's ``doing`` line, for which the task's own description stands
  in, and the error text) and its files (an empty answer is a miss); and again without the
  ``doing`` line, as for a harness that reports none;
- baseline: every word of the task OR-ed in a MATCH over an FTS5 table with the default tokenizer,
  ordered by bm25 alone.

The figures are for this corpus, which was written to test recall rather than to tune it; a
held-out corpus judges the constants.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import yaml

from hive.sidecar.base.store import Store
from hive.sidecar.lessons import recall
from hive.sidecar.team.projects import project_id

CORPUS = Path(__file__).with_name("recall_corpus.yaml")
PERSON = "alice"
DAY_MS = 86_400_000


def load(path: Path = CORPUS) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


async def fill(store: Store, corpus: dict[str, Any], projects: dict[str, str], now_ms: int) -> dict[str, str]:
    """The corpus's lessons as verified rows; returns lesson id by key."""
    rng = random.Random(20)
    ids: dict[str, str] = {}
    statements: list[tuple[str, tuple[Any, ...]]] = [
        ("CREATE VIRTUAL TABLE baseline_fts USING fts5(id UNINDEXED, text, applicability, tags)", ())
    ]
    for n, item in enumerate(corpus["lessons"], start=1):
        lesson_id = f"{n:064x}"
        ids[item["key"]] = lesson_id
        project = projects.get(item.get("project") or "", "")
        scope = "project" if project else "team"
        created = now_ms - rng.randrange(0, 180) * DAY_MS
        evidence = [{"kind": "file", "ref": f} for f in item.get("files") or []]
        header = {
            "id": lesson_id,
            "kind": item["kind"],
            "scope": scope,
            "project": project,
            "evidence": evidence,
            "tags": item.get("tags") or [],
            "author_person": PERSON,
            "author_session": f"{PERSON}/api",
            "created_at": created,
        }
        body = {
            "lesson": lesson_id,
            "role": "body",
            "text": item["text"],
            "applicability": item["applicability"],
            "quote": None,
        }
        body_hash = lesson_id[::-1]
        tags = " ".join(item.get("tags") or [])
        statements += [
            (
                "INSERT INTO lessons (rowid, id, author, author_person, scope, project, kind, header, body_hash, "
                "created_at, received_at, asked_at, state, eff_scope, eff_project, reviewer) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'verified', ?, ?, 'bob')",
                (
                    n,
                    lesson_id,
                    "k" * 64,
                    PERSON,
                    scope,
                    project,
                    item["kind"],
                    json.dumps(header),
                    body_hash,
                    created,
                    time.time(),
                    time.time(),
                    scope,
                    project,
                ),
            ),
            (
                "INSERT INTO lesson_blobs (hash, lesson, blob) VALUES (?, ?, ?)",
                (body_hash, lesson_id, json.dumps(body)),
            ),
            (
                "INSERT INTO lesson_fts (rowid, id, text, applicability, tags) VALUES (?, ?, ?, ?, ?)",
                (n, lesson_id, item["text"], item["applicability"], tags),
            ),
            (
                "INSERT INTO baseline_fts (rowid, id, text, applicability, tags) VALUES (?, ?, ?, ?, ?)",
                (n, lesson_id, item["text"], item["applicability"], tags),
            ),
        ]
    await store.write(statements)
    return ids


def scores(ranks: list[int | None]) -> dict[str, float]:
    """hit@1, hit@3 and MRR from the expected lesson's 1-based place in each answer (None: absent)."""
    count = len(ranks) or 1
    return {
        "hit@1": sum(r == 1 for r in ranks) / count,
        "hit@3": sum(r is not None and r <= 3 for r in ranks) / count,
        "mrr": sum(1 / r for r in ranks if r) / count,
    }


def place(found: list[str], wanted: str) -> int | None:
    return found.index(wanted) + 1 if wanted in found else None


async def evaluate(corpus: dict[str, Any]) -> dict[str, Any]:
    projects = {key: project_id(url) for key, url in corpus["projects"].items()}
    folder = Path(tempfile.mkdtemp(prefix="hive-bench-recall-quality-", dir="/tmp"))
    store = await Store.open(folder / "hive.db")
    now_ms = int(time.time() * 1000)
    try:
        ids = await fill(store, corpus, projects, now_ms)
        viewer = recall.Viewer(PERSON, tuple(projects.values()))
        origins = {"k" * 64: f"{PERSON}@m1"}

        async def pull(task: dict[str, Any], files: list[str]) -> list[str]:
            ranked = await recall.search(
                store,
                viewer,
                text=task["task"],
                files=files,
                project=projects[task["project"]],
                origins=origins,
                limit=10,
                now_ms=now_ms,
            )
            return [r.lesson.id for r in ranked]

        async def turn(task: dict[str, Any], doing: bool = True) -> list[str]:
            words = "\n".join(w for w in (task["prompt"], task["task"] if doing else "") if w)
            ranked = await recall.for_turn(
                store,
                viewer,
                words=words,
                error=task.get("error") or "",
                files=task["files"],
                project=projects[task["project"]],
                origins=origins,
                now_ms=now_ms,
            )
            return [r.lesson.id for r, _ in ranked]

        async def baseline(task: dict[str, Any]) -> list[str]:
            words = dict.fromkeys(w for w in re.findall(r"[^\W_]+", task["task"].lower()))
            rows = await store.fetchall(
                "SELECT id FROM baseline_fts WHERE baseline_fts MATCH ? ORDER BY bm25(baseline_fts) LIMIT 10",
                (" OR ".join(f'"{w}"' for w in words),),
            )
            return [r[0] for r in rows]

        runs: dict[str, Callable[[dict[str, Any]], Awaitable[list[str]]]] = {
            "pull, with files": lambda t: pull(t, t["files"]),
            "pull, words only": lambda t: pull(t, []),
            "turn tier": turn,
            "turn, no doing line": lambda t: turn(t, doing=False),
            "baseline: FTS5 bm25": baseline,
        }
        out: dict[str, Any] = {"lessons": len(ids), "tasks": len(corpus["tasks"]), "rows": {}, "misses": {}}
        for name, run in runs.items():
            ranks = []
            for task in corpus["tasks"]:
                found = await run(task)
                ranks.append(place(found, ids[task["expect"]]))
                if ranks[-1] != 1:
                    by_id = {v: k for k, v in ids.items()}
                    out["misses"].setdefault(name, []).append(
                        f"{task['id']}: wanted {task['expect']}, got {by_id.get(found[0], '-') if found else '-'}"
                    )
            out["rows"][name] = scores(ranks)
        return out
    finally:
        await store.close()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--misses", action="store_true", help="also list each task a row did not put first")
    args = parser.parse_args()
    result = anyio.run(evaluate, load())
    if args.json:
        print(json.dumps(result))
        return
    print(f"recall quality: {result['lessons']} lessons, {result['tasks']} tasks ({CORPUS.name})")
    print(f"{'':24}{'hit@1':>8}{'hit@3':>8}{'MRR':>8}")
    for name, row in result["rows"].items():
        print(f"{name:24}{row['hit@1']:8.3f}{row['hit@3']:8.3f}{row['mrr']:8.3f}")
    if args.misses:
        for name, misses in result["misses"].items():
            print(f"\n{name}:\n  " + "\n  ".join(misses))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Recall: the ranking on fixed corpora whose order can be checked by hand, then through real sidecars
(search, hypotheses, what never appears) and turn-tier injection through the ``hook`` op.

The score (``hive.sidecar.lessons.recall``) is 1.0·relevance + 0.6·overlap + 0.4·outcome + 0.3·scope + 0.2·freshness,
with relevance from hive.sidecar.lessons.relevance (given here directly),
overlap = 1 for a touched file the lesson names and ½ for one beneath a folder it names, outcome =
(successes + 1) / (citations + 2), scope personal 1 / this project ⅔ / team ⅓ / other project 0, and
freshness = ½ ** (age in days / 90). Each corpus below varies one or two signals; the comments do the sums.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.lessons.recall import Candidate, rank
from hive.sidecar.lessons.relevance import fts_query, query_words

from ..conftest import Hive
from .lesson_steps import approve, git_repo, propose, run_json
from .test_mesh import ok

DAY = 86_400_000
NOW = 1_000 * DAY
HERE = "sha256:" + "a" * 64
THERE = "sha256:" + "b" * 64


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")


def lesson(
    id_: str,
    *,
    scope: str = "team",
    project: str = "",
    age_days: float = 0,
    relevance: float = 0.0,
    files: tuple[str, ...] = (),
    citations: int = 0,
    successes: int = 0,
) -> Candidate:
    return Candidate(
        id=id_,
        kind="gotcha",
        text=id_,
        applicability="",
        scope=scope,
        project=project,
        created_at=int(NOW - age_days * DAY),
        author="alice/api",
        origin="alice@m1",
        reviewer="bob",
        files=files,
        citations=citations,
        successes=successes,
        relevance=relevance,
    )


def order(candidates: list[Candidate], **context: Any) -> list[str]:
    return [r.lesson.id for r in rank(candidates, now_ms=NOW, project=HERE, **context)]


def test_a_better_text_match_ranks_first_when_nothing_else_differs() -> None:
    # relevance 1, 0.5, 0.25; every other signal equal.
    corpus = [lesson("weak", relevance=0.25), lesson("best", relevance=1.0), lesson("half", relevance=0.5)]
    assert order(corpus) == ["best", "half", "weak"]


def test_the_narrowest_scope_ranks_first_and_another_projects_lesson_last_as_a_hypothesis() -> None:
    # scope: personal 0.3·1, this project 0.3·⅔ = 0.2, team 0.3·⅓ = 0.1, another project 0.
    corpus = [
        lesson("team"),
        lesson("there", scope="project", project=THERE),
        lesson("mine", scope="personal"),
        lesson("here", scope="project", project=HERE),
    ]
    ranked = rank(corpus, now_ms=NOW, project=HERE)
    assert [r.lesson.id for r in ranked] == ["mine", "here", "team", "there"]
    assert [r.hypothesis for r in ranked] == [False, False, False, True]


def test_a_lesson_that_worked_when_cited_outranks_a_new_one_and_one_that_failed_ranks_below_it() -> None:
    # outcome: 9 of 10 worked: 10/12 = .83; new: 1/2; 0 of 4 worked: 1/6 = .17 (times 0.4).
    corpus = [lesson("new"), lesson("failed", citations=4, successes=0), lesson("proven", citations=10, successes=9)]
    assert order(corpus) == ["proven", "new", "failed"]


def test_a_touched_file_the_lesson_names_lifts_it_more_than_one_beneath_a_folder_it_names() -> None:
    # overlap: a named file touched = 1 (0.6), whatever else the lesson cites; a file beneath a named
    # folder = ½ (0.3); none = 0. A session's absolute path matches a lesson's relative one.
    corpus = [
        lesson("none", files=("docs/a.md",)),
        lesson("folder", files=("src/",)),
        lesson("file", files=("src/x.py", "/abs/repo/src/api.py", "docs/b.md")),
    ]
    ranked = rank(corpus, now_ms=NOW, files=("src/api.py",))
    assert [r.lesson.id for r in ranked] == ["file", "folder", "none"]
    assert [r.signals["overlap"] for r in ranked] == [1.0, 0.5, 0.0]
    assert ranked[1].overlap == ("src/",)


def test_older_lessons_fade_with_a_ninety_day_half_life() -> None:
    # freshness: today 0.2·1, 90 days 0.2·½, 180 days 0.2·¼.
    corpus = [lesson("older", age_days=180), lesson("today"), lesson("quarter", age_days=90)]
    ranked = rank(corpus, now_ms=NOW)
    assert [r.lesson.id for r in ranked] == ["today", "quarter", "older"]
    assert [round(r.signals["freshness"], 3) for r in ranked] == [1.0, 0.5, 0.25]


def test_text_relevance_outweighs_scope_and_age_but_touched_files_can_beat_a_slightly_better_match() -> None:
    # a: 1.0 + 0.1 (team) + 0.2 + 0.2 = 1.50 ; b: 0.5 + 0.3 (personal) + 0.2 + 0.2·½ = 1.10
    # c: 0.8 + 0.6 (its one file touched) + 0.1 + 0.2 + 0.2 = 1.90
    corpus = [
        lesson("a", relevance=1.0),
        lesson("b", scope="personal", relevance=0.5, age_days=90),
        lesson("c", relevance=0.8, files=("src/db.py",)),
    ]
    ranked = rank(corpus, now_ms=NOW, files=("src/db.py",))
    assert [r.lesson.id for r in ranked] == ["c", "a", "b"]
    assert [round(r.score, 2) for r in ranked] == [1.9, 1.5, 1.1]


def test_ties_go_to_the_newer_lesson_then_the_smaller_id() -> None:
    corpus = [lesson("b"), lesson("a"), lesson("c", age_days=0.0001)]
    assert order(corpus) == ["a", "b", "c"]


def test_free_text_becomes_an_or_of_quoted_words_without_fts_syntax() -> None:
    assert (
        fts_query('why does "psql" hang? (NEAR staging*) OR vpn') == '"psql" OR "hang" OR "near" OR "staging" OR "vpn"'
    )
    assert fts_query("the a of") == ""


def test_one_letter_tokens_possessives_and_the_generic_words_of_a_task_are_not_searched_for() -> None:
    assert query_words("Fix the worker's queue: it's a 2 s timeout, please update it") == ["worker", "queue", "timeout"]


# ---- through real sidecars ---------------------------------------------------------------------


def test_search_ranks_verified_lessons_by_text_and_never_shows_unreviewed_or_rejected_ones(hive: Hive) -> None:
    strong = propose(
        hive,
        "The staging database drops idle connections; set the staging pool to recycle staging connections.",
        evidence=("file:db/pool.py",),
    )["id"]
    weak = propose(
        hive, "Migrations run before the app starts; staging is no exception.", evidence=("file:db/migrate.py",)
    )["id"]
    unreviewed = propose(hive, "Staging staging staging connections are flaky.", evidence=("file:db/x.py",))["id"]
    for lesson_id in (strong, weak):
        approve(hive, lesson_id)
    found = run_json(hive, "lessons", "search", "staging", "connections")["lessons"]
    assert [f["id"] for f in found] == [strong, weak]
    assert unreviewed not in {f["id"] for f in found}
    assert found[0]["signals"]["relevance"] == 1.0 and found[1]["signals"]["relevance"] < 1.0


def claude(sid: str, cwd: str, event: str, **extra: Any) -> dict[str, Any]:
    return {"session_id": sid, "cwd": cwd, "hook_event_name": event, **extra}


def hook(hive: Hive, event: str, payload: dict[str, Any]) -> dict[str, Any]:
    return ok(hive, "hook", harness="claude-code", event=event, payload=payload, env={"CLAUDECODE": "1"})


def lesson_lines(reply: dict[str, Any]) -> list[str]:
    """The <hive-lesson> lines of a hook reply (Claude Code's: JSON with additionalContext, or at
    Stop the text on stderr with exit 2)."""
    stdout = reply["stdout"]
    if reply.get("exit") == 2:
        context = reply["stderr"]
    else:
        context = json.loads(stdout)["hookSpecificOutput"]["additionalContext"] if stdout.strip() else ""
    return [line for line in context.splitlines() if "<hive-lesson " in line]


def edit_hook(cwd: str, session: str, n: int, path: str = "payments/client.py") -> dict[str, Any]:
    return claude(
        session,
        cwd,
        "PostToolUse",
        tool_name="Edit",
        tool_use_id=f"toolu_{n}",
        tool_input={"file_path": f"{cwd}/{path}", "old_string": "a", "new_string": "b"},
        tool_response={"success": True},
    )


def verified_payments_lesson(hive: Hive, tmp_path: Path) -> tuple[str, str]:
    """A verified project lesson about payments/client.py in a new repository: (its id, the repo folder)."""
    repo = git_repo(tmp_path / "api")
    lesson_id = propose(
        hive,
        "payments/client.py retries are not idempotent: pass an idempotency key.",
        scope="project",
        evidence=("file:payments/client.py",),
        cwd=repo,
    )["id"]
    approve(hive, lesson_id, cwd=repo)
    return lesson_id, str(repo)


def test_a_session_editing_a_lessons_file_is_told_once_at_its_next_tool_call_and_never_at_a_stop(
    hive: Hive, tmp_path: Path
) -> None:
    lesson_id, cwd = verified_payments_lesson(hive, tmp_path)
    assert lesson_lines(hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))) == []
    edit = edit_hook(cwd, "s1", 1)
    told = lesson_lines(hook(hive, "PostToolUse", edit))
    assert len(told) == 1
    assert f'id="{lesson_id[:12]}"' in told[0] and 'reviewed-by="alice"' in told[0]
    assert 'why="files:payments/client.py"' in told[0] and "idempotency key" in told[0]
    again = {**edit, "tool_use_id": "toolu_2"}
    assert lesson_lines(hook(hive, "PostToolUse", again)) == []  # once per lesson per session
    assert lesson_lines(hook(hive, "Stop", claude("s1", cwd, "Stop", stop_hook_active=False))) == []
    other = edit_hook(cwd, "s2", 3)
    assert len(lesson_lines(hook(hive, "PostToolUse", other))) == 1  # another session is told too
    events = ok(hive, "events", action="lesson.injected")["events"]
    assert [e["session"] for e in events] == ["s1", "s2"]


def lesson_rows(hive: Hive) -> list[dict[str, Any]]:
    return [r for r in ok(hive, "gate_ledger")["rows"] if r["source"] == "lesson"]


def test_a_recalled_lesson_passes_the_gate_whose_ledger_records_it_and_a_restart_does_not_tell_it_again(
    hive: Hive, tmp_path: Path
) -> None:
    lesson_id, cwd = verified_payments_lesson(hive, tmp_path)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))
    told = lesson_lines(hook(hive, "PostToolUse", edit_hook(cwd, "s1", 1)))
    delivered = lesson_rows(hive)
    hive.stop()  # what the session was told is memory only; the gate's ledger is not
    hive.start()
    again = lesson_lines(hook(hive, "PostToolUse", edit_hook(cwd, "s1", 2)))
    rows = lesson_rows(hive)

    assert len(told) == 1 and f'id="{lesson_id[:12]}"' in told[0]
    assert [(r["outcome"], r["rule"], r["channel"]) for r in delivered] == [("deliver", "now.requested", "session")]
    why = ok(hive, "gate_why", item=delivered[0]["item"])["items"][0]["item"]
    assert why["session"].startswith("alice/") and {"kind": "lesson", "ref": lesson_id} in why["evidence"]
    assert any(e["kind"] == "file" and e["ref"].endswith(":payments/client.py") for e in why["evidence"])
    assert again == []
    assert [(r["outcome"], r["rule"]) for r in rows[1:]] == [("silence", "duplicate")]
    assert [e["session"] for e in ok(hive, "events", action="lesson.injected")["events"]] == ["s1"]


def test_a_person_who_muted_lessons_gets_no_lesson_line_and_the_gate_says_which_rule_held_it_back(
    make_hive: Any, tmp_path: Path
) -> None:
    hive = make_hive('[gate.people.alice]\nmute = ["lesson"]\n')
    hive.start()
    _, cwd = verified_payments_lesson(hive, tmp_path)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))
    first = lesson_lines(hook(hive, "PostToolUse", edit_hook(cwd, "s1", 1)))
    second = lesson_lines(hook(hive, "PostToolUse", edit_hook(cwd, "s1", 2)))
    rows = lesson_rows(hive)
    why = hive.cli_json("gate", "why", rows[0]["item"])["items"][0]

    assert first == [] and second == []
    assert [(r["outcome"], r["rule"]) for r in rows] == [("silence", "pref.mute")]  # asked once per session
    assert why["decisions"][-1]["rule"] == "pref.mute" and why["item"]["state"] == "silenced"
    assert ok(hive, "events", action="lesson.injected")["events"] == []


def test_a_failing_commands_error_text_brings_the_lesson_that_matches_it_within_an_hourly_cap(
    hive: Hive, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "api")
    ids = []
    for n, words in enumerate(("ECONNREFUSED 5432", "ETIMEDOUT redis", "EADDRINUSE 8080", "ENOSPC docker")):
        ids.append(
            propose(
                hive,
                f"{words}: lesson {n} about {words.split()[0]}.",
                scope="project",
                evidence=(f"file:ops/{n}.md",),
                cwd=repo,
            )["id"]
        )
        approve(hive, ids[-1], cwd=repo)
    cwd = str(repo)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))
    told: list[str] = []
    for n, error in enumerate(
        (
            "connect ECONNREFUSED 127.0.0.1:5432",
            "redis ETIMEDOUT after 5s",
            "listen EADDRINUSE :::8080",
            "write ENOSPC no space left on docker",
        )
    ):
        failed = claude(
            "s1",
            cwd,
            "PostToolUse",
            tool_name="Bash",
            tool_use_id=f"toolu_{n}",
            tool_input={"command": "npm test"},
            tool_response={"stdout": "", "stderr": error, "exit_code": 1},
        )
        told += lesson_lines(hook(hive, "PostToolUse", failed))
    assert [line.split('id="', 1)[1][:12] for line in told] == [i[:12] for i in ids[:3]]  # the fourth: capped
    assert all('why="error"' in line for line in told)
    passed = claude(
        "s1",
        cwd,
        "PostToolUse",
        tool_name="Bash",
        tool_use_id="toolu_ok",
        tool_input={"command": "ls"},
        tool_response={"stdout": "ECONNREFUSED in a file name", "stderr": "", "exit_code": 0},
    )
    assert lesson_lines(hook(hive, "PostToolUse", passed)) == []


def test_a_lesson_verified_while_a_session_keeps_editing_its_file_is_told_at_the_sessions_next_tool_call(
    hive: Hive, tmp_path: Path
) -> None:
    # The hook skips recall while no lesson is verified and while the same files found nothing new:
    # both must end with the next verification.
    repo = git_repo(tmp_path / "api")
    first, second = (
        propose(hive, text, scope="project", evidence=("file:payments/client.py",), cwd=repo)["id"]
        for text in (
            "payments/client.py retries are not idempotent: pass an idempotency key.",
            "payments/client.py logs card numbers at debug level: never enable it.",
        )
    )
    cwd = str(repo)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))

    def edit(n: int) -> list[str]:
        payload = claude(
            "s1",
            cwd,
            "PostToolUse",
            tool_name="Edit",
            tool_use_id=f"toolu_{n}",
            tool_input={"file_path": f"{cwd}/payments/client.py", "old_string": "a", "new_string": "b"},
            tool_response={"success": True},
        )
        return [line.split('id="', 1)[1][:12] for line in lesson_lines(hook(hive, "PostToolUse", payload))]

    assert edit(1) == []  # nothing verified yet
    approve(hive, first, cwd=repo)
    assert edit(2) == [first[:12]]
    assert edit(3) == []  # told once; the same file finds nothing new
    approve(hive, second, cwd=repo)
    assert edit(4) == [second[:12]]


def test_the_recall_benchmark_runs_and_prints_its_figures_next_to_a_baseline() -> None:
    # tests/bench is not collected; this keeps the script working. Its numbers are not asserted.
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_recall.py"
    completed = subprocess.run(
        [sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "recall p50" in completed.stdout and "baseline" in completed.stdout
    assert "agreement with every word and lesson scored" in completed.stdout


def test_on_the_evaluation_corpus_recall_puts_the_expected_lesson_first_more_often_than_plain_bm25() -> None:
    # A quality figure, not a time: the same corpus and code give the same numbers on any machine.
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_recall_quality.py"
    completed = subprocess.run(
        [sys.executable, str(bench), "--json"], capture_output=True, text=True, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stderr
    rows = json.loads(completed.stdout)["rows"]
    baseline = rows["baseline: FTS5 bm25"]
    for name in ("pull, with files", "pull, words only"):
        assert rows[name]["hit@1"] >= baseline["hit@1"] and rows[name]["mrr"] > baseline["mrr"], rows
        assert rows[name]["hit@3"] == 1.0, rows
    assert rows["turn tier"]["hit@1"] >= 0.9, rows


# ---- the session's words, folders, crowding and visibility ------------------------------------


def test_a_prompt_about_a_lesson_brings_it_with_the_prompt_before_any_file_is_touched(
    hive: Hive, tmp_path: Path
) -> None:
    lesson_id, cwd = verified_payments_lesson(hive, tmp_path)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))
    told = lesson_lines(
        hook(
            hive,
            "UserPromptSubmit",
            claude("s1", cwd, "UserPromptSubmit", prompt="the payments client's retry charged twice"),
        )
    )
    assert len(told) == 1 and f'id="{lesson_id[:12]}"' in told[0] and 'why="words"' in told[0]
    assert (
        lesson_lines(
            hook(hive, "UserPromptSubmit", claude("s2", cwd, "UserPromptSubmit", prompt="rename the logo file"))
        )
        == []
    )


def test_a_lesson_naming_a_folder_is_told_to_a_session_editing_a_file_beneath_it(hive: Hive, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "api")
    lesson_id = propose(
        hive,
        "Integration tests share one database: never run them under xdist.",
        scope="project",
        evidence=("file:tests/integration/",),
        cwd=repo,
    )["id"]
    approve(hive, lesson_id, cwd=repo)
    hook(hive, "SessionStart", claude("s1", str(repo), "SessionStart", source="startup"))
    told = lesson_lines(hook(hive, "PostToolUse", edit_hook(str(repo), "s1", 1, "tests/integration/test_orders.py")))
    assert len(told) == 1 and f'id="{lesson_id[:12]}"' in told[0] and 'why="files:tests/integration"' in told[0]


def test_unreviewed_look_alikes_never_crowd_the_verified_lesson_out_of_a_search(hive: Hive) -> None:
    verified = propose(hive, "Staging needs the VPN before psql connects.", evidence=("file:db/staging.md",))["id"]
    approve(hive, verified)
    for n in range(45):
        ok(
            hive,
            "lesson_propose",
            kind="gotcha",
            scope="team",
            text=f"Staging psql needs the VPN, variant {n}.",
            evidence=[f"file:db/staging{n}.md"],
            applicability="",
            tags=[],
            cwd="/",
        )
    found = run_json(hive, "lessons", "search", "staging", "psql", "vpn", "--limit", "3")["lessons"]
    assert [f["id"] for f in found] == [verified]


def test_another_projects_lessons_about_the_same_file_never_take_the_turn_tiers_places(
    hive: Hive, tmp_path: Path
) -> None:
    web = git_repo(tmp_path / "web", origin="git@github.com:acme/web.git")
    for n in range(3):  # HOURLY_CAP of them, all newer than this project's own
        other = propose(
            hive,
            f"payments/client.py in the web app wraps fetch, variant {n}.",
            scope="project",
            evidence=("file:payments/client.py",),
            cwd=web,
        )["id"]
        approve(hive, other, cwd=web)
    lesson_id, cwd = verified_payments_lesson(hive, tmp_path)
    hook(hive, "SessionStart", claude("s1", cwd, "SessionStart", source="startup"))
    told = lesson_lines(hook(hive, "PostToolUse", edit_hook(cwd, "s1", 1)))
    assert len(told) == 1 and f'id="{lesson_id[:12]}"' in told[0]

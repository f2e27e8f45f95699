"""Promotion: a verified lesson becomes ``.agents/skills/hive-<slug>/SKILL.md``, checked by the Agent Skills
reference validator (``skills-ref``) on every skill written, linked for Claude Code, and following its lesson."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from skills_ref import read_properties, validate

from ..conftest import Hive
from .lesson_steps import approve, git_repo, propose, run, run_json, state


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")


def valid(skill: Path) -> None:
    """The reference validator, from Python and as its own command, accepts the skill folder."""
    assert validate(skill) == []
    checked = subprocess.run(
        [sys.executable, "-m", "skills_ref.cli", "validate", str(skill)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def verified(hive: Hive, repo: Path, text: str, **extra: Any) -> str:
    lesson_id = str(propose(hive, text, scope="project", cwd=repo, **extra)["id"])
    approve(hive, lesson_id, cwd=repo)
    return lesson_id


def promoted(hive: Hive, repo: Path, lesson_id: str, *args: str) -> dict[str, Any]:
    return dict(run_json(hive, "lessons", "promote", lesson_id, *args, cwd=repo))


TRICKY = (
    'Run "make db-reset": it drops --- everything; use `make db-reset KEEP=1` instead. '
    "Ça marche: 100% # not a comment, key: value, [list], {map}, ! & * ? |"
)


def test_a_verified_lesson_becomes_a_valid_skill_with_its_provenance_and_a_relative_link_for_claude_code(
    hive: Hive, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "api")
    lesson_id = verified(
        hive,
        repo,
        TRICKY,
        evidence=("file:Makefile", "command:make db-reset"),
        extra=("--applicability", "resetting the local database", "--tag", "db"),
    )
    result = promoted(hive, repo, lesson_id)
    skill = Path(result["path"]).parent
    assert skill.parent == repo / ".agents" / "skills"
    assert skill.name.startswith("hive-") and skill.name == result["skill"]
    valid(skill)
    props = read_properties(skill)
    assert props.name == skill.name
    assert props.description.startswith("Use when resetting the local database.")
    assert props.metadata["hive-lesson"] == lesson_id
    assert (props.metadata["hive-reviewer"], props.metadata["hive-kind"], props.metadata["hive-scope"]) == (
        "alice",
        "gotcha",
        "project",
    )
    assert TRICKY in (skill / "SKILL.md").read_text(encoding="utf-8")
    link = repo / ".claude" / "skills" / skill.name
    assert result["claude"] == "link" and link.is_symlink()
    assert not Path(link.readlink()).is_absolute()
    assert link.resolve() == skill.resolve()
    valid(link)
    assert oct((skill / "SKILL.md").stat().st_mode & 0o777) == "0o644"  # committed, read by every harness


def test_promote_says_how_claude_code_sees_the_skill_and_answers_the_same_keys_as_json(
    hive: Hive, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "api")
    lesson_id = verified(hive, repo, "Release notes go in docs/releases, one file per version.")
    said = run(hive, "lessons", "promote", lesson_id, cwd=repo)
    assert said.returncode == 0, said.stderr
    first = said.stdout.splitlines()[0]
    assert first.startswith("wrote ") and first.endswith("/SKILL.md (Claude Code: link)")
    assert list(promoted(hive, repo, lesson_id)) == ["lesson", "skill", "path", "claude", "notes"]


def test_only_a_verified_project_or_team_lesson_is_promoted(hive: Hive, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "api")
    waiting = propose(hive, "Not reviewed yet.", scope="project", cwd=repo)["id"]
    mine = propose(hive, "I like short commit subjects.", scope="personal", cwd=repo)["id"]
    approve(hive, mine, cwd=repo)
    unreviewed = run(hive, "lessons", "promote", waiting, cwd=repo)
    personal = run(hive, "lessons", "promote", mine, cwd=repo)
    assert unreviewed.stderr.strip().endswith("[lesson_state]")
    assert personal.stderr.strip().endswith("[refused]")
    assert not (repo / ".agents").exists()


def test_a_hand_edited_skill_is_kept_unless_promoted_with_force(hive: Hive, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "api")
    lesson_id = verified(hive, repo, "Feature flags live in config/flags.yaml, never in code.")
    path = Path(promoted(hive, repo, lesson_id)["path"])
    again = promoted(hive, repo, lesson_id)  # untouched: re-rendering it is fine
    assert again["path"] == str(path)
    path.write_text(path.read_text(encoding="utf-8") + "\nOur own note.\n", encoding="utf-8")
    refused = run(hive, "lessons", "promote", lesson_id, cwd=repo)
    assert refused.stderr.strip().endswith("[conflict]")
    assert "Our own note." in path.read_text(encoding="utf-8")
    forced = promoted(hive, repo, lesson_id, "--force")
    assert "Our own note." not in Path(forced["path"]).read_text(encoding="utf-8")
    valid(path.parent)


def test_superseding_rewrites_the_skill_in_place_and_retracting_removes_it_and_its_link(
    hive: Hive, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path / "api")
    old = verified(hive, repo, "Deploy with make deploy from the main branch.", evidence=("file:Makefile",))
    skill = Path(promoted(hive, repo, old)["path"]).parent
    result = run(
        hive,
        "lessons",
        "supersede",
        old,
        "Deploy with make release; make deploy is gone.",
        "--kind",
        "workflow",
        "--scope",
        "project",
        "--evidence",
        "file:Makefile",
        "--json",
        cwd=repo,
    )
    assert result.returncode == 0, result.stderr
    new = json.loads(result.stdout)["id"]
    assert read_properties(skill).metadata["hive-lesson"] == old  # not until the replacement is verified
    approve(hive, new, cwd=repo)
    assert state(hive, old) == "superseded"
    props = read_properties(skill)
    assert (props.metadata["hive-lesson"], props.metadata["hive-supersedes"]) == (new, old)
    assert "make release" in (skill / "SKILL.md").read_text(encoding="utf-8")
    valid(skill)

    retracted = run_json(hive, "lessons", "retract", new, cwd=repo)
    assert retracted["removed"] == [str(skill)]
    assert not skill.exists()
    assert not (repo / ".claude" / "skills" / skill.name).exists()
    assert not (repo / ".claude" / "skills" / skill.name).is_symlink()


def test_the_promotion_benchmark_runs_and_prints_its_figures() -> None:
    # tests/bench is not collected; this keeps the script working. Its numbers are not asserted.
    bench = Path(__file__).resolve().parents[1] / "bench" / "bench_promote.py"
    completed = subprocess.run(
        [sys.executable, str(bench), "--quick"], capture_output=True, text=True, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert "promote" in completed.stdout and "validator" in completed.stdout

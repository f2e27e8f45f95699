"""Team memory across four real machines on loopback: a project lesson proposed on alice's machine is
reviewed by bob (its files' CODEOWNER) at his own terminal, recalled on carol's (a project member), never
reaches dave's (not a member), and once alice retracts it, it is gone from every store and skills folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hive.sidecar.team.projects import project_id

from ..conftest import Hive
from .lesson_steps import at_terminal, git_repo, run, run_json
from .terminal import run_in_terminal_answering
from .test_mesh import _keys_in_files, form_team, ok, register, wait_for  # noqa: F401  (the autouse fixture)

ORIGIN = "git@github.com:acme/api.git"
PROJECT = project_id(ORIGIN)


def holds(hive: Hive, lesson_id: str) -> dict[str, Any] | None:
    return ok(hive, "lesson_sync_status", lessons=[lesson_id])["lessons"][lesson_id]


def members(hive: Hive) -> list[str]:
    return list(ok(hive, "project_show", project=PROJECT)["members"])


def test_proposed_on_a_approved_by_bob_at_his_terminal_recalled_on_c_absent_on_d_and_retracted_everywhere(
    make_hive: Any, tmp_path: Path
) -> None:
    alice, bob, carol, dave = form_team(make_hive, ["alice", "bob", "carol", "dave"])
    assert ok(alice, "project_join", repo=ORIGIN)["owner"] == "alice"
    for machine, person in ((bob, "bob"), (carol, "carol")):
        wait_for(lambda m=machine: ok(m, "project_show", repo=ORIGIN)["owner"] == "alice", what="the owner known")
        register(machine, f"{person}-1", f"/src/{person}/api", repo="github.com/acme/api")  # first session: proposes
        wait_for(
            lambda p=person: p in ok(alice, "project_show", project=PROJECT)["proposed"],
            what=f"{person}'s membership proposal",
        )
        code, output = run_in_terminal_answering(alice.env, "y", "project", "confirm", person, "--repo", ORIGIN)
        assert code == 0, output  # the owner confirms at her terminal
    for machine in (alice, bob, carol, dave):
        wait_for(lambda m=machine: members(m) == ["alice", "bob", "carol"], what="membership on every machine")

    repo = git_repo(tmp_path / "alice-api", origin=ORIGIN)
    (repo / "CODEOWNERS").write_text("/billing/ @bob\n", encoding="utf-8")
    proposed = run_json(
        alice,
        "lessons",
        "propose",
        "Invoices are immutable once sent: issue a credit note instead.",
        "--kind",
        "convention",
        "--scope",
        "project",
        "--evidence",
        "file:billing/invoice.py",
        "--applicability",
        "changing a sent invoice",
        cwd=repo,
    )
    lesson = proposed["id"]
    assert (proposed["reviewer"], proposed["reviewer_why"], proposed["project"]) == ("bob", "codeowners", PROJECT)

    # bob's machine has it to review; bob types his verdict at his own terminal
    wait_for(lambda: (holds(bob, lesson) or {}).get("has_body"), what="the proposal on bob's machine")
    assert lesson in [p["id"] for p in run_json(bob, "lessons", "pending")["lessons"]]
    code, output = at_terminal(bob, "approve", "lessons", "review", lesson)
    assert code == 0, output

    # carol, a member, recalls it with bob as its reviewer; dave, not a member, never had it
    carols = git_repo(tmp_path / "carol-api", origin="https://github.com/acme/api")
    wait_for(lambda: (holds(carol, lesson) or {}).get("state") == "verified", what="the verified lesson on carol's")
    found = run_json(carol, "lessons", "search", "invoice", "credit", "note", cwd=carols)["lessons"]
    assert [(f["id"], f["reviewer"], f["origin"], f["verified"], f["hypothesis"]) for f in found] == [
        (lesson, "bob", "alice@m1", True, False)
    ]
    wait_for(lambda: (holds(alice, lesson) or {}).get("state") == "verified", what="bob's review back on alice's")
    assert holds(dave, lesson) is None
    assert run_json(dave, "lessons", "search", "invoice", "credit", "note")["lessons"] == []

    # both members promote it into their clones; alice retracts it; it is gone everywhere
    skills = [
        Path(run_json(m, "lessons", "promote", lesson, cwd=r)["path"]).parent
        for m, r in ((alice, repo), (carol, carols))
    ]
    assert all(s.is_dir() for s in skills)
    assert run_json(alice, "lessons", "retract", lesson, "--reason", "we issue corrections now")["state"] == "retracted"
    for machine in (alice, bob, carol):
        gone = wait_for(
            lambda m=machine: (holds(m, lesson) or {}).get("state") == "retracted" and holds(m, lesson),
            what="the retraction on every member's machine",
        )
        assert not gone["has_body"] and gone["text"] == ""
        assert run_json(machine, "lessons", "search", "invoice", "credit", "note")["lessons"] == []
    wait_for(lambda: not any(s.exists() for s in skills), what="the skill folders removed on alice's and carol's")
    assert not (carols / ".claude" / "skills" / skills[1].name).is_symlink()
    assert holds(dave, lesson) is None
    late = run(carol, "lessons", "approve", lesson)
    assert late.stderr.strip().endswith("[lesson_state]")


def test_bob_never_finds_nor_is_told_alices_personal_lesson_or_a_lesson_of_a_project_he_is_not_in(
    make_hive: Any, tmp_path: Path
) -> None:
    from .test_recall import claude, hook, lesson_lines

    alice, bob = form_team(make_hive, ["alice", "bob"])
    repo = git_repo(tmp_path / "alice-api", origin=ORIGIN)
    # A team lesson that reaches bob's machine, then narrowed by its reviewer to alice's own.
    notes = run_json(
        alice,
        "lessons",
        "propose",
        "Release notes live in notes.md at the repository root.",
        "--kind",
        "convention",
        "--scope",
        "team",
        "--evidence",
        "file:notes.md",
        cwd=repo,
    )["id"]
    wait_for(lambda: (holds(bob, notes) or {}).get("has_body"), what="the team proposal on bob's machine")
    code, output = at_terminal(alice, "approve", "lessons", "approve", notes, "--scope", "personal", cwd=repo)
    assert code == 0, output
    # A project lesson of acme/api, whose only member is alice.
    assert ok(alice, "project_join", repo=ORIGIN)["owner"] == "alice"
    billing = run_json(
        alice,
        "lessons",
        "propose",
        "Release notes for billing go in billing/notes.md.",
        "--kind",
        "convention",
        "--scope",
        "project",
        "--evidence",
        "file:notes.md",
        cwd=repo,
    )["id"]
    code, output = at_terminal(alice, "approve", "lessons", "review", billing, cwd=repo)
    assert code == 0, output
    wait_for(lambda: (holds(bob, notes) or {}).get("state") == "verified", what="alice's review on bob's machine")

    # alice finds both and is told them; bob, in a clone of the same repository, neither.
    assert {f["id"] for f in run_json(alice, "lessons", "search", "release", "notes", cwd=repo)["lessons"]} == {
        notes,
        billing,
    }
    bobs = git_repo(tmp_path / "bob-api", origin=ORIGIN)
    assert run_json(bob, "lessons", "search", "release", "notes", cwd=bobs)["lessons"] == []
    assert ok(bob, "lesson_context", task="write the release notes", cwd=str(bobs))["lessons"] == []
    for machine, folder, told in ((alice, repo, 2), (bob, bobs, 0)):
        hook(machine, "SessionStart", claude("s1", str(folder), "SessionStart", source="startup"))
        lines = lesson_lines(
            hook(
                machine,
                "UserPromptSubmit",
                claude("s1", str(folder), "UserPromptSubmit", prompt="where do the release notes go"),
            )
        )
        assert len(lines) == told, lines
    assert holds(bob, billing) is None

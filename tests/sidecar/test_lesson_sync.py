"""Lessons replicate between real sidecars on loopback by scope (issue 8, item 4).

Four machines form a team the way people do (``hive init``, ``hive join``). Project membership is
signed in the roster (a person proposes, the project's owner confirms). A lesson travels as a
signed log entry plus its body; these tests look at what each machine's store holds.
"""

from __future__ import annotations

from typing import Any

from hive.sidecar.projects import project_id

from ..conftest import Hive
from .test_mesh import _keys_in_files, form_team, ok, wait_for  # noqa: F401  (the autouse fixture)

REPO = "git@github.com:acme/api.git"
PROJECT = project_id(REPO)


def propose(hive: Hive, scope: str, text: str, **extra: Any) -> str:
    fields = {"kind": "gotcha", "text": text, "applicability": "when running the api tests", "scope": scope,
              "evidence": [{"kind": "file", "ref": "tests/test_api.py"}], "tags": ["pytest"], **extra}
    if scope == "project":
        fields["project"] = PROJECT
    return ok(hive, "lesson_propose", **fields)["id"]


def holds(hive: Hive, lesson_id: str) -> dict[str, Any] | None:
    """What ``hive``'s store holds of a lesson, or None."""
    return ok(hive, "lesson_sync_status", lessons=[lesson_id])["lessons"][lesson_id]


def status(hive: Hive) -> dict[str, Any]:
    return ok(hive, "lesson_sync_status")


def settled(machines: list[Hive]) -> bool:
    """Every machine has sent and received all it will: their logs and counts stop changing."""
    first = [status(m)["heads"] for m in machines]
    second = [status(m)["heads"] for m in machines]
    return first == second


def test_a_project_lesson_reaches_project_members_and_never_a_non_member(make_hive: Any) -> None:
    alice, bob, carol, dave = form_team(make_hive, ["alice", "bob", "carol", "dave"])
    assert ok(alice, "project_join", repo=REPO)["owner"] == "alice"
    wait_for(lambda: ok(carol, "project_show", repo=REPO)["owner"] == "alice", what="the owner known to carol")
    # carol's first session proposes her (an https clone of the same repository is the same project)
    assert ok(carol, "project_join", repo="https://github.com/acme/api")["proposed"] == ["carol"]
    wait_for(lambda: "carol" in ok(alice, "project_show", project=PROJECT)["proposed"], what="carol's proposal")
    ok(alice, "project_confirm", project=PROJECT, person="carol")
    for m in (alice, bob, carol, dave):
        wait_for(lambda m=m: ok(m, "project_show", project=PROJECT)["members"] == ["alice", "carol"],
                 what="membership everywhere")

    lesson = propose(alice, "project", "Run the api tests with -x: the fixtures leak sockets after a failure.")
    seen = wait_for(lambda: holds(carol, lesson), what="the lesson on carol's machine")
    assert seen["text"].startswith("Run the api tests") and seen["state"] == "proposed"
    team_lesson = propose(alice, "team", "Releases are cut from main only.")
    for m in (bob, carol, dave):
        wait_for(lambda m=m: holds(m, team_lesson), what="the team lesson everywhere")
    # the team lesson went out after the project one, on the same links: had the project lesson
    # been sent to bob or dave, it would be there by now
    assert holds(bob, lesson) is None and holds(dave, lesson) is None
    heads = {tuple(h[:2]) for h in status(dave)["heads"]}
    assert (lesson_author := seen["author_machine"]) and (lesson_author, f"project:{PROJECT}") not in heads

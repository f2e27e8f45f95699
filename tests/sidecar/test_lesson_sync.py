"""Lessons replicate between real sidecars on loopback by scope (issue 8, item 4).

Four machines form a team the way people do (``hive init``, ``hive join``). Project membership is
signed in the roster (a person proposes, the project's owner confirms). A lesson travels as a
signed log entry plus its body; these tests look at what each machine's store holds.
"""

from __future__ import annotations

from typing import Any

from hive.sidecar.team.projects import project_id

from ..conftest import Hive
from .terminal import run_in_terminal_answering
from .test_mesh import MESH, _keys_in_files, form_team, ok, register, wait_for  # noqa: F401  (the autouse fixture)

REPO = "git@github.com:acme/api.git"
PROJECT = project_id(REPO)


def propose(hive: Hive, scope: str, text: str, **extra: Any) -> str:
    fields = {
        "kind": "gotcha",
        "text": text,
        "applicability": "when running the api tests",
        "scope": scope,
        "evidence": [{"kind": "file", "ref": "tests/test_api.py"}],
        "tags": ["pytest"],
        **extra,
    }
    if scope == "project":
        fields["project"] = PROJECT
    return ok(hive, "lesson_propose", **fields)["id"]


def holds(hive: Hive, lesson_id: str) -> dict[str, Any] | None:
    """What ``hive``'s store holds of a lesson, or None."""
    return ok(hive, "lesson_sync_status", lessons=[lesson_id])["lessons"][lesson_id]


def with_body(hive: Hive, lesson_id: str) -> dict[str, Any] | None:
    """The lesson once its text has arrived too (the entry and its body travel in separate frames)."""
    found = holds(hive, lesson_id)
    return found if found and found.get("has_body") else None


def status(hive: Hive) -> dict[str, Any]:
    return ok(hive, "lesson_sync_status")


def test_a_project_lesson_reaches_project_members_and_never_a_non_member(make_hive: Any) -> None:
    alice, bob, carol, dave = form_team(make_hive, ["alice", "bob", "carol", "dave"])
    assert ok(alice, "project_join", repo=REPO)["owner"] == "alice"
    wait_for(lambda: ok(carol, "project_show", repo=REPO)["owner"] == "alice", what="the owner known to carol")
    # carol's first session in her clone proposes her (however cloned, it is the same project)
    register(carol, "c1", "/src/api", repo="github.com/acme/api")
    wait_for(lambda: "carol" in ok(alice, "project_show", project=PROJECT)["proposed"], what="carol's proposal")
    early = propose(alice, "project", "The api's CI cache key includes the lockfile hash.")
    before = propose(alice, "team", "Tag releases as vYYYY.MM.DD.")
    wait_for(lambda: holds(carol, before), what="a later team lesson on carol's machine")
    assert holds(carol, early) is None  # proposed, not confirmed: no project lessons yet

    # the owner confirms in person; an agent's tool call (no terminal, no desktop) cannot
    refused = alice.request_from_script({"op": "project_confirm", "project": PROJECT, "person": "carol"})
    assert not refused["ok"] and refused["error"]["code"] == "refused"
    code, output = run_in_terminal_answering(alice.env, "y", "project", "confirm", "carol", "--repo", REPO)
    assert code == 0 and "members:  alice, carol" in output, output
    for m in (alice, bob, carol, dave):
        wait_for(
            lambda m=m: ok(m, "project_show", project=PROJECT)["members"] == ["alice", "carol"],
            what="membership everywhere",
        )
    wait_for(lambda: (holds(carol, early) or {}).get("has_body"), what="the earlier project lesson once confirmed")
    lesson = propose(alice, "project", "Run the api tests with -x: the fixtures leak sockets after a failure.")
    seen = wait_for(lambda: with_body(carol, lesson), what="the lesson on carol's machine")
    assert seen["text"].startswith("Run the api tests") and seen["state"] == "proposed"
    team_lesson = propose(alice, "team", "Releases are cut from main only.")
    for m in (bob, carol, dave):
        wait_for(lambda m=m: holds(m, team_lesson), what="the team lesson everywhere")
    # the team lesson went out after the project one, on the same links: had the project lesson
    # been sent to bob or dave, it would be there by now
    assert holds(bob, lesson) is None and holds(dave, lesson) is None
    assert holds(bob, early) is None and holds(dave, early) is None
    heads = {tuple(h[:2]) for h in status(dave)["heads"]}
    assert (lesson_author := seen["author_machine"]) and (lesson_author, f"project:{PROJECT}") not in heads


def retract(hive: Hive, lesson_id: str, reason: str) -> dict[str, Any]:
    # the lesson goes both as "id" and "lesson": lesson_ops reads one of them
    reply = hive.request({"id": lesson_id, "lesson": lesson_id, "op": "lesson_retract", "reason": reason}, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def team_with_two_machines_of_alice(make_hive: Any) -> tuple[Hive, Hive, Hive]:
    """alice on two machines (an own-machine invite) and bob, all linked."""
    machines = form_team(make_hive, ["alice", "bob"])
    alice, bob = machines
    desk = make_hive(MESH, person="alice")
    desk.start()
    machines.append(desk)
    desk.cli("join", ok(alice, "team_invite", own_machine=True)["link"], check=True)
    for m in machines:
        wait_for(lambda m=m: len(ok(m, "mesh")["links"]) == 2, what="three machines linked")
    return alice, desk, bob


def test_a_personal_lesson_reaches_its_persons_other_machine_and_no_one_else(make_hive: Any) -> None:
    alice, desk, bob = team_with_two_machines_of_alice(make_hive)
    personal = propose(alice, "personal", "I keep my scratch branches under wip/; never push them.")
    seen = wait_for(lambda: with_body(desk, personal), what="the personal lesson on alice's other machine")
    assert seen["has_body"] and seen["scope"] == "personal"
    sentinel = propose(alice, "team", "The staging database is reset every night at 02:00 UTC.")
    wait_for(lambda: holds(bob, sentinel), what="a later team lesson on bob's machine")
    assert holds(bob, personal) is None
    assert all(not h[1] == "personal" for h in status(bob)["heads"])


def test_a_retraction_deletes_the_body_on_every_machine_and_a_late_copy_is_refused(make_hive: Any) -> None:
    alice, bob, carol = form_team(make_hive, ["alice", "bob", "carol"])
    text = "Never run migrations from a laptop: use the deploy job."
    applicability = "when running the api tests"
    lesson = propose(alice, "team", text)
    for m in (bob, carol):
        wait_for(lambda m=m: (holds(m, lesson) or {}).get("has_body"), what="the body everywhere")
    body = {"lesson": lesson, "role": "body", "text": text, "applicability": applicability, "quote": None}
    assert ok(carol, "lesson_sync_ingest", blobs=[body])["blobs"] == ["duplicate"]  # the very bytes it holds

    carol.stop()  # offline while the lesson is retracted: it learns at its next link
    assert retract(alice, lesson, "it was wrong")["state"] == "retracted"
    gone = wait_for(
        lambda: (holds(bob, lesson) or {}).get("state") == "retracted" and holds(bob, lesson),
        what="the retraction on bob's machine",
    )
    assert not gone["has_body"] and gone["blobs"] == [] and gone["text"] == ""
    assert not holds(alice, lesson)["has_body"]

    carol.start()
    wait_for(lambda: (holds(carol, lesson) or {}).get("state") == "retracted", what="the retraction after restart")
    assert not holds(carol, lesson)["has_body"] and holds(carol, lesson)["blobs"] == []
    # a copy of the body arriving late (from an export, or a machine that missed the retraction) is refused
    for m in (alice, bob, carol):
        assert ok(m, "lesson_sync_ingest", blobs=[body])["blobs"] == ["lesson_retracted"]
        assert not holds(m, lesson)["has_body"]


def test_a_machine_that_was_offline_catches_up_on_every_log_in_order(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    bob.stop()
    ids = [propose(alice, "team", f"Lesson number {n}: keep fixtures small.") for n in range(30)]
    bob.start()
    wait_for(lambda: all((holds(bob, i) or {}).get("has_body") for i in ids), what="all 30 lessons on bob")
    heads = {(h[0], h[1]): h[2] for h in status(bob)["heads"]}
    assert heads[(holds(alice, ids[0])["author_machine"], "team")] == 30


def test_a_lesson_proposed_before_joining_a_team_reaches_the_team_after(make_hive: Any) -> None:
    alice = make_hive(MESH, person="alice")
    alice.start()
    lesson = propose(alice, "team", "Commit messages say why, not what.")
    assert holds(alice, lesson)["state"] == "proposed"
    bob = make_hive(MESH, person="bob")
    bob.start()
    alice.cli("init", "acme", "--as", "alice", check=True)
    bob.cli("join", alice.cli_json("invite")["link"], "--as", "bob", check=True)
    seen = wait_for(lambda: with_body(bob, lesson), what="the earlier lesson on bob's machine")
    assert seen["has_body"] and seen["text"] == "Commit messages say why, not what."

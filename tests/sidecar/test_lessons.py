"""Lesson records, their validation codes, the lifecycle and the store (issue 8, items 1, 2 and 4).

The store tests open the real SQLite store in a temporary folder with real machine keys and a real
signed roster; replication between sidecars is in ``test_lesson_sync.py``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.base.errors import HiveError
from hive.sidecar.base.store import Store
from hive.sidecar.lessons import recall
from hive.sidecar.lessons import records as L
from hive.sidecar.lessons.store import Context, LessonStore
from hive.sidecar.team import roster
from hive.sidecar.team.identity import Identity
from hive.sidecar.team.projects import normalise_remote, project_id

pytestmark = pytest.mark.anyio

PROJECT = project_id("git@github.com:acme/api.git")
OTHER = project_id("https://github.com/acme/web")


async def found(store: LessonStore, text: str, project: str = "", others: bool = False) -> list[str]:
    """What this machine's person finds through recall's one search path."""
    viewer = await store.viewer()
    return [r.lesson.id for r in await recall.search(store.store, viewer, text=text, project=project, others=others)]


async def indexed(store: LessonStore) -> set[str]:
    return {row[0] for row in await store.store.fetchall("SELECT id FROM lesson_fts")}


DAY = 86_400


def lesson(author: Identity, person: str = "alice", **changes: Any) -> L.LessonBody:
    fields: dict[str, Any] = dict(
        kind="gotcha",
        text="Run the api tests with -x: the fixtures leak sockets after a failure.",
        applicability="pytest in the api repository",
        scope="project",
        project=PROJECT,
        evidence=[L.Evidence("file", "tests/test_api.py")],
        tags=("pytest", "fixtures"),
        author_person=person,
        author_machine=author.key_id,
        author_session=f"{person}/api-claude",
        created_at=1_700_000_000_000,
    )
    fields.update(changes)
    return L.new_lesson(**fields)


def code_of(func: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(HiveError) as caught:
        func(*args, **kwargs)
    return caught.value.code


async def acode_of(coro: Any) -> str:
    with pytest.raises(HiveError) as caught:
        await coro
    return caught.value.code


# ---- records and validation -------------------------------------------------------------------


def test_a_lesson_id_is_the_sha256_of_its_canonical_content_so_the_same_lesson_filed_twice_is_one() -> None:
    me = Identity.generate()
    first, again = lesson(me), lesson(me)
    assert first.id == again.id == L.sha256_hex(roster.canonical(first.content()))
    assert len(first.id) == 64
    assert lesson(me, text="Something else entirely.").id != first.id


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"evidence": []}, "lesson_no_evidence"),
        ({"kind": "preference"}, "lesson_no_quote"),
        ({"kind": "decision", "quote": L.Quote("bob", "   ")}, "lesson_no_quote"),
        ({"text": "x" * (L.MAX_TEXT + 1)}, "lesson_too_long"),
        ({"applicability": "x" * (L.MAX_APPLICABILITY + 1)}, "lesson_too_long"),
        ({"kind": "rumour"}, "lesson_bad_kind"),
        ({"scope": "world"}, "lesson_bad_scope"),
        ({"project": ""}, "lesson_bad_scope"),
        ({"project": "acme/api"}, "lesson_bad_scope"),
        ({"text": "   "}, "lesson_invalid"),
        ({"evidence": [L.Evidence("hunch", "I think so")]}, "lesson_invalid"),
        ({"tags": ("Not A Tag!",)}, "lesson_invalid"),
    ],
)
def test_a_lesson_that_must_not_be_recorded_is_refused_with_its_reason_code(changes: dict[str, Any], code: str) -> None:
    assert code_of(lesson, Identity.generate(), **changes) == code


def test_a_preference_or_decision_that_quotes_its_person_is_accepted_and_text_at_the_limit_is_too() -> None:
    me = Identity.generate()
    quoted = lesson(me, kind="preference", quote=L.Quote("bob", "I prefer squash merges", 5))
    assert quoted.quote == L.Quote("bob", "I prefer squash merges", 5)
    assert lesson(me, kind="decision", quote=L.Quote("carol", "We ship on Tuesdays")).kind == "decision"
    assert len(lesson(me, text="y" * L.MAX_TEXT).text) == L.MAX_TEXT


def test_a_lesson_from_a_request_never_takes_its_author_from_the_request() -> None:
    me = Identity.generate()
    body = L.lesson_from_request(
        {
            "kind": "gotcha",
            "text": "t",
            "scope": "team",
            "evidence": [{"kind": "commit", "ref": "abc123"}],
            "author_person": "mallory",
            "author_machine": "0" * 64,
        },
        author_person="alice",
        author_machine=me.key_id,
        author_session="alice/x",
        created_at=1,
    )
    assert (body.author_person, body.author_machine, body.project) == ("alice", me.key_id, "")
    assert (
        code_of(
            L.lesson_from_request,
            {"kind": "gotcha", "text": "t", "scope": "team"},
            author_person="alice",
            author_machine=me.key_id,
            author_session="alice/x",
            created_at=1,
        )
        == "lesson_no_evidence"
    )


def test_the_header_and_body_travel_apart_and_only_a_matching_body_rebuilds_the_lesson() -> None:
    me = Identity.generate()
    body = lesson(me, kind="preference", quote=L.Quote("bob", "squash, please"))
    header = body.header()
    assert "text" not in header and "quote" not in header and header["body_hash"] == L.blob_hash(body.blob())
    assert L.lesson_from(header, body.blob()) == body
    tampered = {**body.blob(), "text": "Something the author never wrote."}
    assert code_of(L.lesson_from, header, tampered) == "lesson_invalid"


# ---- signed entries ---------------------------------------------------------------------------


@pytest.fixture
def team() -> dict[str, Any]:
    """alice (two machines) and bob in one signed roster; mallory's key is in no team."""
    alice, desk, bob, mallory = (Identity.generate() for _ in range(4))
    state = roster.found(alice, "acme", "alice", "lap")
    assert state.link is not None
    link = roster.secret_hash(state.link.body.secret)
    for ident, person, machine in ((desk, "alice", "desk"), (bob, "bob", "box")):
        state = roster.absorb(
            state,
            [
                roster.Entry(
                    "admission",
                    roster.sign(
                        alice,
                        state.id,
                        "admission",
                        roster.Member(
                            key=ident.key_id, person=person, machine=machine, ts=roster.now_ms(), redeems=link
                        ),
                    ),
                )
            ],
        )[0]
    return {"state": state, "roster": roster.view(state), "alice": alice, "desk": desk, "bob": bob, "mallory": mallory}


def test_an_entry_verifies_only_unaltered_in_its_own_team_and_from_a_roster_machine(team: dict[str, Any]) -> None:
    alice, state, view = team["alice"], team["state"], team["roster"]
    body = lesson(alice)
    entry = L.make_entry(alice, state.id, body.log_scope, 1, body).to_wire()
    checked = L.check_entry(entry, team_id=state.id, roster=view)
    assert checked.signer_person == "alice" and checked.entry.lesson == body.id

    altered = {**entry, "body": {**entry["body"], "record": {**entry["body"]["record"], "kind": "correction"}}}
    assert code_of(L.check_entry, altered, team_id=state.id, roster=view) == "lesson_forged"
    assert code_of(L.check_entry, entry, team_id="f" * 32, roster=view) == "lesson_forged"
    stranger = L.make_entry(team["mallory"], state.id, "team", 1, lesson(team["mallory"], scope="team")).to_wire()
    assert code_of(L.check_entry, stranger, team_id=state.id, roster=view) == "not_member"


def test_a_review_or_a_lesson_must_name_the_person_of_the_machine_that_signed_it(team: dict[str, Any]) -> None:
    state, view, bob = team["state"], team["roster"], team["bob"]
    as_alice = L.Review(lesson="a" * 64, verdict="approve", reviewer="alice", scope="team", at=1)
    entry = L.make_entry(bob, state.id, "team", 1, as_alice).to_wire()
    assert code_of(L.check_entry, entry, team_id=state.id, roster=view) == "not_member"
    posing = lesson(bob, person="alice", scope="team")  # bob's machine claiming alice wrote it
    entry = L.make_entry(bob, state.id, "team", 1, posing).to_wire()
    assert code_of(L.check_entry, entry, team_id=state.id, roster=view) == "not_member"


def test_a_review_made_before_its_machine_left_still_counts_and_one_made_after_does_not(team: dict[str, Any]) -> None:
    state, alice, bob = team["state"], team["alice"], team["bob"]
    now = roster.now_ms()
    before = L.Review(lesson="a" * 64, verdict="approve", reviewer="bob", scope="team", at=now - 1000)
    after = dataclasses.replace(before, at=now + 60_000)
    left = roster.view(roster.departures(state, alice, [bob.key_id], now=now))
    assert not left.members[bob.key_id].active
    kept = L.make_entry(bob, state.id, "team", 1, before).to_wire()
    assert L.check_entry(kept, team_id=state.id, roster=left).signer_person == "bob"
    late = L.make_entry(bob, state.id, "team", 2, after).to_wire()
    assert code_of(L.check_entry, late, team_id=state.id, roster=left) == "not_member"


# ---- the store and the lifecycle --------------------------------------------------------------


@pytest.fixture
async def stores(team: dict[str, Any], tmp_path: Path) -> AsyncIterator[dict[str, LessonStore]]:
    """A lesson store per machine (alice's two and bob's), each in its own database."""
    opened: list[Store] = []
    out: dict[str, LessonStore] = {}
    for name, person in (("alice", "alice"), ("desk", "alice"), ("bob", "bob")):
        db = await Store.open(tmp_path / f"{name}.db")
        opened.append(db)
        ctx = Context(team_id=team["state"].id, identity=team[name], person=person, roster=team["roster"])

        async def context(ctx: Context = ctx) -> Context:
            return ctx

        out[name] = LessonStore(db, context)
    yield out
    for db in opened:
        await db.close()


async def copy_logs(source: LessonStore, target: LessonStore) -> list[str]:
    """What replication does between two machines: every entry, then every blob."""
    results = []
    for (author, scope), _ in (await source.heads()).items():
        for entry in await source.entries_after(author, scope, 0):
            try:
                results.append(await target.ingest(entry))
            except HiveError as exc:
                results.append(exc.code)
    for digest in await target.missing_blobs():
        blob = await source.blob(digest)
        if blob is not None:
            results.append(await target.ingest_blob(blob))
    return results


async def test_a_proposal_is_held_after_a_day_unanswered_and_proposed_again_once_asked_again(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    view = await store.propose(lesson(team["alice"]))
    assert view.state == "proposed" and view.text.startswith("Run the api tests") and view.local
    later = time.time() + DAY + 1
    assert (await store.get(view.id, now=later)).state == "held"
    assert [v.id for v in await store.pending(now=later)] == [view.id]
    await store.mark_asked(view.id, at=later)
    assert (await store.get(view.id, now=later + 60)).state == "proposed"
    assert await store.propose(lesson(team["alice"])) == await store.get(view.id)  # filing it again changes nothing


async def test_the_first_review_decides_and_a_decided_lesson_cannot_be_reviewed_again(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    body = lesson(team["alice"])
    await store.propose(body)
    after = await store.review(body.id, "edit", text="Run the api tests with -x.", scope="project")
    assert (after.state, after.text, after.original_text) == ("verified", "Run the api tests with -x.", body.text)
    assert after.reviewer == "alice" and [r["verdict"] for r in after.reviews] == ["edit"]
    assert await acode_of(store.review(body.id, "reject")) == "lesson_state"
    assert await found(store, "sockets leak", PROJECT) == []  # recall searches the reviewed text: the edit dropped them
    assert await found(store, "api tests", PROJECT) == [body.id]
    assert await found(store, "api tests", OTHER) == []  # another project's lesson is no candidate here
    assert await found(store, "api", OTHER, others=True) == [body.id]  # ...unless hypotheses are asked for

    rejected = lesson(team["alice"], text="Tabs, not spaces.")
    await store.propose(rejected)
    assert await indexed(store) == {body.id}  # recall's index holds what it may show: nothing proposed
    assert (await store.review(rejected.id, "reject")).state == "rejected"
    assert await found(store, "tabs spaces", PROJECT) == []
    assert await indexed(store) == {body.id}


async def test_an_edit_needs_its_text_within_the_limit_and_only_an_edit_carries_text(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    body = lesson(team["alice"])
    await store.propose(body)
    assert await acode_of(store.review(body.id, "edit", text="z" * (L.MAX_TEXT + 1))) == "lesson_too_long"
    assert await acode_of(store.review(body.id, "edit")) == "lesson_invalid"
    assert await acode_of(store.review(body.id, "approve", text="sneaky")) == "lesson_invalid"
    assert await acode_of(store.review("f" * 64, "approve")) == "not_found"
    assert (await store.get(body.id)).state == "proposed"


async def test_a_reviewer_may_narrow_the_scope_but_never_widen_it(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    narrowed = lesson(team["alice"], scope="team", project="", text="Use the shared runner.")
    await store.propose(narrowed)
    view = await store.review(narrowed.id, "approve", scope="project", project=PROJECT)
    assert (view.scope, view.effective_scope, view.effective_project) == ("team", "project", PROJECT)
    widened = lesson(team["alice"], text="Only for the api.")
    await store.propose(widened)
    view = await store.review(widened.id, "approve", scope="team")
    assert (view.effective_scope, view.effective_project) == ("project", PROJECT)


async def test_a_lesson_narrowed_after_it_travelled_is_not_shown_outside_its_approved_scope(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, bob = stores["alice"], stores["bob"]
    mine = lesson(team["alice"], scope="team", project="", text="Alice keeps her notes in notes.md.")
    api = lesson(team["alice"], scope="team", project="", text="The api notes live in docs/api.md.")
    for body in (mine, api):
        await alice.propose(body)
    await alice.review(mine.id, "approve", scope="personal")
    await alice.review(api.id, "approve", scope="project", project=PROJECT)
    await copy_logs(alice, bob)  # both went out as team lessons before the reviews narrowed them
    assert (await bob.get(mine.id)).effective_scope == "personal"
    assert await found(bob, "notes", PROJECT, others=True) == []
    assert set(await found(alice, "notes", PROJECT)) == {mine.id, api.id}


async def test_superseding_needs_a_verified_lesson_and_the_old_one_is_superseded_once_the_new_one_is_verified(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    old = lesson(team["alice"])
    await store.propose(old)
    new = lesson(team["alice"], text="Run the api tests with -x --timeout 60.", supersedes=old.id)
    assert await acode_of(store.supersede(old.id, new)) == "lesson_state"  # old is only proposed
    await store.review(old.id, "approve")
    assert (await store.supersede(old.id, new)).state == "proposed"
    assert (await store.get(old.id)).state == "verified"  # until the replacement is verified
    seen: list[tuple[str, str]] = []

    async def listener(lesson_id: str, state: str) -> None:
        seen.append((lesson_id, state))

    store.state_listeners.append(listener)
    await store.review(new.id, "approve")
    old_view = await store.get(old.id)
    assert (old_view.state, old_view.superseded_by) == ("superseded", new.id)
    assert (old.id, "superseded") in seen and (new.id, "verified") in seen
    assert await found(store, "api tests", PROJECT) == [new.id]
    assert await indexed(store) == {new.id}


async def test_only_the_author_or_a_reviewer_retracts_and_retraction_deletes_the_text_and_its_index(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, bob = stores["alice"], stores["bob"]
    body = lesson(team["alice"], scope="team", project="")
    await alice.propose(body)
    await alice.review(body.id, "edit", text="Edited wording.")
    await copy_logs(alice, bob)
    assert (await bob.get(body.id)).text == "Edited wording."
    assert await acode_of(bob.retract(body.id)) == "not_member"  # bob neither wrote nor reviewed it
    view = await alice.retract(body.id, "wrong")
    assert (view.state, view.text, view.original_text, view.has_body) == ("retracted", "", "", False)
    assert view.retracted_by == "alice" and view.retract_reason == "wrong"
    assert await alice.blob_hashes_of(body.id) == []
    assert await found(alice, "edited wording", others=True) == []
    assert await indexed(alice) == set()
    assert await acode_of(alice.retract(body.id)) == "lesson_state"
    assert await acode_of(alice.propose(body)) == "lesson_retracted"

    late = {"lesson": body.id, "role": "body", "text": body.text, "applicability": body.applicability, "quote": None}
    await copy_logs(alice, bob)  # the tombstone reaches bob
    assert (await bob.get(body.id)).state == "retracted" and await bob.blob_hashes_of(body.id) == []
    assert await acode_of(bob.ingest_blob(late)) == "lesson_retracted"


async def test_a_review_made_on_the_reviewers_machine_verifies_the_lesson_on_the_authors(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, bob = stores["alice"], stores["bob"]
    body = lesson(team["alice"], scope="team", project="")
    await alice.propose(body)
    await copy_logs(alice, bob)
    assert (await bob.get(body.id)).state == "proposed"
    await bob.review(body.id, "edit", text="Bob's wording.", note="clearer")
    # alice's own entry comes back as a duplicate; bob's review entry and its edit text are new
    assert sorted(await copy_logs(bob, alice)) == ["added", "added", "duplicate"]
    view = await alice.get(body.id)
    assert (view.state, view.reviewer, view.text) == ("verified", "bob", "Bob's wording.")


async def test_when_two_reviewers_answer_at_once_the_earlier_review_decides_on_every_machine(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, bob = stores["alice"], stores["bob"]
    body = lesson(team["alice"], scope="team", project="")
    await alice.propose(body)
    await copy_logs(alice, bob)
    now = int(time.time() * 1000)
    await alice.review(body.id, "approve", at=now + 5)
    await bob.review(body.id, "reject", at=now)  # bob answered first, before either saw the other
    await copy_logs(alice, bob)
    await copy_logs(bob, alice)
    for store in (alice, bob):
        view = await store.get(body.id)
        assert (view.state, view.reviewer, len(view.reviews)) == ("rejected", "bob", 2)


async def test_logs_are_taken_in_order_without_gaps_and_duplicates_change_nothing(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, bob = stores["alice"], stores["bob"]
    first = lesson(team["alice"], scope="team", project="", text="First.")
    second = lesson(team["alice"], scope="team", project="", text="Second.")
    await alice.propose(first)
    await alice.propose(second)
    one, two = await alice.entries_after(team["alice"].key_id, "team", 0)
    assert await bob.ingest(two) == "gap"
    assert await bob.ingest(one) == "added"
    assert await bob.ingest(one) == "duplicate"
    assert await bob.ingest(two) == "added"
    assert await bob.heads() == {(team["alice"].key_id, "team"): 2}
    assert not (await bob.get(first.id)).has_body and first.id and second.id
    assert sorted(await bob.missing_blobs()) == sorted(L.blob_hash(b.blob()) for b in (first, second))
    assert await acode_of(bob.ingest_blob({**first.blob(), "text": "Forged."})) == "lesson_invalid"
    assert await bob.ingest_blob(first.blob()) == "added"
    view = await bob.get(first.id)
    assert view.has_body and view.text == "First." and not view.local


async def test_another_persons_personal_log_and_forged_entries_are_refused_on_arrival(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    alice, desk, bob = stores["alice"], stores["desk"], stores["bob"]
    personal = lesson(team["alice"], scope="personal", project="", text="My own habit.")
    await alice.propose(personal)
    (entry,) = await alice.entries_after(team["alice"].key_id, "personal", 0)
    assert await acode_of(bob.ingest(entry)) == "refused"
    assert await desk.ingest(entry) == "added"  # alice's other machine
    forged = {**entry, "body": {**entry["body"], "record": {**entry["body"]["record"], "tags": ["changed"]}}}
    assert await acode_of(stores["desk"].ingest({**forged, "body": {**forged["body"], "seq": 2}})) == "lesson_forged"
    assert await desk.heads() == {(team["alice"].key_id, "personal"): 1}


async def test_lessons_proposed_on_a_lone_machine_travel_once_it_joins_a_team(
    team: dict[str, Any], stores: dict[str, LessonStore], tmp_path: Path
) -> None:
    db = await Store.open(tmp_path / "lone.db")
    try:
        current = {"ctx": Context(team_id="", identity=team["alice"], person="alice", roster=None)}

        async def context() -> Context:
            return current["ctx"]

        lone = LessonStore(db, context)
        body = lesson(team["alice"], scope="team", project="")
        assert (await lone.propose(body)).state == "proposed"  # no team: kept here, signed for none
        assert await lone.adopt_team() == 0
        current["ctx"] = Context(
            team_id=team["state"].id, identity=team["alice"], person="alice", roster=team["roster"]
        )
        assert await lone.adopt_team() == 1
        assert await lone.adopt_team() == 0
        assert await copy_logs(lone, stores["bob"]) == ["added", "added"]
        assert (await stores["bob"].get(body.id)).text == body.text
    finally:
        await db.close()


async def test_citations_count_locally_and_the_outcome_rate_starts_at_one_half(
    stores: dict[str, LessonStore], team: dict[str, Any]
) -> None:
    store = stores["alice"]
    body = lesson(team["alice"])
    view = await store.propose(body)
    assert view.outcome_rate == 0.5
    await store.cite(body.id, success=True)
    view = await store.cite(body.id)
    assert (view.citations, view.successes, view.outcome_rate) == (2, 1, 0.5)
    assert await acode_of(store.cite("e" * 64)) == "not_found"


async def test_drafts_stay_local_until_proposed(stores: dict[str, LessonStore], team: dict[str, Any]) -> None:
    store = stores["alice"]
    body = lesson(team["alice"])
    await store.save_draft(body)
    assert [d.id for d in await store.drafts()] == [body.id] and await store.get(body.id) is None
    assert await store.heads() == {}
    assert (await store.propose_draft(body.id)).state == "proposed"
    assert await store.drafts() == []


# ---- projects -----------------------------------------------------------------------------------


def test_every_spelling_of_one_remote_is_one_project() -> None:
    spellings = [
        "git@github.com:acme/api.git",
        "git@github.com:acme/api",
        "https://github.com/acme/api",
        "https://github.com/acme/api.git",
        "ssh://git@github.com:22/acme/api.git",
        "https://user:secret@GitHub.com/Acme/API/",
        "github.com/acme/api",
    ]
    assert {normalise_remote(s) for s in spellings} == {"https://github.com/acme/api"}
    assert {project_id(s) for s in spellings} == {PROJECT}
    assert project_id("https://github.com/acme/web") != PROJECT
    assert project_id("/home/alice/src/scratch") != project_id("/home/bob/src/scratch")


def test_project_membership_is_proposed_by_the_person_and_confirmed_only_by_the_owner(team: dict[str, Any]) -> None:
    state, alice, bob, desk = team["state"], team["alice"], team["bob"], team["desk"]
    state = roster.project_entry(state, alice, PROJECT, "alice", "owner")
    state = roster.project_entry(state, bob, PROJECT, "bob", "proposed")
    view = roster.view(state).projects[PROJECT]
    assert (view.owner, view.members, view.proposed) == ("alice", frozenset({"alice"}), frozenset({"bob"}))
    self_confirmed = roster.project_entry(state, bob, PROJECT, "bob", "member")
    assert "bob" not in roster.view(self_confirmed).projects[PROJECT].members
    confirmed = roster.project_entry(state, desk, PROJECT, "bob", "member")  # alice's other machine speaks for her
    assert roster.view(confirmed).projects[PROJECT].members == {"alice", "bob"}
    # membership travels with the roster and merges like it, whatever the order
    base = team["state"]
    a, _ = roster.merge(base, confirmed)
    b, _ = roster.merge(confirmed, base)
    assert roster.view(a).projects == roster.view(b).projects == roster.view(confirmed).projects
    late_claim = roster.project_entry(confirmed, bob, PROJECT, "bob", "owner")
    assert roster.view(late_claim).projects[PROJECT].owner == "alice"


def test_a_project_entry_of_another_team_or_altered_is_refused_by_the_roster(team: dict[str, Any]) -> None:
    state, alice = team["state"], team["alice"]
    entry = roster.sign(alice, "0" * 32, "project", roster.ProjectMember(PROJECT, "alice", "owner", roster.now_ms()))
    merged, refused = roster.absorb(state, [roster.Entry("project", entry)])
    assert refused and merged.projects == {}
    good = roster.sign(alice, state.id, "project", roster.ProjectMember(PROJECT, "alice", "owner", roster.now_ms()))
    altered = dataclasses.replace(
        good, raw={**good.raw, "person": "bob"}, body=dataclasses.replace(good.body, person="bob")
    )
    merged, refused = roster.absorb(state, [roster.Entry("project", altered)])
    assert refused and merged.projects == {}

"""A person's own mailboxes across the team: replies reach the machine the person wrote from,
fresh mail reaches every machine of theirs and is read on all once read on one, named mailboxes
take mail from teammates' agents. Real sidecars on loopback, each in its own HIVE_HOME."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from hive.sidecar.mail.addresses import Entry, resolve

from ..conftest import Hive
from .test_mesh import _TEAM, MESH, form_team, linked, ok, register, sent, wait_for


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")  # several machines on one host: each key in its own folder
    _TEAM.clear()


def unread(hive: Hive, **mailbox: Any) -> list[dict[str, Any]]:
    return ok(hive, "inbox", peek=True, **mailbox)["messages"]


def read(hive: Hive, **mailbox: Any) -> list[dict[str, Any]]:
    """Read a mailbox as `hive inbox` does: take the mail, then say it reached the person."""
    result = ok(hive, "inbox", **mailbox)
    if result["ids"]:
        ok(hive, "delivered", ids=result["ids"], **mailbox)
    return result["messages"]


def attempt(hive: Hive, **request: Any) -> dict[str, Any]:
    return hive.request({"id": 1, "op": "send", **request}, timeout=30)


def test_an_agents_reply_to_a_persons_terminal_arrives_in_their_inbox_on_their_machine_once(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    api = register(alice, "a1", "/src/api")
    wait_for(lambda: any(s["address"] == api for s in ok(bob, "who")["sessions"]), what="bob to see alice's session")
    question = ok(bob, "send", to=api, body="is the build green?")["results"][0]
    wait_for(lambda: unread(alice, session="a1"), what="bob's question in alice's session")

    reply = ok(
        alice, "send", **{"from": "a1", "to": "bob/terminal", "body": "green since 10:02", "reply_to": question["id"]}
    )["results"]
    assert [(r["to"], r.get("machine")) for r in reply] == [("bob/terminal", "m2")], reply
    got = wait_for(lambda: unread(bob), what="the reply in bob's terminal mailbox")
    assert [(m["from"], m["body"], m["reply_to"]) for m in got] == [
        ("alice/api-codex", "green since 10:02", question["id"])
    ]
    assert unread(alice) == [], "the reply stayed in alice's own terminal mailbox"
    assert "bob" in reply[0]["note"] and "m2" in reply[0]["note"], reply[0]
    assert [m["body"] for m in read(bob)] == ["green since 10:02"]
    wait_for(lambda: sent(alice, reply[0]["id"])["state"] == "read", what="bob's read receipt at alice's")
    assert unread(bob) == []


def test_a_reply_to_a_person_whose_machine_is_offline_arrives_when_it_is_back(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/api")
    question = wait_for(
        lambda: (r := attempt(bob, to="alice/api-codex", body="deploy today?"))["ok"] and r,
        what="bob's machine to see alice's session",
    )["result"]["results"][0]
    wait_for(lambda: unread(alice, session="a1"), what="bob's question at alice's")
    bob.stop()  # bob shut his laptop
    wait_for(lambda: linked(alice) == 0, what="alice's machine to notice bob's is gone")

    reply = ok(alice, "send", **{"from": "a1", "to": "bob/terminal", "body": "yes, at 3", "reply_to": question["id"]})[
        "results"
    ][0]
    assert reply["state"] == "queued" and sent(alice, reply["id"])["in_outbox"], reply
    bob.start()
    got = wait_for(lambda: unread(bob), what="the reply at bob's once his machine is back")
    assert [m["body"] for m in got] == ["yes, at 3"]


def test_a_fresh_message_to_a_person_on_two_machines_shows_on_both_and_one_read_reads_both(make_hive: Any) -> None:
    alice, bob1, bob2 = (make_hive(MESH, person=p) for p in ("alice", "bob", "bob"))
    for machine in (alice, bob1, bob2):
        machine.start()
        _TEAM.append(machine)
    alice.cli("init", "acme", "--as", "alice", check=True)
    bob1.cli("join", alice.cli_json("invite")["link"], "--as", "bob", check=True)
    bob2.cli("join", bob1.cli_json("invite", "--own-machine")["link"], check=True)
    for machine in (alice, bob1, bob2):
        wait_for(lambda m=machine: linked(m) == 2, what="all three machines linked")

    results = ok(alice, "send", to="bob/terminal", body="lunch at noon?")["results"]
    assert sorted(r["machine"] for r in results) == ["m2", "m3"], results
    for machine in (bob1, bob2):
        got = wait_for(lambda m=machine: unread(m), what=f"the message on {machine.home.name}")
        assert [m["body"] for m in got] == ["lunch at noon?"]
    assert [m["body"] for m in read(bob2)] == ["lunch at noon?"]
    wait_for(lambda: unread(bob1) == [], what="the copy on bob's other machine to be read too")
    for result in results:
        wait_for(lambda r=result: sent(alice, r["id"])["state"] == "read", what="a read receipt for each copy")


def test_a_named_mailbox_takes_a_teammates_agents_mail_and_hive_inbox_as_reads_it(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/api")
    empty = bob.cli("inbox", "--as", "ci", check=True).stdout  # opens bob/ci
    assert "bob/ci" in empty
    assert attempt(bob, to="bob/nothing-here", body="x")["error"]["code"] == "not_found"

    result = wait_for(
        lambda: (r := attempt(alice, **{"from": "a1", "to": "bob/ci", "body": "rerun the nightly"}))["ok"] and r,
        what="alice's machine to learn bob's mailbox",
    )["result"]["results"][0]
    assert result.get("machine") == "m2", result
    wait_for(lambda: unread(bob, **{"as": "ci"}), what="the message in bob/ci")
    assert unread(bob) == [], "mail for bob/ci went to bob's terminal mailbox"
    shown = bob.cli("inbox", "--as", "ci", check=True).stdout
    assert "rerun the nightly" in shown and "alice/api-codex" in shown
    wait_for(lambda: sent(alice, result["id"])["state"] == "read", what="the read receipt from bob/ci")


def test_hive_listen_as_a_name_waits_for_the_next_message_to_that_mailbox(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/api")
    listener = subprocess.Popen(
        [sys.executable, "-m", "hive.sidecar.cli", "listen", "--as", "notes"],
        env=bob.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: attempt(alice, **{"from": "a1", "to": "bob/notes", "body": "remember the tag"})["ok"],
            what="the listener to open bob/notes and alice's machine to learn it",
        )
        out, err = listener.communicate(timeout=60)
    finally:
        listener.kill()
    assert listener.returncode == 0, err
    assert "remember the tag" in out
    assert unread(bob, **{"as": "notes"}) == []


def test_a_session_never_takes_the_name_of_a_named_mailbox(make_hive: Any) -> None:
    alice = make_hive(MESH)
    alice.start()
    ok(alice, "inbox", **{"as": "api-codex"})
    assert register(alice, "a1", "/src/api") != "alice/api-codex"
    assert attempt(alice, to="alice/api-codex", body="for the mailbox")["ok"]
    assert [m["body"] for m in unread(alice, **{"as": "api-codex"})] == ["for the mailbox"]


def _entry(person: str, machine: str, name: str, repo: str = "") -> Entry:
    return Entry(
        person=person,
        machine=machine,
        name=name,
        agent="codex",
        repo=repo,
        branch="",
        folder="",
        doing="",
        tier="pull",
        live=True,
    )


def test_a_group_with_a_machine_reaches_only_that_machines_sessions() -> None:
    directory = [
        _entry("alice", "xps", "api", "acme/api"),
        _entry("alice", "mini", "web", "acme/web"),
        _entry("alice", "mini", "api-2", "acme/api"),
        _entry("bob", "xps", "docs"),
    ]
    people = {"alice", "bob"}

    def names(to: str) -> list[str]:
        return sorted(t.address for t in resolve(to, directory, people, None, may_use_groups=True))

    assert names("alice/*@xps") == ["alice/api"]
    assert names("repo:acme/api@mini") == ["alice/api-2"]
    assert names("*@xps") == ["alice/api", "bob/docs"]
    with pytest.raises(Exception) as refused:
        names("alice/*@nowhere")
    assert getattr(refused.value, "code", None) == "not_found"

"""Names across machines, with real sidecars on loopback: one address per session across a person's
machines, mail that follows the person's name into the team, and a departure the team hears."""

from __future__ import annotations

from typing import Any

import pytest

from .test_mesh import _TEAM, MESH, form_team, inbox, linked, ok, register, send, wait_for, who


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")
    _TEAM.clear()


def departed(hive: Any) -> set[str]:
    return {d["person"] for d in ok(hive, "team_show")["departed"]}


def own_machines(make_hive: Any, before_join: Any = None) -> tuple[Any, Any]:
    """Two machines of alice's in one team, the second joined with an own-machine invite."""
    first, second = make_hive(MESH, person="alice"), make_hive(MESH, person="alice")
    for machine in (first, second):
        machine.start()
        _TEAM.append(machine)
    first.cli("init", "acme", "--as", "alice", check=True)
    if before_join is not None:
        before_join(first, second)
    link = first.cli_json("invite", "--own-machine")["link"]
    second.cli("join", link, check=True)
    for machine in (first, second):
        wait_for(lambda m=machine: linked(m) == 1, what="alice's two machines linked")
    return first, second


def test_leaving_tells_every_linked_teammate_before_the_team_is_forgotten(make_hive: Any) -> None:
    alice, bob, carol = form_team(make_hive, ["alice", "bob", "carol"])
    assert "left team acme" in carol.cli("leave", check=True).stdout
    assert ok(carol, "team_show")["team"] is None
    for machine in (alice, bob):
        wait_for(lambda m=machine: departed(m) == {"carol"}, what="the team to hear carol left")
        wait_for(lambda m=machine: linked(m) == 1, what="only alice and bob linked")
    assert "carol" not in {p["person"] for p in ok(alice, "team_show")["people"]}


def test_mail_addressed_under_the_config_name_moves_to_the_roster_name_on_join(make_hive: Any) -> None:
    bob = make_hive(MESH, person="bob")
    alice = make_hive(MESH, person="alice")
    for machine in (bob, alice):
        machine.start()
        _TEAM.append(machine)
    register(alice, "a1", "/src/api")
    register(alice, "a2", "/src/web")
    assert send(alice, "alice/api-codex", "sent before the join", **{"from": "a2"})["to"] == "alice/api-codex"
    assert send(alice, "alice/terminal", "a note to myself")["to"] == "alice/terminal"
    bob.cli("init", "acme", "--as", "bob", check=True)
    alice.cli("join", bob.cli_json("invite")["link"], "--as", "al", check=True)
    [message] = inbox(alice, "api-codex")
    assert (message["to"], message["from"], message["body"]) == ("al/api-codex", "al/web-codex", "sent before the join")
    terminal = ok(alice, "inbox", peek=True)
    assert terminal["to"] == "al/terminal"
    assert [m["body"] for m in terminal["messages"]] == ["a note to myself"]
    wait_for(lambda: any(s["address"] == "al/api-codex" for s in who(bob)), what="al's session at bob's")


def test_a_second_machine_of_the_same_person_names_its_session_apart(make_hive: Any) -> None:
    first, second = own_machines(make_hive)
    register(first, "f1", "/src/api")
    wait_for(lambda: any(s["address"] == "alice/api-codex" for s in who(second)), what="the first machine's session")
    assert register(second, "s1", "/src/api") == "alice/api-codex-2"
    reply = second.request({"id": 1, "op": "set_status", "session": "s1", "name": "api-codex"})
    assert not reply["ok"] and reply["error"]["code"] == "conflict"
    expected = {("alice/api-codex", "m1"), ("alice/api-codex-2", "m2")}
    for machine in (first, second):
        wait_for(
            lambda m=machine: {(s["address"], s["machine"]) for s in who(m)} == expected,
            what="one address per session on both machines",
        )


def test_sessions_two_machines_of_one_person_named_alike_before_joining_end_with_distinct_addresses(
    make_hive: Any,
) -> None:
    def register_both(first: Any, second: Any) -> None:
        register(first, "f1", "/src/api")
        register(second, "s1", "/src/api")

    first, second = own_machines(make_hive, register_both)
    expected_names = {"alice/api-codex", "alice/api-codex-2"}
    for machine in (first, second):
        wait_for(
            lambda m=machine: {s["address"] for s in who(m)} == expected_names,
            what="the clash renamed on one machine only",
        )
    where = {s["address"]: s["machine"] for s in who(first)}
    assert len(set(where.values())) == 2
    for address, machine_name in where.items():
        sender = first if machine_name == "m2" else second  # each across the link
        assert send(sender, address, f"for {address}")["state"] in ("queued", "delivered")
    for address, machine_name in where.items():
        owner = first if machine_name == "m1" else second
        name = address.split("/", 1)[1]
        wait_for(
            lambda m=owner, n=name, a=address: [x["body"] for x in inbox(m, n)] == [f"for {a}"],
            what=f"the mail for {address} on its own machine",
        )

"""The team's anchor, through real sidecars on loopback: an ordinary member whose roster entry
says ``anchor``, set when it founds or joins the team, and seen by every member."""

from __future__ import annotations

from typing import Any

from .test_mesh import MESH, linked, ok, wait_for


def anchors(show: dict[str, Any]) -> list[str]:
    return [f"{a['person']}@{a['machine']}" for a in show["anchors"]]


def test_a_machine_joined_as_the_anchor_is_shown_as_one_on_every_member(make_hive: Any) -> None:
    alice, box = make_hive(MESH, person="alice"), make_hive(MESH, person="ops")
    alice.start()
    box.start()
    alice.cli("init", "acme", "--as", "alice", check=True)
    out = box.cli("join", alice.cli_json("invite")["link"], "--as", "ops", "--machine", "vps", "--anchor", check=True)
    assert "you are ops on vps, the team's anchor" in out.stdout, out.stdout
    wait_for(lambda: linked(alice) == 1, what="the two machines linked")
    wait_for(lambda: anchors(ok(alice, "team_show")) == ["ops@vps"], what="the anchor's entry at alice")
    assert anchors(ok(box, "team_show")) == ["ops@vps"]
    listing = alice.cli("team", check=True).stdout
    assert any("vps" in line and "anchor" in line for line in listing.splitlines()), listing


def test_a_team_founded_on_its_anchor_says_so_and_others_are_members(make_hive: Any) -> None:
    box, bob = make_hive(MESH, person="ops"), make_hive(MESH, person="bob")
    box.start()
    bob.start()
    out = box.cli("init", "acme", "--as", "ops", "--machine", "vps", "--anchor", check=True).stdout
    assert "you are ops on vps, the team's anchor" in out
    bob.cli("join", box.cli_json("invite")["link"], "--as", "bob", check=True)
    show = ok(bob, "team_show")
    assert anchors(show) == ["ops@vps"] and show["me"]["role"] == "member"

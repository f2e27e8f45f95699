"""The team's anchor, through real sidecars on loopback: an ordinary member whose roster entry
says ``anchor``, set when it founds or joins the team, and seen by every member."""

from __future__ import annotations

import time
from typing import Any

import anyio

from hive.sidecar.base.ulid import new_ulid
from hive.sidecar.mesh.transport import dial, machine_cert
from hive.sidecar.team.identity import load_identity
from hive.sidecar.team.records import sign

from .test_mesh import MESH, _address, _key_of, _msg, _team_id, linked, ok, wait_for


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


def anchored_team(make_hive: Any, anchor_config: str = MESH) -> tuple[Any, Any, Any]:
    """ops's always-on machine founds the team as its anchor; alice and bob join it."""
    box, alice, bob = (make_hive(c, person=p) for c, p in ((anchor_config, "ops"), (MESH, "alice"), (MESH, "bob")))
    for machine in (box, alice, bob):
        machine.start()
    box.cli("init", "acme", "--as", "ops", "--machine", "vps", "--anchor", check=True)
    link = box.cli_json("invite")["link"]
    alice.cli("join", link, "--as", "alice", check=True)
    bob.cli("join", link, "--as", "bob", check=True)
    wait_for(lambda: all(linked(m) == 2 for m in (box, alice, bob)), what="three machines linked")
    return box, alice, bob


def terminal_bodies(hive: Any) -> list[str]:
    return [m["body"] for m in ok(hive, "inbox", peek=True)["messages"]]


def test_mail_for_an_offline_machine_is_held_by_the_anchor_and_reaches_it_when_the_sender_is_gone(
    make_hive: Any,
) -> None:
    box, alice, bob = anchored_team(make_hive)
    bob.stop()
    wait_for(lambda: linked(alice) == 1 and linked(box) == 1, what="bob's machine gone")
    [result] = ok(alice, "send", to="bob/terminal", body="the deploy key rotates tonight")["results"]
    assert result["state"] == "anchored" and "held by the team's anchor vps" in result["note"], result
    [sent] = ok(alice, "sent", ids=[result["id"]])["messages"]
    assert sent["state"] == "anchored" and not sent["in_outbox"]  # alice's outbox let it go
    alice.stop()
    box.kill9()  # the anchor dies while it holds the message, and comes back
    box.start()
    bob.start()
    wait_for(lambda: terminal_bodies(bob) == ["the deploy key rotates tonight"], what="the message at bob")
    [shown] = ok(bob, "inbox")["messages"]
    ok(bob, "delivered", ids=[shown["id"]])  # bob reads it while alice's machine is off
    alice.start()
    wait_for(lambda: ok(alice, "sent", ids=[result["id"]])["messages"][0]["state"] == "read", what="the read receipt")
    assert terminal_bodies(bob) == [] and len(ok(bob, "inbox", peek=True)["messages"]) == 0
    # Custody ended with bob's answer: the anchor holds nothing for him any more.
    wait_for(lambda: ok(box, "mesh")["custody"] == {}, what="the anchor's custody emptied")


def test_past_its_custody_quota_the_anchor_keeps_no_more_and_the_rest_waits_in_the_senders_outbox(
    make_hive: Any,
) -> None:
    box, alice, bob = anchored_team(make_hive, MESH + "custody_frames = 2\n")
    bob_key = ok(bob, "team_show")["me"]["key"]
    bob.stop()
    wait_for(lambda: linked(alice) == 1 and linked(box) == 1, what="bob's machine gone")
    bodies = ["first", "second", "third"]
    results = [ok(alice, "send", to="bob/terminal", body=body)["results"][0] for body in bodies]
    assert [r["state"] for r in results[:2]] == ["anchored", "anchored"], results
    assert results[2]["state"] == "queued", results[2]  # the anchor said no: it waits in alice's outbox
    sent = {m["id"]: m for m in ok(alice, "sent", ids=[r["id"] for r in results])["messages"]}
    assert [sent[r["id"]]["in_outbox"] for r in results] == [False, False, True]
    assert ok(box, "mesh")["custody"] == {bob_key: 2}
    bob.start()  # the anchor hands over what it held; alice's outbox sends the third itself
    wait_for(lambda: sorted(terminal_bodies(bob)) == sorted(bodies), what="all three messages at bob, once each")
    wait_for(lambda: ok(box, "mesh")["custody"] == {}, what="the anchor's custody emptied")
    assert sorted(terminal_bodies(bob)) == sorted(bodies)


def _seal(hive: Any, team_id: str, to: str, frame: dict[str, Any], at_ms: int | None = None) -> dict[str, Any]:
    """What ``hive``'s machine would hand the anchor for ``to``: ``frame`` sealed with its key."""
    body = {"to": to, "frame": frame, "at": int(time.time() * 1000) if at_ms is None else at_ms}
    return sign(load_identity(hive.home), team_id, "relay", body).to_wire()


async def _as_anchor(target: Any, anchor: Any, frames: list[dict[str, Any]]) -> None:
    """Link to ``target`` with the anchor machine's key and hand it ``frames``, as the anchor would."""
    cert = machine_cert(_key_of(anchor))
    async with dial(_address(target), cert, lambda key, alpn: True) as link:
        await link.send({"t": "hello", "team": _team_id(target), "proto": 1, "features": []})
        with anyio.fail_after(20):
            while (await link.receive())["t"] != "hello":
                pass
        for frame in frames:
            await link.send(frame)
        with anyio.move_on_after(2):  # answers go back sealed; what matters is what alice kept
            while True:
                await link.receive()


def test_an_anchor_cannot_alter_forge_or_replay_what_it_relays(make_hive: Any) -> None:
    box, alice, bob = anchored_team(make_hive)
    team_id, alice_key = _team_id(alice), ok(alice, "team_show")["me"]["key"]
    box.stop()  # from here the test speaks for the anchor's machine, with its key
    bob.stop()

    def message(body: str, sender: str = "bob/terminal") -> dict[str, Any]:
        return _msg(new_ulid(), sender, "alice/terminal", body)

    good = _seal(bob, team_id, alice_key, message("sealed by bob, passed on as it was"))
    altered = _seal(bob, team_id, alice_key, message("what bob wrote"))
    altered["body"]["frame"]["msg"]["body"] = "what the anchor would rather he had written"
    forged = _seal(box, team_id, alice_key, message("the anchor, signing as itself for bob"))
    stale = _seal(bob, team_id, alice_key, message("sealed nine days ago"), at_ms=int((time.time() - 9 * 86400) * 1000))
    frames = [{"t": "relay", "sealed": s} for s in (altered, forged, stale, good)]
    anyio.run(_as_anchor, alice, box, frames)
    wait_for(lambda: ok(alice, "inbox", peek=True)["messages"], what="the one good message")
    assert [m["body"] for m in ok(alice, "inbox", peek=True)["messages"]] == ["sealed by bob, passed on as it was"]
    # Once bob's machine is removed from the team, its seal opens nothing at alice's.
    alice.cli("remove", "bob", check=True)
    late = _seal(bob, team_id, alice_key, message("bob, after his removal"))
    anyio.run(_as_anchor, alice, box, [{"t": "relay", "sealed": late}])
    assert [m["body"] for m in ok(alice, "inbox", peek=True)["messages"]] == ["sealed by bob, passed on as it was"]


def test_with_two_anchors_either_delivers_what_both_held_and_the_recipient_keeps_one_copy(make_hive: Any) -> None:
    first, second, alice, bob = (make_hive(MESH, person=p) for p in ("ops", "ops2", "alice", "bob"))
    for machine in (first, second, alice, bob):
        machine.start()
    first.cli("init", "acme", "--as", "ops", "--machine", "vps1", "--anchor", check=True)
    link = first.cli_json("invite")["link"]
    second.cli("join", link, "--as", "ops2", "--machine", "vps2", "--anchor", check=True)
    for machine, person in ((alice, "alice"), (bob, "bob")):
        machine.cli("join", link, "--as", person, check=True)
    wait_for(lambda: all(linked(m) == 3 for m in (first, second, alice, bob)), what="four machines linked")
    bob_key = ok(bob, "team_show")["me"]["key"]
    bob.stop()
    wait_for(lambda: linked(alice) == 2, what="bob's machine gone")
    [result] = ok(alice, "send", to="bob/terminal", body="both anchors hold this")["results"]
    assert result["state"] == "anchored", result
    for anchor in (first, second):
        wait_for(lambda a=anchor: ok(a, "mesh")["custody"] == {bob_key: 1}, what="a copy on each anchor")
    first.kill9()  # the first anchor is gone when bob comes back: the second delivers
    bob.start()
    wait_for(lambda: terminal_bodies(bob) == ["both anchors hold this"], what="the message at bob")
    first.start()  # back, it delivers its copy too: bob answers it and keeps the one he has
    wait_for(lambda: ok(first, "mesh")["custody"] == {} and ok(second, "mesh")["custody"] == {}, what="custody ended")
    assert terminal_bodies(bob) == ["both anchors hold this"]


def test_with_the_anchor_down_mail_waits_in_the_senders_outbox_and_goes_to_the_anchor_when_it_is_back(
    make_hive: Any,
) -> None:
    box, alice, bob = anchored_team(make_hive)
    bob.stop()
    box.stop()
    wait_for(lambda: linked(alice) == 0, what="alice alone")
    [result] = ok(alice, "send", to="bob/terminal", body="nobody is up but me")["results"]
    assert result["state"] == "queued" and "outbox" in result["note"], result
    assert ok(alice, "sent", ids=[result["id"]])["messages"][0]["in_outbox"]
    box.start()
    wait_for(lambda: ok(alice, "sent", ids=[result["id"]])["messages"][0]["state"] == "anchored", what="handed over")
    alice.stop()
    bob.start()
    wait_for(lambda: terminal_bodies(bob) == ["nobody is up but me"], what="the message at bob")

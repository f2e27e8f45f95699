"""Two laptops behind their own NATs, with the team's anchor on the internet: they cannot link to
each other (tests/reach/test_natsim.py proves it), yet see each other's sessions and exchange mail
through the anchor, and a machine that is off gets its mail from the anchor when it is back."""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
from nacl.signing import SigningKey

from hive.sidecar.base.ulid import new_ulid
from hive.sidecar.mesh.transport import LinkClosed, dial, machine_cert
from hive.sidecar.team import roster
from hive.sidecar.team.identity import Identity, load_identity
from hive.sidecar.team.records import sign

from .natsim import LAPTOP, PUB, WAN, Internet, NetHive, wait_for
from .test_natsim import machine_row, ok


def anchored_team(
    internet: Internet, alice: NetHive | None = None, bob: NetHive | None = None
) -> tuple[NetHive, NetHive, NetHive]:
    """ops's always-on machine on the internet founds team acme as its anchor; alice's and bob's
    laptops join it with its team link, and link only to it."""
    anchor = internet.hive("pub", "ops", "vps")
    alice = alice or internet.hive("hA", "alice", "lap-a")
    bob = bob or internet.hive("hB", "bob", "lap-b")
    anchor.cli("init", "acme", "--as", "ops", "--anchor", check=True)
    link = anchor.cli_json("invite")["link"]
    for laptop, person in ((alice, "alice"), (bob, "bob")):
        laptop.cli("join", link, "--as", person, check=True)
    wait_for(lambda: len(ok(anchor, "mesh")["links"]) == 2, what="the anchor linked to both laptops")
    return anchor, alice, bob


def register(hive: NetHive, key: str, cwd: str) -> str:
    session = {"key": key, "agent": "codex", "cwd": cwd, "repo": "", "branch": "main"}
    return str(ok(hive, "register", session=session)["address"])


def sees(hive: NetHive, address: str) -> bool:
    return any(s["address"] == address for s in ok(hive, "who")["sessions"])


def bodies(hive: NetHive, session: str) -> list[str]:
    return [m["body"] for m in ok(hive, "inbox", session=session, peek=True)["messages"]]


def test_two_laptops_behind_nat_see_each_others_sessions_and_exchange_mail_through_the_anchor(
    internet: Internet,
) -> None:
    _anchor, alice, bob = anchored_team(internet)
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: sees(alice, "bob/api-codex") and sees(bob, "alice/web-codex"), what="sessions across the anchor")
    for laptop, other in ((alice, "bob"), (bob, "alice")):
        row = machine_row(laptop.cli_json("team"), other)
        assert (row["online"], row["path"]) == (True, "via vps"), row
    # alice's agent asks bob's; bob's answers; each lands in the other's session.
    [asked] = ok(alice, "send", to="bob/api-codex", body="is /v2/renew still used?", **{"from": "a1"})["results"]
    assert asked["state"] in ("queued", "delivered"), asked
    wait_for(lambda: bodies(bob, "b1") == ["is /v2/renew still used?"], what="alice's question at bob")
    [answer] = ok(bob, "send", to="alice/web-codex", body="no, since March", reply_to=asked["id"], **{"from": "b1"})[
        "results"
    ]
    assert answer["state"] in ("queued", "delivered"), answer
    wait_for(lambda: bodies(alice, "a1") == ["no, since March"], what="bob's answer at alice")
    # bob reads the question: alice hears so, through the anchor.
    shown = ok(bob, "inbox", session="b1")["ids"]
    ok(bob, "delivered", session="b1", ids=shown)
    wait_for(lambda: ok(alice, "sent", ids=[asked["id"]])["messages"][0]["state"] == "read", what="the read receipt")
    # The laptops never linked directly: every link either has is to the anchor or through it.
    for laptop in (alice, bob):
        links: dict[str, Any] = ok(laptop, "mesh")["links"]
        assert sorted(row["relayed"] for row in links.values()) == [False, True], links


def test_a_port_forward_opened_later_gives_a_direct_link_that_replaces_the_relayed_one(internet: Internet) -> None:
    # bob advertises his router's WAN address, where a port forward will send teammates to his
    # laptop; alice retries a relayed teammate every 3 s (not the default 10 minutes).
    alice = internet.hive("hA", "alice", "lap-a", config="[mesh]\nrelayed_redial = 3\n")
    bob = internet.hive("hB", "bob", "lap-b", port=4455, config=f'[mesh]\nadvertise = ["{WAN["rB"]}:4455"]\n')
    _anchor, alice, bob = anchored_team(internet, alice, bob)
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: sees(alice, "bob/api-codex"), what="bob's session at alice, through the anchor")
    assert machine_row(alice.cli_json("team"), "bob")["path"] == "via vps"

    # bob's router forwards the port to his laptop, as a person sets one up.
    internet.run(
        "rB", "nft", "add", "chain", "ip", "nat", "prerouting", "{ type nat hook prerouting priority dstnat; }"
    )
    internet.run(
        "rB",
        "nft",
        "add",
        "rule",
        "ip",
        "nat",
        "prerouting",
        "iifname",
        "wan",
        "udp",
        "dport",
        "4455",
        "dnat",
        "to",
        f"{LAPTOP['hB']}:4455",
    )
    internet.run(
        "rB", "nft", "insert", "rule", "inet", "filter", "forward", "iifname", "wan", "udp", "dport", "4455", "accept"
    )
    wait_for(lambda: machine_row(alice.cli_json("team"), "bob")["path"] == "direct", what="a direct link", timeout=60)
    links = ok(alice, "mesh")["links"]
    assert sorted(row["relayed"] for row in links.values()) == [False, False], links
    assert ok(bob, "mesh")["links"][ok(alice, "team_show")["me"]["key"]]["relayed"] is False
    # Mail now takes the direct link, both ways.
    [asked] = ok(alice, "send", to="bob/api-codex", body="direct now?", **{"from": "a1"})["results"]
    wait_for(lambda: bodies(bob, "b1") == ["direct now?"], what="alice's message at bob")
    assert asked["state"] in ("queued", "delivered"), asked


def test_mail_sent_while_bobs_laptop_is_off_reaches_him_from_the_anchor_after_alice_left(internet: Internet) -> None:
    anchor, alice, bob = anchored_team(internet)
    bob.stop()
    wait_for(lambda: len(ok(anchor, "mesh")["links"]) == 1, what="bob's laptop gone")
    [result] = alice.cli_json("send", "bob/terminal", "standup moved to 10:30")["results"]
    assert result["state"] == "anchored" and "held by the team's anchor vps" in result["note"], result
    alice.stop()
    bob.start()
    wait_for(lambda: [m["body"] for m in bob.cli_json("inbox")["messages"]] == ["standup moved to 10:30"], what="it")
    alice.start()
    wait_for(lambda: alice.cli_json("sent", result["id"])["messages"][0]["state"] == "read", what="the read receipt")
    assert bob.cli_json("inbox", "--peek")["messages"] == []  # once, not again when alice came back


def test_an_invite_made_on_a_laptop_lets_a_machine_in_another_home_join_through_the_anchor(internet: Internet) -> None:
    anchor = internet.hive("pub", "ops", "vps")
    alice = internet.hive("hA", "alice", "lap-a")
    bob = internet.hive("hB", "bob", "lap-b")
    anchor.cli("init", "acme", "--as", "ops", "--anchor", check=True)
    alice.cli("join", anchor.cli_json("invite")["link"], "--as", "alice", check=True)
    wait_for(lambda: len(ok(alice, "mesh")["links"]) == 1, what="alice linked to the anchor")
    # alice's invite names the anchor first (reachable from anywhere), then her own LAN address.
    invite = alice.cli_json("invite", "--once")["link"]
    ticket = roster.decode_ticket(invite)
    assert ticket.addresses[0] == f"{PUB}:{ok(anchor, 'mesh')['listening']}", ticket.addresses
    out = bob.cli("join", invite, "--as", "bob", check=True).stdout
    assert "joined team acme: you are bob" in out
    register(alice, "a1", "/src/web")
    wait_for(lambda: sees(bob, "alice/web-codex"), what="alice's session at bob, through the anchor")
    listing = bob.cli("team", check=True).stdout
    assert any("lap-a" in line and "via vps (unreachable directly)" in line for line in listing.splitlines()), listing


def test_an_anchor_with_two_addresses_listens_on_the_one_it_names_so_a_join_through_a_nat_works(
    internet: Internet,
) -> None:
    public = "198.18.0.9"  # the anchor's second address; its first (the route's source) is PUB
    internet.run("pub", "ip", "addr", "add", f"{public}/24", "dev", "br0")
    anchor = internet.hive("pub", "ops", "vps")
    config = anchor.home / "config.toml"
    config.write_text(config.read_text().replace(f'listen = "{PUB}:0"', 'listen = "0.0.0.0:0"'))
    out = anchor.cli("init", "acme", "--as", "ops", "--anchor", "--address", f"{public}:4433", check=True).stdout
    assert f"{public}:4433" in out, out
    assert ok(anchor, "mesh")["listening"] == 4433
    alice = internet.hive("hA", "alice", "lap-a")
    alice.cli("join", anchor.cli_json("invite")["link"], "--as", "alice", check=True)
    wait_for(lambda: len(ok(alice, "mesh")["links"]) == 1, what="alice linked to the anchor")
    [dialed] = ok(alice, "mesh")["links"].values()
    assert dialed["address"] == f"{public}:4433", dialed  # the address it named, not the route's source
    [row] = ok(anchor, "mesh")["links"].values()
    assert row["address"].startswith(WAN["rA"]), row  # through alice's NAT


def test_with_two_anchors_split_by_a_partition_bob_gets_what_both_held_once(internet: Internet) -> None:
    second = "198.18.0.9"  # the second anchor's address, on the same internet
    internet.run("pub", "ip", "addr", "add", f"{second}/24", "dev", "br0")
    first_anchor = internet.hive("pub", "ops", "vps1")
    second_anchor = internet.hive("pub", "ops2", "vps2")
    config = second_anchor.home / "config.toml"
    config.write_text(config.read_text().replace(f'listen = "{PUB}:0"', f'listen = "{second}:0"'))
    alice = internet.hive("hA", "alice", "lap-a")
    bob = internet.hive("hB", "bob", "lap-b")
    first_anchor.cli("init", "acme", "--as", "ops", "--anchor", check=True)
    link = first_anchor.cli_json("invite")["link"]
    second_anchor.cli("join", link, "--as", "ops2", "--anchor", check=True)
    for laptop, person in ((alice, "alice"), (bob, "bob")):
        laptop.cli("join", link, "--as", person, check=True)
    for machine, links in ((first_anchor, 3), (second_anchor, 3), (alice, 3), (bob, 3)):
        wait_for(lambda m=machine, n=links: len(ok(m, "mesh")["links"]) == n, what=f"{machine.role} linked")
    bob_key = ok(bob, "team_show")["me"]["key"]
    bob.stop()
    wait_for(lambda: bob_key not in ok(alice, "mesh")["links"], what="bob's laptop gone")
    [result] = alice.cli_json("send", "bob/terminal", "the release is frozen")["results"]
    assert result["state"] == "anchored", result
    for anchor in (first_anchor, second_anchor):
        wait_for(lambda a=anchor: ok(a, "mesh")["custody"] == {bob_key: 1}, what="a copy on each anchor")
    # A partition: bob's home cannot reach the first anchor; he gets the message from the second.
    cut = (
        "table inet split {\n chain input {\n type filter hook input priority filter; policy accept;\n"
        f" ip saddr {WAN['rB']} ip daddr {PUB} drop\n }}\n}}\n"
    )
    internet.run("pub", "nft", "-f", "-", input=cut)
    bob.start()
    wait_for(
        lambda: [m["body"] for m in bob.cli_json("inbox", "--peek")["messages"]] == ["the release is frozen"], what="it"
    )
    wait_for(lambda: ok(second_anchor, "mesh")["custody"] == {}, what="the second anchor's custody ended")
    assert ok(first_anchor, "mesh")["custody"] == {bob_key: 1}  # the first one could not hear of it
    # The partition heals: the first anchor delivers its copy, bob answers it and keeps the one he has.
    internet.run("pub", "nft", "delete", "table", "inet", "split")
    wait_for(lambda: ok(first_anchor, "mesh")["custody"] == {}, what="the first anchor's custody ended", timeout=120)
    assert [m["body"] for m in bob.cli_json("inbox", "--peek")["messages"]] == ["the release is frozen"]


def test_a_removed_machine_and_a_stranger_cannot_use_the_anchor(internet: Internet) -> None:
    anchor, alice, bob = anchored_team(internet)
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: sees(alice, "bob/api-codex"), what="bob's session at alice, through the anchor")
    team_id, alice_key = ok(alice, "team_show")["team"]["id"], ok(alice, "team_show")["me"]["key"]
    bob_key = load_identity(bob.home).signing_key.encode()
    anchor.cli("remove", "bob", check=True)
    wait_for(lambda: ok(bob, "team_show")["team"] is None, what="bob's machine told it was removed")
    wait_for(lambda: len(ok(anchor, "mesh")["links"]) == 1, what="the anchor linked to alice only")
    wait_for(lambda: len(ok(alice, "mesh")["links"]) == 1, what="alice's relayed link to bob closed")
    bob.cli("stop", check=True)
    address = f"{PUB}:{ok(anchor, 'mesh')['listening']}"

    async def hand_over(key: bytes) -> list[str]:
        """Dial the anchor from bob's home with ``key`` and hand it mail for alice, sealed by that key."""
        got: list[str] = []
        message = {"id": new_ulid(), "from": "bob/b1", "to": "alice/web-codex", "kind": "agent", "body": "let me in"}
        body = {"to": alice_key, "frame": {"t": "msg", "msg": message}, "at": int(time.time() * 1000)}
        sealed = sign(Identity(SigningKey(key), "file"), team_id, "relay", body).to_wire()
        try:
            async with dial(address, machine_cert(key), lambda k, alpn: True) as link:
                await link.send({"t": "hello", "team": team_id, "proto": 1, "features": []})
                await link.send({"t": "relay", "sealed": sealed})
                with anyio.move_on_after(5):
                    got.append((await link.receive())["t"])
        except (ConnectionError, LinkClosed):
            pass
        return got

    # bob's machine, with its own key, gets only the roster that says it was removed (no hello, no
    # link); a stranger's key gets nothing. Nothing either hands the anchor reaches alice.
    assert internet.inside("hB", lambda: anyio.run(hand_over, bob_key)) == ["state"]
    assert internet.inside("hB", lambda: anyio.run(hand_over, os.urandom(32))) == []
    assert bodies(alice, "a1") == [] and len(ok(anchor, "mesh")["links"]) == 1

"""The simulated internet (tests/reach/natsim.py) behaves like two homes behind NATs, and hive today
links each laptop to a public machine but never the two laptops to each other: the baseline the
[reach] work (anchor, relay across NAT) starts from.

UDP checks use stdlib sockets made inside the namespaces; hive checks run real sidecars, one per
namespace, driven through the CLI (which runs inside the machine's namespace) and raw requests.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

from hive.sidecar.team import roster
from tests.sidecar.test_tailscale import doctor, line_of

from .natsim import LAN, LAPTOP, LAPTOPS, PUB, WAN, Internet, NetHive, holds, wait_for

# Over these veth links a dial that can succeed links in well under a second (a laptop links to the
# public machine in about 0.2 s), so this long without a link, after a dial's packets were seen on
# their way, means they did not get through.
NEVER = 3.0


def ok(hive: NetHive, op: str, **args: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def drain(sock: socket.socket) -> list[tuple[bytes, tuple[str, int]]]:
    """Every datagram ``sock`` receives until it has been quiet for its timeout (unreachable is never
    reported to a UDP socket: silence for a while is all a negative check can see)."""
    got = []
    with contextlib.suppress(TimeoutError):
        while True:
            got.append(sock.recvfrom(65536))
    return got


# ---- the topology, seen with UDP ------------------------------------------------------------------


def test_both_laptops_reach_the_public_machine_which_sees_their_routers_wan_addresses(internet: Internet) -> None:
    with contextlib.ExitStack() as stack:
        public = stack.enter_context(internet.udp("pub", timeout=5))
        for laptop in LAPTOPS:
            own = stack.enter_context(internet.udp(laptop, timeout=5))
            own.sendto(f"hello from {laptop}".encode(), public.getsockname())
            data, seen = public.recvfrom(2048)
            assert data == f"hello from {laptop}".encode()
            assert seen[0] == WAN[internet.router_of(laptop)], f"{laptop} came from {seen}, not its router's WAN"
            # The answer goes back through the NAT's mapping to the laptop.
            public.sendto(b"welcome " + data, seen)
            assert own.recvfrom(2048) == (b"welcome " + data, (PUB, public.getsockname()[1]))


def test_neither_laptop_reaches_the_other_by_lan_address_wan_address_or_the_mapping_it_opened(
    internet: Internet,
) -> None:
    with contextlib.ExitStack() as stack:
        public = stack.enter_context(internet.udp("pub", timeout=5))
        listening = {laptop: stack.enter_context(internet.udp(laptop, timeout=1)) for laptop in LAPTOPS}
        # Each listener first opens a mapping on its router, towards the public machine.
        mapped = {}
        for laptop, sock in listening.items():
            sock.sendto(b"map", public.getsockname())
            data, seen = public.recvfrom(2048)
            assert data == b"map"
            mapped[laptop] = seen
        for laptop, other in (("hA", "hB"), ("hB", "hA")):
            port = listening[other].getsockname()[1]
            sender = stack.enter_context(internet.udp(laptop))
            for target in ((LAPTOP[other], port), (WAN[internet.router_of(other)], port), mapped[other]):
                sender.sendto(f"{laptop} to {target}".encode(), target)
        # Each laptop's own router reaches its listener: the listener works, so silence from the
        # other laptop means the way is shut.
        for laptop, sock in listening.items():
            control = stack.enter_context(internet.udp(internet.router_of(laptop)))
            control.sendto(b"control", (LAPTOP[laptop], sock.getsockname()[1]))
        for laptop, sock in listening.items():
            assert [data for data, _ in drain(sock)] == [b"control"], f"{laptop} heard from the other laptop"
    # The datagram addressed to each laptop's LAN address reached the internet and died there.
    assert (internet.stray_packets_to("rA"), internet.stray_packets_to("rB")) == (1, 1)


def test_a_home_router_lets_nothing_new_in_even_from_a_neighbour_that_routes_to_its_lan(internet: Internet) -> None:
    # Masquerade alone is no firewall: with a route to bob's LAN through his router's WAN address,
    # alice's router hands her packets for bob's laptop straight to bob's router.
    internet.run("rA", "ip", "route", "add", LAN["rB"], "via", WAN["rB"])
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(internet.udp("hB", timeout=1))
        stack.enter_context(internet.udp("hA")).sendto(b"straight to bob", (LAPTOP["hB"], listener.getsockname()[1]))
        stack.enter_context(internet.udp("rB")).sendto(b"control", (LAPTOP["hB"], listener.getsockname()[1]))
        assert [data for data, _ in drain(listener)] == [b"control"]


# ---- hive today -----------------------------------------------------------------------------------


def form_team(internet: Internet) -> tuple[NetHive, NetHive, NetHive, str]:
    """carol's always-on machine (``anchor``, on the internet) founds team acme; alice's and bob's
    laptops join it with its team link. Returns the three machines and the link."""
    anchor = internet.hive("pub", "carol", "anchor")
    alice = internet.hive("hA", "alice", "lap-a")
    bob = internet.hive("hB", "bob", "lap-b")
    anchor.cli("init", "acme", "--as", "carol", check=True)  # starts its sidecar, inside pub
    link = anchor.cli_json("invite")["link"]
    # One after the other: the anchor tells bob, as he links, the address alice told it.
    for laptop, person in ((alice, "alice"), (bob, "bob")):
        laptop.cli("join", link, "--as", person, check=True)  # starts its sidecar, inside its namespace
        wait_for(lambda m=laptop: len(ok(m, "mesh")["links"]) == 1, what=f"{laptop.role} linked to the anchor")
    wait_for(lambda: len(ok(anchor, "mesh")["links"]) == 2, what="the anchor linked to both laptops")
    return anchor, alice, bob, link


def machine_row(team: dict[str, Any], person: str) -> dict[str, Any]:
    [row] = [m for p in team["people"] if p["person"] == person for m in p["machines"]]
    return row


def test_the_public_machines_invite_carries_its_public_address_and_both_laptops_join_it(internet: Internet) -> None:
    anchor, alice, bob, link = form_team(internet)
    assert roster.decode_ticket(link).addresses == (f"{PUB}:{ok(anchor, 'mesh')['listening']}",)
    # The anchor sees each laptop at its router's WAN address: the links went through the NATs.
    seen = {row["address"].rsplit(":", 1)[0] for row in ok(anchor, "mesh")["links"].values()}
    assert seen == {WAN["rA"], WAN["rB"]}
    for laptop in (alice, bob):
        carol = machine_row(laptop.cli_json("team"), "carol")
        assert (carol["online"], carol["path"]) == (True, "direct")
        # A laptop's own invite names only its LAN address: no use to anyone outside its home.
        own = roster.decode_ticket(laptop.cli_json("invite")["link"])
        assert own.addresses == (f"{laptop.address}:{ok(laptop, 'mesh')['listening']}",)
    # Every sidecar, started by the CLI, runs inside its machine's namespace.
    for machine in (anchor, alice, bob):
        assert machine.running_pid() is not None, f"{machine.role}'s sidecar is not inside its namespace"


def test_the_two_laptops_never_link_and_alices_mail_to_bob_waits_in_her_outbox(
    internet: Internet, tmp_path: Path
) -> None:
    anchor, alice, bob, _ = form_team(internet)
    alice_key, bob_key = (ok(m, "team_show")["me"]["key"] for m in (alice, bob))
    session = {"key": "b1", "agent": "codex", "cwd": "/src/api", "repo": "acme/api", "branch": "main"}
    assert ok(bob, "register", session=session)["address"] == "bob/api-codex"
    # The anchor, linked to bob, sees his session and mails it: mail works wherever there is a link.
    wait_for(
        lambda: any(s["address"] == "bob/api-codex" for s in ok(anchor, "who")["sessions"]),
        what="bob's session at the anchor",
    )
    anchor.cli("send", "bob/api-codex", "from the anchor", check=True)
    wait_for(
        lambda: [m["body"] for m in ok(bob, "inbox", session="api-codex", peek=True)["messages"]],
        what="the anchor's mail in bob's session",
    )

    # alice, linked only to the anchor, never sees bob's session, so cannot even address it...
    assert not ok(alice, "who")["sessions"]
    refused = alice.cli("send", "bob/api-codex", "hello bob")
    assert refused.returncode == 1 and "bob/api-codex" in refused.stderr, refused
    # ...and what she sends bob's own mailbox waits in her outbox.
    [result] = alice.cli_json("send", "bob/terminal", "hello bob")["results"]
    assert (result["state"], result["machine"]) == ("queued", "lap-b") and "outbox" in result["note"], result

    # bob dials alice at the LAN address she advertises (the anchor passed it on); those packets
    # die on the internet. (alice learns bob's address only at the anchor's once-a-minute refresh.)
    wait_for(lambda: internet.stray_packets_to("rA") > 0, what="bob's dial towards alice's LAN address", timeout=90)

    def apart() -> bool:
        return bob_key not in ok(alice, "mesh")["links"] and alice_key not in ok(bob, "mesh")["links"]

    def waiting() -> bool:
        return bool(ok(alice, "sent", ids=[result["id"]])["messages"][0]["in_outbox"])

    holds(lambda: apart() and waiting(), what="the laptops unlinked and alice's mail in her outbox", seconds=NEVER)
    assert internet.stray_packets_to("rA") > 0  # still trying, still dying on the internet
    [sent] = alice.cli_json("sent", result["id"])["messages"]
    assert (sent["state"], sent["in_outbox"], sent["read_at"]) == ("queued", True, None)
    assert bob.cli_json("inbox", "--peek")["messages"] == []

    # Neither laptop calls the other offline: the public machine says it links both, so each is
    # up but unreachable from the other (alice hears it at the public machine's refresh).
    def unreachable(viewer: NetHive, person: str) -> bool:
        row = machine_row(viewer.cli_json("team"), person)
        return (row["online"], row["path"], row["unreachable"], row["linked_by"]) == (False, None, True, ["anchor"])

    wait_for(lambda: unreachable(alice, "bob") and unreachable(bob, "alice"), what="both unreachable", timeout=90)
    listing = alice.cli("team", check=True).stdout.splitlines()
    assert any("lap-b" in line and "unreachable from here (up: linked to anchor)" in line for line in listing)
    advice = line_of(doctor(alice, tmp_path / "home"), "bob@lap-b")
    assert "up (linked to anchor) but unreachable from here" in advice, advice

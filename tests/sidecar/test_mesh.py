"""The mesh between real sidecars on loopback, each in its own HIVE_HOME (its own "machine").

Teams are formed the way people form them (``hive init``, ``hive invite``, ``hive join``), and
faults are real: ``kill -9`` of a sidecar, a stopped peer, frames written by hand with a member's
own key over the real transport (duplicates, reordering, unknown types, oversize frames, a
removed machine, a stranger).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import pytest
import tomlkit

from hive.sidecar.base.ulid import new_ulid
from hive.sidecar.mesh.transport import MAX_FRAME, RELAY_ALLOWANCE, LinkClosed, dial, machine_cert
from hive.sidecar.presence.frames import sanitise_presence
from hive.sidecar.team import roster
from hive.sidecar.team.identity import load_identity

from ..conftest import Hive
from .terminal import run_in_terminal_answering

MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'
T = TypeVar("T")
_TEAM: list[Hive] = []  # the machines of the running test, whose logs a timeout shows


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    # Several machines on one host: each keeps its key in its own state folder.
    monkeypatch.setenv("HIVE_KEYRING", "off")
    _TEAM.clear()


def _logs() -> str:
    parts = []
    for machine in _TEAM:
        with contextlib.suppress(OSError):
            lines = (machine.home / "sidecar.log").read_text().splitlines()[-15:]
            parts.append(f"--- {machine.home.name}\n" + "\n".join(lines))
    return "\n".join(parts)


def wait_for(check: Callable[[], T], timeout: float = 30, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{_logs()}")
        time.sleep(0.05)


def ok(hive: Hive, op: str, **args: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": op, **args}, timeout=30)
    assert reply["ok"], reply
    return reply["result"]


def register(hive: Hive, key: str, cwd: str, agent: str = "codex", repo: str = "") -> str:
    info = {"key": key, "agent": agent, "cwd": cwd, "repo": repo, "branch": "main"}
    return ok(hive, "register", session=info)["address"]


def linked(hive: Hive) -> int:
    return len(ok(hive, "mesh")["links"])


def form_team(make_hive: Any, people: list[str], configs: dict[str, str] | None = None) -> list[Hive]:
    """Found a team on the first machine and join the others with its invite link."""
    configs = configs or {}
    machines = []
    for person in people:
        machine = make_hive(MESH + configs.get(person, ""), person=person)
        machine.start()
        machines.append(machine)
        _TEAM.append(machine)
    machines[0].cli("init", "acme", "--as", people[0], check=True)
    link = machines[0].cli_json("invite")["link"]
    for machine, person in zip(machines[1:], people[1:], strict=True):
        machine.cli("join", link, "--as", person, check=True)
    for machine in machines:
        wait_for(lambda m=machine: linked(m) == len(machines) - 1, what="every machine linked to every other")
    return machines


def who(hive: Hive) -> list[dict[str, Any]]:
    return ok(hive, "who")["sessions"]


def sent(hive: Hive, message_id: str) -> dict[str, Any]:
    return ok(hive, "sent", ids=[message_id])["messages"][0]


def inbox(hive: Hive, session: str) -> list[dict[str, Any]]:
    return ok(hive, "inbox", session=session, peek=True)["messages"]


def send(hive: Hive, to: str, body: str, **extra: Any) -> dict[str, Any]:
    return ok(hive, "send", to=to, body=body, **extra)["results"][0]


# ---- forming a team, presence, mail and receipts -------------------------------------------


def test_three_machines_form_a_team_see_each_others_sessions_and_a_read_receipt_comes_back(make_hive: Any) -> None:
    alice, bob, carol = form_team(make_hive, ["alice", "bob", "carol"])
    register(alice, "a1", "/src/web", agent="claude-code", repo="acme/web")
    register(bob, "b1", "/src/api", repo="acme/api")
    register(carol, "c1", "/src/docs", agent="cursor")
    expected = {"alice/web-claude-code", "bob/api-codex", "carol/docs-cursor"}
    for machine in (alice, bob, carol):
        wait_for(lambda m=machine: {s["address"] for s in who(m)} == expected, what="everyone's sessions")
    seen_by_carol = {s["address"]: s for s in who(carol)}
    assert seen_by_carol["bob/api-codex"]["machine"] == "m2"  # from the roster, not from bob's presence
    assert seen_by_carol["bob/api-codex"]["repo"] == "acme/api"
    assert seen_by_carol["bob/api-codex"]["folder"] == "api"  # only the last part of the cwd leaves bob's machine

    result = send(alice, "bob/api-codex", "does refresh still return 401?")
    assert result["state"] == "queued", result  # bob's session is on the pull tier
    assert "inbox" in result["note"]
    messages = inbox(bob, "api-codex")
    assert [(m["from"], m["body"]) for m in messages] == [("alice/terminal", "does refresh still return 401?")]
    assert sent(alice, result["id"])["state"] == "queued"

    read = bob.request({"id": 1, "op": "inbox", "session": "api-codex"})["result"]
    ok(bob, "delivered", session="api-codex", ids=read["ids"])
    receipt = wait_for(lambda: sent(alice, result["id"])["read_at"] and sent(alice, result["id"]), what="read receipt")
    assert receipt["state"] == "read"

    reply = send(bob, "alice/web-claude-code", "yes, since the token change", **{"from": "b1"})
    assert reply["state"] in ("queued", "delivered")
    assert [m["body"] for m in inbox(alice, "web-claude-code")] == ["yes, since the token change"]


def test_a_remote_session_that_ended_still_takes_mail(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    ok(bob, "end", session="b1")
    ok(bob, "who")  # the ended session leaves bob's presence as a known name
    result = send(alice, "bob/api-codex", "still there?")
    assert result["state"] in ("queued", "delivered")  # an offline name still takes mail
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["still there?"]


# ---- faults: kill -9, restarts, outbox replay ----------------------------------------------


def test_kill_the_recipient_send_restart_it_and_the_message_arrives_exactly_once(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    bob.kill9()
    result = send(alice, "bob/api-codex", "are you back?")  # alice may not have noticed yet
    assert result["state"] == "queued"
    assert "outbox" in result["note"]
    bob.start()
    wait_for(lambda: inbox(bob, "api-codex"), what="the message after bob's restart", timeout=60)
    wait_for(lambda: not sent(alice, result["id"])["in_outbox"], what="the ack after the relink")
    # A message sent after the ack comes behind any replay of the first on the same link.
    send(alice, "bob/api-codex", "marker")
    wait_for(lambda: len(inbox(bob, "api-codex")) >= 2, what="the marker message")
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["are you back?", "marker"]


def test_kill_the_sender_after_send_returned_and_its_outbox_delivers_after_restart(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    bob.kill9()
    result = send(alice, "bob/api-codex", "from the outbox")
    assert result["state"] == "queued"
    alice.kill9()
    bob.start()
    alice.start()
    wait_for(lambda: inbox(bob, "api-codex"), what="the outbox to deliver after both restarts", timeout=90)
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["from the outbox"]
    wait_for(lambda: not sent(alice, result["id"])["in_outbox"], what="the ack to reach the sender")


def test_two_machines_that_dial_each_other_at_once_keep_one_and_the_same_link(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    # Each lists the other as a static address, so both dial as soon as they start.
    for machine, other in ((alice, bob), (bob, alice)):
        config = tomlkit.parse((machine.home / "config.toml").read_text())
        config["mesh"]["static"] = [_address(other)]  # type: ignore[index]
        (machine.home / "config.toml").write_text(tomlkit.dumps(config))
    for _ in range(3):
        alice.kill9()
        bob.kill9()
        # Both come back on their old ports at the same moment.
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(Hive.start, (alice, bob)))
        # While both dials are decided a side may briefly hold the link the other side drops; then
        # both keep the same link (one side dialed it, the other accepted it), and it stays.
        wait_for(lambda: _settled(alice, bob), timeout=60, what="one shared link that stays for 3 s")


def _settled(alice: Hive, bob: Hive) -> bool:
    first = _one_shared_link(alice, bob)
    deadline = time.monotonic() + 3
    while first is not None and time.monotonic() < deadline:
        time.sleep(0.2)
        now = _one_shared_link(alice, bob)
        if (
            now is None
            or [v["dialed"] for v in now] != [v["dialed"] for v in first]
            or any(b["age"] < a["age"] for a, b in zip(first, now, strict=True))
        ):
            return False
    return first is not None


def _one_shared_link(*machines: Hive) -> list[dict[str, Any]] | None:
    views = []
    for machine in machines:
        links = list(ok(machine, "mesh")["links"].values())
        if len(links) != 1:
            return None
        views.append(links[0])
    return views if sorted(v["dialed"] for v in views) == [False, True] else None


# ---- frames written by hand with a member's key --------------------------------------------


def _key_of(hive: Hive) -> bytes:
    return load_identity(hive.home).signing_key.encode()


def _team_id(hive: Hive) -> str:
    return ok(hive, "team_show")["team"]["id"]


def _address(hive: Hive) -> str:
    return f"127.0.0.1:{ok(hive, 'mesh')['listening']}"


async def _raw_link(
    target: Hive, as_machine: Hive, frames: list[dict[str, Any] | bytes], answers: int
) -> list[dict[str, Any]]:
    """Dial ``target`` with ``as_machine``'s key, say hello, write frames, collect answers."""
    cert = machine_cert(_key_of(as_machine))
    got: list[dict[str, Any]] = []
    async with dial(_address(target), cert, lambda key, alpn: True) as link:
        await link.send({"t": "hello", "team": _team_id(target), "proto": 1, "features": []})
        with anyio.fail_after(20):
            while True:
                frame = await link.receive()
                got.append(frame)
                if frame["t"] == "hello":
                    break
                if frame["t"] == "state" and not any(f["t"] == "hello" for f in got):
                    return got  # not a member: the state, then the close
            for item in frames:
                if isinstance(item, bytes):
                    link._writer.write(item)
                else:
                    await link.send(item)
            while sum(1 for f in got if f["t"] == "ack") < answers:
                got.append(await link.receive())
    return got


def _msg(message_id: str, sender: str, to: str, body: str, **extra: Any) -> dict[str, Any]:
    return {
        "t": "msg",
        "msg": {
            "id": message_id,
            "from": sender,
            "to": to,
            "kind": "agent",
            "agent": "codex",
            "repo": "",
            "reply_to": None,
            "body": body,
            "fyi": False,
            "sent_at": time.time(),
            **extra,
        },
    }


def test_duplicate_reordered_and_unknown_frames_deliver_each_message_once(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()  # the test speaks for bob's machine with bob's key
    early, late = new_ulid(), new_ulid()
    frames: list[dict[str, Any] | bytes] = [
        _msg(late, "bob/api-codex", "alice/web-codex", "second"),
        {"t": "from-the-future", "payload": [1, 2, 3]},
        _msg(early, "bob/api-codex", "alice/web-codex", "first"),
        _msg(late, "bob/api-codex", "alice/web-codex", "second"),
        _msg(early, "bob/api-codex", "alice/web-codex", "first"),
    ]
    got = anyio.run(_raw_link, alice, bob, frames, 4)
    acks = [(f["id"], f["state"]) for f in got if f["t"] == "ack"]
    assert [a[0] for a in acks] == [late, early, late, early]
    assert all(state == "queued" for _, state in acks)
    assert sorted(m["body"] for m in inbox(alice, "web-codex")) == ["first", "second"]


def test_a_machine_speaks_only_for_its_own_person(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()
    forged = new_ulid()
    got = anyio.run(_raw_link, alice, bob, [_msg(forged, "alice/other", "alice/web-codex", "it's me, alice")], 1)
    ack = next(f for f in got if f["t"] == "ack")
    assert ack["state"] == "refused"
    assert "speaks only for bob" in ack["note"]
    assert inbox(alice, "web-codex") == []


def test_an_oversize_frame_closes_only_that_link(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(alice, "a1", "/src/web")
    bob.stop()
    oversize = (MAX_FRAME + RELAY_ALLOWANCE + 1).to_bytes(4, "big") + b"{"
    with pytest.raises(LinkClosed):
        anyio.run(_raw_link, alice, bob, [oversize], 1)
    fine = new_ulid()
    got = anyio.run(_raw_link, alice, bob, [_msg(fine, "bob/api-codex", "alice/web-codex", "after")], 1)
    assert [f["state"] for f in got if f["t"] == "ack"] == ["queued"]


def test_a_removed_machine_gets_the_roster_without_secrets_and_cannot_connect(make_hive: Any) -> None:
    alice, bob, carol = form_team(make_hive, ["alice", "bob", "carol"])
    register(alice, "a1", "/src/web")
    alice.cli("remove", "bob", check=True)
    wait_for(lambda: ok(bob, "team_show")["team"] is None, what="bob to learn he was removed")
    wait_for(lambda: linked(alice) == 1 and linked(carol) == 1, what="only alice and carol linked")
    bob.stop()
    got = anyio.run(_raw_link, alice, bob, [_msg(new_ulid(), "bob/x", "alice/web-codex", "let me in")], 0)
    assert [f["t"] for f in got] == ["state"]
    state = got[0]["state"]
    # No link and no live invite: only the ones admissions redeemed travel, as hashes of spent secrets.
    assert state["link"] is None and roster.view(roster.state_from_wire(state)).invites == {}
    assert inbox(alice, "web-codex") == []
    assert "bob" not in {p["person"] for p in ok(carol, "team_show")["people"]}


def test_a_stranger_learns_nothing(make_hive: Any) -> None:
    alice, _bob = form_team(make_hive, ["alice", "bob"])
    stranger = machine_cert(os.urandom(32))

    async def probe() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        try:
            async with dial(_address(alice), stranger, lambda key, alpn: True) as link:
                await link.send({"t": "hello", "team": "0" * 32, "proto": 1})
                with anyio.fail_after(10):
                    got.append(await link.receive())
        except (ConnectionError, LinkClosed):
            pass
        return got

    assert anyio.run(probe) == []
    assert linked(alice) == 1


# ---- trust controls ------------------------------------------------------------------------


def test_held_mail_waits_for_approval_and_the_sender_hears_each_step(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": '[inbound.people]\nalice = "hold"\n'})
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    first = send(alice, "bob/api-codex", "please run the migration")
    second = send(alice, "bob/api-codex", "and drop the old table")
    assert first["state"] == second["state"] == "held"
    assert inbox(bob, "api-codex") == []
    held = ok(bob, "held")["held"]
    assert [h["body"] for h in held] == ["please run the migration", "and drop the old table"]
    assert bob.cli("approve", first["id"], check=True).returncode == 0
    assert bob.cli("drop", second["id"], check=True).returncode == 0
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["please run the migration"]
    wait_for(lambda: sent(alice, first["id"])["state"] == "delivered", what="the approval receipt")
    wait_for(lambda: sent(alice, second["id"])["state"] == "refused", what="the drop receipt")


def test_a_refused_person_is_told_so(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": '[inbound]\ndefault = "refuse"\n'})
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    result = send(alice, "bob/api-codex", "hello?")
    assert result["state"] == "refused"
    assert "does not take messages from alice" in result["note"]


def test_over_the_rate_limit_messages_are_deferred_not_lost(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": "rate_limit = 3\nrate_window = 2\n"})
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" and s["live"] for s in who(alice)), what="bob's session")
    results = [send(alice, "bob/api-codex", f"message {n}") for n in range(6)]
    states = [r["state"] for r in results]
    assert states[:3] == ["queued"] * 3
    assert all(state == "queued" for state in states[3:])
    assert any("outbox" in r["note"] or "again" in r["note"] for r in results[3:])
    wait_for(lambda: len(inbox(bob, "api-codex")) == 6, what="the deferred messages", timeout=60)
    assert sorted(m["body"] for m in inbox(bob, "api-codex")) == [f"message {n}" for n in range(6)]


def test_the_loop_guard_stops_agents_and_a_person_resets_it(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "loop_limit = 3\n", "bob": "loop_limit = 3\n"})
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: len(who(alice)) == 2 and len(who(bob)) == 2, what="both sessions")
    one = send(alice, "bob/api-codex", "ping 1", **{"from": "a1"})
    two = send(bob, "alice/web-codex", "pong 1", **{"from": "b1", "reply_to": one["id"]})
    three = send(alice, "bob/api-codex", "ping 2", **{"from": "a1", "reply_to": two["id"]})
    four = send(bob, "alice/web-codex", "pong 2", **{"from": "b1", "reply_to": three["id"]})
    assert [r["state"] for r in (one, two, three)] == ["queued"] * 3
    assert four["state"] == "refused"
    assert "Check with your person" in four["note"]
    # The person's reply restarts the count, once they confirm it (here at the CLI's own terminal).
    code, output = run_in_terminal_answering(
        alice.env, "y", "send", "--reply-to", three["id"], "bob/api-codex", "carry on, both"
    )
    assert code == 0, output
    assert "It restarts the loop guard" in output
    five = send(bob, "alice/web-codex", "pong 2, with alice's blessing", **{"from": "b1", "reply_to": three["id"]})
    assert five["state"] == "queued", five


def test_a_teammates_gone_session_keeps_its_agent_repo_branch_and_last_tier(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    ok(
        bob,
        "register",
        session={
            "key": "b1",
            "agent": "codex",
            "cwd": "/src/api",
            "repo": "github.com/acme/api",
            "branch": "main",
            "tier": "turn",
        },
    )
    wait_for(lambda: any(s["person"] == "bob" and s["live"] for s in who(alice)), what="bob's session at alice's")
    ok(bob, "end", session="b1")

    def gone() -> dict[str, Any] | None:
        return next((s for s in ok(alice, "who", all=True)["sessions"] if s["person"] == "bob" and not s["live"]), None)

    seen = wait_for(gone, what="bob's session gone at alice's")
    assert (seen["name"], seen["agent"], seen["repo"], seen["branch"], seen["tier"]) == (
        "api-codex",
        "codex",
        "github.com/acme/api",
        "main",
        "turn",
    )


# ---- presence sanitising -------------------------------------------------------------------


def test_presence_from_a_peer_is_cut_to_counts_lengths_and_one_printable_line() -> None:
    raw = {
        "sessions": [
            {
                "name": f"S {n}!",
                "agent": "x" * 500,
                "repo": "acme/api\n<hive-message>",
                "doing": "line one\nline two\u202e",
                "tier": "root",
            }
            for n in range(500)
        ],
        "known": [f"old-{n}" for n in range(1000)],
        "features": ["receipts", 42, "y" * 100],
        "addresses": ["127.0.0.1:1", "not an address", "[::1]:2", "x:99999"],
        "peers": {"a" * 64: ["10.0.0.1:5"], "not-a-key": ["10.0.0.2:5"]},
        "mailboxes": ["CI", "terminal", 7, "ci", *(f"box-{n}" for n in range(40))],
    }
    presence = sanitise_presence(raw)
    assert len(presence["sessions"]) == 200
    assert len(presence["known"]) == 100
    first = presence["sessions"][0]
    assert first["name"] == "s-0"
    assert len(first["agent"]) == 32
    assert "\n" not in first["repo"] and "<hive" not in first["repo"]
    assert first["doing"] == "line one line two"
    assert first["tier"] == "pull"
    assert presence["features"] == ["receipts", "y" * 32]
    assert presence["addresses"] == ["127.0.0.1:1", "[::1]:2"]
    assert presence["peers"] == {"a" * 64: ["10.0.0.1:5"]}
    assert presence["mailboxes"][:2] == ["ci", "box-0"] and len(presence["mailboxes"]) <= 16
    assert sanitise_presence("junk") == {
        "sessions": [],
        "known": [],
        "gone": {},
        "features": [],
        "addresses": [],
        "peers": {},
        "mailboxes": [],
    }
    gone = sanitise_presence(
        {
            "known": ["old-1", "old-2"],
            "gone": [
                {"name": "old-1", "agent": "y" * 99, "repo": "a\n<hive-message>", "tier": "root"},
                {"name": "never-known", "agent": "codex"},
                "junk",
            ],
        }
    )["gone"]
    assert list(gone) == ["old-1"] and len(gone["old-1"]["agent"]) == 32 and gone["old-1"]["tier"] == "pull"
    assert "\n" not in gone["old-1"]["repo"] and "<hive" not in gone["old-1"]["repo"]
    assert json.dumps(presence)  # what is stored is plain JSON


def test_the_outbox_gives_up_visibly_when_the_recipient_never_comes_back(make_hive: Any) -> None:
    give_up = "outbox_give_up = 3\n"  # seconds here; a week by default
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": give_up})
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in who(alice)), what="bob's session")
    bob.kill9()
    result = send(alice, "bob/api-codex", "anyone?")
    assert result["state"] == "queued"
    failed = wait_for(
        lambda: sent(alice, result["id"])["state"] == "failed" and sent(alice, result["id"]),
        what="the outbox to give up",
        timeout=90,
    )
    assert not failed["in_outbox"]
    assert "gave up" in failed["note"]

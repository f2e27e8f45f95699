"""The gate across machines: items for a teammate are decided by their own machine's gate, and a
security finding reaches the owner of the code (CODEOWNERS) wherever they are, even in quiet hours.

Real sidecars on loopback, each in its own HIVE_HOME (its own "machine"), as in test_mesh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import Hive
from tests.sidecar.test_mesh import form_team, ok, register, wait_for

ALL_DAY_QUIET = '[gate.people.bob]\nquiet = "00:00-23:59"\ntimezone = "UTC"\n'


def ledger(hive: Hive, person: str) -> list[dict[str, Any]]:
    return list(ok(hive, "gate_ledger", person=person)["rows"])


def terminal_mail(hive: Hive) -> list[dict[str, Any]]:
    return list(ok(hive, "inbox", peek=True)["messages"])


def test_an_item_for_a_teammate_is_decided_by_their_machines_gate_with_the_facts_behind_it(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    address = register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == address for s in ok(alice, "who")["sessions"]), what="bob's session")
    ok(alice, "gate_fact", kind="ci", ref="acme/api@main", state="failing")
    offered = ok(
        alice,
        "gate_offer",
        item={
            "source": "overlap",
            "person": "bob",
            "session": address,
            "title": "alice is editing src/auth.py too",
            "evidence": [{"kind": "ci", "ref": "acme/api@main"}],
        },
    )
    there = wait_for(lambda: [r for r in ledger(bob, "bob") if r["source"] == "overlap"], what="bob's gate to decide")
    delivered = ok(bob, "gate_breakpoint", session="b1", kind="turn")["delivered"]
    [message] = ok(bob, "inbox", session="b1")["messages"]
    here = ledger(alice, "bob")
    why = ok(alice, "gate_why", item=offered["item"])["items"][0]["answer"]

    assert (offered["outcome"], offered["rule"]) == ("relay", "relay.taken")
    assert why.startswith("Decided on bob's own machine")
    assert [r["rule"] for r in here] == ["relay", "relay.taken"]
    assert "bob@" in here[1]["reason"] and "(wait)" in here[1]["reason"]
    # Bob's gate rated it from alice's CI record (attention, not info) and waited for bob's own pause.
    assert [(r["outcome"], r["urgency"]) for r in there] == [("wait", "attention")]
    assert [(d["outcome"], d["rule"]) for d in delivered] == [("deliver", "breakpoint.turn")]
    assert message["from"] == "hive/gate" and "Relayed by alice@" in message["body"]


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "api"
    (repo / ".git").mkdir(parents=True)
    (repo / ".github").mkdir()
    (repo / ".github" / "CODEOWNERS").write_text("* @alice\n/src/auth/ @bob @nobody-here\n", encoding="utf-8")
    return repo


def test_a_security_finding_reaches_the_code_owner_on_their_machine_through_quiet_hours(
    make_hive: Any, tmp_path: Path
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"bob": ALL_DAY_QUIET})
    repo = _repo(tmp_path)
    register(alice, "a1", str(repo / "src"), repo="acme/api")
    ok(alice, "gate_fact", kind="security", ref="GHSA-1234", state="open")
    decisions = ok(
        alice,
        "gate_offer",
        item={
            "source": "review",
            "person": "alice",
            "title": "token check skipped in login",
            "evidence": [
                {"kind": "security", "ref": "GHSA-1234"},
                {"kind": "file", "ref": "acme/api:src/auth/login.py"},
            ],
        },
    )
    rows = wait_for(lambda: [r for r in ledger(bob, "bob") if r["rule"] == "floor.security"], what="bob's floor")
    mail = wait_for(lambda: terminal_mail(bob), what="the finding in bob's mailbox")
    here = ledger(alice, "bob")

    assert (decisions["outcome"], decisions["rule"]) == ("deliver", "floor.security")  # alice, who it was for
    assert [r["rule"] for r in here] == ["relay", "relay.taken"]
    assert "CODEOWNERS line 2 gives src/auth/login.py to @bob" in here[0]["reason"]
    # On bob's machine, in bob's quiet hours: the floor passes, and says whose code it is.
    assert "bob owns the code (CODEOWNERS line 2" in rows[0]["reason"]
    assert "token check skipped in login" in mail[0]["body"]
    assert ok(bob, "digest", person="bob", peek=True)["held"] == 0


def test_an_item_for_a_machine_that_is_down_is_relayed_when_it_is_back(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "[gate]\nrelay_retry = 1\n"})
    bob.kill9()
    offered = ok(alice, "gate_offer", item={"source": "overlap", "person": "bob", "title": "lunch at noon?"})
    held = ledger(alice, "bob")
    bob.start()
    taken = wait_for(
        lambda: [r for r in ledger(alice, "bob") if r["rule"] == "relay.taken"],
        what="the item to be relayed once bob's machine is back",
        timeout=90,
    )

    assert (offered["outcome"], offered["rule"]) == ("hold", "relay.wait")  # nothing lost: it waits here
    assert [r["rule"] for r in held[:2]] == ["relay", "relay.wait"]
    assert "bob@" in taken[0]["reason"]
    assert {r["title"] for r in ledger(bob, "bob")} == {"lunch at noon?"}

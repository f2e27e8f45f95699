"""Claude Code end to end across the simulated internet: alice's laptop and bob's behind their own
home NATs (tests/reach/natsim.py), linked only through the team's anchor on the public network.

The real ``claude`` runs headless on alice's laptop, wired by ``hive setup``, against the scripted
model (which listens inside her laptop's namespace). The whole round trip of
:func:`~tests.e2e.scenarios.round_trip` runs unchanged: the model lists the team and messages bob's
session; bob's session writes to the Claude Code session while it works; the message reaches the
model framed and defanged at the next tool result; bob gets his read receipts; the session ends at
bob's once the harness exits. A message for a laptop that is off is held by the anchor, and the
model is told so. And a person's journey: bob types a question at his terminal, the
model answers him with send_message, and he reads the answer with ``hive inbox``. Every frame
between the laptops is sealed and relayed by the anchor.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import on_failure, process_gone, sidecar_logs
from tests.reach.conftest import internet  # noqa: F401 (the fixture)
from tests.reach.natsim import LAPTOP, Internet

from .conftest import INFLIGHT, TEAMMATE_KEY, HarnessMachine, Team, wait_for
from .model_server import ModelServer, Request, Script, call, say
from .scenarios import REPLY, after_last_call, round_trip
from .test_claude_code import HARNESS, runner


@pytest.fixture
def laptops(internet: Internet, keys_in_files: None) -> Iterator[Team]:  # noqa: F811
    """ops's anchor founds team acme on the public network; alice's laptop (``hive setup`` for
    Claude Code) and bob's join it with its link. The test runs inside alice's home: its thread
    stays in her laptop's namespace until this fixture's teardown."""
    anchor = internet.hive("pub", "ops", "vps")
    anchor.cli("init", "acme", "--as", "ops", "--anchor", check=True)
    link = anchor.cli_json("invite")["link"]
    root = Path(tempfile.mkdtemp(prefix="hive-e2e-", dir="/tmp"))
    machine = HarnessMachine(root, with_clis=True)
    machine.project.mkdir(parents=True)
    machine.state.mkdir(parents=True, mode=0o700)
    (machine.state / "config.toml").write_text(
        f'person = "alice"\nmachine = "m1"\n[mesh]\nlisten = "{LAPTOP["hA"]}:0"\nmdns = false\n'
        f"[sidecar]\ninflight_timeout = {INFLIGHT}\n",
        encoding="utf-8",
    )
    sidecar_logs(machine.state)
    try:
        with internet.joined("hA"):
            out = machine.setup("--only", HARNESS)
            assert "wire" in out, out
            joined = machine.hive("join", link, "--as", "alice")
            assert joined.returncode == 0, joined.stderr
            bob = internet.hive("hB", "bob", "m2")
            bob.cli("join", link, "--as", "bob", check=True)
            team = Team(machine, bob)
            team.bob_ok(
                "register",
                session={
                    "key": TEAMMATE_KEY,
                    "agent": "codex",
                    "cwd": "/src/web",
                    "repo": "acme/web",
                    "branch": "main",
                },
                hold=False,
            )
            for side in (team.machine.ok, team.bob_ok):
                wait_for(
                    lambda side=side: sorted(r["relayed"] for r in side("mesh")["links"].values()) == [False, True],
                    timeout=60,
                    what="each laptop linked to the anchor, and to the other through it",
                )
            try:
                yield team
            finally:
                machine.hive("stop", timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_claude_code_behind_one_nat_and_a_teammate_behind_another_talk_through_the_anchor(laptops: Team) -> None:
    with ModelServer(Script()) as model:  # listening inside alice's home, where the test's thread is
        on_failure("the scripted model's requests", model.transcript)
        measured = round_trip(runner(), laptops, model)
    assert measured["tier"] == "push", measured
    # Nothing went direct: alice's only direct link is the anchor, bob is reached through it.
    links = laptops.machine.ok("mesh")["links"]
    assert {row["address"] for row in links.values() if row["relayed"]} == {"via vps"}, json.dumps(links)


def test_a_person_behind_one_nat_asks_a_claude_code_session_behind_another_and_reads_its_answer(laptops: Team) -> None:
    """bob, at his terminal, types a question to alice's Claude Code session; the model gets it at
    the next tool result and answers him with send_message; bob reads the answer with `hive inbox`
    and his question shows as read. Every word travels through the anchor."""
    bob = laptops.bob
    asked: dict[str, str] = {}
    question = "which port does the api listen on?"

    def bob_types(request: Request) -> None:
        me = wait_for(lambda: laptops.machine.session_of("claude-code"), what="the Claude Code session")
        wait_for(
            lambda: any(s["address"] == me["address"] for s in laptops.bob_ok("who")["sessions"]), what="it at bob's"
        )
        [result] = bob.cli_json("send", me["address"], question)["results"]
        asked.update(id=result["id"], address=me["address"])

    with ModelServer(Script()) as model:
        on_failure("the scripted model's requests", model.transcript)
        model.script = Script(
            {
                "E2E-PERSON": [
                    call("list_team", before=bob_types),
                    call("send_message", {"to": "bob/terminal", "message": REPLY}),
                    say("done"),
                ]
            }
        )
        run = runner().start(laptops.machine, model, "E2E-PERSON: help your teammates", False)
        output = run.finish()
        assert not model.errors and run.process.returncode == 0, f"{model.errors}\n{output}\n{model.transcript()}"
        # The question reached the model framed as bob's, right after list_team's result.
        shown = after_last_call(model.main()[1])
        frame = '<hive-message from="bob/terminal"'
        assert frame in shown and question in shown[shown.index(frame) :], f"the model saw:\n{shown[:3000]}"

    # bob reads the answer at his terminal, and sees his question read.
    inbox = bob.cli_json("inbox")["messages"]
    assert [(m["from"], m["body"]) for m in inbox] == [(asked["address"], REPLY)], inbox
    wait_for(lambda: bob.cli_json("sent", asked["id"])["messages"][0]["state"] == "read", what="bob's question read")


def test_claude_codes_message_for_a_laptop_that_is_off_is_held_by_the_anchor_and_the_model_is_told_so(
    laptops: Team,
) -> None:
    """bob's laptop is off. The model's send_message to bob is answered `anchored`, and the tool
    result says where the message waits; alice's laptop goes off too, bob's comes back and his
    `hive inbox` shows it, and alice's sidecar hears it was read once her laptop is back."""
    machine, bob = laptops.machine, laptops.bob
    bob.cli("stop", check=True)
    wait_for(lambda: len(machine.ok("mesh")["links"]) == 1, what="alice's laptop linked to the anchor only")
    with ModelServer(Script()) as model:
        on_failure("the scripted model's requests", model.transcript)
        model.script = Script(
            {"E2E-OFFLINE": [call("send_message", {"to": "bob/terminal", "message": "deploy moved to 5"}), say("ok")]}
        )
        run = runner().start(machine, model, "E2E-OFFLINE: tell bob the deploy moved", False)
        output = run.finish()
        assert not model.errors and run.process.returncode == 0, f"{model.errors}\n{output}\n{model.transcript()}"
        told = after_last_call(model.main()[1])
        assert "held by the team's anchor vps until bob's machine" in told, f"the tool result:\n{told[:2000]}"
    [address] = {s["address"] for s in machine.ok("who", all=True)["sessions"] if s["agent"] == "claude-code"}
    [sent] = machine.ok("sent", session=address)["messages"]
    assert (sent["state"], sent["in_outbox"]) == ("anchored", False), sent
    pid = int((machine.state / "sidecar.lock").read_text().strip())
    machine.hive("stop", timeout=60)  # alice's laptop goes off
    wait_for(lambda: process_gone(pid), what="alice's sidecar gone")
    bob.start()
    wait_for(lambda: [m["body"] for m in bob.cli_json("inbox")["messages"]] == ["deploy moved to 5"], what="at bob's")
    assert process_gone(pid)  # the anchor handed it over while alice's laptop was off
    machine.hive("status", timeout=60)  # alice's laptop is back (the command starts its sidecar)
    wait_for(lambda: machine.ok("sent", ids=[sent["id"]])["messages"][0]["state"] == "read", what="the read receipt")

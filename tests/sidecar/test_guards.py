"""The mail guards on every agent message: the loop guard per pair of sessions and the rate limit
per sender, between two sessions of one machine and across machines, reply or not.

Real sidecars; prompts reach them through the real hook client, as Claude Code runs it.
"""

from __future__ import annotations

from typing import Any

from hive.sidecar.mail.guards import pair

from ..conftest import Hive, run_in_terminal
from ..integrations.test_hook import fire
from .test_mesh import form_team, inbox, ok, register, send, wait_for, who

LIMITS = "[mesh]\nloop_limit = 3\n"


def error(hive: Hive, **request: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": "send", **request}, timeout=30)
    assert not reply["ok"], reply
    return reply["error"]


def two_sessions(hive: Hive) -> tuple[str, str]:
    web = register(hive, "w1", "/src/web")
    api = register(hive, "a1", "/src/api")
    return web, api


# ---- on one machine ----------------------------------------------------------------------------


def test_two_sessions_on_one_machine_are_stopped_at_the_loop_limit_with_or_without_replies(make_hive: Any) -> None:
    hive = make_hive(LIMITS)
    hive.start()
    web, api = two_sessions(hive)
    one = send(hive, api, "ping", **{"from": "w1"})
    send(hive, web, "pong", **{"from": "a1", "reply_to": one["id"]})
    send(hive, api, "ping again, no reply_to", **{"from": "w1"})
    refused = error(hive, to=web, body="pong again", **{"from": "a1"})
    assert refused["code"] == "loop_guard"
    # Either direction, a fresh thread or not: the pair is still in its run.
    assert error(hive, to=api, body="a new topic", **{"from": "w1"})["code"] == "loop_guard"
    assert [m["body"] for m in inbox(hive, "w1")] == ["pong"]
    assert [m["body"] for m in inbox(hive, "a1")] == ["ping", "ping again, no reply_to"]


def test_a_prompt_typed_into_either_session_lets_the_pair_talk_again(make_hive: Any, tmp_path: Any) -> None:
    hive = make_hive(LIMITS)
    hive.start()
    (tmp_path / "web").mkdir()
    fire(hive, "claude-code", "SessionStart", "w1", str(tmp_path / "web"))
    web = ok(hive, "who", session="w1")["me"]
    api = register(hive, "a1", "/src/api")
    for n in range(3):
        send(hive, web if n % 2 else api, f"message {n}", **{"from": "a1" if n % 2 else "w1"})
    assert error(hive, to=web, body="one too many", **{"from": "a1"})["code"] == "loop_guard"
    fire(hive, "claude-code", "UserPromptSubmit", "w1", str(tmp_path / "web"), prompt="keep going with api")
    assert send(hive, web, "after the prompt", **{"from": "a1"})["state"] == "queued"
    # A new run, counted from the prompt: three more, then the guard again.
    send(hive, api, "two", **{"from": "w1"})
    send(hive, web, "three", **{"from": "a1"})
    assert error(hive, to=api, body="four", **{"from": "w1"})["code"] == "loop_guard"


def test_a_person_typing_to_one_session_resets_its_runs_and_other_pairs_keep_counting(make_hive: Any) -> None:
    hive = make_hive(LIMITS)
    hive.start()
    web, api = two_sessions(hive)
    docs = register(hive, "d1", "/src/docs")
    for _ in range(2):
        send(hive, api, "web to api", **{"from": "w1"})
        send(hive, docs, "web to docs", **{"from": "w1"})
    send(hive, web, "api to web", **{"from": "a1"})
    send(hive, web, "docs to web", **{"from": "d1"})
    code, output = run_in_terminal(hive, "send", api, "api, go on with web")
    assert code == 0, output
    assert send(hive, web, "api to web, after alice", **{"from": "a1"})["state"] == "queued"
    assert error(hive, to=web, body="docs to web, nobody asked", **{"from": "d1"})["code"] == "loop_guard"


def test_mail_to_a_persons_own_mailbox_is_not_a_loop(make_hive: Any) -> None:
    hive = make_hive(LIMITS)
    hive.start()
    register(hive, "w1", "/src/web")
    results = [send(hive, "alice/terminal", f"status {n}", **{"from": "w1"}) for n in range(6)]
    assert [r["state"] for r in results] == ["queued"] * 6


def test_an_agent_over_the_rate_limit_is_refused_and_told_when_it_may_send_again(make_hive: Any) -> None:
    hive = make_hive("[mesh]\nrate_limit = 3\nrate_window = 60\n")
    hive.start()
    web, api = two_sessions(hive)
    for n in range(3):
        send(hive, "alice/terminal", f"status {n}", **{"from": "w1"})
    refused = error(hive, to=api, body="one more", **{"from": "w1"})
    assert refused["code"] == "rate_limited"
    assert 0 < refused["retry_after"] <= 60.1
    assert inbox(hive, "a1") == []
    # Per sender: the other session still sends, and the person is never limited.
    assert send(hive, web, "from api", **{"from": "a1"})["state"] == "queued"
    code, output = run_in_terminal(hive, "send", api, "from alice herself")
    assert code == 0, output
    assert [m["body"] for m in inbox(hive, "a1")] == ["from alice herself"]


def test_a_persons_script_is_rate_limited_like_an_agent(make_hive: Any) -> None:
    hive = make_hive("[mesh]\nrate_limit = 2\nrate_window = 60\n")
    hive.start()
    register(hive, "a1", "/src/api")
    assert hive.cli("send", "api-codex", "build 1 green", script=True).returncode == 0
    assert hive.cli("send", "api-codex", "build 2 green", script=True).returncode == 0
    done = hive.cli("send", "api-codex", "build 3 green", script=True)
    assert done.returncode != 0 and "may send again" in done.stderr


# ---- across machines ---------------------------------------------------------------------------


def test_across_machines_the_loop_guard_counts_both_directions_without_reply_to(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "loop_limit = 3\n", "bob": "loop_limit = 3\n"})
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: len(who(alice)) == 2 and len(who(bob)) == 2, what="both sessions")
    states = [
        send(alice, "bob/api-codex", "ping", **{"from": "a1"})["state"],
        send(bob, "alice/web-codex", "pong", **{"from": "b1"})["state"],
        send(alice, "bob/api-codex", "ping", **{"from": "a1"})["state"],
    ]
    assert states == ["queued"] * 3
    fourth = send(bob, "alice/web-codex", "pong", **{"from": "b1"})
    assert (fourth["state"], fourth.get("code")) == ("refused", "loop_guard")
    again = send(bob, "alice/web-codex", "pong, as a new message", **{"from": "b1"})
    assert (again["state"], again.get("code")) == ("refused", "loop_guard")
    other_way = send(alice, "bob/api-codex", "ping", **{"from": "a1"})
    assert (other_way["state"], other_way.get("code")) == ("refused", "loop_guard")
    assert [m["body"] for m in inbox(alice, "a1")] == ["pong"]


def test_a_prompt_on_the_recipients_machine_resets_the_run_its_sender_could_not_see(
    make_hive: Any, tmp_path: Any
) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": "loop_limit = 2\n", "bob": "loop_limit = 2\n"})
    register(alice, "a1", "/src/web")
    (tmp_path / "api").mkdir()
    fire(bob, "claude-code", "SessionStart", "b1", str(tmp_path / "api"))
    bobs = ok(bob, "who", session="b1")["me"]
    wait_for(lambda: len(who(alice)) == 2, what="bob's session at alice's")
    for n in range(2):
        assert send(alice, bobs, f"ping {n}", **{"from": "a1"})["state"] == "queued"
    assert send(alice, bobs, "ping 2", **{"from": "a1"}).get("code") == "loop_guard"
    # bob tells his session to carry on: alice's machine still counts the run, bob's does not.
    shown = fire(bob, "claude-code", "UserPromptSubmit", "b1", str(tmp_path / "api"), prompt="answer alice's agent")
    assert "ping 0" in shown and "ping 1" in shown and "ping 2" not in shown
    assert send(alice, bobs, "ping 3", **{"from": "a1"})["state"] == "queued"
    assert [m["body"] for m in inbox(bob, "b1")] == ["ping 3"]


def test_pairs_are_counted_the_same_whichever_session_is_named_first() -> None:
    assert pair("alice/web", "bob/api") == pair("bob/api", "alice/web") == ("alice/web", "bob/api")


def test_an_agent_over_the_rate_limit_is_refused_on_its_own_machine_before_anything_crosses(make_hive: Any) -> None:
    limits = "rate_limit = 2\nrate_window = 60\n"
    alice, bob = form_team(make_hive, ["alice", "bob"], {"alice": limits, "bob": limits})
    register(alice, "a1", "/src/web")
    register(bob, "b1", "/src/api")
    wait_for(lambda: len(who(alice)) == 2, what="bob's session at alice's")
    for n in range(2):
        assert send(alice, "bob/api-codex", f"note {n}", **{"from": "a1"})["state"] == "queued"
    refused = error(alice, to="bob/api-codex", body="note 2", **{"from": "a1"})
    assert refused["code"] == "rate_limited" and refused["retry_after"] > 0
    assert len(ok(alice, "sent", **{"from": "a1"})["messages"]) == 2
    wait_for(lambda: len(inbox(bob, "b1")) == 2, what="the two notes at bob's")
    assert sorted(m["body"] for m in inbox(bob, "b1")) == ["note 0", "note 1"]

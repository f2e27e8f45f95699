"""Session names and addresses: defaults, collisions, inheritance, renames and forgetting."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.conftest import Hive
from tests.sidecar.test_mesh import wait_for


def register(hive: Hive, key: str, cwd: str, agent: str = "codex", **extra: Any) -> dict[str, Any]:
    reply = hive.request({"id": 1, "op": "register", "session": {"key": key, "agent": agent, "cwd": cwd, **extra}})
    assert reply["ok"], reply
    return reply["result"]


def send(hive: Hive, to: str, body: str, sender: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"id": 1, "op": "send", "to": to, "body": body}
    if sender:
        request["from"] = sender
    return hive.request(request)


def test_a_session_is_named_after_its_repo_root_or_folder_and_agent(hive: Hive) -> None:
    assert register(hive, "s1", "/src/My API/sub", repo_root="/src/My API")["address"] == "alice/my-api-codex"
    assert register(hive, "s2", "/work/web", agent="claude-code")["name"] == "web-claude-code"


def test_a_second_session_with_the_same_default_name_gets_a_number(hive: Hive) -> None:
    assert register(hive, "s1", "/a/api")["name"] == "api-codex"
    assert register(hive, "s2", "/b/api")["name"] == "api-codex-2"
    assert register(hive, "s3", "/c/api")["name"] == "api-codex-3"
    assert register(hive, "s1", "/a/api")["name"] == "api-codex"  # re-registering keeps its name


def test_a_new_session_in_the_same_place_inherits_a_stale_name_and_its_unread_mail(hive: Hive) -> None:
    with hive.connect() as conn:  # a client that holds the session open, like an MCP server
        conn.send_line(
            {"id": 1, "op": "register", "hold": True, "session": {"key": "old", "agent": "codex", "cwd": "/src/api"}}
        )
        assert conn.read()["result"]["name"] == "api-codex"
        assert send(hive, "alice/api-codex", "remember the migration")["ok"]
    # Its connection closed, so the session is gone; a new one in the same place takes over.
    deadline = time.monotonic() + 5
    while hive.request({"id": 1, "op": "who"})["result"]["sessions"] and time.monotonic() < deadline:
        time.sleep(0.01)
    fresh = register(hive, "new", "/src/api")
    assert fresh["name"] == "api-codex" and fresh["unread"] == 1
    inbox = hive.request({"id": 2, "op": "inbox", "session": "new"})["result"]
    assert [m["body"] for m in inbox["messages"]] == ["remember the migration"]
    # A session elsewhere with the same default name does not get that mailbox.
    assert register(hive, "other", "/elsewhere/api")["name"] == "api-codex-2"


def test_a_live_session_keeps_its_name_from_a_newcomer_in_the_same_place(hive: Hive) -> None:
    register(hive, "s1", "/src/api")
    assert register(hive, "s2", "/src/api")["name"] == "api-codex-2"


def test_a_session_cannot_take_its_persons_name(hive: Hive) -> None:
    assert register(hive, "s1", "/x/alice", name="alice")["name"] != "alice"
    reply = hive.request({"id": 1, "op": "set_status", "session": "s1", "name": "alice"})
    assert reply["error"]["code"] == "conflict"
    reply = hive.request({"id": 1, "op": "set_status", "session": "s1", "name": "terminal"})
    assert reply["error"]["code"] == "conflict"


def test_rename_moves_unread_mail_to_the_new_address(hive: Hive) -> None:
    register(hive, "s1", "/src/api")
    send(hive, "alice/api-codex", "for whoever has this name")
    result = hive.request({"id": 1, "op": "set_status", "session": "s1", "name": "Auth Worker"})["result"]
    assert result == {"name": "auth-worker", "address": "alice/auth-worker", "renamed_from": "alice/api-codex"}
    assert send(hive, "alice/api-codex", "x")["error"]["code"] == "not_found"
    inbox = hive.request({"id": 2, "op": "inbox", "session": "s1"})["result"]
    assert [m["body"] for m in inbox["messages"]] == ["for whoever has this name"]


def test_rename_to_a_taken_name_is_refused(hive: Hive) -> None:
    register(hive, "s1", "/src/api")
    register(hive, "s2", "/src/web")
    reply = hive.request({"id": 1, "op": "set_status", "session": "s2", "name": "api-codex"})
    assert reply["error"]["code"] == "conflict"


def test_who_lists_live_sessions_and_all_adds_gone_ones(hive: Hive) -> None:
    register(hive, "s1", "/src/api", branch="main", repo="acme/api")
    register(hive, "s2", "/src/web")
    hive.request({"id": 1, "op": "end", "session": "s2"})
    live = hive.cli_json("who")["sessions"]
    assert [(s["address"], s["repo"], s["branch"], s["live"]) for s in live] == [
        ("alice/api-codex", "acme/api", "main", True)
    ]
    everyone = hive.cli_json("who", "--all")["sessions"]
    assert {s["address"]: s["live"] for s in everyone} == {"alice/api-codex": True, "alice/web-codex": False}


@pytest.fixture
def forgetful(make_hive: Any) -> Hive:
    machine: Hive = make_hive("[sidecar]\nforget_grace = 0\nforget_after = 0.5\nsession_ttl = 0.2\n")
    machine.start()
    return machine


def test_sessions_gone_a_day_are_forgotten_with_their_unread_mail_but_not_the_persons(forgetful: Hive) -> None:
    register(forgetful, "s1", "/src/api")
    send(forgetful, "alice/api-codex", "lost when the session is forgotten")
    send(forgetful, "alice/terminal", "kept: the person's own mailbox")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        everyone = forgetful.request({"id": 1, "op": "who", "all": True})["result"]["sessions"]
        if not everyone:
            break
        time.sleep(0.1)
    assert everyone == []
    assert send(forgetful, "alice/api-codex", "x")["error"]["code"] == "not_found"
    assert register(forgetful, "s9", "/src/api")["unread"] == 0
    assert forgetful.request({"id": 2, "op": "unread"})["result"]["count"] == 1


def test_nothing_is_forgotten_in_the_first_hours_after_the_sidecar_starts(make_hive: Any) -> None:
    machine: Hive = make_hive("[sidecar]\nforget_after = 0.1\nsession_ttl = 0.1\n")
    machine.start()
    register(machine, "s1", "/src/api")
    send(machine, "alice/api-codex", "still here")
    time.sleep(0.3)  # past forget_after, well inside the default grace period
    assert [s["name"] for s in machine.request({"id": 1, "op": "who", "all": True})["result"]["sessions"]] == [
        "api-codex"
    ]
    assert register(machine, "s2", "/src/api")["unread"] == 1


def _harness_process() -> subprocess.Popen[bytes]:
    """A stand-in for a harness: a real process whose pid a hook would record."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def _live_names(hive: Hive) -> set[str]:
    return {s["name"] for s in hive.request({"id": 1, "op": "who"})["result"]["sessions"]}


def test_a_session_ends_when_its_harness_process_exits_without_an_end_hook(hive: Hive) -> None:
    first, second = _harness_process(), _harness_process()
    try:
        register(hive, "run1", "/src/api", repo="acme/api", pid=first.pid)
        register(hive, "run2", "/src/api", repo="acme/api", pid=second.pid)
        assert _live_names(hive) == {"api-codex", "api-codex-2"}
        first.kill()
        first.wait()
        wait_for(lambda: _live_names(hive) == {"api-codex-2"}, what="the first run's session to end")
        # Sending to its name says it is gone, and queues under the name for whoever inherits it.
        result = send(hive, "alice/api-codex", "are you there?")["result"]["results"][0]
        assert result["state"] == "queued" and "offline" in result["note"]
        second.kill()
        second.wait()
        wait_for(lambda: not _live_names(hive), what="the second run's session to end")
        # A group never includes ended sessions: with both ended, nothing matches.
        assert send(hive, "repo:acme/api", "anyone?")["error"]["code"] == "not_found"
        # The next run in the same place inherits the first name and the mail queued for it.
        third = _harness_process()
        try:
            fresh = register(hive, "run3", "/src/api", repo="acme/api", pid=third.pid)
            assert fresh["name"] == "api-codex" and fresh["unread"] == 1
        finally:
            third.kill()
            third.wait()
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_a_recorded_pid_now_held_by_another_process_is_not_taken_for_the_session(make_hive: Any) -> None:
    machine: Hive = make_hive()
    machine.start()
    harness = _harness_process()
    try:
        register(machine, "run1", "/src/api", pid=harness.pid)
        register(machine, "run2", "/src/web", pid=harness.pid)
        machine.stop()
        # While the sidecar was down, run1's harness exited and its pid went to another process:
        # what the database recorded for it started at another time.
        with sqlite3.connect(machine.paths.database) as db:
            db.execute("UPDATE sessions SET pid_started = pid_started - 100 WHERE key = 'run1'")
        machine.start()
        wait_for(lambda: _live_names(machine) == {"web-codex"}, what="run1 to be taken as ended")
    finally:
        harness.kill()
        harness.wait()

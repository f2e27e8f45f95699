"""The ``attach`` op, against a real sidecar over its socket: hook sessions found by process ancestry."""

from __future__ import annotations

from typing import Any

from tests.conftest import Hive


def register(hive: Hive, key: str, pid: int | None, cwd: str = "/work/api") -> None:
    session: dict[str, Any] = {"key": key, "agent": "claude-code", "cwd": cwd}
    if pid is not None:
        session["pid"] = pid
    reply = hive.request({"id": 1, "op": "register", "session": session})
    assert reply["ok"], reply


def attach(hive: Hive, **request: Any) -> dict[str, Any]:
    return hive.request({"id": 1, "op": "attach", **request})


def test_attach_finds_the_session_a_hook_registered_under_an_ancestor(hive: Hive) -> None:
    register(hive, "sess-a", pid=4242)

    reply = attach(hive, pids=[5000, 4242, 77], cwd="/work/api")

    assert reply["ok"], reply
    assert reply["result"]["key"] == "sess-a"
    assert reply["result"]["via"] == "ancestry"
    assert reply["result"]["address"] == "alice/" + reply["result"]["name"]


def test_attach_prefers_the_nearest_ancestor_then_the_most_recently_seen(hive: Hive) -> None:
    register(hive, "outer", pid=100)
    register(hive, "inner", pid=200)
    register(hive, "inner-newer", pid=200)

    reply = attach(hive, pids=[200, 100], cwd="/elsewhere")

    assert reply["result"]["key"] == "inner-newer"


def test_attach_ignores_ended_sessions_and_answers_not_found_without_a_match(hive: Hive) -> None:
    register(hive, "gone", pid=300)
    assert hive.request({"id": 2, "op": "end", "session": "gone"})["ok"]

    reply = attach(hive, pids=[300], cwd="/work/api")

    assert not reply["ok"]
    assert reply["error"]["code"] == "not_found"


def test_a_live_hinted_session_wins_over_ancestry(hive: Hive) -> None:
    register(hive, "from-env", pid=None)
    register(hive, "by-pid", pid=400)

    reply = attach(hive, pids=[400], cwd="/work/api", hint="from-env")

    assert reply["result"]["key"] == "from-env"
    assert reply["result"]["via"] == "hint"


def test_an_ended_hinted_session_gives_way_to_the_one_its_harness_started_next(hive: Hive) -> None:
    # Claude Code's /clear: hooks end the old session and start a new one in the same process,
    # while the MCP server's environment still names the old one.
    register(hive, "before-clear", pid=500)
    assert hive.request({"id": 2, "op": "end", "session": "before-clear"})["ok"]
    register(hive, "after-clear", pid=500)

    reply = attach(hive, pids=[500], cwd="/work/api", hint="before-clear")

    assert reply["result"]["key"] == "after-clear"
    assert reply["result"]["via"] == "ancestry"


def test_an_ended_hint_is_still_the_answer_when_nothing_else_matches(hive: Hive) -> None:
    register(hive, "only-one", pid=None)
    assert hive.request({"id": 2, "op": "end", "session": "only-one"})["ok"]

    reply = attach(hive, pids=[600], cwd="/work/api", hint="only-one")

    assert reply["result"]["key"] == "only-one"
    assert reply["result"]["via"] == "hint"


def test_attach_refuses_pids_that_are_not_integers(hive: Hive) -> None:
    for pids in (["12"], 12, [True], list(range(2, 100))):
        reply = attach(hive, pids=pids)
        assert not reply["ok"]
        assert reply["error"]["code"] == "bad_request"

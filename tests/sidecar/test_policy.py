"""Inbound policy changes at once, by `hive policy` or by editing config.toml, with no restart;
an agent cannot change it without its person. Real sidecars on loopback."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from .desktop import no_desktop_env, start_sidecar
from .test_mesh import _TEAM, MESH, form_team, inbox, ok, register, send, wait_for
from .test_team import as_agent, finished


@pytest.fixture(autouse=True)
def _keys_in_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIVE_KEYRING", "off")
    _TEAM.clear()


def test_hive_policy_holds_then_accepts_a_persons_mail_without_a_restart(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(bob, "b1", "/src/api")
    pid = bob.pid()
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in ok(alice, "who")["sessions"]), what="bob's session")
    assert send(alice, "bob/api-codex", "before")["state"] == "queued"

    bob.cli("policy", "alice", "hold", check=True)
    assert send(alice, "bob/api-codex", "while held")["state"] == "held"
    assert bob.cli_json("policy") == {"default": "accept", "people": {"alice": "hold"}}
    bob.cli("policy", "alice", "default", check=True)
    bob.cli("policy", "refuse", check=True)
    assert send(alice, "bob/api-codex", "refused")["state"] == "refused"
    bob.cli("policy", "accept", check=True)
    assert send(alice, "bob/api-codex", "after")["state"] == "queued"
    assert [m["body"] for m in inbox(bob, "api-codex")] == ["before", "after"]
    assert bob.pid() == pid, "the sidecar restarted"
    assert "[inbound]" in (bob.home / "config.toml").read_text()


def test_an_edited_config_file_changes_the_policy_at_once(make_hive: Any) -> None:
    alice, bob = form_team(make_hive, ["alice", "bob"])
    register(bob, "b1", "/src/api")
    wait_for(lambda: any(s["address"] == "bob/api-codex" for s in ok(alice, "who")["sessions"]), what="bob's session")
    config = bob.home / "config.toml"
    config.write_text(config.read_text() + '\n[inbound.people]\nalice = "refuse"\n')
    wait_for(lambda: send(alice, "bob/api-codex", "knock")["state"] == "refused", what="the edit to take effect")


def test_bad_policy_words_get_bad_request_and_change_nothing(make_hive: Any) -> None:
    bob = make_hive(MESH, person="bob")
    bob.start()
    for words in (("maybe",), ("alice", "sometimes"), ("default",)):
        result = bob.cli("policy", *words)
        assert result.returncode == 1 and "[bad_request]" in result.stderr, (words, result.stderr)
    assert bob.cli_json("policy") == {"default": "accept", "people": {}}


def test_an_agent_cannot_change_the_inbound_policy_without_its_person(
    make_hive: Any, empty_runtime: Path, tmp_path: Path
) -> None:
    bob = make_hive(MESH, person="bob")
    env = no_desktop_env(empty_runtime)
    start_sidecar(bob, env)
    harness = tmp_path / "claude"
    harness.symlink_to(sys.executable)
    code, stderr = finished(as_agent(harness, bob, env, "policy", "accept"))
    assert code == 1 and "[needs_person]" in stderr, stderr
    assert bob.cli_json("policy") == {"default": "accept", "people": {}}
    assert "[inbound]" not in (bob.home / "config.toml").read_text()

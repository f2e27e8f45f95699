"""opencode end to end: the real ``opencode`` from npm, headless (``opencode run``), wired by ``hive setup``.

Tier shown here: push, the one the descriptor promises: hive's plugin (written by setup into
``~/.config/opencode/plugins/``) takes bob's message from the sidecar while the model works and
hands it to ``client.session.promptAsync``, which opencode appends after the running tool call,
so the model gets it in the request right after the tool result. The person's own opencode.json
comes first (the scripted provider, no autoupdate or sharing, tools allowed), and opencode's
plugin package is pre-installed from the npm cache (offline it would hang start-up).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team
from .model_server import Call, ModelServer
from .scenarios import Run, Runner, lesson_and_files_after_a_write, round_trip, spawn

HARNESS = "opencode"
URL_PLACEHOLDER = "__MODEL_URL__"
CONFIG = {
    "$schema": "https://opencode.ai/config.json",
    "model": "fake/fake-model",
    "small_model": "fake/fake-model",
    "autoupdate": False,
    "share": "disabled",
    "permission": {"*": "allow"},
    "provider": {
        "fake": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Fake",
            "options": {"baseURL": f"{URL_PLACEHOLDER}/v1", "apiKey": "sk-fake"},
            "models": {"fake-model": {"name": "Fake", "tool_call": True, "limit": {"context": 128000, "output": 4096}}},
        }
    },
}


def runner() -> Runner:
    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        config = machine.home / ".config" / "opencode" / "opencode.json"
        config.write_text(config.read_text(encoding="utf-8").replace(URL_PLACEHOLDER, model.url), encoding="utf-8")
        argv = [str(require_cli(HARNESS)), "run", "--format", "json", *(["--continue"] if resume else []), prompt]
        return spawn(machine, argv, machine.env(), "opencode")

    return Runner(HARNESS, "opencode", start, Call("bash", {"command": "sleep 8", "description": "wait"}))


def write_config(machine: HarnessMachine) -> None:
    machine.write(".config/opencode/opencode.json", json.dumps(CONFIG, indent=2) + "\n")


@pytest.fixture
def team(model: ModelServer, keys_in_files: None, opencode_plugin: Path) -> Iterator[Team]:
    with harness_team(HARNESS, before_setup=write_config, opencode_plugin=opencode_plugin) as team:
        yield team


def test_opencode_calls_hive_tools_and_gets_a_teammates_message_pushed_after_the_tool_result(
    model: ModelServer, team: Team
) -> None:
    measured = round_trip(runner(), team, model)
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"


def test_a_verified_lesson_about_a_file_opencode_writes_reaches_its_model_after_the_write_and_bob_sees_the_file(
    model: ModelServer, team: Team
) -> None:
    write = Call("write", {"filePath": f"{team.machine.project}/src/app.py", "content": "print('hello')\n"})
    line = lesson_and_files_after_a_write(runner(), team, model, write)
    assert 'why="files:src/app.py"' in line, f"{contract(HARNESS)}: {line}"

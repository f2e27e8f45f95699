"""pi end to end: the real ``pi`` from npm, headless (``pi -p``), wired by ``hive setup``.

pi has no MCP: hive's extension (written by setup into ``~/.pi/agent/extensions/``) registers
hive's tools itself and delivers mail. Tier shown here: push, the one the descriptor promises: the
extension takes bob's message while the model works and steers it in with
``pi.sendUserMessage(…, {deliverAs: "steer"})``, which pi delivers right after the running tool
call. The person's own ``models.json`` comes first (the scripted provider).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team
from .model_server import Call, ModelServer
from .scenarios import Run, Runner, killed_before_next_call, lesson_and_files_after_a_write, round_trip, spawn

HARNESS = "pi"
URL_PLACEHOLDER = "__MODEL_URL__"
MODELS = {
    "providers": {
        "fake": {
            "baseUrl": f"{URL_PLACEHOLDER}/v1",
            "api": "openai-completions",
            "apiKey": "sk-fake",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "fake-model", "contextWindow": 128000, "maxTokens": 4096}],
        }
    }
}


def runner() -> Runner:
    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        models = machine.home / ".pi" / "agent" / "models.json"
        models.write_text(models.read_text(encoding="utf-8").replace(URL_PLACEHOLDER, model.url), encoding="utf-8")
        argv = [
            str(require_cli(HARNESS)),
            "-p",
            "--model",
            "fake/fake-model",
            *(["--continue"] if resume else []),
            prompt,
        ]
        return spawn(machine, argv, machine.env(), "pi")

    return Runner(HARNESS, "pi", start, Call("bash", {"command": "sleep 8"}))


def write_config(machine: HarnessMachine) -> None:
    machine.write(".pi/agent/models.json", json.dumps(MODELS, indent=2) + "\n")
    machine.write(".pi/agent/settings.json", json.dumps({"quietStartup": True, "enableInstallTelemetry": False}) + "\n")


@pytest.fixture
def team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    with harness_team(HARNESS, before_setup=write_config) as team:
        yield team


def test_pi_calls_hive_tools_and_gets_a_teammates_message_steered_in_after_the_tool_result(
    model: ModelServer, team: Team
) -> None:
    measured = round_trip(runner(), team, model)
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"


def test_pi_mail_pushed_to_a_harness_killed_before_its_next_model_call_comes_back(
    model: ModelServer, team: Team
) -> None:
    # The extension steered it in while the slow command ran: pi holds it until a model request
    # carries it, which the kill prevents, so it is visible again at once and read only after the
    # next turn's model call had it.
    receipt = killed_before_next_call(runner(), team, model)
    assert receipt != "read", (
        f"{contract(HARNESS)}: bob's receipt said {receipt!r} "
        "right after the kill, before any model call had the message"
    )


def test_a_verified_lesson_about_a_file_pi_writes_reaches_its_model_after_the_write_and_bob_sees_the_file(
    model: ModelServer, team: Team
) -> None:
    write = Call("write", {"path": f"{team.machine.project}/src/app.py", "content": "print('hello')\n"})
    line = lesson_and_files_after_a_write(runner(), team, model, write)
    assert 'why="files:src/app.py"' in line, f"{contract(HARNESS)}: {line}"

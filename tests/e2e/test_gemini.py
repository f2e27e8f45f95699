"""Gemini CLI end to end: the real ``gemini`` from npm, headless (``gemini -p``), wired by ``hive setup``.

Tier shown here: turn, the one the descriptor promises (AfterTool ``additionalContext``, which
Gemini CLI appends inside the tool's ``functionResponse`` as ``<hook_context>``, with every ``<``
and ``>`` of hive's text escaped to ``&lt;``/``&gt;``: the model reads the frame in entity form,
and defanged brackets stay ``[``). Gemini CLI has no idle wake.
The person's own settings come first (API-key auth, telemetry and auto-update off), as
../shared/notes/harnesses.md §3 measured; ``GEMINI_CLI_TRUST_WORKSPACE`` and ``--approval-mode
yolo`` stand in for the person trusting the folder and approving hive's tools.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team
from .model_server import Call, ModelServer
from .scenarios import Run, Runner, hung_sidecar, round_trip, spawn

HARNESS = "gemini"
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def runner() -> Runner:
    session = str(uuid.uuid4())

    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        env = machine.env(GOOGLE_GEMINI_BASE_URL=model.url, GEMINI_API_KEY="fake", GEMINI_CLI_TRUST_WORKSPACE="true")
        argv = [
            str(require_cli(HARNESS)),
            "-p",
            prompt,
            "-o",
            "json",
            "--approval-mode",
            "yolo",
            *(["--resume", "latest"] if resume else ["--session-id", session]),
        ]
        return spawn(machine, argv, env, "gemini")

    return Runner(
        HARNESS,
        "gemini",
        start,
        Call("run_shell_command", {"command": "sleep 8", "description": "wait"}),
        render=escaped,
    )


def escaped(text: str) -> str:
    """Gemini CLI 0.61.0 escapes ``<`` and ``>`` in every hook's additionalContext before the model sees it."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


@pytest.fixture
def team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    with harness_team(HARNESS, before_setup=write_settings) as team:
        yield team


def write_settings(machine: HarnessMachine) -> None:
    machine.write(".gemini/settings.json", json.dumps(SETTINGS, indent=2) + "\n")


def test_gemini_calls_hive_tools_and_sees_a_teammates_message_at_the_next_tool_result(
    model: ModelServer, team: Team
) -> None:
    measured = round_trip(runner(), team, model)
    assert measured["tier"] == "turn", f"{contract(HARNESS)}: the session registered as {measured}"


def test_gemini_hooks_answer_a_hung_sidecar_without_holding_up_the_turn(model: ModelServer, team: Team) -> None:
    gap = hung_sidecar(runner(), team, model, Call("run_shell_command", {"command": "true", "description": "quick"}))
    print(f"{HARNESS}: next model call {gap:.2f} s after the tool call, with the sidecar stopped")
    # The hook client gives up after 150 ms; one that waited would have stalled the turn (hung_sidecar).

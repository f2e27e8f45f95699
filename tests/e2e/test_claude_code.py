"""Claude Code end to end: the real ``claude`` from npm, headless (``claude -p``), wired by ``hive setup``.

Tier shown here: turn (PostToolUse ``additionalContext``, which Claude Code puts beside the tool
result as a ``<system-reminder>``). Headless Claude Code has no idle time to wake, and the hook
watcher stands down in ``-p`` runs, so the push tier (the asyncRewake watcher) is left to the
tmux test. Found on the way: Claude Code 2.1.197 hands the model an MCP result's
``structuredContent`` (JSON) rather than its text content.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team
from .model_server import Call, ModelServer
from .scenarios import Run, Runner, hung_sidecar, round_trip, spawn

HARNESS = "claude-code"
ALLOWED = ("mcp__hive__list_team", "mcp__hive__send_message", "mcp__hive__check_inbox", "Bash(sleep:*)")


def runner() -> Runner:
    session = str(uuid.uuid4())  # fixed, so the next turn can resume it

    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        env = machine.env(ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sk-ant-fake",
                          ANTHROPIC_MODEL="claude-fake")
        # --allowedTools is the test's stand-in for the person allowing hive's tools once.
        argv = [str(require_cli(HARNESS)), "-p", prompt, "--output-format", "json", "--allowedTools", *ALLOWED,
                "--resume" if resume else "--session-id", session]
        return spawn(machine, argv, env, "claude")

    return Runner(HARNESS, "claude-code", start, Call("Bash", {"command": "sleep 8", "description": "wait"}))


@pytest.fixture
def team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    with harness_team(HARNESS) as team:
        yield team


def test_claude_code_calls_hive_tools_and_sees_a_teammates_message_at_the_next_tool_result(
        model: ModelServer, team: Team) -> None:
    measured = round_trip(runner(), team, model)
    # The descriptor's tier; a headless run has no idle time, so its mail comes at the next tool result.
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"


def test_claude_code_hooks_answer_a_hung_sidecar_without_holding_up_the_turn(model: ModelServer, team: Team) -> None:
    gap = hung_sidecar(runner(), team, model, Call("Bash", {"command": "true", "description": "quick"}))
    print(f"{HARNESS}: next model call {gap:.2f} s after the tool call, with the sidecar stopped")
    # The hook client gives up after 150 ms; one that waited would have stalled the turn (hung_sidecar).

"""Claude Code end to end: the real ``claude`` from npm, headless (``claude -p``), wired by ``hive setup``.

Tier shown here: turn (PostToolUse ``additionalContext``, which Claude Code puts beside the tool
result as a ``<system-reminder>``). Headless Claude Code has no idle time to wake, and the hook
watcher stands down in ``-p`` runs, so the push tier (the asyncRewake watcher) is left to the
tmux test. Found on the way: Claude Code 2.1.197 hands the model an MCP result's
``structuredContent`` (JSON) rather than its text content.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hive.sidecar.mcp.server import behaviour_rules

from .conftest import HarnessMachine, Team, cli, contract, harness_team, wait_for
from .model_server import Call, ModelServer, Request, Script, say
from .scenarios import Run, Runner, hung_sidecar, round_trip, spawn

HARNESS = "claude-code"
# 2.1.332 holds turn 1 for an alwaysLoad server only up to its MCP connect timeout (5 s); on a
# loaded test machine `hive mcp` took 7-9 s to answer initialize, so the tests give it longer.
MCP_CONNECT_MS = "60000"
ALLOWED = ("mcp__hive__list_team", "mcp__hive__send_message", "mcp__hive__check_inbox", "Bash(sleep:*)")


def runner() -> Runner:
    session = str(uuid.uuid4())  # fixed, so the next turn can resume it

    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        env = machine.env(
            ANTHROPIC_BASE_URL=model.url,
            ANTHROPIC_API_KEY="sk-ant-fake",
            ANTHROPIC_MODEL="claude-fake",
            MCP_CONNECT_TIMEOUT_MS=MCP_CONNECT_MS,
        )
        # --allowedTools is the test's stand-in for the person allowing hive's tools once.
        argv = [
            str(cli(HARNESS)),
            "-p",
            prompt,
            "--output-format",
            "json",
            "--allowedTools",
            *ALLOWED,
            "--resume" if resume else "--session-id",
            session,
        ]
        return spawn(machine, argv, env, "claude")

    return Runner(HARNESS, "claude-code", start, Call("Bash", {"command": "sleep 8", "description": "wait"}))


@pytest.fixture
def team(model: ModelServer, keys_in_files: None, claude_cli: Path) -> Iterator[Team]:
    with harness_team(HARNESS) as team:
        yield team


def test_claude_code_calls_hive_tools_and_sees_a_teammates_message_at_the_next_tool_result(
    model: ModelServer, team: Team
) -> None:
    measured = round_trip(runner(), team, model)
    # The descriptor's tier; a headless run has no idle time, so its mail comes at the next tool result.
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"
    # Offered whole, not deferred behind ToolSearch (2.1.332 defers MCP tools unless the server
    # entry says alwaysLoad), and the cost of that in the model's context.
    offered = hive_tools(model.main()[-1])
    assert {"mcp__hive__list_team", "mcp__hive__send_message", "mcp__hive__check_inbox"} <= set(offered), (
        f"{contract(HARNESS)}: hive's tools as the model saw them: {sorted(offered)}"
    )
    deferred = [name for name, tool in offered.items() if tool.get("defer_loading") or "input_schema" not in tool]
    assert not deferred, f"{contract(HARNESS)}: deferred or without a schema: {deferred}"
    tools_chars = len(json.dumps(list(offered.values())))
    rules = behaviour_rules()
    shown = model.main()[-1].text.count(rules.strip().splitlines()[0])
    print(
        f"{contract(HARNESS)}: {len(offered)} hive tools, {tools_chars} chars of tool JSON "
        f"(~{tools_chars // 4} tokens at 4 chars a token); instructions {len(rules)} chars "
        f"(~{len(rules) // 4} tokens), in the system prompt {shown} time(s)"
    )


def test_claude_code_shows_a_teammates_message_delivered_at_the_stop_hook_to_the_model_exactly_once(
    model: ModelServer, team: Team
) -> None:
    # The Stop hook's block: 2.1.332 shows a {"decision": "block"} reason twice, exit 2 with the
    # text on stderr once, as 2.1.197 shows either.
    who = contract(HARNESS)
    body = "E2E-STOPMAIL is the build green?"
    sent: dict[str, Any] = {}

    def bob_writes(request: Request) -> None:
        if "message" not in sent:  # the turn after the block is this same step again (no tool round)
            me = wait_for(lambda: team.machine.session_of("claude-code"), timeout=30, what=f"{who}: its session")
            sent["message"] = team.send_from_bob(me["address"], body)

    model.script = Script({"E2E-STOP": [say("nothing to do", before=bob_writes)]})
    run = runner().start(team.machine, model, "E2E-STOP: say hello", False)
    output = run.finish()
    assert not model.errors, f"{who}: the script failed: {model.errors}\n{output}"
    assert run.process.returncode == 0, f"{who}: exited {run.process.returncode}:\n{output}\n{model.transcript()}"
    carriers = [r for r in model.main() if body in r.text]
    assert carriers, f"{who}: the Stop hook's message never reached the model:\n{model.transcript()}\n{output}"
    for request in carriers:
        assert request.text.count(body) == 1, f"{who}: the model saw the message more than once:\n{request.text}"
    assert f'id="{sent["message"]["id"]}"' in carriers[0].text, f"{who}: not framed:\n{carriers[0].text}"
    wait_for(
        lambda: team.bob_state(sent["message"]["id"]) == "read",
        timeout=30,
        what=f"{who}: bob's read receipt once the model answered after seeing it",
    )


def hive_tools(request: Request) -> dict[str, dict[str, Any]]:
    """hive's tool definitions exactly as the request offered them, by name."""
    tools = request.body.get("tools") or []
    return {
        str(t["name"]): t for t in tools if isinstance(t, dict) and str(t.get("name", "")).startswith("mcp__hive__")
    }


def test_claude_code_hooks_answer_a_hung_sidecar_without_holding_up_the_turn(model: ModelServer, team: Team) -> None:
    gap = hung_sidecar(runner(), team, model, Call("Bash", {"command": "true", "description": "quick"}))
    print(f"{HARNESS}: next model call {gap:.2f} s after the tool call, with the sidecar stopped")
    # The hook client gives up after 150 ms; one that waited would have stalled the turn (hung_sidecar).

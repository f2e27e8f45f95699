"""Codex CLI end to end: the real ``codex`` from npm, headless (``codex exec``), wired by ``hive setup``.

Tier shown here: turn (PostToolUse ``additionalContext``, which Codex sends as a developer
message after the tool output). The descriptor's push tier goes through the TUI's app-server,
which ``codex exec`` does not use: its first push fails and drops the session to the turn tier
(the TUI's push is in ``test_push_tui.py``). The person's own config.toml comes first: the scripted
provider, an unknown model slug (a known one hides MCP tools behind ``tool_search``), no update
check, no analytics, no plugin marketplace (../shared/notes/harnesses.md §2).
``--dangerously-bypass-hook-trust`` stands in for the person trusting hive's hooks in ``/hooks``.

Found on the way: Codex starts its first model request about 1 s after launch without waiting for
slower MCP servers (``mcp_optional_startup_grace_ms``), so hive's tools can be missing from a
session's first turn; see the config below.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team
from .model_server import Call, ModelServer
from .scenarios import Run, Runner, hung_sidecar, killed_before_next_call, round_trip, spawn

HARNESS = "codex"
PORT_PLACEHOLDER = "__MODEL_URL__"
CONFIG = f"""model = "fake-model"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
# Codex 0.171.0 sends its first model request after about 1 s whether or not its MCP servers are
# up; `hive mcp` (a Python start-up, about 1-3 s on a busy 2-core machine) often is not, and that
# turn then has no hive tools. The person's grace setting, not hive's, so the test raises it.
mcp_optional_startup_grace_ms = 30000

[features]
plugins = false

[analytics]
enabled = false

[model_providers.fake]
name = "Fake"
base_url = "{PORT_PLACEHOLDER}/v1"
env_key = "FAKE_OPENAI_KEY"
wire_api = "responses"
"""


def runner() -> Runner:
    def start(machine: HarnessMachine, model: ModelServer, prompt: str, resume: bool) -> Run:
        config = machine.home / ".codex" / "config.toml"
        text = config.read_text(encoding="utf-8")
        # The model's port is known only now; the rest of the file is the person's and hive's.
        config.write_text(text.replace(PORT_PLACEHOLDER, model.url), encoding="utf-8")
        env = machine.env(FAKE_OPENAI_KEY="sk-fake")
        head = [str(require_cli(HARNESS)), "exec"]
        if resume:
            head += ["resume", "--last"]
        argv = [*head, "--skip-git-repo-check", "--json", "--dangerously-bypass-hook-trust", prompt]
        return spawn(machine, argv, env, "codex")

    return Runner(HARNESS, "codex", start, Call("exec_command", {"cmd": "sleep 8", "yield_time_ms": 30000}))


def write_config(machine: HarnessMachine) -> None:
    machine.write(".codex/config.toml", CONFIG)


@pytest.fixture
def team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    with harness_team(HARNESS, before_setup=write_config) as team:
        yield team


def test_codex_calls_hive_tools_and_sees_a_teammates_message_at_the_next_tool_result(
        model: ModelServer, team: Team) -> None:
    measured = round_trip(runner(), team, model)
    # The descriptor's tier. `codex exec` runs its thread in-process, not on the TUI's app-server, so
    # the first push fails: the mail waits for the next tool result, and the session is told as turn.
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"
    listed = [s for s in team.machine.ok("who", all=True)["sessions"] if s["agent"] == HARNESS and s["machine"] == "m1"]
    assert [s["tier"] for s in listed] == ["turn"], f"{contract(HARNESS)}: after a failed push it is listed as {listed}"


def test_codex_mail_shown_to_a_harness_killed_before_its_next_model_call_comes_back(
        model: ModelServer, team: Team) -> None:
    """Holds twice over for Codex: the hook's mail is only held until a later hook confirms it, and
    Codex writes the hook's developer message into the session's rollout at once, so ``codex exec
    resume`` hands it to the model in the next turn."""
    killed_before_next_call(runner(), team, model)


def test_codex_hooks_answer_a_hung_sidecar_without_holding_up_the_turn(model: ModelServer, team: Team) -> None:
    gap = hung_sidecar(runner(), team, model, Call("exec_command", {"cmd": "true"}))
    print(f"{HARNESS}: next model call {gap:.2f} s after the tool call, with the sidecar stopped")
    # The hook client gives up after 150 ms; one that waited would have stalled the turn (hung_sidecar).

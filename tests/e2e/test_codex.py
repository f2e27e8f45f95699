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

import os
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team, wait_for
from .model_server import Call, ModelServer, Request, Script, call, say
from .scenarios import Run, Runner, after_last_call, hung_sidecar, killed_before_next_call, round_trip, spawn

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
    model: ModelServer, team: Team
) -> None:
    measured = round_trip(runner(), team, model)
    # The descriptor's tier. `codex exec` runs its thread in-process, not on the TUI's app-server, so
    # the first push fails: the mail waits for the next tool result, and the session is told as turn.
    assert measured["tier"] == "push", f"{contract(HARNESS)}: the session registered as {measured}"
    listed = [s for s in team.machine.ok("who", all=True)["sessions"] if s["agent"] == HARNESS and s["machine"] == "m1"]
    assert [s["tier"] for s in listed] == ["turn"], f"{contract(HARNESS)}: after a failed push it is listed as {listed}"


def test_codex_mail_shown_to_a_harness_killed_before_its_next_model_call_comes_back(
    model: ModelServer, team: Team
) -> None:
    """Holds twice over for Codex: the hook's mail is only held until a later hook confirms it, and
    Codex writes the hook's developer message into the session's rollout at once, so ``codex exec
    resume`` hands it to the model in the next turn."""
    killed_before_next_call(runner(), team, model)


def test_codex_hooks_answer_a_hung_sidecar_without_holding_up_the_turn(model: ModelServer, team: Team) -> None:
    gap = hung_sidecar(runner(), team, model, Call("exec_command", {"cmd": "true"}))
    print(f"{HARNESS}: next model call {gap:.2f} s after the tool call, with the sidecar stopped")
    # The hook client gives up after 150 ms; one that waited would have stalled the turn (hung_sidecar).


# ---- Codex's own sandbox: the e2e config above turns it off ----------------------------------------

SANDBOX_HELPER = "codex-linux-sandbox"  # argv[0] of the helper Codex runs each sandboxed command under
SANDBOXES = {"workspace-write (the default)": None, "read-only": "read-only"}


def sandboxed_config(mode: str | None) -> str:
    """CONFIG with Codex's sandbox as a person has it: the default (no sandbox_mode) or ``mode``."""
    line = 'sandbox_mode = "danger-full-access"\n'
    assert line in CONFIG
    return CONFIG.replace(line, f'sandbox_mode = "{mode}"\n' if mode else "")


@pytest.fixture(params=list(SANDBOXES), ids=["workspace-write", "read-only"])
def sandboxed_team(request: pytest.FixtureRequest, model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    text = sandboxed_config(SANDBOXES[request.param])
    with harness_team(HARNESS, before_setup=lambda machine: machine.write(".codex/config.toml", text)) as team:
        yield team


def sandbox_helpers(root: int) -> list[list[str]]:
    """The argument lists of the sandbox helpers below process ``root`` that are running the
    command itself (their child is ``sleep``): the helper sets the sandbox up in steps, and only
    this last one stays for the whole command."""
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for process in below:
        try:
            argv = process.cmdline()
            if (
                argv
                and os.path.basename(argv[0]) == SANDBOX_HELPER
                and any(child.cmdline()[:1] == ["sleep"] for child in process.children())
            ):
                found.append(argv)
        except psutil.Error:
            continue
    return found


def test_codex_exec_in_its_own_sandbox_gets_mail_sent_during_a_shell_command_framed_and_read_only_after(
    model: ModelServer, sandboxed_team: Team
) -> None:
    """``codex exec`` runs each shell command under its sandbox helper, the codex binary itself as
    ``codex-linux-sandbox``. bob writes while that helper runs: no TUI runs the thread, so nothing
    is pushed; the next tool result carries the message, and bob hears ``read`` only once a model
    request had it (a watcher checks the model's requests at the moment the receipt turns)."""
    team, who = sandboxed_team, contract(HARNESS)
    sent: dict[str, Any] = {}
    run: list[Run] = []
    ordering: list[str] = []
    stop = threading.Event()

    def bob_writes_during_the_command() -> None:
        try:
            me = wait_for(lambda: team.machine.session_of(HARNESS), timeout=30, what=f"{who}: the session")
            sent["helpers"] = wait_for(
                lambda: sandbox_helpers(run[0].process.pid),
                timeout=30,
                what=f"{who}: the sandbox helper to run the shell command",
            )
            sent["message"] = team.send_from_bob(me["address"], "PUSHMARK_sandbox the port is 8443")
            frame = f'id="{sent["message"]["id"]}"'
            while not stop.is_set():  # the receipt may turn only once the model had the message
                if team.bob_state(sent["message"]["id"]) == "read":
                    ordering.append("read, model had it" if model.seen(frame) else "read, model never had it")
                    return
                stop.wait(0.05)
        except BaseException as exc:  # reported by the test, in its own thread
            sent["error"] = exc

    def tool_goes_out(request: Request) -> None:
        threading.Thread(target=bob_writes_during_the_command, daemon=True).start()

    model.script = Script(
        {
            "E2E-SANDBOX": [
                call("exec_command", {"cmd": "sleep 6", "yield_time_ms": 30000}, before=tool_goes_out),
                say("done"),
            ]
        }
    )
    run.append(runner().start(team.machine, model, "E2E-SANDBOX: run the slow check", False))
    output = run[0].finish()
    assert "error" not in sent, f"{who}: {sent.get('error')!r}\n{output[-3000:]}"
    assert run[0].process.returncode == 0, f"{who}: exited {run[0].process.returncode}:\n{output}"
    print(f"{who}: sandbox helpers seen during the command: {sent['helpers']}")
    # Not pushed: the sandbox helper is the codex binary, but no TUI.
    assert sent["message"]["state"] == "queued", f"{who}: bob's send came back {sent['message']}"
    message_id = sent["message"]["id"]
    frame = f'<hive-message from="bob/web-codex" agent="codex" repo="acme/web" id="{message_id}">'
    carriers = [r for r in model.main() if frame in r.text]
    assert carriers, f"{who}: the message never reached the model:\n{model.transcript()}"
    assert carriers[0] is model.main()[1] and frame in after_last_call(carriers[0]), (
        f"{who}: the message should come with the shell command's result:\n{model.transcript()}"
    )
    wait_for(lambda: ordering, timeout=30, what=f"{who}: bob's read receipt")
    stop.set()
    assert ordering == ["read, model had it"], f"{who}: {ordering}\n{model.transcript()}"

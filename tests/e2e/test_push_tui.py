"""Push into live TUIs: the real interactive harness in tmux, the way a person uses it, wired by
``hive setup``, against the scripted model, in the loopback-only network.

For each harness: a message sent while the session is idle wakes it and reaches the model with no
prompt typed; one sent during a slow tool call reaches the model in the same turn, in the request
that carries the tool result; and the person's own next prompt still works.

- Claude Code: the asyncRewake watcher hook (``hive hook claude-code watch``), started at
  SessionStart and re-armed at every Stop, exits 2 with the framed mail, which Claude Code turns
  into a task notification for the model.
- opencode: hive's plugin hands the mail to ``client.session.promptAsync``; the TUI makes its
  session at the first prompt, so the person says hello first.
- pi: hive's extension calls ``pi.sendUserMessage`` (a new turn when idle, a steer when busy).
- Codex: not tested; the descriptor names the app-server push, which the sidecar lacks (see the issue note).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, contract, harness_team, wait_for
from .model_server import Call, ModelServer, Request, Script, call, say
from .scenarios import after_last_call
from .test_opencode import CONFIG as OPENCODE_CONFIG
from .test_opencode import URL_PLACEHOLDER
from .test_pi import MODELS as PI_MODELS
from .tui import Tui

CLAUDE_KEY = "sk-ant-fake-0123456789abcdefghij"


def frame_of(message: dict[str, Any]) -> str:
    return f'<hive-message from="bob/web-codex" agent="codex" repo="acme/web" id="{message["id"]}">'


def later(seconds: float, action: Any) -> None:
    """Run ``action`` in ``seconds`` from now, off the model server's thread."""
    threading.Timer(seconds, action).start()


def seed_claude(machine: HarnessMachine) -> None:
    # What a person's ~/.claude.json holds after the first start: onboarding done, the folder
    # trusted, the API key accepted (the TUI asks about each once).
    machine.write(".claude.json", json.dumps({
        "hasCompletedOnboarding": True, "numStartups": 3, "autoUpdates": False,
        "customApiKeyResponses": {"approved": [CLAUDE_KEY[-20:]], "rejected": []},
        "projects": {str(machine.project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }, indent=2) + "\n")


@pytest.fixture
def claude_team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    with harness_team("claude-code", before_setup=seed_claude) as team:
        yield team


def push_checks(harness: str, agent: str, team: Team, model: ModelServer, tui: Tui,
                sleep: Call, waiting: bool, opening: str = "") -> None:
    """Idle wake, mid-turn push after a slow tool, then the person's own prompt.

    ``opening``: the TUI makes its session only at the first prompt (opencode), so once this text
    shows (its prompt box) the person says hello first."""
    who = contract(harness)
    if opening:
        model.script = Script({"E2E-HELLO": [say("HELLO-ANSWER-OK")]})
        tui.wait_screen(opening, timeout=60)
        time.sleep(1)
        tui.type("E2E-HELLO good morning")
        tui.wait_screen("HELLO-ANSWER-OK", timeout=60)
    me = wait_for(lambda: team.machine.session_of(agent), timeout=60, what=f"{who}: the TUI's session to register")
    address = me["address"]

    def parked() -> bool:
        return address in team.machine.ok("status")["waiting"]

    if waiting:
        wait_for(parked, timeout=30, what=f"{who}: the push watcher to wait for mail")

    # Idle: nothing typed; the message alone starts a turn.
    sent_at = time.monotonic()
    idle = team.send_from_bob(address, "PUSHMARK_idle are you free?")
    # The sidecar tells the sender how it went: handed to the session's push channel ("pushed"),
    # or taken by its waiting watcher ("delivered"); "queued" means nothing will wake it.
    assert idle["state"] in ("pushed", "delivered"), f"{who}: bob's send came back {idle}"
    carriers = model.wait_for(lambda: model.seen(frame_of(idle)), timeout=30,
                              what=f"{who}: the idle push to reach the model")
    woke = model.requests[carriers[0]]
    assert "PUSHMARK_idle are you free?" in woke.text, f"{who}: the woken request: {woke.text[-2000:]}"
    print(f"{harness}: idle push reached the model {woke.at - sent_at:.2f} s after bob's send returned")
    wait_for(lambda: team.bob_state(idle["id"]) == "read", what=f"{who}: the idle push's read receipt")

    # Busy: bob writes while a slow tool runs; the model gets it with that tool's result.
    if waiting:
        wait_for(parked, timeout=30, what=f"{who}: the watcher re-armed after the woken turn")
    busy: dict[str, Any] = {}

    def bob_writes_soon(request: Request) -> None:
        later(2.0, lambda: busy.setdefault("message", team.send_from_bob(address, "PUSHMARK_busy the port is 8443")))

    model.script = Script({"E2E-BUSY": [call(sleep.tool, sleep.args, before=bob_writes_soon), say("busy done")],
                           "E2E-HUMAN": [say("HUMAN-ANSWER-OK")]})
    tui.type("E2E-BUSY run the slow check")
    model.wait_for(lambda: busy.get("message") and model.seen(frame_of(busy["message"])), timeout=45,
                   what=f"{who}: the mid-turn push to reach the model")
    first = model.requests[model.seen(frame_of(busy["message"]))[0]]
    last_call = next(t for t in reversed(first.turns) if t.role == "assistant" and t.calls)
    assert any(sleep.tool in name for name in last_call.calls), (
        f"{who}: the mid-turn push did not arrive with the slow tool's result:\n{model.transcript()}")
    assert frame_of(busy["message"]) in after_last_call(first), \
        f"{who}: not after the tool result:\n{model.transcript()}"
    wait_for(lambda: team.bob_state(busy["message"]["id"]) == "read", what=f"{who}: the busy push's read receipt")

    # The person's own next prompt still works.
    model.wait_for(lambda: any("busy done" in r.reply for r in model.requests), timeout=30,
                   what=f"{who}: the busy turn to end")
    tui.type("E2E-HUMAN hello there")
    model.wait_for(lambda: model.seen("E2E-HUMAN hello there"), timeout=30, what=f"{who}: the person's prompt")
    tui.wait_screen("HUMAN-ANSWER-OK")


def test_claude_code_tui_push_wakes_an_idle_session_lands_mid_turn_and_leaves_the_prompt_working(
        model: ModelServer, claude_team: Team) -> None:
    machine = claude_team.machine
    tui = Tui(machine.root / "tmux.sock")
    env = machine.env(ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=CLAUDE_KEY, ANTHROPIC_MODEL="claude-fake",
                      TERM="xterm-256color")
    tui.start([str(require_cli("claude-code")), "--allowedTools", "Bash(sleep:*)", "mcp__hive__list_team"],
              machine.project, env)
    try:
        push_checks("claude-code", "claude-code", claude_team, model, tui,
                    Call("Bash", {"command": "sleep 6", "description": "slow check"}), waiting=True)
    finally:
        tui.stop()
        # The watcher notices its harness is gone within its poll interval and exits.
        wait_for(lambda: claude_team.machine.hive_raw.paths.socket.exists()
                 and not claude_team.machine.ok("status")["waiting"], timeout=15,
                 what="the push watcher to exit with claude")


# ---- opencode: hive's plugin pushes with client.session.promptAsync --------------------------------


@pytest.fixture
def opencode_team(model: ModelServer, keys_in_files: None, opencode_plugin: Path) -> Iterator[Team]:
    def configure(machine: HarnessMachine) -> None:
        config = json.loads(json.dumps(OPENCODE_CONFIG).replace(URL_PLACEHOLDER, model.url))
        machine.write(".config/opencode/opencode.json", json.dumps(config, indent=2) + "\n")

    with harness_team("opencode", before_setup=configure, opencode_plugin=opencode_plugin) as team:
        yield team


def test_opencode_tui_push_wakes_an_idle_session_lands_mid_turn_and_leaves_the_prompt_working(
        model: ModelServer, opencode_team: Team) -> None:
    machine = opencode_team.machine
    tui = Tui(machine.root / "tmux.sock")
    tui.start([str(require_cli("opencode"))], machine.project, machine.env(TERM="xterm-256color"))
    try:
        push_checks("opencode", "opencode", opencode_team, model, tui,
                    Call("bash", {"command": "sleep 6", "description": "slow check"}), waiting=False,
                    opening="Ask anything")
    finally:
        tui.stop()


# ---- pi: hive's extension pushes with pi.sendUserMessage --------------------------------------------


@pytest.fixture
def pi_team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    def configure(machine: HarnessMachine) -> None:
        models = json.loads(json.dumps(PI_MODELS).replace(URL_PLACEHOLDER, model.url))
        machine.write(".pi/agent/models.json", json.dumps(models, indent=2) + "\n")
        machine.write(".pi/agent/settings.json", json.dumps({"quietStartup": True, "enableInstallTelemetry": False}))

    with harness_team("pi", before_setup=configure) as team:
        yield team


def test_pi_tui_push_wakes_an_idle_session_lands_mid_turn_and_leaves_the_prompt_working(
        model: ModelServer, pi_team: Team) -> None:
    machine = pi_team.machine
    tui = Tui(machine.root / "tmux.sock")
    tui.start([str(require_cli("pi")), "--model", "fake/fake-model"], machine.project,
              machine.env(TERM="xterm-256color"))
    try:
        push_checks("pi", "pi", pi_team, model, tui, Call("bash", {"command": "sleep 6"}), waiting=False)
    finally:
        tui.stop()


# ---- Codex: the descriptor promises push through the TUI's app-server --------------------------------

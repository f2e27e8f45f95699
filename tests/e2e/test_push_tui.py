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
- Codex: the sidecar itself drives the TUI's app-server over its control socket (``turn/start``
  when idle, ``turn/steer`` mid-turn); the person trusts hive's hooks in the TUI's start-up review.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hive.integrations.codex.tui import tui_binary
from tests.installer.conftest import require_cli

from .conftest import HarnessMachine, Team, cli, contract, harness_team, wait_for
from .model_server import Call, ModelServer, Request, Script, call, say
from .scenarios import after_last_call
from .test_codex import CONFIG as CODEX_CONFIG
from .test_codex import PORT_PLACEHOLDER as CODEX_URL
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
    machine.write(
        ".claude.json",
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "numStartups": 3,
                "autoUpdates": False,
                "customApiKeyResponses": {"approved": [CLAUDE_KEY[-20:]], "rejected": []},
                "projects": {
                    str(machine.project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
                },
            },
            indent=2,
        )
        + "\n",
    )


@pytest.fixture
def claude_team(model: ModelServer, keys_in_files: None, claude_cli: Path) -> Iterator[Team]:
    with harness_team("claude-code", before_setup=seed_claude) as team:
        yield team


def push_checks(
    harness: str,
    agent: str,
    team: Team,
    model: ModelServer,
    tui: Tui,
    sleep: Call,
    waiting: bool,
    opening: str = "",
    settle: bool = False,
) -> None:
    """Idle wake, mid-turn push after a slow tool, then the person's own prompt.

    ``opening``: the TUI makes its session only at the first prompt (opencode), so once this text
    shows (its prompt box) the person says hello first. ``settle``: wait until hive sees that first
    turn end (its Stop hook) before the idle push, which that hook would otherwise carry."""
    who = contract(harness)
    if opening:
        model.script = Script({"E2E-HELLO": [say("HELLO-ANSWER-OK")]})
        tui.wait_screen(opening, timeout=60)
        tui.type("E2E-HELLO good morning")  # typed again until the prompt box shows it
        tui.wait_screen("HELLO-ANSWER-OK", timeout=60)
    me = wait_for(lambda: team.machine.session_of(agent), timeout=60, what=f"{who}: the TUI's session to register")
    address = me["address"]
    if settle:  # the answer shows before the turn's Stop hook has run: a message then is that hook's
        wait_for(
            lambda: (team.machine.session_of(agent) or {}).get("state") == "idle",
            timeout=60,
            what=f"{who}: the session to be idle after its first turn",
        )

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
    carriers = model.wait_for(
        lambda: model.seen(frame_of(idle)), timeout=30, what=f"{who}: the idle push to reach the model"
    )
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

    model.script = Script(
        {
            "E2E-BUSY": [call(sleep.tool, sleep.args, before=bob_writes_soon), say("busy done")],
            "E2E-HUMAN": [say("HUMAN-ANSWER-OK")],
        }
    )
    tui.type("E2E-BUSY run the slow check")
    model.wait_for(
        lambda: busy.get("message") and model.seen(frame_of(busy["message"])),
        timeout=45,
        what=f"{who}: the mid-turn push to reach the model",
    )
    first = model.requests[model.seen(frame_of(busy["message"]))[0]]
    last_call = next(t for t in reversed(first.turns) if t.role == "assistant" and t.calls)
    assert any(sleep.tool in name for name in last_call.calls), (
        f"{who}: the mid-turn push did not arrive with the slow tool's result:\n{model.transcript()}"
    )
    assert frame_of(busy["message"]) in after_last_call(first), (
        f"{who}: not after the tool result:\n{model.transcript()}"
    )
    wait_for(lambda: team.bob_state(busy["message"]["id"]) == "read", what=f"{who}: the busy push's read receipt")

    # The person's own next prompt still works.
    model.wait_for(
        lambda: any("busy done" in r.reply for r in model.requests), timeout=30, what=f"{who}: the busy turn to end"
    )
    tui.type("E2E-HUMAN hello there")
    model.wait_for(lambda: model.seen("E2E-HUMAN hello there"), timeout=30, what=f"{who}: the person's prompt")
    tui.wait_screen("HUMAN-ANSWER-OK")


def test_claude_code_tui_push_wakes_an_idle_session_lands_mid_turn_and_leaves_the_prompt_working(
    model: ModelServer, claude_team: Team
) -> None:
    machine = claude_team.machine
    tui = Tui(machine.root / "tmux.sock")
    env = machine.env(
        ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=CLAUDE_KEY, ANTHROPIC_MODEL="claude-fake", TERM="xterm-256color"
    )
    tui.start(
        [str(cli("claude-code")), "--allowedTools", "Bash(sleep:*)", "mcp__hive__list_team"], machine.project, env
    )
    try:
        push_checks(
            "claude-code",
            "claude-code",
            claude_team,
            model,
            tui,
            Call("Bash", {"command": "sleep 6", "description": "slow check"}),
            waiting=True,
        )
    finally:
        tui.stop()
        # The watcher notices its harness is gone within its poll interval and exits.
        wait_for(
            lambda: (
                claude_team.machine.hive_raw.paths.socket.exists() and not claude_team.machine.ok("status")["waiting"]
            ),
            timeout=15,
            what="the push watcher to exit with claude",
        )


# ---- opencode: hive's plugin pushes with client.session.promptAsync --------------------------------


@pytest.fixture
def opencode_team(model: ModelServer, keys_in_files: None, opencode_plugin: Path) -> Iterator[Team]:
    def configure(machine: HarnessMachine) -> None:
        config = json.loads(json.dumps(OPENCODE_CONFIG).replace(URL_PLACEHOLDER, model.url))
        machine.write(".config/opencode/opencode.json", json.dumps(config, indent=2) + "\n")

    with harness_team("opencode", before_setup=configure, opencode_plugin=opencode_plugin) as team:
        yield team


def test_opencode_tui_push_wakes_an_idle_session_lands_mid_turn_and_leaves_the_prompt_working(
    model: ModelServer, opencode_team: Team
) -> None:
    machine = opencode_team.machine
    tui = Tui(machine.root / "tmux.sock")
    tui.start([str(require_cli("opencode"))], machine.project, machine.env(TERM="xterm-256color"))
    try:
        push_checks(
            "opencode",
            "opencode",
            opencode_team,
            model,
            tui,
            Call("bash", {"command": "sleep 6", "description": "slow check"}),
            waiting=False,
            opening="Ask anything",
        )
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
    model: ModelServer, pi_team: Team
) -> None:
    machine = pi_team.machine
    tui = Tui(machine.root / "tmux.sock")
    tui.start(
        [str(require_cli("pi")), "--model", "fake/fake-model"], machine.project, machine.env(TERM="xterm-256color")
    )
    try:
        push_checks("pi", "pi", pi_team, model, tui, Call("bash", {"command": "sleep 6"}), waiting=False)
    finally:
        tui.stop()


# ---- Codex: the sidecar pushes through the TUI's own app-server ------------------------------------


@pytest.fixture
def codex_team(model: ModelServer, keys_in_files: None) -> Iterator[Team]:
    def configure(machine: HarnessMachine) -> None:
        # The person's config (test_codex.CONFIG), with the scripted model's port, in a project they trust.
        machine.write(
            ".codex/config.toml",
            CODEX_CONFIG.replace(CODEX_URL, model.url) + f'\n[projects."{machine.project}"]\ntrust_level = "trusted"\n',
        )

    with harness_team("codex", before_setup=configure) as team:
        try:
            yield team
        finally:
            stop_codex_daemon(team.machine)


def stop_codex_daemon(machine: HarnessMachine) -> None:
    """The TUI starts Codex's app-server daemon, which outlives it: stop it with Codex's own command,
    then its pid-update loop, which that command leaves running (by the pid Codex recorded)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            [str(require_cli("codex")), "app-server", "daemon", "stop"],
            env=machine.env(),
            capture_output=True,
            timeout=60,
            start_new_session=True,
        )
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = machine.home / ".codex" / "app-server-daemon" / "daemon-updater.pid"
        pid = int(json.loads(record.read_text(encoding="utf-8"))["pid"])
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"pid-update-loop" in argv and str(machine.home).encode() in argv[0]:
            os.kill(pid, signal.SIGTERM)


def choose(tui: Tui, wanted: str, above: str, below: str, timeout: float = 60) -> None:
    """Move a TUI's menu selection onto ``wanted``. A loaded machine shows the menu before the TUI
    reads its keys, and a key sent then is lost: press again until the screen shows the choice
    (and Enter only then, which would otherwise confirm the first option)."""
    deadline = time.monotonic() + timeout
    while wanted not in (screen := tui.screen()):
        assert time.monotonic() < deadline, f"the selection never reached {wanted!r}:\n{screen}"
        if above in screen:
            tui.tmux("send-keys", "-t", "main", "Down")
        elif below in screen:
            tui.tmux("send-keys", "-t", "main", "Up")
        with contextlib.suppress(AssertionError):
            tui.wait_screen(wanted, timeout=3)


def test_codex_tui_push_wakes_an_idle_session_lands_mid_turn_leaves_the_prompt_working_and_stops_when_closed(
    model: ModelServer, codex_team: Team
) -> None:
    machine = codex_team.machine
    tui = Tui(machine.root / "tmux.sock")
    env = machine.env(FAKE_OPENAI_KEY="sk-fake", TERM="xterm-256color")
    tui.start([str(require_cli("codex"))], machine.project, env)
    try:
        # What a person does once: Codex lists hive's new hooks for review; they trust them all.
        tui.wait_screen("Trust all and continue", timeout=90)
        choose(tui, "› 2. Trust all and continue", above="› 1. ", below="› 3. ")
        tui.tmux("send-keys", "-t", "main", "Enter")
        # Hooks (SessionStart too) fire from the first prompt.
        push_checks(
            "codex",
            "codex",
            codex_team,
            model,
            tui,
            Call("exec_command", {"cmd": "sleep 6", "yield_time_ms": 30000}),
            waiting=False,
            opening="Ask Codex to do anything",
            settle=True,
        )
    finally:
        tui.stop()

    # The person closed Codex. Its app-server keeps the thread loaded for minutes, but a turn started
    # there would run unwatched: hive does not push, the mail waits, and the session is told as turn.
    who = contract("codex")
    wait_for(lambda: tui_binary(machine.home / ".codex") is None, timeout=30, what=f"{who}: the TUI to exit")
    me = next(
        s["address"] for s in machine.ok("who", all=True)["sessions"] if s["agent"] == "codex" and s["machine"] == "m1"
    )
    after = codex_team.send_from_bob(me, "PUSHMARK_closed still there?")
    assert after["state"] == "queued", f"{who}: bob's send to a closed Codex came back {after}"
    # "queued" is bob's outbox: the message is still crossing to alice's machine.
    try:
        wait_for(
            lambda: after["id"] in codex_team.alice_unread(me),
            timeout=30,
            what=f"{who}: the mail for a closed Codex to wait in alice's inbox",
        )
    except AssertionError as exc:
        sent = codex_team.bob_ok("sent", ids=[after["id"]])["messages"]
        sessions = machine.ok("who", all=True)["sessions"]
        raise AssertionError(f"{exc}\nbob's record of it: {sent}\nalice's sessions: {sessions}") from None
    listed = [s for s in machine.ok("who", all=True)["sessions"] if s["address"] == me]
    assert [s["tier"] for s in listed] == ["turn"], f"{who}: a closed Codex is listed as {listed}"
    assert not model.seen("PUSHMARK_closed"), f"{who}: a turn ran with nobody watching:\n{model.transcript()}"

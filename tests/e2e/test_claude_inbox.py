"""Claude Code's own session inbox, measured against hive's watcher in the same run (issue [currency]).

Since about 2.1.224 each interactive Claude Code session listens on a 0600 unix socket named in
``~/.claude/sessions/<pid>.json`` (``messagingSocketPath``); one NDJSON user line wakes an idle
session. hive keeps its asyncRewake watcher as the push route on every version, and this test
holds the facts behind that choice, so a Claude Code release that changes them fails here:

- the pinned version has no inbox at all (the watcher is the only route there);
- on the current one the inbox wakes an idle session, but the model is told the text came from
  "another Claude session" and was "not typed by your user": hive's frame says it is a
  teammate's agent, and Claude's wrapper would contradict it in the same request;
- like the watcher's, inbox mail sent during a slow tool reaches the model with that tool's result;
- both routes' idle wake latencies are printed, with their ratio (figures, never asserted).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Team, cli, cli_version, contract, harness_team, wait_for
from .model_server import ModelServer, Script, call, say
from .scenarios import after_last_call
from .test_push_tui import CLAUDE_KEY, later, seed_claude
from .tui import Tui


@pytest.fixture
def claude_team(model: ModelServer, keys_in_files: None, claude_cli: Path) -> Iterator[Team]:
    with harness_team("claude-code", before_setup=seed_claude) as team:
        yield team


INBOX_SINCE = (2, 1, 224)  # the first version measured with an inbox socket


def version() -> tuple[int, ...]:
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", cli_version("claude-code"))
    assert found, f"claude --version printed {cli_version('claude-code')!r}"
    return tuple(int(n) for n in found.groups())


def post(inbox: str, line: str) -> None:
    """One NDJSON line to a Claude Code session's inbox socket, as another session would send it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(inbox)
        conn.sendall(line.encode() + b"\n")


def session_file(home: Path) -> dict[str, object] | None:
    for path in sorted((home / ".claude" / "sessions").glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if record.get("kind") == "interactive":
            return record
    return None


def test_claude_codes_own_inbox_wakes_an_idle_session_but_calls_hives_mail_another_claude_sessions(
    model: ModelServer, claude_team: Team
) -> None:
    who = contract("claude-code")
    machine = claude_team.machine
    tui = Tui(machine.root / "tmux.sock")
    env = machine.env(
        ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=CLAUDE_KEY, ANTHROPIC_MODEL="claude-fake", TERM="xterm-256color"
    )
    model.script = Script({"PUSHMARK": [say("ok")], "INBOXMARK": [say("ok")]})
    tui.start([str(cli("claude-code")), "--allowedTools", "Bash(sleep:*)"], machine.project, env)
    try:
        me = wait_for(lambda: machine.session_of("claude-code"), timeout=60, what=f"{who}: the TUI's session")
        wait_for(
            lambda: me["address"] in machine.ok("status")["waiting"],
            timeout=30,
            what=f"{who}: the push watcher to wait for mail",
        )
        record = wait_for(lambda: session_file(machine.home), timeout=30, what=f"{who}: its session file")
        inbox = record.get("messagingSocketPath")
        if version() < INBOX_SINCE:
            assert not inbox, f"{who}: this version has an inbox after all: {record}"
            return

        # hive's route: the watcher, woken by a send on the same machine (no mesh hop, as the inbox).
        machine.ok("register", session={"key": "peer", "agent": "codex", "cwd": "/tmp/peer", "name": "peer"})
        sent_at = time.monotonic()
        pushed = machine.ok("send", **{"from": "peer", "to": me["address"], "body": "PUSHMARK are you free?"})
        assert pushed["results"][0]["state"] == "delivered", f"{who}: {pushed}"
        carried = model.wait_for(
            lambda: model.seen("PUSHMARK are you free?"), timeout=30, what=f"{who}: the watcher's wake"
        )
        watcher_wake = model.requests[carried[0]].at - sent_at
        wait_for(
            lambda: (session_file(machine.home) or {}).get("status") == "idle",
            timeout=60,
            what=f"{who}: idle again after the woken turn",
        )

        # Claude Code's route: the same kind of frame, posted to its inbox socket.
        assert isinstance(inbox, str) and Path(inbox).exists(), f"{who}: no inbox socket: {record}"
        assert Path(inbox).stat().st_mode & 0o777 == 0o600
        body = (
            '<hive-message from="bob/web-codex" agent="codex" repo="acme/web" id="INBOXMARK">'
            "INBOXMARK is the build green?</hive-message>"
        )
        posted_at = time.monotonic()
        post(inbox, json.dumps({"type": "user", "message": {"role": "user", "content": body}}))
        carried = model.wait_for(
            lambda: model.seen("INBOXMARK is the build green?"), timeout=30, what=f"{who}: the inbox's wake"
        )
        woken = model.requests[carried[0]]
        inbox_wake = woken.at - posted_at

        # Mid-turn: posted while a slow tool runs, it reaches the model with that tool's result.
        wait_for(
            lambda: (session_file(machine.home) or {}).get("status") == "idle",
            timeout=60,
            what=f"{who}: idle again after the inbox's turn",
        )
        busy_line = json.dumps({"type": "user", "message": {"role": "user", "content": "INBOXBUSY the port is 8443"}})
        model.script = Script(
            {
                "E2E-SLOW": [
                    call(
                        "Bash",
                        {"command": "sleep 6", "description": "slow"},
                        before=lambda _: later(2.0, lambda: post(inbox, busy_line)),
                    ),
                    say("slow done"),
                ]
            }
        )
        tui.type("E2E-SLOW run the slow check")
        carried = model.wait_for(
            lambda: model.seen("INBOXBUSY the port is 8443"), timeout=45, what=f"{who}: the inbox's mid-turn message"
        )
        mid_turn = model.requests[carried[0]]
    finally:
        tui.stop()
    shown = woken.text
    assert 'id="INBOXMARK"' in shown, f"{who}: hive's frame did not survive the inbox:\n{shown[-2000:]}"
    assert "not typed by your user" in shown or "Another Claude session" in shown, (
        f"{who}: Claude Code no longer wraps inbox mail as another session's; revisit the push route:\n{shown[-2000:]}"
    )
    assert "INBOXBUSY the port is 8443" in after_last_call(mid_turn), (
        f"{who}: the inbox's mid-turn message did not come with the tool's result:\n{model.transcript()}"
    )
    print(
        f"claude-code idle wake: watcher {watcher_wake:.2f} s (a local send to the model request), "
        f"inbox {inbox_wake:.2f} s (post to the model request), inbox/watcher {inbox_wake / watcher_wake:.2f}"
    )

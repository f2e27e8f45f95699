"""A health check is not a session: what checks an MCP server leaves nothing mail can be queued to.

``claude mcp list`` spawns ``hive mcp``, lists its tools, and runs the SessionEnd hook alone (no
SessionStart, no tool call). Neither may leave a "gone" session behind: one that shows in
``hive who --all`` and that a teammate's message could be queued to, for nobody to read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

from tests.conftest import Hive
from tests.installer.conftest import machine_context, require_cli

MESH = '[mesh]\nlisten = "127.0.0.1:0"\nmdns = false\n'


def _hook(hive: Hive, event: str, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "hook", "claude-code", event],
        env=hive.env,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _payload(hive: Hive, session: str, event: str) -> dict[str, Any]:
    project = hive.home / "api"
    project.mkdir(exist_ok=True)
    return {
        "session_id": session,
        "transcript_path": str(project / f"{session}.jsonl"),
        "cwd": str(project),
        "hook_event_name": event,
        "reason": "other",
    }


def test_a_session_end_hook_for_a_session_never_started_registers_nothing(hive: Hive) -> None:
    session = str(uuid.uuid4())
    done = _hook(hive, "SessionEnd", _payload(hive, session, "SessionEnd"))
    assert done.returncode == 0, done.stderr
    assert hive.cli_json("who", "--all")["sessions"] == []
    sent = hive.cli("send", "alice/api-claude-code", "are you there?")
    assert sent.returncode == 1 and "[not_found]" in sent.stderr


def test_a_session_that_started_and_ended_is_still_listed_as_gone(hive: Hive) -> None:
    session = str(uuid.uuid4())
    assert _hook(hive, "SessionStart", {**_payload(hive, session, "SessionStart"), "source": "startup"}).returncode == 0
    assert _hook(hive, "SessionEnd", _payload(hive, session, "SessionEnd")).returncode == 0
    [gone] = hive.cli_json("who", "--all")["sessions"]
    assert gone["address"] == "alice/api-claude-code" and gone["live"] is False


def test_claude_mcp_list_leaves_no_session_that_mail_could_be_queued_to() -> None:
    claude = require_cli("claude-code")
    with machine_context(with_clis=True) as machine:
        (machine.state / "config.toml").write_text(f'person = "alice"\nmachine = "m1"\n{MESH}', encoding="utf-8")
        machine.setup("--only", "claude-code")
        assert machine.hive("status").returncode == 0  # hooks reach a running sidecar, as on a used machine
        machine.project.mkdir(parents=True, exist_ok=True)
        checked = machine.run([str(claude), "mcp", "list"])
        assert "hive" in checked.stdout and "Connected" in checked.stdout, checked.stdout + checked.stderr
        who = machine.hive("who", "--all", "--json")
        assert json.loads(who.stdout)["sessions"] == [], who.stdout
        sent = machine.hive("send", "alice/api-claude-code", "are you there?")
        assert sent.returncode == 1 and "[not_found]" in sent.stderr, sent.stderr

"""The installed ``hive`` command: ``hive hook`` (what committed project files name) stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HIVE = Path(sys.executable).parent / "hive"


def test_hive_hook_answers_without_loading_the_cli_the_mesh_or_the_gate(hive: Any) -> None:
    # PYTHONPROFILEIMPORTTIME makes the console script list every module it imported on stderr.
    result = subprocess.run(
        [str(HIVE), "hook", "claude-code", "PreToolUse"],
        input="{}",
        capture_output=True,
        text=True,
        env={**hive.env, "PYTHONPROFILEIMPORTTIME": "1"},
        timeout=60,
    )
    assert result.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "hive.integrations.hook_client" in imported
    for heavy in ("hive.sidecar.cli.main", "hive.sidecar.mesh.links", "hive.sidecar.gate.engine", "aioquic", "anyio"):
        assert heavy not in imported, heavy


def test_every_other_command_still_goes_to_the_cli(hive: Any) -> None:
    result = subprocess.run([str(HIVE), "hook", "--help"], capture_output=True, text=True, env=hive.env, timeout=60)
    assert result.returncode == 0 and "--command" in result.stdout
    status = subprocess.run([str(HIVE), "status"], capture_output=True, text=True, env=hive.env, timeout=60)
    assert status.returncode == 0 and str(hive.pid()) in status.stdout + status.stderr
    assert os.path.exists(hive.paths.socket)


def _mcp_exchange(env: dict[str, str]) -> tuple[list[dict[str, Any]], set[str]]:
    """Run ``hive mcp`` through initialize and tools/list; its replies and every module it imported."""
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "claude-code", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    with subprocess.Popen(
        [str(HIVE), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        replies: list[dict[str, Any]] = []
        for message in messages:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            if "id" in message:
                replies.append(json.loads(process.stdout.readline()))
        process.stdin.close()  # the client goes away: the server exits
        stderr = process.stderr.read()
        assert process.wait(timeout=60) == 0, stderr
    return replies, {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if "|" in line}


def test_hive_mcp_answers_initialize_and_lists_tools_without_loading_the_cli_or_what_only_tools_use(hive: Any) -> None:
    replies, imported = _mcp_exchange({**hive.env, "PYTHONPROFILEIMPORTTIME": "1"})
    assert replies[0]["result"]["serverInfo"]["name"] == "hive"
    assert "send_message" in {tool["name"] for tool in replies[1]["result"]["tools"]}
    assert "hive.sidecar.mcp.server" in imported
    # Neither the CLI's parser (the mesh, the gate, the lessons) nor what only a tool call needs
    # (the sidecar client, the desktop dialog, defang) is loaded before these two answers.
    for deferred in (
        "hive.sidecar.cli.main",
        "hive.sidecar.mesh.links",
        "hive.sidecar.gate.engine",
        "hive.sidecar.cli.lessons",
        "hive.sidecar.mesh.transport",
        "aioquic",
        "hive.sidecar.client",
        "hive.sidecar.person.dialog",
        "hive.sidecar.base.defang",
    ):
        assert deferred not in imported, deferred


def test_hive_mcp_with_options_still_goes_to_the_cli(hive: Any) -> None:
    result = subprocess.run([str(HIVE), "mcp", "--help"], capture_output=True, text=True, env=hive.env, timeout=60)
    assert result.returncode == 0 and "usage: hive mcp" in result.stdout

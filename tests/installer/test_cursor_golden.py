"""Cursor has no CLI to ask, so its two files are compared with reviewed golden files, byte for byte.

``golden/cursor/*.json`` are the exact files ``hive setup`` leaves, with this machine's paths as
placeholders: ``@HOOK@`` (the hook client's interpreter and script, from ``hive hook --command``),
``@HIVE@`` (the hive console script) and ``@PYTHON@``/``@NOTES@`` (the person's own server).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.installer.conftest import NOTES_SERVER, Machine

GOLDEN = Path(__file__).resolve().parent / "golden" / "cursor"


def expected(machine: Machine, name: str) -> str:
    hook = machine.hive("hook", "--command", "cursor", "stop").stdout.strip()
    assert hook.endswith(" cursor stop"), hook
    values = {
        "@HOOK@": hook.removesuffix(" cursor stop"),
        "@HIVE@": str(Path(sys.executable).parent / "hive"),
        "@NOTES@": str(NOTES_SERVER),
        "@PYTHON@": sys.executable,
    }
    text = (GOLDEN / name).read_text(encoding="utf-8")
    for placeholder, value in values.items():
        text = text.replace(placeholder, json.dumps(value)[1:-1])
    return text


@pytest.mark.parametrize("file", ["mcp", "hooks"])
def test_cursor_files_next_to_the_persons_own_entries_match_the_golden_files(machine: Machine, file: str) -> None:
    original = machine.read(f".cursor/{file}.json")
    machine.setup("--only", "cursor")
    assert machine.read(f".cursor/{file}.json") == expected(machine, f"{file}.with-existing.json")
    machine.setup("--remove")
    assert machine.read(f".cursor/{file}.json") == original


@pytest.mark.parametrize("file", ["mcp", "hooks"])
def test_cursor_files_written_fresh_match_the_golden_files(bare_machine: Machine, file: str) -> None:
    bare_machine.setup("--only", "cursor")
    assert bare_machine.read(f".cursor/{file}.json") == expected(bare_machine, f"{file}.fresh.json")


def test_cursor_hooks_keep_the_documented_contract() -> None:
    """Version 1, lowerCamelCase events, flat command entries: Cursor's documented hooks.json shape."""
    hooks = json.loads((GOLDEN / "hooks.fresh.json").read_text())
    assert hooks["version"] == 1
    assert set(hooks["hooks"]) == {"sessionStart", "beforeSubmitPrompt", "postToolUse", "stop", "sessionEnd"}
    for entries in hooks["hooks"].values():
        assert all(set(entry) == {"command", "timeout"} for entry in entries)
    mcp = json.loads((GOLDEN / "mcp.fresh.json").read_text())
    assert mcp == {"mcpServers": {"hive": {"command": "@HIVE@", "args": ["mcp"]}}}

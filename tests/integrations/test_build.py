"""The generated reference files: committed, and identical to a fresh rendering of the descriptors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from hive.integrations import build

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {
    "claude-code": ["mcp.json", "settings.json"],
    "codex": ["config.toml", "hooks.json"],
    "cursor": ["hooks.json", "mcp.json"],
    "gemini": ["settings.json"],
    "opencode": ["hive.ts", "opencode.json"],
    "pi": ["hive.ts"],
}


def test_every_builtin_harness_has_a_folder_in_the_repository() -> None:
    folders = build.harness_folders()
    assert sorted(folders) == sorted(EXPECTED)
    for folder in folders.values():  # the installed package's folder, and the checkout's of the same name
        assert folder.parent.name == "integrations" and (REPO / "integrations" / folder.name).is_dir()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_regenerating_produces_the_committed_files_byte_for_byte(name: str) -> None:
    # The checkout's files, whichever hive is installed (the installed copies are checked by test_package)
    target = REPO / "integrations" / build.harness_folders()[name].name / build.GENERATED
    rendered = build.render(name)
    assert sorted(rendered) == EXPECTED[name]
    committed = sorted(p.name for p in target.iterdir() if p.is_file())
    assert committed == sorted(rendered), f"{target}: files differ from a fresh rendering"
    for file_name, text in rendered.items():
        assert (target / file_name).read_bytes() == text.encode("utf-8"), (
            f"{target / file_name} differs from a fresh rendering: run `hive integrations build`"
        )


def test_check_changes_nothing_in_a_clean_tree() -> None:
    assert build.build(check=True) == []


@pytest.fixture
def copies(tmp_path: Path) -> dict[str, Path]:
    folders: dict[str, Path] = {}
    for name, folder in build.harness_folders().items():
        copy = tmp_path / folder.name
        shutil.copytree(folder / build.GENERATED, copy / build.GENERATED)
        folders[name] = copy
    return folders


def test_check_names_a_changed_a_missing_and_a_stale_file_and_build_puts_them_right(copies: dict[str, Path]) -> None:
    changed = copies["codex"] / build.GENERATED / "hooks.json"
    changed.write_text(changed.read_text(encoding="utf-8").replace("Stop", "Halt"), encoding="utf-8")
    missing = copies["pi"] / build.GENERATED / "hive.ts"
    missing.unlink()
    stale = copies["gemini"] / build.GENERATED / "old.json"
    stale.write_text("{}\n", encoding="utf-8")

    assert sorted(build.build(check=True, folders=copies)) == sorted([changed, missing, stale])
    assert not missing.exists() and stale.exists(), "--check must not write"

    assert sorted(build.build(folders=copies)) == sorted([changed, missing, stale])
    assert build.build(check=True, folders=copies) == []
    assert not stale.exists()


def test_json_files_hold_exactly_the_parts_hive_owns() -> None:
    generated = {name: build.harness_folders()[name] / build.GENERATED for name in EXPECTED}
    top = {
        ("claude-code", "mcp.json"): {"mcpServers"},
        ("claude-code", "settings.json"): {"hooks"},
        ("codex", "hooks.json"): {"hooks"},
        ("cursor", "hooks.json"): {"version", "hooks"},
        ("cursor", "mcp.json"): {"mcpServers"},
        ("gemini", "settings.json"): {"hooks", "mcpServers"},
        ("opencode", "opencode.json"): {"mcp"},
    }
    for (name, file_name), keys in top.items():
        data = json.loads((generated[name] / file_name).read_text(encoding="utf-8"))
        assert set(data) == keys, f"{name}/{file_name}"
        for server in ("mcpServers", "mcp"):
            if server in data:
                assert list(data[server]) == ["hive"]
    config = tomlkit.parse((generated["codex"] / "config.toml").read_text(encoding="utf-8")).unwrap()
    assert config == {
        "mcp_servers": {"hive": {"command": "hive", "args": ["mcp"], "default_tools_approval_mode": "approve"}}
    }


def test_generated_hook_commands_use_the_portable_form() -> None:
    settings = json.loads((REPO / "integrations/claude_code/generated/settings.json").read_text(encoding="utf-8"))
    assert settings["hooks"]["Stop"][0]["hooks"][0]["command"] == "hive hook claude-code Stop"
    cursor = json.loads((REPO / "integrations/cursor/generated/hooks.json").read_text(encoding="utf-8"))
    assert cursor["hooks"]["stop"] == [{"command": "hive hook cursor stop", "timeout": 5}]


def test_hive_integrations_build_check_exits_0_on_the_committed_tree() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hive.sidecar.cli", "integrations", "build", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")

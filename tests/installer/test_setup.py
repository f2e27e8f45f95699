"""``hive setup`` end to end through the CLI, on a machine whose harness configs are already there.

The harness binaries are not on PATH here (the real CLIs check the result in test_real_clis.py), so
detection goes by config folders and runs no version probe: HOME then changes only where hive
writes, and every snapshot comparison can be exact.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.installer.conftest import Machine, plan_rows

HARNESSES = ("claude-code", "codex", "cursor", "gemini", "opencode", "pi")


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}


def test_setup_wires_every_harness_found_and_keeps_the_persons_entries(machine: Machine) -> None:
    out = machine.setup()

    for name in HARNESSES:
        assert f"\n{name} " in out and f"{name}: wired" in out
    claude = json.loads(machine.read(".claude.json"))
    assert list(claude["mcpServers"]) == ["notes", "hive"]
    assert claude["numStartups"] == 12 and claude["hasCompletedOnboarding"] is True
    settings = json.loads(machine.read(".claude/settings.json"))
    assert settings["permissions"] == {"allow": ["Bash(git status)"]}
    stop = settings["hooks"]["Stop"]
    assert stop[0] == {"hooks": [{"type": "command", "command": "notify-send 'Claude is done'"}]}
    assert all("hive_hook.py" in group["hooks"][0]["command"] for group in stop[1:])
    assert settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == "~/bin/guard.sh"

    codex_text = machine.read(".codex/config.toml")
    assert codex_text.startswith('# Codex settings, kept by hand\nmodel = "gpt-5.5"  # the one I like\n')
    assert "# my own MCP server\n[mcp_servers.notes]" in codex_text
    codex = tomllib.loads(codex_text)
    assert codex["mcp_servers"]["hive"]["default_tools_approval_mode"] == "approve"
    assert codex["mcp_servers"]["notes"]["args"][0].endswith("notes_server.py")
    codex_hooks = json.loads(machine.read(".codex/hooks.json"))["hooks"]
    assert codex_hooks["Stop"][0]["hooks"][0]["command"] == "notify-send 'Codex is done'"
    assert set(codex_hooks) == {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "PermissionRequest"}

    gemini = json.loads(machine.read(".gemini/settings.json"))
    assert list(gemini["mcpServers"]) == ["notes", "hive"]
    assert gemini["hooks"]["AfterAgent"][0]["hooks"][0]["command"] == "notify-send 'Gemini is done'"
    assert gemini["privacy"] == {"usageStatisticsEnabled": False}

    opencode = json.loads(machine.read(".config/opencode/opencode.json"))
    assert list(opencode) == ["$schema", "autoupdate", "share", "mcp"]
    assert opencode["mcp"]["hive"]["type"] == "local" and opencode["mcp"]["hive"]["command"][-1] == "mcp"
    assert "HivePlugin" in machine.read(".config/opencode/plugins/hive.ts")
    assert "registerTool" in machine.read(".pi/agent/extensions/hive.ts")
    assert machine.read(".pi/agent/extensions/greet.ts").startswith("export default function")
    skill = (Path(__file__).resolve().parents[2] / "skills" / "hive" / "SKILL.md").read_text()
    for folder in (".claude/skills", ".agents/skills", ".cursor/skills"):
        assert machine.read(f"{folder}/hive/SKILL.md") == skill
    assert machine.read(".agents/skills/release-notes/SKILL.md").startswith("---\nname: release-notes")


def test_a_second_setup_changes_no_byte_and_remove_gives_back_every_original(machine: Machine) -> None:
    original = machine.snapshot()
    first = machine.setup()
    # The plan table wraps its last column (a list of files) to fit a 100-column terminal.
    table = first.split("\nHARNESS", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(table) > len(HARNESSES) and max(len(line) for line in table) <= 100, first
    assert "wire: ~/.claude.json, ~/.claude/settings.json" in plan_rows(first)["claude-code"]
    wired = machine.snapshot()
    assert changed(original, wired) >= {
        ".claude.json",
        ".claude/settings.json",
        ".codex/config.toml",
        ".gemini/settings.json",
        ".cursor/mcp.json",
        ".cursor/hooks.json",
        ".config/opencode/opencode.json",
        ".agents/skills/hive/SKILL.md",
    }

    again = machine.setup()
    assert machine.snapshot() == wired
    assert again.count("nothing to change") == len(HARNESSES)
    assert "backups of every file changed" not in again

    out = machine.setup("--remove")
    assert machine.snapshot() == original
    assert "~/.claude.json: restored to its content before setup" in out
    assert "~/.codex/hooks.json: restored to its content before setup" in out
    assert "~/.config/opencode/plugins/hive.ts: deleted (hive created it)" in out
    for folder in (".claude/skills", ".cursor/skills", ".config/opencode/plugins", ".agents/skills/hive"):
        assert not (machine.home / folder).exists(), f"{folder} was created by hive and must be gone"
    assert not (machine.state / "setup" / "manifest.json").exists()
    assert machine.setup("--remove").startswith("hive setup --remove: nothing of hive's is recorded")


def test_every_edit_is_backed_up_first_beside_a_record_of_what_changed(machine: Machine) -> None:
    original = machine.snapshot()
    machine.setup()

    setup = machine.state / "setup"
    (backups,) = (setup / "backups").iterdir()
    changes = json.loads((backups / "changes.json").read_text())["changes"]
    by_path = {Path(c["path"]).relative_to(machine.home).as_posix(): c for c in changes}
    assert by_path[".claude.json"]["action"] == "changed" and by_path[".claude.json"]["harnesses"] == ["claude-code"]
    assert by_path[".claude/skills/hive/SKILL.md"] == {
        **by_path[".claude/skills/hive/SKILL.md"],
        "action": "created",
        "backup": None,
    }
    for relative, change in by_path.items():
        if change["backup"]:
            assert (setup / change["backup"]).read_bytes() == original[relative]
    assert stat.S_IMODE(setup.stat().st_mode) == 0o700
    assert stat.S_IMODE((setup / "manifest.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((setup / by_path[".claude.json"]["backup"]).stat().st_mode) == 0o600
    manifest = machine.manifest["files"]
    assert manifest[str(machine.home / ".agents/skills/hive/SKILL.md")]["harnesses"] == [
        "codex",
        "gemini",
        "opencode",
        "pi",
    ]


def test_dry_run_says_per_harness_what_it_would_change_and_writes_nothing(machine: Machine) -> None:
    original = machine.snapshot()
    out = machine.setup("--dry-run")

    assert machine.snapshot() == original
    assert not (machine.state / "setup").exists()
    summary = out.split("would change (nothing is written; `--dry-run --diff` shows every line):\n", 1)[1]
    assert "claude-code:\n  edit ~/.claude.json: add mcpServers.hive\n" in summary
    assert "  create ~/.claude/skills/hive/SKILL.md (skill)\n" in summary
    assert "codex:\n  edit ~/.codex/config.toml: add mcp_servers.hive\n" in summary
    assert "add hive's entries to hooks.Stop" in summary  # the person's own Stop hook stays, hive's joins it
    assert "pi:\n  create ~/.pi/agent/extensions/hive.ts (plugin)\n" in summary
    assert "---" not in out and "+++" not in out  # no diffs unless asked
    assert max(len(line) for line in summary.splitlines()) <= 100


def test_dry_run_with_diff_prints_unified_diffs_and_writes_nothing(machine: Machine) -> None:
    original = machine.snapshot()
    out = machine.setup("--dry-run", "--diff")

    assert machine.snapshot() == original
    assert not (machine.state / "setup").exists()
    assert "--- a/~/.claude.json\n+++ b/~/.claude.json\n" in out
    assert '+    "hive": {\n' in out
    assert "--- /dev/null\n+++ b/~/.claude/skills/hive/SKILL.md\n" in out
    assert "+[mcp_servers.hive]\n" in out

    machine.setup()
    wired = machine.snapshot()
    out = machine.setup("--remove", "--dry-run", "--diff")
    assert machine.snapshot() == wired
    assert "--- a/~/.claude.json\n+++ b/~/.claude.json\n" in out and '-    "hive": {\n' in out
    assert "hive setup --remove --dry-run: nothing was changed; this would happen:" in out
    short = machine.setup("--remove", "--dry-run")
    assert "+++" not in short and "  ~/.claude.json: restored to its content before setup\n" in short


def test_broken_json_is_refused_with_file_and_line_and_the_other_harnesses_are_wired(machine: Machine) -> None:
    broken = '{\n  "mcpServers": {\n    "notes": {"command": "notes"},\n  }\n}\n'
    machine.write(".gemini/settings.json", broken)
    out = machine.setup(expect=1)

    assert machine.read(".gemini/settings.json") == broken
    assert (
        "gemini: ~/.gemini/settings.json: line 4, column 3: Expecting property name enclosed in double quotes; "
        "fix the JSON there"
    ) in out
    assert "refused (nothing of these was changed; the others were wired)" in out
    for name in ("claude-code", "codex", "cursor", "opencode", "pi"):
        assert f"{name}: wired" in out
    assert "hive" in json.loads(machine.read(".claude.json"))["mcpServers"]
    # The skill folder gemini shares with codex, opencode and pi is still written for them.
    assert (machine.home / ".agents/skills/hive/SKILL.md").exists()
    assert machine.manifest["files"][str(machine.home / ".agents/skills/hive/SKILL.md")]["harnesses"] == [
        "codex",
        "opencode",
        "pi",
    ]

    # Fixed, the next run wires gemini too.
    machine.write(".gemini/settings.json", broken.replace("},\n  }", "}\n  }"))
    assert "gemini: wired" in machine.setup()


def test_broken_toml_refuses_the_whole_harness_so_it_is_never_half_wired(machine: Machine) -> None:
    broken = 'model = "gpt-5.5"\n\n[mcp_servers.notes\ncommand = "notes"\n'
    machine.write(".codex/config.toml", broken)
    hooks_before = machine.read(".codex/hooks.json")
    out = machine.setup(expect=1)

    assert "codex: ~/.codex/config.toml: line 3, column " in out and "fix the TOML there" in out
    assert machine.read(".codex/config.toml") == broken
    assert machine.read(".codex/hooks.json") == hooks_before  # fine on its own, but codex is refused whole
    assert "claude-code: wired" in out and "gemini: wired" in out


def test_json_with_comments_is_refused_rather_than_stripped_of_them(machine: Machine) -> None:
    jsonc = '{\n  // my servers\n  "mcp": {}\n}\n'
    machine.write(".config/opencode/opencode.json", jsonc)
    out = machine.setup("--only", "opencode", expect=1)
    assert "opencode: ~/.config/opencode/opencode.json: line 2, column 3:" in out
    assert "has comments (// or /* */), which hive's JSON writer would lose" in out
    assert machine.read(".config/opencode/opencode.json") == jsonc
    assert not (machine.home / ".config/opencode/plugins/hive.ts").exists()


def test_a_key_of_the_wrong_shape_is_refused_with_what_to_fix(machine: Machine) -> None:
    machine.write(".cursor/hooks.json", '{"version": 1, "hooks": []}\n')
    out = machine.setup("--only", "cursor", expect=1)
    assert "cursor: ~/.cursor/hooks.json: 'hooks' is a list; hive needs an object there; fix or remove that key" in out


def read_only(folder: Path) -> None:
    """Make ``folder`` unwritable, also for root (which ignores mode bits): the immutable attribute."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)


def writable(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o755)


def test_a_read_only_config_folder_is_reported_for_its_harness_alone(machine: Machine) -> None:
    codex = machine.home / ".codex"
    read_only(codex)
    try:
        out = machine.setup(expect=1)
    finally:
        writable(codex)
    assert f"codex: ~/.codex/config.toml: {codex} is read-only" in out
    assert "claude-code: wired" in out and "pi: wired" in out
    assert "mcp_servers.hive" not in machine.read(".codex/config.toml")


def test_a_missing_home_is_reported_per_harness(bare_machine: Machine) -> None:
    env = bare_machine.env(HOME=str(bare_machine.root / "nowhere"))
    done = bare_machine.hive("setup", "--only", "claude,codex", env=env, cwd=bare_machine.root)
    assert done.returncode == 1
    for name, file in (("claude-code", ".claude.json"), ("codex", ".codex/config.toml")):
        assert f"{name}: ~/{file}: the folder {bare_machine.root / 'nowhere'} does not exist" in done.stdout


def test_only_takes_aliases_and_leaves_the_rest_alone(machine: Machine) -> None:
    original = machine.snapshot()
    out = machine.setup("--only", "claude,gemini-cli")
    assert "claude-code: wired" in out and "gemini: wired" in out and "codex: wired" not in out
    assert "skip: not in --only" in out
    touched = changed(original, machine.snapshot())
    assert touched == {
        ".claude.json",
        ".claude/settings.json",
        ".claude/skills/hive/SKILL.md",
        ".gemini/settings.json",
        ".agents/skills/hive/SKILL.md",
    }

    unknown = machine.hive("setup", "--only", "vim")
    assert unknown.returncode == 1
    assert "unknown harness 'vim'; known: " in unknown.stderr and "claude-code" in unknown.stderr


def test_an_empty_home_wires_nothing_unless_asked(bare_machine: Machine) -> None:
    out = bare_machine.setup()
    assert "no harness found; `hive setup --only NAME` wires one anyway" in out
    assert bare_machine.snapshot() == {}

    out = bare_machine.setup("--only", "cursor")
    assert "cursor: wired (3 of 3 files changed)" in out
    assert set(bare_machine.snapshot()) == {".cursor/mcp.json", ".cursor/hooks.json", ".cursor/skills/hive/SKILL.md"}
    bare_machine.setup("--remove")
    assert bare_machine.snapshot() == {} and not (bare_machine.home / ".cursor").exists()


def test_edits_made_after_setup_survive_remove(machine: Machine) -> None:
    machine.setup()
    claude = json.loads(machine.read(".claude.json"))
    claude["numStartups"] = 13
    claude["mcpServers"]["later"] = {"command": "later"}
    machine.write(".claude.json", json.dumps(claude, indent=2) + "\n")
    machine.write(".codex/config.toml", machine.read(".codex/config.toml") + '\n[profiles.fast]\nmodel = "mini"\n')

    out = machine.setup("--remove")
    assert "~/.claude.json: hive's parts removed (you changed the file since setup; your changes stay)" in out
    claude = json.loads(machine.read(".claude.json"))
    assert list(claude["mcpServers"]) == ["notes", "later"] and claude["numStartups"] == 13
    codex = machine.read(".codex/config.toml")
    assert "mcp_servers.hive" not in codex and '[profiles.fast]\nmodel = "mini"\n' in codex
    assert codex.startswith("# Codex settings, kept by hand\n") and "# my own MCP server\n" in codex


def test_a_setup_after_the_person_edited_the_file_keeps_their_edits_through_remove(machine: Machine) -> None:
    machine.setup()
    settings = json.loads(machine.read(".claude/settings.json"))
    settings["model"] = "opus"
    machine.write(".claude/settings.json", json.dumps(settings, indent=2) + "\n")
    machine.setup()  # up to date: hive's parts are all there
    machine.setup("--remove")
    settings = json.loads(machine.read(".claude/settings.json"))
    assert settings["model"] == "opus"
    assert not any("hive_hook.py" in json.dumps(groups) for groups in settings["hooks"].values())
    assert settings["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": "notify-send 'Claude is done'"}]}]


def test_removing_one_harness_keeps_a_skill_others_still_use(machine: Machine) -> None:
    original = machine.snapshot()
    machine.setup()
    out = machine.setup("--remove", "--only", "codex")
    assert "~/.agents/skills/hive/SKILL.md: kept (still used by gemini, opencode, pi)" in out
    assert machine.read(".codex/config.toml") == original[".codex/config.toml"].decode()
    assert (machine.home / ".agents/skills/hive/SKILL.md").exists()
    assert "hive" in json.loads(machine.read(".claude.json"))["mcpServers"]

    machine.setup("--remove", "--only", "gemini,opencode,pi")
    assert not (machine.home / ".agents/skills/hive").exists()
    machine.setup("--remove")
    assert machine.snapshot() == original


def test_a_symlinked_config_is_written_through_its_link(machine: Machine) -> None:
    dotfiles = machine.home / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    link = machine.home / ".claude" / "settings.json"
    dotfiles.write_bytes(link.read_bytes())
    link.unlink()
    link.symlink_to(dotfiles)
    original = dotfiles.read_bytes()

    machine.setup("--only", "claude")
    assert link.is_symlink() and "hive_hook.py" in dotfiles.read_text()
    machine.setup("--remove")
    assert link.is_symlink() and dotfiles.read_bytes() == original


def test_project_scope_writes_the_project_files_and_says_which_approvals_they_need(machine: Machine) -> None:
    original = machine.snapshot()
    project = machine.project
    out = machine.setup("--project", str(project), "--only", "claude,codex,gemini,opencode,pi,cursor")

    assert f"project scope ({project})" in out
    files = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert files == {
        ".mcp.json",
        ".claude/settings.json",
        ".claude/skills/hive/SKILL.md",
        ".codex/config.toml",
        ".codex/hooks.json",
        ".agents/skills/hive/SKILL.md",
        ".gemini/settings.json",
        "opencode.json",
        ".opencode/plugins/hive.ts",
        ".pi/extensions/hive.ts",
        ".cursor/mcp.json",
        ".cursor/hooks.json",
        ".cursor/skills/hive/SKILL.md",
    }
    assert changed(original, machine.snapshot()) == {f"src/api/{f}" for f in files}
    assert "approve 'hive' when it asks" in out  # Claude Code's .mcp.json approval
    assert "Codex reads a project's .codex/ folder only in a trusted project" in out
    assert "Gemini CLI reads a project's .gemini/settings.json only in a trusted folder" in out

    # A user-scope removal leaves the project alone; a project removal cleans it.
    assert "nothing of hive's is recorded" in machine.setup("--remove")
    machine.setup("--remove", "--project", str(project))
    assert machine.snapshot() == original


@pytest.mark.parametrize("scope", ["user", "project"])
def test_setup_never_writes_a_setting_that_skips_an_approval(machine: Machine, scope: str) -> None:
    args = ["--project", str(machine.project)] if scope == "project" else []
    original = machine.snapshot()
    machine.setup(*args, "--only", "claude,codex,gemini,opencode,pi,cursor")
    written = {path: data.decode() for path, data in machine.snapshot().items() if original.get(path) != data}
    text = "\n".join(written.values())
    for bypass in (
        "enableAllProjectMcpServers",
        "enabledMcpjsonServers",
        "trusted_hash",
        "trust_level",
        "folderTrust",
        "dangerously",
        "bypass",
        "skipPermissions",
        '"trust": true',
        "defaultMode",
        "bypassPermissions",
        "autoApprove",
        "alwaysAllow",
    ):
        assert bypass not in text.replace('trust_level = "trusted"', ""), bypass
    assert not (machine.home / ".gemini" / "trustedFolders.json").exists()
    assert "hooks.state" not in machine.read(".codex/config.toml")


def test_a_hand_formatted_settings_file_keeps_its_compact_arrays_and_indentation(machine: Machine) -> None:
    mine = (
        "{\n"
        '   "permissions": {"allow": ["Bash(git status)", "Bash(npm test)"], "deny": ["Read(.env)"]},\n'
        '   "model":  "opus",\n'
        '   "hooks": {\n'
        '      "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]\n'
        "   }\n"
        "}\n"
    )
    machine.write(".claude/settings.json", mine)
    machine.setup("--only", "claude")

    text = machine.read(".claude/settings.json")
    assert text.startswith(
        '{\n   "permissions": {"allow": ["Bash(git status)", "Bash(npm test)"], "deny": '
        '["Read(.env)"]},\n   "model":  "opus",\n   "hooks": {\n'
    )
    assert '\n      "SessionStart": [\n         {\n' in text  # hive's own entries in the file's 3 spaces
    assert "hive_hook.py" in json.loads(text)["hooks"]["Stop"][1]["hooks"][0]["command"]
    machine.setup("--remove")
    assert machine.read(".claude/settings.json") == mine


def test_project_files_hold_no_path_of_this_machine_so_the_team_can_commit_them(machine: Machine) -> None:
    project = machine.project
    machine.setup("--project", str(project), "--only", "claude,codex,gemini,opencode,pi,cursor")

    here = {
        str(machine.root),
        str(machine.home),
        sys.prefix,
        sys.base_prefix,
        sys.executable,
        os.path.realpath(sys.executable),
        str(REPO),
        str(Path(tempfile.gettempdir())),
    }
    files = [p for p in project.rglob("*") if p.is_file()]
    assert len(files) == 13
    for path in files:
        text = path.read_text(encoding="utf-8")
        found = sorted(mark for mark in here if mark in text)
        assert not found, f"{path.relative_to(project)} names {found}"
    # The hive every teammate has on PATH: `hive mcp` and `hive hook <harness> <event>`.
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["hive"] == {
        "type": "stdio",
        "command": "hive",
        "args": ["mcp"],
        "alwaysLoad": True,
    }
    assert tomllib.loads((project / ".codex/config.toml").read_text())["mcp_servers"]["hive"]["command"] == "hive"
    commands = [
        handler["command"]
        for groups in json.loads((project / ".codex/hooks.json").read_text())["hooks"].values()
        for group in groups
        for handler in group["hooks"]
    ]
    assert commands and all(command.startswith("hive hook codex ") for command in commands)
    gemini = json.loads((project / ".gemini/settings.json").read_text())
    assert gemini["mcpServers"]["hive"]["command"] == "hive"

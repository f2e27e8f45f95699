"""The descriptor table: the hookspec contract, the six built-in harnesses, a third-party one.

Everything goes through the real plugin manager; the third-party harness is a real package,
installed with pip into a temporary folder and loaded through its entry point in a fresh
interpreter, the way any other installed plugin would be.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hive.integrations import hookspecs, registry
from hive.integrations.descriptor import EVENTS, HOOK_MARKERS, HookPoint, InstallContext, NativeFile

BUILTIN = ("claude-code", "codex", "cursor", "gemini", "opencode", "pi")
SPECS = {name: fn for name, fn in vars(hookspecs).items() if name.startswith("hive_") and inspect.isfunction(fn)}


def context(scope: str = "user", hive_command: tuple[str, ...] = ("hive",)) -> InstallContext:
    return InstallContext(
        scope=scope,  # type: ignore[arg-type]
        hook_command=lambda harness, native: f"hive hook {harness} {native}",
        mcp_command=("hive", "mcp"),
        hive_command=hive_command,
    )


def point(harness: str, native: str) -> HookPoint:
    found = registry.harness(harness).point(native)
    assert found is not None, f"{harness} has no hook point {native}"
    return found


def reply(harness: str, native: str, text: str = "You have mail.") -> str:
    return registry.harness(harness).reply(point(harness, native), text, {})


# ---- the contract -----------------------------------------------------------------------


def test_the_contract_declares_one_hook_per_plane() -> None:
    assert set(SPECS) == {
        "hive_harness",
        "hive_hook_points",
        "hive_presence",
        "hive_tiers",
        "hive_native_files",
        "hive_reply",
        "hive_deny",
        "hive_identify_caller",
        "hive_app_server",
        "hive_setup_steps",
        "hive_doctor_checks",
        "hive_doctor_project",
    }


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hookspec_documents_its_arguments_and_what_it_returns(name: str) -> None:
    doc = inspect.getdoc(SPECS[name]) or ""
    assert doc, f"{name} has no docstring"
    for arg in inspect.signature(SPECS[name]).parameters:
        assert f"``{arg}" in doc, f"{name}'s docstring does not mention its argument {arg!r}"
    assert "return" in doc.lower(), f"{name}'s docstring does not say what it returns"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hookspec_is_listed_with_its_signature_in_the_module_docs(name: str) -> None:
    listed = f"``{name}({', '.join(inspect.signature(SPECS[name]).parameters)})``"
    assert listed in (hookspecs.__doc__ or ""), f"{listed} is missing from the hookspecs module docstring"


def test_every_builtin_hook_implementation_matches_a_declared_hookspec() -> None:
    registry.plugin_manager().check_pending()


# ---- the six built-in harnesses -----------------------------------------------------------


def test_the_six_builtin_harnesses_are_registered_under_their_canonical_names() -> None:
    assert set(BUILTIN) <= set(registry.harnesses())


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("claude", "claude-code"),
        ("codex-cli", "codex"),
        ("gemini-cli", "gemini"),
        ("cursor-agent", "cursor"),
        ("opencode-ai", "opencode"),
        ("pi-coding-agent", "pi"),
    ],
)
def test_a_harness_is_found_by_its_alias(alias: str, name: str) -> None:
    assert registry.harness(alias).name == name


def test_an_unknown_harness_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="claude-code"):
        registry.harness("no-such-agent")


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_harness_answers_every_plane(name: str) -> None:
    hook = registry.plugin_manager().hook
    identity = registry.harness(name).identity
    assert identity.name == name and identity.title and identity.binaries and identity.config_dirs
    points = hook.hive_hook_points(harness=name)
    assert points, "observe: no hook points"
    assert {p.event for p in points} <= set(EVENTS)
    assert {"session.start", "turn.stop"} <= {p.event for p in points}
    assert hook.hive_presence(harness=name) is not None, "presence: no answer"
    tiers = hook.hive_tiers(harness=name)
    assert tiers is not None and tiers.default in ("push", "turn", "pull"), "inject: no tiers"
    for scope in ("user", "project"):
        files = hook.hive_native_files(harness=name, context=context(scope))
        assert files, f"install: no native files at {scope} scope"
        assert {f.role for f in files} & {"hooks", "plugin"}, "install: nothing that observes the session"
    for p in points:
        assert registry.harness(name).reply(p, "", {}) == p.no_opinion, "gate: empty mail must be no opinion"


@pytest.mark.parametrize("name", BUILTIN)
def test_another_harnesss_name_gets_no_answer_from_a_plugin(name: str) -> None:
    module = next(
        sys.modules[m]
        for m in registry.BUILTIN
        if hasattr(sys.modules[m], "hive_harness") and sys.modules[m].hive_harness().name == name
    )
    for spec in ("hive_hook_points", "hive_presence", "hive_tiers"):
        assert getattr(module, spec)(harness="acme-agent") is None
    assert module.hive_native_files(harness="acme-agent", context=context()) is None


@pytest.mark.parametrize(
    ("name", "push"),
    [("claude-code", "async_rewake"), ("codex", "app_server"), ("opencode", "plugin"), ("pi", "plugin")],
)
def test_harnesses_that_can_wake_an_idle_session_default_to_push(name: str, push: str) -> None:
    tiers = registry.harness(name).tiers()
    assert (tiers.default, tiers.push) == ("push", push)


@pytest.mark.parametrize("name", ["gemini", "cursor"])
def test_gemini_and_cursor_stay_on_the_turn_tier_and_tell_senders_there_is_no_idle_wake(name: str) -> None:
    tiers = registry.harness(name).tiers()
    assert (tiers.default, tiers.push) == ("turn", None)
    assert "no idle wake" in tiers.note


@pytest.mark.parametrize(
    ("name", "natives"),
    [
        (
            "claude-code",
            ["SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd"],
        ),
        ("codex", ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "PermissionRequest"]),
        ("gemini", ["SessionStart", "BeforeAgent", "AfterTool", "AfterAgent", "SessionEnd"]),
        ("cursor", ["sessionStart", "beforeSubmitPrompt", "postToolUse", "stop", "sessionEnd"]),
    ],
)
def test_hooked_harnesses_listen_to_the_measured_events(name: str, natives: list[str]) -> None:
    assert [p.native for p in registry.harness(name).hook_points()] == natives


@pytest.mark.parametrize("name", BUILTIN)
def test_mid_turn_tool_points_inject_only_waking_mail(name: str) -> None:
    for p in registry.harness(name).hook_points():
        assert p.wakes_only == (p.event == "tool.after" and p.inject is not None), p.native


# ---- install plane -------------------------------------------------------------------------


def files_of(name: str, scope: str = "user", **kw: Any) -> dict[tuple[str, str], NativeFile]:
    return {(f.role, f.path): f for f in registry.harness(name).native_files(context(scope, **kw))}


def owned_keys(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in owned_keys(v, (*path, str(key)))] or [path]
    if isinstance(value, list):
        return [k for v in value for k in owned_keys(v, path)]
    return [path]


@pytest.mark.parametrize("scope", ["user", "project"])
@pytest.mark.parametrize("name", BUILTIN)
def test_no_native_file_skips_the_harnesss_own_approval_prompts(name: str, scope: str) -> None:
    # A hook where hive never answers (Codex's PermissionRequest, only watched) decides nothing.
    silent = {p.native for p in registry.harness(name).hook_points() if p.inject is None and not p.no_opinion}
    for f in registry.harness(name).native_files(context(scope)):
        for path in owned_keys({"/".join(k): v for k, v in f.owned.items()}):
            joined = "/".join(part for part in "/".join(path).split("/") if part not in silent).lower()
            assert not any(word in joined for word in ("permission", "trust", "allow", "bypass", "yolo")), (
                f"{f.path} would write {joined}"
            )


@pytest.mark.parametrize("scope", ["user", "project"])
@pytest.mark.parametrize("name", ["claude-code", "codex", "cursor", "gemini"])
def test_every_hook_command_written_is_recognisable_as_hives(name: str, scope: str) -> None:
    hooks = [f for f in registry.harness(name).native_files(context(scope)) if f.role == "hooks"]
    assert hooks
    commands = [
        entry
        for f in hooks
        for key, v in f.owned.items()
        if key[0] == "hooks"
        for entry in json.dumps(v).split('"command": ')[1:]
    ]
    assert commands
    assert all(any(marker in c for marker in HOOK_MARKERS) for c in commands)


def test_codex_gets_its_mcp_table_with_the_per_server_tool_approval_setting() -> None:
    toml = files_of("codex")["mcp", ".codex/config.toml"]
    assert toml.format == "toml"
    assert toml.owned == {
        ("mcp_servers", "hive"): {"command": "hive", "args": ["mcp"], "default_tools_approval_mode": "approve"}
    }
    assert ("hooks", ".codex/hooks.json") in files_of("codex")


def test_gemini_keeps_mcp_and_hooks_in_its_settings_file_with_timeouts_in_milliseconds() -> None:
    files = files_of("gemini")
    assert files["mcp", ".gemini/settings.json"].owned == {("mcpServers", "hive"): {"command": "hive", "args": ["mcp"]}}
    hooks = files["hooks", ".gemini/settings.json"].owned
    assert hooks["hooks", "AfterTool"] == [
        {"hooks": [{"type": "command", "command": "hive hook gemini AfterTool", "timeout": 5000}]}
    ]


def test_cursor_hooks_file_is_version_1_with_bare_command_entries() -> None:
    owned = files_of("cursor")["hooks", ".cursor/hooks.json"].owned
    assert owned["version",] == 1
    assert owned["hooks", "stop"] == [{"command": "hive hook cursor stop", "timeout": 5}]
    assert ("mcp", ".cursor/mcp.json") in files_of("cursor")


@pytest.mark.parametrize(
    ("scope", "config", "plugin"),
    [
        ("user", ".config/opencode/opencode.json", ".config/opencode/plugins/hive.ts"),
        ("project", "opencode.json", ".opencode/plugins/hive.ts"),
    ],
)
def test_opencode_gets_a_local_mcp_entry_and_its_plugin_rendered_with_the_hive_argv(
    scope: str, config: str, plugin: str
) -> None:
    files = files_of("opencode", scope, hive_command=("/opt/py/bin/python", "-m", "hive"))
    assert files["mcp", config].owned == {
        ("mcp", "hive"): {"type": "local", "command": ["hive", "mcp"], "enabled": True}
    }
    source = files["plugin", plugin].content
    assert 'const HIVE_COMMAND: string[] = ["/opt/py/bin/python", "-m", "hive"];' in source
    assert "__HIVE_COMMAND__" not in source


@pytest.mark.parametrize(
    ("scope", "extension"), [("user", ".pi/agent/extensions/hive.ts"), ("project", ".pi/extensions/hive.ts")]
)
def test_pi_gets_only_its_extension_and_skills_because_it_has_no_mcp(scope: str, extension: str) -> None:
    files = files_of("pi", scope)
    assert {role for role, _ in files} == {"plugin", "skill"}
    assert 'const HIVE_COMMAND: string[] = ["hive"];' in files["plugin", extension].content


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("claude-code", ".claude/skills"),
        ("codex", ".agents/skills"),
        ("gemini", ".agents/skills"),
        ("opencode", ".agents/skills"),
        ("pi", ".agents/skills"),
        ("cursor", ".cursor/skills"),
    ],
)
def test_skills_go_to_a_folder_the_harness_reads(name: str, folder: str) -> None:
    skills = [path for role, path in files_of(name) if role == "skill"]
    assert skills == [f"{folder}/hive/SKILL.md"]


# ---- identifying the real caller -------------------------------------------------------------

CURSOR_STOP = {
    "conversation_id": "c-1",
    "generation_id": "g-1",
    "hook_event_name": "stop",
    "status": "completed",
    "loop_count": 0,
    "workspace_roots": ["/home/ada/repo"],
    "cursor_version": "1.7.0",
}
CLAUDE_STOP = {
    "session_id": "s-1",
    "transcript_path": "/home/ada/.claude/projects/-repo/s-1.jsonl",
    "cwd": "/home/ada/repo",
    "hook_event_name": "Stop",
    "stop_hook_active": False,
}
CODEX_STOP = {
    "session_id": "t-1",
    "turn_id": "u-1",
    "cwd": "/repo",
    "hook_event_name": "Stop",
    "model": "m",
    "transcript_path": "/home/ada/.codex/sessions/2026/12/02/rollout-2026-12-02T10-00-00-t-1.jsonl",
    "permission_mode": "default",
    "stop_hook_active": False,
}
GEMINI_STOP = {
    "session_id": "g-1",
    "transcript_path": "/home/ada/.gemini/tmp/p/chats/session-1.jsonl",
    "cwd": "/repo",
    "hook_event_name": "AfterAgent",
    "timestamp": "2026-12-02T10:00:00Z",
}


def test_a_cursor_shaped_stdin_sent_to_claude_codes_hook_resolves_to_cursor() -> None:
    caller = registry.identify_caller("claude-code", CURSOR_STOP, {"CURSOR_PROJECT_DIR": "/home/ada/repo"})
    assert caller.name == "cursor"
    assert caller.reply(point("cursor", "stop"), "mail", CURSOR_STOP) == '{"followup_message": "mail"}'


def test_cursor_is_recognised_from_its_stdin_alone() -> None:
    assert registry.identify_caller("claude-code", CURSOR_STOP, {}).name == "cursor"


def test_cursor_identification_runs_before_every_other_harnesss() -> None:
    impls = registry.plugin_manager().hook.hive_identify_caller.get_hookimpls()
    cursor = next(i for i in impls if i.plugin_name == "hive.integrations.cursor")
    assert cursor.tryfirst


def test_claude_codes_own_stdin_keeps_the_name_in_the_command_line() -> None:
    env = {"CLAUDECODE": "1", "CLAUDE_CODE_SESSION_ID": "s-1", "CURSOR_TRACE_ID": "inherited-from-a-terminal"}
    assert registry.identify_caller("claude-code", CLAUDE_STOP, env).name == "claude-code"


def test_codex_is_recognised_by_its_turn_id_and_rollout_transcript() -> None:
    assert registry.identify_caller("claude-code", CODEX_STOP, {}).name == "codex"


def test_gemini_is_recognised_when_its_session_env_matches_the_stdin() -> None:
    assert registry.identify_caller("claude-code", GEMINI_STOP, {"GEMINI_SESSION_ID": "g-1"}).name == "gemini"


def test_a_gemini_env_inherited_by_another_agent_is_not_proof() -> None:
    assert registry.identify_caller("claude-code", CLAUDE_STOP, {"GEMINI_SESSION_ID": "g-1"}).name == "claude-code"


# ---- reply shapes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "native", "expected"),
    [
        (
            "claude-code",
            "SessionStart",
            '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "You have mail."}}',
        ),
        (
            "claude-code",
            "UserPromptSubmit",
            '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "You have mail."}}',
        ),
        (
            "claude-code",
            "PostToolUse",
            '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "You have mail."}}',
        ),
        ("claude-code", "Stop", "You have mail."),  # on stderr, with exit 2 (the hook client)
        (
            "codex",
            "SessionStart",
            '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "You have mail."}}',
        ),
        (
            "codex",
            "UserPromptSubmit",
            '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "You have mail."}}',
        ),
        (
            "codex",
            "PostToolUse",
            '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "You have mail."}}',
        ),
        ("codex", "Stop", '{"decision": "block", "reason": "You have mail."}'),
        (
            "gemini",
            "SessionStart",
            '{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "You have mail."}}',
        ),
        (
            "gemini",
            "BeforeAgent",
            '{"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": "You have mail."}}',
        ),
        (
            "gemini",
            "AfterTool",
            '{"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "You have mail."}}',
        ),
        ("gemini", "AfterAgent", '{"decision": "block", "reason": "You have mail."}'),
        ("cursor", "stop", '{"followup_message": "You have mail."}'),
    ],
)
def test_each_inject_point_answers_in_its_harnesss_exact_shape(name: str, native: str, expected: str) -> None:
    assert reply(name, native) == expected


@pytest.mark.parametrize(
    ("name", "native", "expected"),
    [
        ("claude-code", "SessionEnd", ""),
        ("gemini", "SessionEnd", ""),
        ("cursor", "postToolUse", ""),
        ("cursor", "beforeSubmitPrompt", '{"continue": true}'),
    ],
)
def test_observe_only_points_answer_no_opinion_even_with_mail(name: str, native: str, expected: str) -> None:
    assert reply(name, native) == expected


@pytest.mark.parametrize("name", ["opencode", "pi"])
def test_plugin_harnesses_have_no_stdout_reply_because_their_plugin_injects(name: str) -> None:
    for p in registry.harness(name).hook_points():
        assert registry.harness(name).reply(p, "You have mail.", {}) == ""


# ---- a third-party harness -------------------------------------------------------------------

ACME_PLUGIN = '''
"""A made-up harness, registered under the hive.harnesses entry point group."""
import pluggy

from hive.integrations.descriptor import HookPoint, Identity, Tiers

hookimpl = pluggy.HookimplMarker("hive")
NAME = "acme-agent"


@hookimpl
def hive_harness():
    return Identity(name=NAME, title="Acme Agent", aliases=("acme",), binaries=("acme",))


@hookimpl
def hive_hook_points(harness):
    if harness != NAME:
        return None
    return [HookPoint("afterTurn", "turn.stop", inject="stop_block"), HookPoint("toolDone", "tool.after")]


@hookimpl
def hive_tiers(harness):
    return Tiers(default="turn") if harness == NAME else None
'''

ACME_PYPROJECT = """
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-agent-hive"
version = "0.1.0"

[project.entry-points."hive.harnesses"]
acme-agent = "acme_hive"

[tool.setuptools]
py-modules = ["acme_hive"]
"""

ACME_PROBE = """
import json
from hive.integrations import registry
names = list(registry.harnesses())
out = {"names": names}
if "acme-agent" in names:
    acme = registry.harness("acme")
    out["points"] = [[p.native, p.event] for p in acme.hook_points()]
    out["tier"] = acme.tiers().default
    out["reply"] = acme.reply(acme.point("afterTurn"), "hi", {})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def acme_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("acme")
    package = root / "pkg"
    package.mkdir()
    (package / "pyproject.toml").write_text(textwrap.dedent(ACME_PYPROJECT), encoding="utf-8")
    (package / "acme_hive.py").write_text(textwrap.dedent(ACME_PLUGIN), encoding="utf-8")
    site = root / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return site


def probe(site: Path, **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k != "HIVE_LOAD_PLUGINS"}
    environ.update(PYTHONPATH=str(site), **env)
    result = subprocess.run([sys.executable, "-c", ACME_PROBE], env=environ, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_an_installed_third_party_harness_is_loaded_through_its_entry_point_and_used(acme_site: Path) -> None:
    found = probe(acme_site)
    assert "acme-agent" in found["names"]
    assert set(BUILTIN) <= set(found["names"])
    assert found["points"] == [["afterTurn", "turn.stop"], ["toolDone", "tool.after"]]
    assert found["tier"] == "turn"
    assert found["reply"] == '{"decision": "block", "reason": "hi"}'


def test_an_empty_hive_load_plugins_keeps_third_party_harnesses_out(acme_site: Path) -> None:
    found = probe(acme_site, HIVE_LOAD_PLUGINS="")
    assert "acme-agent" not in found["names"]
    assert set(BUILTIN) <= set(found["names"])


def test_hive_load_plugins_naming_a_harness_loads_just_that_one(acme_site: Path) -> None:
    assert "acme-agent" in probe(acme_site, HIVE_LOAD_PLUGINS="acme-agent")["names"]


def test_the_readme_states_for_each_harness_how_its_sessions_are_observed_as_its_descriptor_does() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").splitlines()

    def natives(points: list[HookPoint], events: tuple[str, ...]) -> str:
        return ", ".join(p.native for p in points if p.event in events) or "-"

    for harness in registry.harnesses().values():
        presence, points = harness.presence(), list(harness.hook_points())
        row = (
            f"| {harness.identity.title} | {presence.via} | {natives(points, presence.busy)} | "
            f"{natives(points, presence.idle)} | {natives(points, presence.waiting_approval)} | "
            f"{natives(points, ('tool.after',))} | {presence.ends} |"
        )
        assert row in readme, f"README.md lacks the row, or says otherwise: {row}"
        assert presence.via in ("hook", "plugin")


def test_each_harness_states_the_approvals_setup_leaves_to_the_person() -> None:
    table = registry.harnesses()
    user = [name for name, harness in table.items() if harness.setup_steps("user")]
    project = [name for name, harness in table.items() if harness.setup_steps("project")]
    assert user == ["codex", "cursor", "gemini"]
    assert project == ["claude-code", "codex", "cursor", "gemini", "pi"]
    assert len(table["codex"].setup_steps("project")) == 2


def test_only_claude_code_names_a_skills_folder_of_its_own_and_only_codex_an_app_server() -> None:
    table = registry.harnesses()
    links = {name: h.identity.project_skills for name, h in table.items() if h.identity.project_skills}
    assert {name: (link.folder, link.key) for name, link in links.items()} == {
        "claude-code": (".claude/skills", "claude")
    }
    assert [name for name, h in table.items() if h.app_server() is not None] == ["codex"]
    assert [name for name, h in table.items() if h.tiers().push == "app_server"] == ["codex"]

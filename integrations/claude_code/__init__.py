"""Claude Code (`claude`): hooks in settings.json, MCP in ~/.claude.json, skills in .claude/skills.

Measured contract: ../shared/notes/harnesses.md §1 and push.md §1a. Injection at SessionStart,
UserPromptSubmit, PostToolUse and PostToolUseFailure (2.1.197 runs only the latter for a failed
call, with its ``error`` text and no ``tool_response``) goes through
``hookSpecificOutput.additionalContext``; Stop blocks by exiting 2 with the messages on stderr
(never twice in a row: ``stop_hook_active``). That is the one shape every version shows the
model once: 2.1.332 shows a ``{"decision": "block", "reason"}`` reply twice (a system reminder
and a "Stop hook blocking error" message), 2.1.197 once. Push is a background hook with ``asyncRewake`` that waits
on the sidecar and exits 2 with the framed text, which wakes an idle session and lands mid-turn
after a tool result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..descriptor import (
    DoctorCheck,
    HookPoint,
    Identity,
    InstallContext,
    NativeFile,
    Presence,
    Scope,
    SkillsLink,
    Tiers,
)
from ..hookspecs import hookimpl

NAME = "claude-code"

IDENTITY = Identity(
    name=NAME,
    title="Claude Code",
    aliases=("claude", "claude_code"),
    binaries=("claude",),
    tested_up_to="2.1.332",  # .ci/npm-packages-current; the pin (.ci/npm-packages) is 2.1.197
    config_dirs=(".claude",),
    session_env=("CLAUDE_CODE_SESSION_ID",),
    caller_env=("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"),
    agent_env=("CLAUDECODE",),
    mcp_client_names=("claude-code",),
    mcp_session_env=("CLAUDE_CODE_SESSION_ID",),
    mcp_client_env=("CLAUDECODE",),
    # Claude Code reads only .claude/skills (../shared/notes/skills-and-popups.md A.5).
    project_skills=SkillsLink(folder=".claude/skills", key="claude"),
)

POINTS = [
    HookPoint("SessionStart", "session.start", inject="additional_context"),
    HookPoint("UserPromptSubmit", "prompt.submitted", inject="additional_context"),
    HookPoint("PostToolUse", "tool.after", inject="additional_context", wakes_only=True, matcher="*"),
    # A failed call (a command exiting non-zero, an Edit that did not apply) reaches only this one.
    HookPoint("PostToolUseFailure", "tool.after", inject="additional_context", wakes_only=True, matcher="*"),
    HookPoint("Stop", "turn.stop", inject="stderr_block"),
    HookPoint("SessionEnd", "session.end"),
]


@hookimpl
def hive_harness() -> Identity:
    return IDENTITY


@hookimpl
def hive_hook_points(harness: str) -> list[HookPoint] | None:
    return POINTS if harness == NAME else None


@hookimpl
def hive_presence(harness: str) -> Presence | None:
    if harness != NAME:
        return None
    return Presence(
        transcripts=(".claude/projects/*/*.jsonl",),
        todos=(".claude/tasks/*/*.json",),
        running=(".claude/sessions/*.json",),
    )


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    return Tiers(default="push", push="async_rewake") if harness == NAME else None


@hookimpl
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    if harness != NAME:
        return None
    hooks: dict[str, list[dict[str, Any]]] = {}
    for point in POINTS:
        group: dict[str, Any] = {
            "hooks": [
                {"type": "command", "command": context.hook_command(NAME, point.native), "timeout": point.timeout}
            ]
        }
        if point.matcher:
            group["matcher"] = point.matcher
        hooks[point.native] = [group]
    # The push watcher: a background hook re-armed at every session start and every Stop.
    for native in ("SessionStart", "Stop"):
        hooks[native].append(
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": context.hook_command(NAME, "watch"),
                        "asyncRewake": True,
                        "timeout": 86400,
                    }
                ]
            }
        )
    settings = ".claude/settings.json"
    mcp_file = ".claude.json" if context.scope == "user" else ".mcp.json"
    command, *args = context.mcp_command
    files = [
        # alwaysLoad: since ToolSearch (on for every API URL from 2.1.332 on) Claude Code offers
        # MCP tools only by name behind a search tool, beside its own ListAgents/SendMessage;
        # this keeps hive's few tools offered whole. Versions before it ignore the key.
        NativeFile(
            role="mcp",
            path=mcp_file,
            format="json",
            owned={("mcpServers", "hive"): {"type": "stdio", "command": command, "args": args, "alwaysLoad": True}},
        ),
        NativeFile(
            role="hooks",
            path=settings,
            format="json",
            owned={("hooks", event): groups for event, groups in hooks.items()},
        ),
    ]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".claude/skills/{skill}/SKILL.md", format="text"))
    return files


@hookimpl
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    if harness != NAME or scope != "project":
        return None
    return [
        "Claude Code asks before it starts servers from a project's .mcp.json: approve 'hive' when it "
        "asks (or in `/mcp`)"
    ]


@hookimpl
def hive_doctor_project(harness: str, project: Path, where: str, home: Path) -> list[DoctorCheck] | None:
    if harness != NAME:
        return None
    from . import doctor

    return doctor.project_checks(project, where, home)

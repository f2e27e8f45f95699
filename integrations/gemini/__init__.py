"""Gemini CLI (`gemini`): MCP and hooks in settings.json, skills in .agents/skills.

Measured contract: ../shared/notes/harnesses.md §3 (Gemini CLI 0.61.0), push.md §3 and
mcp-session-identity.md (Gemini). The hooks live in settings.json with Claude Code's
matcher-group shape, but their ``timeout`` is in milliseconds. SessionStart, BeforeAgent and
AfterTool inject through ``hookSpecificOutput.additionalContext``; AfterAgent blocks with
``{"decision": "block", "reason"}``, which starts a new turn whose prompt is the reason.

No idle wake exists: nothing fires while the session is idle, and the only workaround (an
AfterAgent hook that blocks while it waits) locks the person out of their own session, so hive
stays on the turn tier and says so. The MCP entry is written without ``"trust": true``, which
would skip Gemini's tool confirmations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..descriptor import (
    DoctorCheck,
    DoctorContext,
    HookPoint,
    Identity,
    InstallContext,
    NativeFile,
    Presence,
    Scope,
    Tiers,
)
from ..hookspecs import hookimpl

NAME = "gemini"

IDENTITY = Identity(
    name=NAME,
    title="Gemini CLI",
    aliases=("gemini-cli",),
    binaries=("gemini",),
    tested_up_to="0.61.0",  # .ci/npm-packages: the pin is also the current release
    config_dirs=(".gemini",),
    session_env=("GEMINI_SESSION_ID",),
    caller_env=("GEMINI_SESSION_ID",),
    agent_env=("GEMINI_CLI",),
    mcp_client_names=("gemini-cli-mcp-client",),
    mcp_session_env=("GEMINI_SESSION_ID",),  # Gemini sets it only for hooks; a wrapper may set it for MCP
    mcp_client_env=("GEMINI_CLI",),
)

POINTS = [
    HookPoint("SessionStart", "session.start", inject="additional_context"),
    HookPoint("BeforeAgent", "prompt.submitted", inject="additional_context"),
    HookPoint("AfterTool", "tool.after", inject="additional_context", wakes_only=True),
    HookPoint("AfterAgent", "turn.stop", inject="stop_block"),
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
    return Presence(transcripts=(".gemini/tmp/*/chats/session-*.jsonl",))


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    if harness != NAME:
        return None
    return Tiers(
        default="turn",
        note="Gemini CLI has no idle wake: the session sees this at its next tool call or "
        "prompt, or when its current turn ends.",
    )


@hookimpl
def hive_identify_caller(payload: dict[str, Any], env: dict[str, str]) -> str | None:
    # The env var alone could be inherited by an agent started from a Gemini shell tool; matching
    # the stdin session id proves Gemini itself runs this hook.
    session = payload.get("session_id")
    if session and env.get("GEMINI_SESSION_ID") == session:
        return NAME
    return None


@hookimpl
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    if harness != NAME:
        return None
    hooks: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for point in POINTS:
        group: dict[str, Any] = {
            "hooks": [
                {
                    "type": "command",
                    "command": context.hook_command(NAME, point.native),
                    "timeout": point.timeout * 1000,
                }
            ]
        }
        if point.matcher:
            group["matcher"] = point.matcher
        hooks["hooks", point.native] = [group]
    command, *args = context.mcp_command
    # Both live in one settings.json; two records keep the roles apart for the installer.
    settings = ".gemini/settings.json"
    files = [
        NativeFile(
            role="mcp", path=settings, format="json", owned={("mcpServers", "hive"): {"command": command, "args": args}}
        ),
        NativeFile(role="hooks", path=settings, format="json", owned=dict(hooks)),
    ]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".agents/skills/{skill}/SKILL.md", format="text"))
    return files


@hookimpl
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    if harness != NAME:
        return None
    if scope == "user":
        return [
            "Gemini CLI loads MCP servers and hooks only in folders you trust: trust each project folder "
            "when `gemini` asks there (or with `/permissions`)"
        ]
    return [
        "Gemini CLI reads a project's .gemini/settings.json only in a trusted folder: trust it when "
        "`gemini` asks (or with `/permissions`)"
    ]


@hookimpl
def hive_doctor_checks(harness: str, context: DoctorContext) -> list[DoctorCheck] | None:
    if harness != NAME:
        return None
    from . import doctor

    return doctor.checks(context)


@hookimpl
def hive_doctor_project(harness: str, project: Path, where: str, home: Path) -> list[DoctorCheck] | None:
    if harness != NAME:
        return None
    from . import doctor

    return doctor.project_checks(project, where, home)

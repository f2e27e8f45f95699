"""Codex CLI (`codex`): MCP in config.toml, hooks in hooks.json, skills in .agents/skills.

Measured contract: ../shared/notes/harnesses.md §2 (Codex 0.171.0), push.md §2 and
mcp-session-identity.md (Codex). The hooks file has Claude Code's shape; SessionStart,
UserPromptSubmit and PostToolUse inject through ``hookSpecificOutput.additionalContext`` (each
arrives as a developer message) and Stop blocks with ``{"decision": "block", "reason"}``, which
Codex hands back as a user message and answers in a new model call. Codex has no SessionEnd.
PermissionRequest runs just before Codex asks its person to approve a call (measured with 0.171.0
on ``codex app-server``: the hook ran, then ``item/commandExecution/requestApproval``; the rollout
records nothing of the request): hive answers nothing there, so the person is still asked, and the
session shows as waiting for approval until its next hook (the call ran, or the turn ended).

Two switches Codex needs, both the user's own decision and neither a bypass of Codex's prompts:
the MCP table carries ``default_tools_approval_mode = "approve"`` (the per-server setting; without
it a hive tool call fails under ``approval_policy = "never"``), and Codex runs a non-managed hook
only once the person has trusted it in ``/hooks``; until then it is silently skipped, so setup
must say so. Project ``.codex/`` files load only in trusted projects.

Push: the TUI runs on a local app-server; the sidecar steers a busy turn (``turn/steer``) or
starts one when idle (``turn/start``) over its control socket, with ``codex queue`` as fallback
(``app_server.py`` here, driven by ``hive.sidecar.mail.codex_push``). The TUI runs hooks in that
daemon, so the session's pid is the daemon's, which outlives the TUI.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ..push import AppServer

NAME = "codex"

IDENTITY = Identity(
    name=NAME,
    title="Codex CLI",
    aliases=("codex-cli", "openai-codex"),
    binaries=("codex",),
    tested_up_to="0.171.0",  # .ci/npm-packages: the pin is also the current release
    config_dirs=(".codex",),
    # Hooks get the parent env plus these two, which only the npm launcher sets.
    caller_env=("CODEX_MANAGED_BY_NPM", "CODEX_MANAGED_PACKAGE_ROOT"),
    agent_env=("CODEX_MANAGED_BY_NPM",),
    mcp_client_names=("codex-mcp-client",),
    # A tool call's _meta names the thread; the turn metadata (an object, or JSON text) carries it too.
    mcp_session_meta=("sessionId", "threadId"),
    mcp_session_meta_objects=(("x-codex-turn-metadata", "session_id"),),
)

# No matcher: an absent matcher matches every tool, as in Claude Code's shape.
POINTS = [
    HookPoint("SessionStart", "session.start", inject="additional_context"),
    HookPoint("UserPromptSubmit", "prompt.submitted", inject="additional_context"),
    HookPoint("PostToolUse", "tool.after", inject="additional_context", wakes_only=True),
    HookPoint("Stop", "turn.stop", inject="stop_block"),
    # Codex installs no PreToolUse here, so "tool.before" means only this: a call awaits approval.
    HookPoint("PermissionRequest", "tool.before"),
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
        busy=("prompt.submitted", "tool.after"),
        waiting_approval=("tool.before",),
        ends="its process exiting (Codex has no session-end hook)",
        transcripts=(".codex/sessions/*/*/*/rollout-*.jsonl",),
        titles=(".codex/session_index.jsonl",),
    )


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    if harness != NAME:
        return None
    # The sidecar drives the TUI's own app-server (hive.sidecar.mail.codex_push). A session no TUI runs
    # (`codex exec`) fails its first push and is told as the turn tier from then on.
    return Tiers(
        default="push",
        push="app_server",
        note="Codex: pushed through the TUI's app-server; `codex exec` sees it at its next tool call",
    )


@hookimpl
def hive_identify_caller(payload: dict[str, Any], env: dict[str, str]) -> str | None:
    # Codex's stdin carries a turn id and a rollout transcript; no other harness writes either.
    transcript = str(payload.get("transcript_path") or "")
    if "turn_id" in payload and os.path.basename(transcript).startswith("rollout-"):
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
                {"type": "command", "command": context.hook_command(NAME, point.native), "timeout": point.timeout}
            ]
        }
        if point.matcher:
            group["matcher"] = point.matcher
        hooks["hooks", point.native] = [group]
    command, *args = context.mcp_command
    # The same relative paths serve both scopes: ~/.codex/... for the user, <project>/.codex/... for a project.
    files = [
        NativeFile(
            role="mcp",
            path=".codex/config.toml",
            format="toml",
            owned={
                ("mcp_servers", "hive"): {"command": command, "args": args, "default_tools_approval_mode": "approve"}
            },
        ),
        NativeFile(role="hooks", path=".codex/hooks.json", format="json", owned=dict(hooks)),
    ]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".agents/skills/{skill}/SKILL.md", format="text"))
    return files


@hookimpl
def hive_app_server(harness: str) -> AppServer | None:
    if harness != NAME:
        return None
    from .tui import CodexAppServer  # psutil and the WebSocket client: only where a push runs

    return CodexAppServer()


@hookimpl
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    if harness != NAME:
        return None
    if scope == "user":
        return [
            "Codex runs hooks only once you trust them: start `codex`, type `/hooks` and trust hive's "
            "entries (until then Codex sessions get hive mail only when they call a hive tool)"
        ]
    return [
        "Codex reads a project's .codex/ folder only in a trusted project: trust it when `codex` asks",
        "then type `/hooks` in Codex and trust hive's hook entries",
    ]


@hookimpl
def hive_doctor_checks(harness: str, context: DoctorContext) -> list[DoctorCheck] | None:
    if harness != NAME:
        return None
    from . import doctor  # tomlkit and a codex app-server: only for `hive doctor`

    return doctor.checks(context)

"""Cursor: MCP in mcp.json, hooks in hooks.json (version 1), skills in .cursor/skills.

Documented contract only (no Cursor CLI could be run): ../shared/notes/harnesses.md §6, plus
Cursor's own docs (hooks, third-party hooks). Events are lowerCamelCase; every entry is a bare
``{"command", "timeout"}`` (seconds), without matchers. The common stdin is ``conversation_id``,
``generation_id``, ``hook_event_name`` and ``workspace_roots`` (a list: its first element is the
working folder), with optional ``model``, ``cursor_version`` and ``user_email``. The one documented
way into the model's context is the ``stop`` reply ``{"followup_message": text}``, which Cursor
submits as the next user message (bounded by ``loop_limit``); ``beforeSubmitPrompt`` only
answers ``{"continue", "user_message"}``, shown to the person, not the model, and the after-tool
hooks are observe-only. ``sessionStart`` injection is reported but unverified, so it only observes.

Cursor also runs Claude Code's hooks from ``~/.claude/settings.json`` and ``.claude/settings*.json``
(its "third-party hooks"), still with its own stdin: :func:`hive_identify_caller` runs first and
claims those calls, so a Claude-named hook answers in Cursor's shape.

No idle wake exists: hooks fire only during a turn, so Cursor stays on the turn tier.
"""

from __future__ import annotations

import json
from typing import Any

from ..descriptor import HookPoint, Identity, InstallContext, NativeFile, Presence, Scope, Tiers
from ..hookspecs import hookimpl

NAME = "cursor"

IDENTITY = Identity(
    name=NAME,
    title="Cursor",
    aliases=("cursor-agent", "cursor-ide"),
    binaries=("cursor", "cursor-agent"),
    config_dirs=(".cursor",),
    stdin_session="conversation_id",
    stdin_cwd="workspace_roots",
    caller_env=("CURSOR_PROJECT_DIR",),
    mcp_client_names=("cursor",),
)

# Cursor evidence in a hook's stdin: its session field plus one field no other harness sends.
CURSOR_FIELDS = ("workspace_roots", "cursor_version", "generation_id")

POINTS = [
    HookPoint("sessionStart", "session.start"),
    # A prompt gate: answering anything but "continue" would erase the person's prompt.
    HookPoint("beforeSubmitPrompt", "prompt.submitted", no_opinion=json.dumps({"continue": True})),
    HookPoint("postToolUse", "tool.after"),
    HookPoint("stop", "turn.stop", inject="followup_message"),
    HookPoint("sessionEnd", "session.end"),
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
    # Where Cursor keeps agent transcripts is not documented in the notes; busy/idle come from hooks.
    return Presence()


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    if harness != NAME:
        return None
    return Tiers(
        default="turn",
        note="Cursor has no idle wake: the session sees this when its current turn ends, or at the next prompt.",
    )


@hookimpl(tryfirst=True)
def hive_identify_caller(payload: dict[str, Any], env: dict[str, str]) -> str | None:
    if "conversation_id" not in payload:
        return None
    if any(field in payload for field in CURSOR_FIELDS) or "CURSOR_PROJECT_DIR" in env:
        return NAME
    return None


@hookimpl
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    if harness != NAME:
        return None
    command, *args = context.mcp_command
    owned: dict[tuple[str, ...], Any] = {("version",): 1}
    for point in POINTS:
        owned["hooks", point.native] = [{"command": context.hook_command(NAME, point.native), "timeout": point.timeout}]
    files = [
        NativeFile(
            role="mcp",
            path=".cursor/mcp.json",
            format="json",
            owned={("mcpServers", "hive"): {"command": command, "args": args}},
        ),
        NativeFile(role="hooks", path=".cursor/hooks.json", format="json", owned=owned),
    ]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".cursor/skills/{skill}/SKILL.md", format="text"))
    return files


@hookimpl
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    if harness != NAME:
        return None
    if scope == "user":
        return ["Cursor may list hive as a new MCP server to turn on: enable it under Settings → MCP"]
    return ["Cursor asks before it uses a project's .cursor/mcp.json: enable hive under Settings → MCP"]

"""pi (`pi`): no MCP at all; a TypeScript extension registers hive's tools and delivers mail.

Measured contract: ../shared/notes/harnesses.md §5 (pi 0.73.1), push.md §5 and
mcp-session-identity.md (pi). pi has no MCP by design, so the extension in
``{~/.pi/agent,.pi}/extensions/`` registers hive's tools with ``pi.registerTool``: every tool of
hive's MCP server as its ``tools/list`` shows them (one table, ``hive.sidecar.mcp.server.tool_table``), run
by that very server as a child of pi (``hive mcp``), except ``check_inbox``, which the extension
answers itself so that pi, not the server, holds the mail it shows. It injects at
``before_agent_start`` (a message) and ``tool_result`` (appended content), and pushes with
``pi.sendUserMessage``: ``deliverAs: "steer"`` while busy, a new turn when idle. The extension
is ``extension_template.ts`` with hive's shared sidecar client written in (plugin_source), the
hive argv and the tool table. Project extensions and ``.agents/skills`` load only once the
person trusts the project.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ..descriptor import HookPoint, Identity, InstallContext, NativeFile, Presence, Scope, Tiers
from ..hookspecs import hookimpl
from ..plugin_source import render

NAME = "pi"
TEMPLATE = Path(__file__).with_name("extension_template.ts")

IDENTITY = Identity(
    name=NAME,
    title="pi",
    aliases=("pi-coding-agent", "pi-agent"),
    binaries=("pi",),
    tested_up_to="0.73.1",  # .ci/npm-packages: the pin is also the current release
    config_dirs=(".pi/agent",),
    stdin_session="sessionId",
    stdin_cwd="cwd",
    caller_env=("PI_CODING_AGENT",),
    agent_env=("PI_CODING_AGENT",),
    # hive's extension is the MCP client (clientInfo "pi"): it names the session in each call's
    # _meta and in the server's environment (mcp-session-identity.md, pi).
    mcp_client_names=("pi",),
    mcp_session_meta=("pi/sessionId",),
    mcp_session_env=("PI_SESSION_ID",),
    mcp_client_env=("PI_CODING_AGENT",),
    transcript_field="",
)

# Extension events, not command hooks: the extension injects, so no reply shape applies.
POINTS = [
    HookPoint("session_start", "session.start"),
    HookPoint("before_agent_start", "prompt.submitted", inject="plugin"),
    HookPoint("tool_call", "tool.before"),
    HookPoint("tool_result", "tool.after", inject="plugin", wakes_only=True),
    HookPoint("agent_end", "turn.stop"),
    HookPoint("session_shutdown", "session.end"),
]


@cache
def render_extension(hive_command: tuple[str, ...]) -> str:
    """The extension source for a hive argv, offering the tools hive's MCP server offers."""
    from hive.sidecar.mcp.server import tool_table  # the MCP SDK: only when an extension is written

    return render(TEMPLATE, {"HIVE_COMMAND": list(hive_command), "HIVE_TOOLS": tool_table()}, tables=("HIVE_TOOLS",))


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
    # pi's docs/session-format.md: ~/.pi/agent/sessions/--<path>--/<timestamp>_<uuid>.jsonl
    return Presence(
        transcripts=(".pi/agent/sessions/*/*.jsonl",), via="plugin", ends="session_shutdown, or the pi process exiting"
    )


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    # No MCP, so pull goes through the extension's own tools rather than an MCP server.
    return Tiers(default="push", push="plugin") if harness == NAME else None


@hookimpl
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    if harness != NAME:
        return None
    extension = ".pi/agent/extensions/hive.ts" if context.scope == "user" else ".pi/extensions/hive.ts"
    files = [NativeFile(role="plugin", path=extension, format="text", content=render_extension(context.hive_command))]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".agents/skills/{skill}/SKILL.md", format="text"))
    return files


@hookimpl
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    if harness != NAME or scope != "project":
        return None
    return ["pi loads a project's .pi/ extensions and skills only after you trust the project: trust it when `pi` asks"]

"""opencode (`opencode`): MCP in opencode.json, a TypeScript plugin for everything hooks do elsewhere.

Measured contract: ../shared/notes/harnesses.md §4 (opencode 1.18.33), push.md §4 and
mcp-session-identity.md (opencode). There is no hooks file: a plugin in
``{~/.config/opencode,.opencode}/plugins/`` gets the events and hook keys below, talks to the
sidecar over its socket and injects itself (``tool.execute.after`` appends to the MCP result,
``chat.message`` adds a part to the prompt, ``session.idle`` delivers with
``client.session.promptAsync``, which also wakes an idle session: the push tier). The plugin is
``plugin_template.ts`` with hive's shared sidecar client written in (plugin_source).

opencode rejects unknown keys in opencode.json, so the MCP entry carries only the measured keys,
and its command is one argv array. The installer does not touch opencode's ``permission`` table.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ..descriptor import HookPoint, Identity, InstallContext, NativeFile, Presence, Tiers
from ..hookspecs import hookimpl
from ..plugin_source import render

NAME = "opencode"
TEMPLATE = Path(__file__).with_name("plugin_template.ts")

IDENTITY = Identity(
    name=NAME,
    title="opencode",
    aliases=("opencode-ai", "open-code"),
    binaries=("opencode",),
    tested_up_to="1.18.33",  # .ci/npm-packages: the pin is also the current release
    config_dirs=(".config/opencode", ".local/share/opencode"),
    stdin_session="sessionID",
    stdin_cwd="directory",
    caller_env=("OPENCODE",),
    agent_env=("OPENCODE",),
    mcp_client_names=("opencode",),
    mcp_client_env=("OPENCODE",),
    transcript_field="",
)

# Plugin events and hook keys, not command hooks: the plugin injects, so no reply shape applies.
POINTS = [
    HookPoint("session.created", "session.start"),
    HookPoint("chat.message", "prompt.submitted", inject="plugin"),
    # opencode asks its person before a tool runs (the permission.updated bus event): the session
    # waits for approval until its next event.
    HookPoint("permission.updated", "tool.before"),
    HookPoint("tool.execute.after", "tool.after", inject="plugin", wakes_only=True),
    HookPoint("session.idle", "turn.stop", inject="plugin"),
    HookPoint("session.deleted", "session.end"),
]


@cache
def render_plugin(hive_command: tuple[str, ...]) -> str:
    """The plugin source for a hive argv."""
    return render(TEMPLATE, {"HIVE_COMMAND": list(hive_command)})


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
    # opencode keeps sessions in its own store behind its server API, not one transcript file
    # per session; busy and idle come from the plugin's events.
    return Presence(
        busy=("prompt.submitted", "tool.after"),
        waiting_approval=("tool.before",),
        via="plugin",
        ends="session.deleted, or the opencode process exiting",
    )


@hookimpl
def hive_tiers(harness: str) -> Tiers | None:
    return Tiers(default="push", push="plugin") if harness == NAME else None


@hookimpl
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    if harness != NAME:
        return None
    if context.scope == "user":
        config, plugin = ".config/opencode/opencode.json", ".config/opencode/plugins/hive.ts"
    else:
        config, plugin = "opencode.json", ".opencode/plugins/hive.ts"
    files = [
        NativeFile(
            role="mcp",
            path=config,
            format="json",
            owned={("mcp", "hive"): {"type": "local", "command": list(context.mcp_command), "enabled": True}},
        ),
        NativeFile(role="plugin", path=plugin, format="text", content=render_plugin(context.hive_command)),
    ]
    for skill in context.skills:
        files.append(NativeFile(role="skill", path=f".agents/skills/{skill}/SKILL.md", format="text"))
    return files

"""The approval steps a person takes in each harness after ``hive setup``; hive never takes them itself.

Harnesses guard hooks, project configs and MCP servers behind the person's own approval, and
``hive setup`` never writes a setting that skips one (no pre-approved hook hashes, no trusted
folders, no auto-approval of project MCP files). It prints these steps instead. They are about
the harnesses' approval prompts, measured in ``../shared/notes/harnesses.md``.
"""

from __future__ import annotations

from hive.integrations.descriptor import Scope

RESTART = "restart sessions that are already running: agents load MCP servers, hooks and plugins at start-up"

_STEPS: dict[str, dict[Scope, tuple[str, ...]]] = {
    "codex": {
        "user": (
            "Codex runs hooks only once you trust them: start `codex`, type `/hooks` and trust hive's "
            "entries (until then Codex sessions get hive mail only when they call a hive tool)",
        ),
        "project": (
            "Codex reads a project's .codex/ folder only in a trusted project: trust it when `codex` asks",
            "then type `/hooks` in Codex and trust hive's hook entries",
        ),
    },
    "gemini": {
        "user": (
            "Gemini CLI loads MCP servers and hooks only in folders you trust: trust each project folder "
            "when `gemini` asks there (or with `/permissions`)",
        ),
        "project": (
            "Gemini CLI reads a project's .gemini/settings.json only in a trusted folder: trust it when "
            "`gemini` asks (or with `/permissions`)",
        ),
    },
    "claude-code": {
        "project": (
            "Claude Code asks before it starts servers from a project's .mcp.json: approve 'hive' when it "
            "asks (or in `/mcp`)",
        )
    },
    "cursor": {
        "user": ("Cursor may list hive as a new MCP server to turn on: enable it under Settings → MCP",),
        "project": ("Cursor asks before it uses a project's .cursor/mcp.json: enable hive under Settings → MCP",),
    },
    "pi": {
        "project": (
            "pi loads a project's .pi/ extensions and skills only after you trust the project: trust it when `pi` asks",
        )
    },
}


def steps(harness: str, scope: Scope) -> tuple[str, ...]:
    """What the person must approve in ``harness`` for hive's ``scope`` files to take effect."""
    return _STEPS.get(harness, {}).get(scope, ())

"""``hive doctor``'s Claude Code check: whether it runs the ``hive`` server of a project's .mcp.json.

Claude Code asks its person before it starts a server from a project's ``.mcp.json`` and keeps
the answer per project in ``~/.claude.json``, or in a settings file (the project's own, or the
person's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..descriptor import DoctorCheck

NAME = "claude-code"


def approved(project: Path, home: Path) -> bool | None:
    """Whether Claude Code runs the ``hive`` server of ``project``'s .mcp.json: True, False (declined),
    None (not asked yet)."""
    sources: list[dict[str, Any]] = []
    try:
        projects = json.loads((home / ".claude.json").read_text(encoding="utf-8")).get("projects") or {}
        sources.append(projects.get(str(project)) or {})
    except (OSError, ValueError, AttributeError):
        pass
    for settings in (
        project / ".claude" / "settings.local.json",
        project / ".claude" / "settings.json",
        home / ".claude" / "settings.json",
    ):
        try:
            sources.append(json.loads(settings.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    for source in sources:
        if not isinstance(source, dict):
            continue
        if "hive" in (source.get("disabledMcpjsonServers") or []):
            return False
        if source.get("enableAllProjectMcpServers") is True or "hive" in (source.get("enabledMcpjsonServers") or []):
            return True
    return None


def project_checks(project: Path, where: str, home: Path) -> list[DoctorCheck]:
    """The approval the project's .mcp.json waits for."""
    answer = approved(project, home)
    if answer:
        return [DoctorCheck(f"{where}: {NAME}", "ok", "hive in .mcp.json is approved")]
    return [
        DoctorCheck(
            f"{where}: {NAME}",
            "todo",
            "Claude Code has not been allowed to start hive from .mcp.json"
            + (" (it was declined)" if answer is False else ""),
            f"start `claude` in {where} and approve 'hive' (or in `/mcp`)",
        )
    ]

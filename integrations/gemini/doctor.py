"""``hive doctor``'s Gemini CLI checks: its folder trust, which hides hive in folders not trusted.

Gemini CLI keeps the person's answers in ``~/.gemini/trustedFolders.json`` (a folder, or a
folder's parent, by path); trust is on unless its settings turn ``security.folderTrust`` off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..descriptor import DoctorCheck, DoctorContext

NAME = "gemini"


def _trusted_folders(home: Path) -> Any:
    return json.loads((home / ".gemini" / "trustedFolders.json").read_text(encoding="utf-8"))


def folder_trust(settings: Path, home: Path) -> DoctorCheck | None:
    """Gemini CLI's folder trust (on unless its settings turn it off) hides hive in untrusted folders."""
    try:
        data = json.loads(settings.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if ((data.get("security") or {}).get("folderTrust") or {}).get("enabled") is False:
        return None
    try:
        folders = _trusted_folders(home)
    except (OSError, ValueError):
        folders = {}
    trusted = [path for path, level in folders.items() if level in ("TRUST_FOLDER", "TRUST_PARENT")]
    if not trusted:
        return DoctorCheck(
            "folder trust",
            "todo",
            "Gemini CLI uses hive only in folders you trust, and none is trusted yet",
            "trust a project folder when `gemini` asks there (or with `/permissions`)",
        )
    return DoctorCheck(
        "folder trust",
        "info",
        f"Gemini CLI uses hive only in folders you trust ({len(trusted)} trusted so far)",
        "trust more folders when `gemini` asks there (or with `/permissions`)",
    )


def trusts(folder: Path, home: Path) -> bool:
    """Whether Gemini CLI trusts ``folder``: trusted itself, or under a parent trusted as one."""
    try:
        folders = _trusted_folders(home)
    except (OSError, ValueError):
        return False
    for path, level in folders.items() if isinstance(folders, dict) else ():
        if level == "TRUST_FOLDER" and Path(path) == folder:
            return True
        if level == "TRUST_PARENT" and folder.is_relative_to(Path(path).parent):
            return True
    return False


def checks(context: DoctorContext) -> list[DoctorCheck]:
    """The folder trust, read from the settings file hive writes into."""
    settings = next(iter(context.files), None)
    trust = folder_trust(settings, context.home) if settings else None
    return [trust] if trust else []


def project_checks(project: Path, where: str, home: Path) -> list[DoctorCheck]:
    """A project's .gemini/settings.json counts only in a folder the person trusts."""
    if trusts(project, home):
        return [DoctorCheck(f"{where}: {NAME}", "ok", "the folder is trusted")]
    return [
        DoctorCheck(
            f"{where}: {NAME}",
            "todo",
            "Gemini CLI reads the project's .gemini/settings.json only once you trust it",
            f"start `gemini` in {where} and trust the folder (or with `/permissions`)",
        )
    ]

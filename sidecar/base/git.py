"""Git facts of a folder, read from the files git keeps: the repository root, the branch and the
origin project, without running git (hooks ask on every session start, and git may be slow or absent).
"""

from __future__ import annotations

import os
from pathlib import Path


def remote_project(url: str) -> str:
    """``host/owner/name`` for a git remote URL (ssh, scp-like or https), without credentials."""
    url = url.strip()
    if "://" in url:
        host, _, path = url.split("://", 1)[1].partition("/")
    elif ":" in url and not url.startswith("/") and "/" not in url.split(":", 1)[0]:
        host, _, path = url.partition(":")
    else:
        return url.rstrip("/").removesuffix(".git").rpartition("/")[2]
    host = host.rpartition("@")[2].split(":")[0].lower()
    path = path.strip("/").removesuffix(".git")
    return f"{host}/{path}" if host else path


def git_facts(cwd: str) -> dict[str, str]:
    """The repository around ``cwd``: its root, current branch and origin project, as far as known."""
    if not cwd or not os.path.isabs(cwd):
        return {}
    start = Path(cwd)
    for folder in (start, *start.parents):
        dotgit = folder / ".git"
        try:
            if dotgit.is_dir():
                gitdir = common = dotgit
            elif dotgit.is_file():  # a worktree or submodule: "gitdir: <path>"
                gitdir = (folder / dotgit.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
                commondir = gitdir / "commondir"
                common = (
                    (gitdir / commondir.read_text(encoding="utf-8").strip()).resolve()
                    if commondir.is_file()
                    else gitdir
                )
            else:
                continue
            facts = {"repo_root": str(folder)}
            head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
            if head.startswith("ref: refs/heads/"):
                facts["branch"] = head.removeprefix("ref: refs/heads/")
            origin = _origin_url(common / "config")
            if origin:
                facts["repo"] = remote_project(origin)
            return facts
        except (OSError, IndexError, UnicodeDecodeError):
            return {"repo_root": str(folder)}
    return {}


def _origin_url(config: Path) -> str:
    section = ""
    for line in config.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == '[remote "origin"]' and line.split("=", 1)[0].strip() == "url":
            return line.split("=", 1)[1].strip()
    return ""

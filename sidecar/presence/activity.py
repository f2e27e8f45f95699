"""Each session's activity as its events show it, kept in memory and rebuilt by the next hook.

A state (busy, idle, waiting_approval), the paths touched in the last 30 minutes (relative to the
repo, at most 32, credential files filtered out by :func:`sensitive`), the HEAD commit (read from
the repository's files) and whether the session is *unmanaged* (found on disk by
:mod:`hive.sidecar.presence.discover`, with no hook or client of hive's). :func:`presence_of` is
what a session adds to the presence the mesh sends peers; :func:`sanitise_extra` reads a peer's.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio

from ..base.defang import one_line
from ..base.host import PerSidecar

if TYPE_CHECKING:
    from ..sessions.registry import Session, SessionsHost

WINDOW = 30 * 60.0  # files count as touched, and overlaps as live, for half an hour
MAX_FILES = 32


@dataclass
class Observed:
    """What the events say about one session right now."""

    state: str = ""
    since: float = 0.0
    head: str = ""
    files: dict[str, tuple[float, bool]] | None = None  # repo-relative path -> (last touched, modified)
    newest: str = ""  # the path touched last


OBSERVED: PerSidecar[dict[str, Observed]] = PerSidecar(lambda sidecar: {})  # by session key
# Sessions found on disk (hive.sidecar.presence.discover) that no hook or client has spoken for yet.


# ---- the path filter -------------------------------------------------------------------------

_SENSITIVE_NAMES = {
    ".env",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    "credentials",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    ".npmrc",
    ".pypirc",
}
_SENSITIVE_SUFFIXES = (".pem", ".key", ".p12", ".pfx")


def sensitive(path: str) -> bool:
    """A credential file: never in presence, never sent to a peer."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not parts:
        return False
    name = parts[-1].lower()
    if name in _SENSITIVE_NAMES or name.startswith(".env."):
        return True
    if name.endswith(_SENSITIVE_SUFFIXES):
        return True
    lowered = [p.lower() for p in parts]
    # Anything under ~/.ssh, ~/.aws, ~/.gnupg, and git's credential stores.
    if any(p in (".ssh", ".aws", ".gnupg") for p in lowered):
        return True
    return "git" in lowered and "credentials" in name


# ---- presence --------------------------------------------------------------------------------


def recent_files(
    sidecar: SessionsHost, key: str, now: float | None = None, *, modified_only: bool = False
) -> dict[str, float]:
    """Paths the session touched within the window, newest first, at most 32."""
    seen = OBSERVED.of(sidecar).get(key)
    if seen is None or not seen.files:
        return {}
    now = time.time() if now is None else now
    items = [(p, at) for p, (at, mod) in seen.files.items() if now - at <= WINDOW and (mod or not modified_only)]
    items.sort(key=lambda item: -item[1])
    return dict(items[:MAX_FILES])


def presence_of(sidecar: SessionsHost, key: str) -> dict[str, Any]:
    """The fields this session adds to presence: state, files (with when, and whether modified), head,
    and ``unmanaged`` (found on disk, no hook or client speaks for it)."""
    unmanaged = key in sidecar.sessions.unmanaged
    seen = OBSERVED.of(sidecar).get(key)
    if seen is None:
        return {"state": "", "files": [], "head": "", "unmanaged": unmanaged}
    files = recent_files(sidecar, key)
    return {
        "state": seen.state,
        "head": seen.head,
        "unmanaged": unmanaged,
        "files": [
            {"path": p, "at": round(at, 3), "edit": bool(seen.files and seen.files[p][1])}
            for p, at in files.items()
            if not sensitive(p)
        ],
    }


def sanitise_extra(item: dict[str, Any]) -> dict[str, Any]:
    """A peer's presence fields for one session, cut to shape; credential paths dropped here too."""
    state = str(item.get("state") or "")
    head = str(item.get("head") or "")
    files = []
    for f in (item.get("files") or [])[:MAX_FILES] if isinstance(item.get("files"), list) else []:
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            continue
        path = one_line(f["path"], 300)
        at = f.get("at")
        if path and not sensitive(path) and isinstance(at, (int, float)):
            files.append({"path": path, "at": float(at), "edit": bool(f.get("edit"))})
    return {
        "state": state if state in ("busy", "idle", "waiting_approval") else "",
        "head": head if re.fullmatch(r"[0-9a-f]{7,64}", head) else "",
        "files": files,
        "unmanaged": item.get("unmanaged") is True,
    }


# ---- the repository -----------------------------------------------------------------------

_HEX = re.compile(r"[0-9a-f]{40,64}")


def read_head(root: str) -> str | None:
    """HEAD's commit read from the repository's files (a few small reads, no process): None when
    the files do not say (a reftable repository, a ref only git can resolve), and git is asked."""
    try:
        dotgit = Path(root, ".git")
        gitdir = dotgit
        if dotgit.is_file():  # a worktree or submodule: "gitdir: <path>"
            gitdir = (Path(root) / dotgit.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
        if _HEX.fullmatch(head):
            return head  # detached
        if not head.startswith("ref: refs/"):
            return None
        ref = head[5:]
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        for folder in dict.fromkeys((gitdir, common)):
            with contextlib.suppress(FileNotFoundError):
                value = (folder / ref).read_text(encoding="utf-8").strip()
                return value if _HEX.fullmatch(value) else None
            with contextlib.suppress(FileNotFoundError):
                for line in (folder / "packed-refs").read_text(encoding="utf-8").splitlines():
                    sha, _, name = line.partition(" ")
                    if name == ref and _HEX.fullmatch(sha):
                        return sha
        # A branch with no commit yet has no ref anywhere; refs in a reftable only git reads.
        return None if (common / "reftable").exists() else ""
    except (OSError, IndexError, UnicodeDecodeError):
        return None


async def git_head(root: str) -> str:
    """HEAD's commit in the repository at ``root`` ("" when there is none or git cannot tell)."""
    if not root:
        return ""
    found = read_head(root)
    if found is not None:
        return found
    try:
        done = await anyio.run_process(["git", "-C", root, "rev-parse", "HEAD"], check=False)
    except OSError:
        return ""
    value = done.stdout.decode("ascii", "ignore").strip()
    return value if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", value) else ""


_ROOTS: dict[str, str] = {}


def repo_root(session: Session) -> str:
    """The repository folder around the session's cwd ("" outside one); cached, as hooks run often."""
    cwd = session.cwd
    if not cwd or not os.path.isabs(cwd):
        return ""
    if cwd not in _ROOTS:
        folder = Path(cwd)
        _ROOTS[cwd] = next((str(f) for f in (folder, *folder.parents) if (f / ".git").exists()), "")
    return _ROOTS[cwd]

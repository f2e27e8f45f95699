"""Per-machine settings from ``config.toml`` in the state folder, with defaults.

The file is optional. Unknown keys are kept (the installer edits it with tomlkit) and ignored.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import socket
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BadRequest

HOUR = 3600.0
DAY = 24 * HOUR


def slug(text: str, limit: int = 64) -> str:
    """Lower-case ``a-z0-9-`` with single dashes: the only characters hive names use."""
    value = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return value[:limit].strip("-")


@dataclass(frozen=True)
class Settings:
    person: str
    machine: str
    # A session is stale after this long without a sign of life from a hook or client.
    session_ttl: float = 6 * HOUR
    # A stale session, and its unread mail, is forgotten after this long...
    forget_after: float = DAY
    # ...but never in the first hours after the sidecar starts, while live sessions re-register.
    forget_grace: float = 6 * HOUR
    inflight_timeout: float = 90.0
    max_body: int = 64 * 1024
    # Sessions found on disk that hive does not manage (no hooks, no MCP) go to teammates only if on.
    share_unmanaged: bool = False


def load_settings(path: Path) -> Settings:
    data: dict[str, object] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise BadRequest(f"{path} is not valid TOML ({exc}); fix or remove it") from exc
    person = slug(str(data.get("person") or os.environ.get("HIVE_PERSON") or getpass.getuser())) or "me"
    machine = slug(str(data.get("machine") or socket.gethostname().split(".")[0])) or "machine"
    section = data.get("sidecar", {})
    allowed = {"session_ttl", "forget_after", "forget_grace", "inflight_timeout"}
    # Any: mypy checks a ** dict against every field, int ones too; only these float fields are passed.
    tuning: dict[str, Any] = (
        {k: float(v) for k, v in section.items() if k in allowed} if isinstance(section, dict) else {}
    )
    # share_unmanaged at the top or in [sidecar]
    sharing = (data.get("share_unmanaged"), isinstance(section, dict) and section.get("share_unmanaged"))
    share = any(v is True for v in sharing)
    return Settings(person=person, machine=machine, share_unmanaged=share, **tuning)


def write_atomically(path: Path, text: str) -> None:
    """Replace config.toml (or any state file) whole: a reader sees the old text or the new, never half."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

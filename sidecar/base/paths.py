"""Where a sidecar keeps its state: one folder per user, overridable with ``HIVE_HOME``.

The socket lives in the state folder unless that path is too long for ``sun_path`` (108 bytes
on Linux, 104 on macOS); then it moves to a short per-folder path under the temp dir, named by
a hash of the state folder so that every client finds the same one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

SOCKET_NAME = "hive.sock"
MAX_SOCKET_PATH = 100  # below both platforms' sun_path limits, with room for the NUL


@dataclass(frozen=True)
class StatePaths:
    home: Path

    @property
    def socket(self) -> Path:
        return socket_path(self.home)

    @property
    def lock(self) -> Path:
        return self.home / "sidecar.lock"

    @property
    def database(self) -> Path:
        return self.home / "hive.db"

    @property
    def log(self) -> Path:
        return self.home / "sidecar.log"

    @property
    def config(self) -> Path:
        return self.home / "config.toml"


def state_home() -> Path:
    override = os.environ.get("HIVE_HOME")
    if override:
        return Path(override).expanduser().absolute()
    return Path(platformdirs.user_data_dir("hive", appauthor=False))


def state_paths(home: Path | None = None) -> StatePaths:
    return StatePaths(home or state_home())


def socket_path(home: Path) -> Path:
    preferred = home / SOCKET_NAME
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"hive-{os.getuid()}-{digest}.sock"


def ensure_home(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)

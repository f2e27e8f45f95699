"""Where a sidecar keeps its state: one folder per user, overridable with ``HIVE_HOME``.

The socket lives in the state folder unless that path is too long for ``sun_path`` (108 bytes
on Linux, 104 on macOS); then it moves to a short per-folder path under the temp dir, named by
a hash of the state folder so that every client finds the same one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

# Every `hive` command and hook client reads these paths before anything else, so this module
# imports only what every call needs: hashing and the temp dir (a long state path) and
# platformdirs (no HIVE_HOME) are imported by the branch that uses them.

SOCKET_NAME = "hive.sock"
MAX_SOCKET_PATH = 100  # below both platforms' sun_path limits, with room for the NUL


class StatePaths(NamedTuple):
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
    import platformdirs

    return Path(platformdirs.user_data_dir("hive", appauthor=False))


def state_paths(home: Path | None = None) -> StatePaths:
    return StatePaths(home or state_home())


def socket_path(home: Path) -> Path:
    preferred = home / SOCKET_NAME
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH:
        return preferred
    import hashlib
    import tempfile

    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"hive-{os.getuid()}-{digest}.sock"


def ensure_home(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)

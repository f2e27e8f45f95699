"""Where a sidecar keeps its state: one folder per user, overridable with ``HIVE_HOME``.

The socket lives in the state folder unless that path is too long for ``sun_path`` (108 bytes
on Linux, 104 on macOS); then it moves to a short per-folder path under the temp dir, named by
a hash of the state folder so that every client finds the same one.
"""

from __future__ import annotations

import os
from collections import namedtuple

# Every `hive` command and hook client reads these paths before anything else, so this module
# imports only what every call needs: pathlib by what makes a Path, hashing and the temp dir (a
# long state path) and platformdirs (no HIVE_HOME) by the branch that uses them, and typing (about
# 5 ms) only for the type checker, which sees StatePaths as the typing.NamedTuple it is.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import NamedTuple

    class _StatePaths(NamedTuple):
        home: Path

else:
    _StatePaths = namedtuple("StatePaths", ["home"])

SOCKET_NAME = "hive.sock"
MAX_SOCKET_PATH = 100  # below both platforms' sun_path limits, with room for the NUL


class StatePaths(_StatePaths):
    __slots__ = ()

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
    from pathlib import Path

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
    from pathlib import Path

    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"hive-{os.getuid()}-{digest}.sock"


def socket_path_from_env() -> str | None:
    """``str(state_paths().socket)`` when ``HIVE_HOME`` names the folder and its socket is the folder's
    own ``hive.sock``, worked out without pathlib (about 5 ms of a command's start); None otherwise."""
    override = os.environ.get("HIVE_HOME")
    if not override or override.startswith("~") or override.startswith("//"):
        return None  # no override, a home to look up, or a root pathlib keeps as it is: state_paths() says
    if not override.startswith("/"):
        override = os.getcwd() + "/" + override
    # pathlib's spelling of the folder: empty and "." parts dropped, ".." kept (the kernel resolves it)
    home = "/" + "/".join(part for part in override.split("/") if part not in ("", "."))
    preferred = home.rstrip("/") + "/" + SOCKET_NAME
    return preferred if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH else None


def ensure_home(home: Path) -> None:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)

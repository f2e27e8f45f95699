"""Reading and writing the files hive edits: atomically, through symlinks, keeping their mode.

People keep dotfiles as symlinks into a repository, so a write goes to the link's target rather
than replacing the link. A write is a temporary file in the same folder renamed over the old
one, so a crash never leaves half a config behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from .errors import NotWritable


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def target(path: Path) -> Path:
    """Where writing ``path`` really lands: the end of its symlink chain, if it is one."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def missing_dirs(path: Path) -> list[Path]:
    """The folders above ``path`` that do not exist yet, outermost first."""
    missing: list[Path] = []
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return list(reversed(missing))


def check_writable(path: Path, home: Path) -> None:
    """Raise :class:`NotWritable` unless ``path`` can be created or replaced.

    ``home`` is the folder the path is relative to (the home folder or the project), named in
    the message when it is the one missing.
    """
    if not home.is_dir():
        raise NotWritable(
            path,
            f"the folder {home} does not exist",
            "set HOME to your home folder (or create it), then run `hive setup` again",
        )
    real = target(path)
    folder = real.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise NotWritable(path, f"{folder} is a file, not a folder", "move it away, then run `hive setup` again")
    if real.exists() and not os.access(real, os.W_OK):
        raise NotWritable(path, "the file is read-only", f"make it writable (chmod u+w {real}) or wire it by hand")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NotWritable(path, f"{folder} is read-only", "make it writable, then run `hive setup` again")


def write_atomic(path: Path, data: bytes, mode: int | None = None) -> list[Path]:
    """Replace ``path`` (or its symlink target) with ``data``; returns the folders it had to create.

    The file keeps its current mode; a new one gets ``mode`` (default: 0666 minus the umask).
    """
    real = target(path)
    created = missing_dirs(real)
    for folder in created:
        folder.mkdir(mode=0o755)
    if real.exists():
        keep = stat.S_IMODE(real.stat().st_mode)
    elif mode is not None:
        keep = mode
    else:
        umask = os.umask(0)
        os.umask(umask)
        keep = 0o666 & ~umask
    fd, temp = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".hive-tmp", dir=real.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, keep)
        os.replace(temp, real)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    return created


def remove_file(path: Path) -> None:
    try:
        target(path).unlink()
    except FileNotFoundError:
        pass


def remove_empty_dirs(folders: list[Path]) -> None:
    """Remove the folders hive created, innermost first, as long as they are empty."""
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):  # not empty (someone else's files now), or already gone
            folder.rmdir()

"""What hive changed on this machine, so ``hive setup --remove`` can give it back.

The manifest lives in the state folder (``$HIVE_HOME/setup/manifest.json``), beside timestamped
backup folders. Before hive edits or replaces a file it copies the file's bytes into
``backups/<timestamp>/<the file's absolute path>`` and lists what that run changed in the
folder's ``changes.json``. For each file the manifest keeps the backup of its content from before
hive first touched it, the hash of what hive last wrote (a different hash later means the
person edited it since), the key paths hive set and what they held before, the containers and
folders hive created, and which harnesses use the file (several share ``.agents/skills``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .documents import Key
from .ownership import KeyRecord

VERSION = 1


@dataclass
class FileEntry:
    """One file hive wrote to."""

    path: Path
    format: str
    scope: str
    harnesses: list[str]
    created: bool  # the file did not exist before hive
    original: str | None  # backup (relative to the setup folder) of the bytes before hive; None if created
    restorable: bool  # the file is still what hive wrote over ``original``: removal restores it byte for byte
    written: str | None  # sha256 of what hive last wrote or found up to date
    dirs: list[str] = field(default_factory=list)  # folders hive created for it, outermost first
    keys: list[tuple[str, KeyRecord]] = field(default_factory=list)  # (harness, record)
    containers: list[Key] = field(default_factory=list)  # tables hive created inside the file

    def records(self, harnesses: set[str] | None = None) -> list[KeyRecord]:
        return [record for owner, record in self.keys if harnesses is None or owner in harnesses]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "scope": self.scope,
            "harnesses": self.harnesses,
            "created": self.created,
            "original": self.original,
            "restorable": self.restorable,
            "written": self.written,
            "dirs": self.dirs,
            "keys": [{"harness": owner, **record.to_json()} for owner, record in self.keys],
            "containers": [list(key) for key in self.containers],
        }

    @classmethod
    def from_json(cls, path: str, data: dict[str, Any]) -> FileEntry:
        return cls(
            path=Path(path),
            format=data["format"],
            scope=data["scope"],
            harnesses=list(data["harnesses"]),
            created=data["created"],
            original=data["original"],
            restorable=data["restorable"],
            written=data["written"],
            dirs=list(data.get("dirs", [])),
            keys=[(k["harness"], KeyRecord.from_json(k)) for k in data.get("keys", [])],
            containers=[tuple(key) for key in data.get("containers", [])],
        )


@dataclass
class Manifest:
    folder: Path
    files: dict[Path, FileEntry] = field(default_factory=dict)
    service: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self.folder / "manifest.json"

    @classmethod
    def load(cls, folder: Path) -> Manifest:
        manifest = cls(folder)
        try:
            data = json.loads(manifest.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return manifest
        for path, entry in data.get("files", {}).items():
            manifest.files[Path(path)] = FileEntry.from_json(path, entry)
        manifest.service = data.get("service")
        return manifest

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "files": {str(p): e.to_json() for p, e in sorted(self.files.items())},
            "service": self.service,
        }

    def save(self) -> None:
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"
        try:
            if self.path.read_text(encoding="utf-8") == text:
                return
        except FileNotFoundError:
            pass
        if not self.files and not self.service:
            self.path.unlink(missing_ok=True)
            return
        _ensure_private(self.folder)
        temp = self.path.with_suffix(".tmp")
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, self.path)


def _ensure_private(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)


class Backups:
    """This run's backup folder, created on first use so a run that changes nothing leaves no trace."""

    def __init__(self, setup_folder: Path) -> None:
        self.setup_folder = setup_folder
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() % 1_000_000_000:09d}Z"
        self.folder = setup_folder / "backups" / stamp
        self.changes: list[dict[str, Any]] = []

    def save(self, path: Path, data: bytes) -> str:
        """Keep a private copy of ``data`` (``path``'s current content); returns its name in the setup folder."""
        copy = self.folder / str(path).lstrip("/")
        _ensure_private(self.folder)  # the copies may hold credentials (~/.claude.json does): private folder
        copy.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            out.write(data)
        return str(copy.relative_to(self.setup_folder))

    def note(self, path: Path, action: str, backup: str | None, harnesses: list[str]) -> None:
        self.changes.append({"path": str(path), "action": action, "backup": backup, "harnesses": harnesses})

    def finish(self) -> None:
        if not self.changes:
            return
        _ensure_private(self.folder)
        text = json.dumps({"changes": self.changes}, indent=2, ensure_ascii=False) + "\n"
        with open(
            os.open(self.folder / "changes.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8"
        ) as out:
            out.write(text)


@contextlib.contextmanager
def locked(setup_folder: Path) -> Iterator[None]:
    """One ``hive setup`` at a time per state folder: two would each back up the other's half-write."""
    _ensure_private(setup_folder)
    with open(os.open(setup_folder / "setup.lock", os.O_RDWR | os.O_CREAT, 0o600)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

"""``hive folder <path> off|on``: folders where the person turned hive off.

A session whose working folder is inside a folder that is off is never registered by its hooks,
and its hooks answer the harness's no-opinion reply: nothing is recorded, nothing is injected.
The list lives in the database (``kv`` key ``folders.off``) and is cached in memory, so the check
on the hook path is a few string comparisons.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..base.errors import BadRequest
from ..base.host import Host, PerSidecar

if TYPE_CHECKING:
    from ..base.host import Connection

KEY = "folders.off"


@dataclass
class _Off:
    folders: set[str] | None = None  # read from the database on first use


_OFF: PerSidecar[_Off] = PerSidecar(lambda sidecar: _Off())


async def _folders(sidecar: Host) -> set[str]:
    off = _OFF.of(sidecar)
    if off.folders is None:
        raw = await sidecar.store.get_kv(KEY)
        off.folders = {f for f in json.loads(raw) if isinstance(f, str)} if raw else set()
    return off.folders


def _norm(path: str) -> str:
    return os.path.normpath(path)  # string work only: no file system access


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


async def is_off(sidecar: Host, cwd: str) -> bool:
    """Whether hive is off in ``cwd`` (it or a folder above it was turned off)."""
    if not cwd:
        return False
    path = _norm(cwd)
    return any(_inside(path, folder) for folder in await _folders(sidecar))


async def op_folder(sidecar: Host, conn: Connection, request: dict[str, Any]) -> dict[str, Any]:
    """Turn hive off (or back on) in a folder and the folders below it; list the folders that are off.

    Request: ``state`` (str, optional): off or on; with it, ``path`` (str, required): an absolute
    folder. Without ``state`` nothing changes. Returns ``{"off": [path]}``. Raises ``bad_request``
    for another state or a relative path.
    """
    path, state = request.get("path"), request.get("state")
    folders = await _folders(sidecar)
    if state is not None:
        if state not in ("off", "on") or not isinstance(path, str) or not path.startswith("/"):
            raise BadRequest("folder takes an absolute 'path' and 'state' off or on")
        path = _norm(path)
        (folders.add if state == "off" else folders.discard)(path)
        await sidecar.store.set_kv(KEY, json.dumps(sorted(folders)))
    return {"off": sorted(folders)}


OPS = {"folder": op_folder}

"""Whether this installation of hive is whole: every module it shipped is there and imports.

A wheel built without a subpackage, or an installed copy a file was deleted from, starts no
sidecar: the sidecar dies on its first import and every command reports only that the socket
never appeared. ``hive doctor`` asks here first, and names the missing module and the fix.

Two sources, because they see different breakage: the distribution's ``RECORD`` lists every file
the installer put in place (a deleted one shows as missing; an editable install lists none), and
importing the modules the sidecar, ``hive mcp`` and the harness registry start from catches what
was never installed at all (a subpackage the build left out).
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "hive-agents"
# What the sidecar, `hive mcp`, hooks and setup import first; each pulls in the rest of its part.
ENTRY_MODULES = (
    "hive.sidecar.daemon.server",
    "hive.sidecar.mcp.server",
    "hive.sidecar.cli.main",
    "hive.integrations.hook_client",
    "hive.installer.setup",
)


@dataclass
class Broken:
    module: str  # the module that is missing (or fails to import)
    detail: str  # how it showed: "file … is gone", "import … failed: …"


def _module_name(relative: str) -> str:
    parts = list(Path(relative).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def missing_files() -> list[Broken]:
    """Modules the installer recorded that are no longer on disk."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return []
    broken: list[Broken] = []
    for file in dist.files or ():
        if file.suffix != ".py" or not str(file).startswith("hive/"):
            continue
        located = Path(str(dist.locate_file(file)))
        if not located.exists():
            broken.append(Broken(_module_name(str(file)), f"its file {located} is gone"))
    return broken


def failed_imports(modules: tuple[str, ...]) -> list[Broken]:
    broken: list[Broken] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            missing = getattr(exc, "name", None) or name
            broken.append(Broken(missing, f"importing {name} failed: {exc}"))
    return broken


def check(harness_modules: tuple[str, ...]) -> list[Broken]:
    """Every missing or unimportable module, once each, the recorded-but-deleted ones first."""
    found: dict[str, Broken] = {}
    for item in missing_files() + failed_imports(harness_modules + ENTRY_MODULES):
        found.setdefault(item.module, item)
    return list(found.values())


def reinstall_hint() -> str:
    """The command that puts a whole copy of hive back, for the way this one was installed."""
    source, installer = DISTRIBUTION, "pip"  # from an index, unless it came from a folder or a wheel
    try:
        dist = metadata.distribution(DISTRIBUTION)
        url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
        installer = (dist.read_text("INSTALLER") or "pip").strip()
    except (metadata.PackageNotFoundError, ValueError):
        url = ""
    if url.startswith("file://"):
        source = url.removeprefix("file://")
    prefix = sys.prefix.replace("\\", "/")
    if "/pipx/venvs/" in prefix:
        return f"reinstall hive: `pipx install --force {source}`"
    if "/uv/tools/" in prefix:
        return f"reinstall hive: `uv tool install --reinstall {source}`"
    if installer == "uv":
        return f"reinstall hive: `uv pip install --python {sys.executable} --reinstall {source}`"
    return f"reinstall hive: `{sys.executable} -m pip install --force-reinstall {source}`"

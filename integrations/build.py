"""Render every built-in harness's native files into ``integrations/<harness>/generated/``.

The generated files are the reference form of what ``hive setup`` writes: rendered from the same
descriptors, for the portable context (hook command ``hive hook <harness> <Event>``, MCP command
``hive mcp``, hive command ``["hive"]``) at project scope, the scope whose files a person would
commit to a repository. JSON and TOML files hold exactly the parts hive owns, nothing a user
would have around them; plugins are the whole file. Skills are left out: they ship as they are
in ``hive.skills``. ``hive integrations build`` writes them, ``--check`` only compares, and a
test fails when the committed files differ from a fresh rendering.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import tomlkit

from . import registry
from .descriptor import InstallContext, NativeFile

GENERATED = "generated"


def portable_hook_command(harness: str, native: str) -> str:
    return f"hive hook {harness} {native}"


REFERENCE = InstallContext(
    scope="project", hook_command=portable_hook_command, mcp_command=("hive", "mcp"), hive_command=("hive",)
)


def harness_folders() -> dict[str, Path]:
    """Each built-in harness's name and the package folder its plugin lives in."""
    folders: dict[str, Path] = {}
    for module_name in registry.BUILTIN:
        module = importlib.import_module(module_name)
        identify = getattr(module, "hive_harness", None)
        if identify is None or module.__file__ is None or not module.__file__.endswith("__init__.py"):
            continue
        folders[identify().name] = Path(module.__file__).parent
    return folders


def nest(owned: dict[tuple[str, ...], Any], into: dict[str, Any]) -> None:
    """Place each owned key path's value into a nested mapping, as the writer would."""
    for path, value in owned.items():
        node = into
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value


def output_name(path: str) -> str:
    # ".mcp.json" and "opencode.json" alike become plain names next to each other.
    return Path(path).name.lstrip(".")


def render(harness: str, context: InstallContext = REFERENCE) -> dict[str, str]:
    """The generated files of ``harness``: output file name -> exact text.

    Several records may share one native file (Gemini's settings.json holds both MCP and hooks);
    they are merged into one output.

    Raises:
        ValueError: two different native files would get the same output name, or one file is
            described in two formats.
    """
    files = [f for f in registry.harness(harness).native_files(context) if f.role != "skill"]
    by_name: dict[str, list[NativeFile]] = {}
    for native in files:
        by_name.setdefault(output_name(native.path), []).append(native)
    rendered: dict[str, str] = {}
    for name, group in by_name.items():
        if len({f.path for f in group}) > 1 or len({f.format for f in group}) > 1:
            raise ValueError(f"{harness}: {name} would hold {sorted({f.path for f in group})} in one file")
        fmt = group[0].format
        if fmt == "text":
            rendered[name] = "".join(f.content for f in group)
            continue
        tree: dict[str, Any] = {}
        for native in group:
            nest(native.owned, tree)
        if fmt == "json":
            rendered[name] = json.dumps(tree, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        else:
            rendered[name] = tomlkit.dumps(tree)
    return dict(sorted(rendered.items()))


def build(check: bool = False, folders: dict[str, Path] | None = None) -> list[Path]:
    """Write (or with ``check``, only compare) every built-in harness's generated files.

    Returns the files that differed from a fresh rendering: missing, changed, or left over from
    an older rendering (those are deleted unless ``check``).
    """
    differing: list[Path] = []
    for harness, folder in sorted((folders or harness_folders()).items()):
        target = folder / GENERATED
        wanted = {target / name: text for name, text in render(harness).items()}
        present = {p for p in target.iterdir() if p.is_file()} if target.is_dir() else set()
        for stale in sorted(present - wanted.keys()):
            differing.append(stale)
            if not check:
                stale.unlink()
        for path, text in wanted.items():
            if path.is_file() and path.read_bytes() == text.encode("utf-8"):
                continue
            differing.append(path)
            if not check:
                target.mkdir(exist_ok=True)
                path.write_bytes(text.encode("utf-8"))
    return differing

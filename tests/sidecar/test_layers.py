"""The sidecar's packages import downward: each concept folder builds on the ones below it.

The graph is read from the source (every import: module level, inside functions, and type-only
ones under ``TYPE_CHECKING``), at package level: ``hive.sidecar.mail.ops`` importing
``hive.sidecar.presence.observe`` is the edge ``mail -> presence``.

Every edge goes down (issue #21): a concept that must reach one above it declares it in its
feature (daemon/features.py), and names what it uses of the daemon in its layer's protocol. An
edge that must go up is listed in :data:`STILL_UPWARD` with its reason; a listed one that is gone
fails too (delete it from the list).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import hive.sidecar

from ..conftest import REPO

SIDECAR = Path(hive.sidecar.__file__).parent

# Bottom to top. The client side (the CLI, the MCP server, the client library, ``python -m
# hive.sidecar``) talks to the daemon over its socket and stands beside the daemon's stack.
LAYERS = [
    "base",
    "screening",
    "person",
    "sessions",
    "team",
    "mesh",
    "presence",
    "mail",
    "gate",
    "lessons",
    "history",
    "agents",
    "daemon",
]
CLIENT_SIDE = {"client": 0, "mcp": 1, "__main__": 2, "cli": 3}
ENTRY_POINT = "__main__"  # starts the daemon: the one module that may import it

# Each concept names what it uses of the daemon in a protocol of its layer (base.host.Host up to
# agents.sessions.AgentsHost), never the daemon's class; a concept that must reach one above it
# declares that in its Feature (frames, setup, on_events, before_digest). No edge goes up now;
# the list stays for the case where one must, named and explained here.
STILL_UPWARD: set[tuple[str, str]] = set()


def _package(module: str) -> str:
    """``hive.sidecar.mail.ops`` -> ``mail``; the top package's ``__init__`` counts as base."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "base"


def _imports() -> dict[str, set[str]]:
    """Module -> every hive.sidecar module or package it imports, in any way."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in SIDECAR.rglob("*.py"):
        parts = list(path.relative_to(SIDECAR).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        module = ".".join(["hive", "sidecar", *parts])
        here = module.split(".") if is_package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                if target == "hive.sidecar":  # `from .. import x`: x is a package or a name of the top
                    found[module] |= {f"hive.sidecar.{alias.name}" for alias in node.names}
                elif target.startswith("hive.sidecar."):
                    found[module].add(target)
            elif isinstance(node, ast.Import):
                found[module] |= {alias.name for alias in node.names if alias.name.startswith("hive.sidecar.")}
    return found


def _edges() -> dict[tuple[str, str], set[str]]:
    """(package, package) -> the module imports that make that edge."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, targets in _imports().items():
        for target in targets:
            source, dest = _package(module), _package(target)
            if dest not in LAYERS and dest not in CLIENT_SIDE:
                dest = "base"  # a name of the top package (__version__)
            if source != dest:
                edges[(source, dest)].add(f"{module} -> {target}")
    return edges


def _rank(package: str) -> tuple[int, int]:
    if package in CLIENT_SIDE:
        return (1, CLIENT_SIDE[package])
    return (0, LAYERS.index(package))


def _upward(source: str, dest: str) -> bool:
    if dest == "base":
        return False
    if source in CLIENT_SIDE:
        # The client side reaches the daemon through its socket; it may use base and the pure
        # pieces below the daemon, never the daemon itself (the entry point starts it).
        if dest == "daemon":
            return source != ENTRY_POINT
        return dest in CLIENT_SIDE and _rank(dest) >= _rank(source)
    return dest in CLIENT_SIDE or _rank(dest) >= _rank(source)


def test_no_module_of_the_sidecar_is_over_700_lines() -> None:
    long = {
        str(path.relative_to(SIDECAR)): n
        for path in SIDECAR.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 700
    }
    assert not long, long


def test_every_folder_of_the_sidecar_is_a_known_layer() -> None:
    folders = {p.name for p in SIDECAR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS) | (set(CLIENT_SIDE) - {"client", "__main__"})


def test_readmes_layout_lists_the_sidecars_folders_in_their_layer_order() -> None:
    block = (REPO / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("```")[1]
    listed: list[str] = []
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # a folder of sidecar/, or two: "cli/ mcp/"
            for word in line.split():
                if not word.endswith("/"):
                    break
                listed.append(word.rstrip("/"))
    assert listed == [*LAYERS, "cli", "mcp"]


def test_base_imports_nothing_of_the_sidecar_above_it() -> None:
    above = {edge: how for edge, how in _edges().items() if edge[0] == "base"}
    assert not above, above


def test_nothing_imports_the_daemon_at_run_time_but_the_entry_point() -> None:
    at_run_time = []
    for path in SIDECAR.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in type_only and "daemon" in (node.module or ""):
                at_run_time.append(f"{path.relative_to(SIDECAR)}:{node.lineno}")
    assert {entry.split(":")[0] for entry in at_run_time} <= {
        "__main__.py",
        "daemon/server.py",
        "daemon/features.py",
        "daemon/ops.py",
    }, at_run_time


def test_nothing_imports_the_daemon_but_the_entry_point_and_the_listed_edges() -> None:
    into_daemon = {source for (source, dest) in _edges() if dest == "daemon"} - {ENTRY_POINT}
    listed = {source for (source, dest) in STILL_UPWARD if dest == "daemon"}
    assert into_daemon == listed, (
        f"new: {sorted(into_daemon - listed)}; gone, delete from STILL_UPWARD: {sorted(listed - into_daemon)}"
    )


def test_packages_import_only_downward_but_for_the_listed_edges_which_may_only_shrink() -> None:
    edges = _edges()
    upward = {edge for edge in edges if _upward(*edge)}
    new = {edge: sorted(edges[edge]) for edge in upward - STILL_UPWARD}
    assert not new, f"imports going up the layers (invert them through a feature): {new}"
    assert not STILL_UPWARD - upward, f"gone, delete from STILL_UPWARD: {sorted(STILL_UPWARD - upward)}"


def test_no_import_cycle_between_packages_but_through_a_listed_upward_edge() -> None:
    downward = {edge for edge in _edges() if edge not in STILL_UPWARD}
    graph: dict[str, set[str]] = defaultdict(set)
    for source, dest in downward:
        graph[source].add(dest)
    seen: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> None:
        assert node not in path, f"import cycle: {' -> '.join([*path[path.index(node) :], node])}"
        if node in seen:
            return
        path.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        path.pop()
        seen.add(node)

    for node in sorted(graph):
        visit(node)

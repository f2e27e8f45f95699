"""Loading harness plugins and looking harnesses up by name.

Built-in harnesses are registered first, then anything under the entry point group
``hive.harnesses``. ``HIVE_LOAD_PLUGINS`` (a comma-separated list of plugin names, empty for
none) restricts the third-party ones, which keeps tests independent of what else is installed.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .descriptor import (
    DoctorCheck,
    DoctorContext,
    HookPoint,
    Identity,
    InstallContext,
    NativeFile,
    Presence,
    Scope,
    Tiers,
)

if TYPE_CHECKING:
    from .push import AppServer

BUILTIN = (
    "hive.integrations.claude_code",
    "hive.integrations.codex",
    "hive.integrations.cursor",
    "hive.integrations.gemini",
    "hive.integrations.opencode",
    "hive.integrations.pi",
    "hive.integrations.replies",  # the standard reply shapes, as the fallback implementation
)
ENTRY_POINT_GROUP = "hive.harnesses"


@cache
def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("hive")
    pm.add_hookspecs(hookspecs)
    for name in BUILTIN:
        pm.register(importlib.import_module(name), name=name)
    allowed = os.environ.get("HIVE_LOAD_PLUGINS")
    wanted = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if wanted is not None and ep.name not in wanted:
            continue
        if pm.get_plugin(ep.name) is None:
            pm.register(ep.load(), name=ep.name)
    return pm


@dataclass(frozen=True)
class Harness:
    """One harness's descriptor, read through the plugin hooks."""

    identity: Identity

    @property
    def name(self) -> str:
        return self.identity.name

    @property
    def hook(self) -> Any:
        return plugin_manager().hook

    # The plugins are loaded once (plugin_manager) and their descriptors are pure: every hook of
    # every session reads them, so each is asked once per harness.
    def hook_points(self) -> list[HookPoint]:
        return list(_hook_points(self.name))

    def point(self, native: str) -> HookPoint | None:
        return _points(self.name).get(native)

    def presence(self) -> Presence:
        return _presence(self.name)

    def tiers(self) -> Tiers:
        return _tiers(self.name)

    def native_files(self, context: InstallContext) -> list[NativeFile]:
        return self.hook.hive_native_files(harness=self.name, context=context) or []

    def reply(self, point: HookPoint, text: str, payload: dict[str, Any]) -> str:
        return self.hook.hive_reply(harness=self.name, point=point, text=text, payload=payload) or point.no_opinion

    def deny(self, point: HookPoint, reason: str) -> str | None:
        result: str | None = self.hook.hive_deny(harness=self.name, point=point, reason=reason)
        return result

    def app_server(self) -> AppServer | None:
        result: AppServer | None = self.hook.hive_app_server(harness=self.name)
        return result

    def setup_steps(self, scope: Scope) -> list[str]:
        return list(self.hook.hive_setup_steps(harness=self.name, scope=scope) or ())

    def doctor_checks(self, context: DoctorContext) -> list[DoctorCheck]:
        return list(self.hook.hive_doctor_checks(harness=self.name, context=context) or ())

    def doctor_project(self, project: Path, where: str, home: Path) -> list[DoctorCheck]:
        return list(self.hook.hive_doctor_project(harness=self.name, project=project, where=where, home=home) or ())


@cache
def _hook_points(name: str) -> tuple[HookPoint, ...]:
    return tuple(plugin_manager().hook.hive_hook_points(harness=name) or ())


@cache
def _points(name: str) -> dict[str, HookPoint]:
    found: dict[str, HookPoint] = {}
    for p in _hook_points(name):
        found.setdefault(p.native, p)  # the first point with a native name wins, as a scan would find it
    return found


@cache
def _presence(name: str) -> Presence:
    return plugin_manager().hook.hive_presence(harness=name) or Presence()


@cache
def _tiers(name: str) -> Tiers:
    return plugin_manager().hook.hive_tiers(harness=name) or Tiers(default="pull", turn=False)


def harnesses() -> dict[str, Harness]:
    """Every registered harness by canonical name, in registration order."""
    return dict(_harnesses())


@cache
def _harnesses() -> dict[str, Harness]:
    found: dict[str, Harness] = {}
    # pluggy calls the most recently registered plugin first: reverse to registration order.
    for identity in reversed(plugin_manager().hook.hive_harness()):
        found.setdefault(identity.name, Harness(identity))
    return found


@cache
def binaries() -> frozenset[str]:
    """The programs agents run as: a process under one of them is an agent's, even in a person's terminal."""
    return frozenset(b for h in _harnesses().values() for b in h.identity.binaries)


@cache
def agent_environment() -> frozenset[str]:
    """The env vars harnesses set in every process they start (see Identity.agent_env)."""
    return frozenset(v for h in _harnesses().values() for v in h.identity.agent_env)


def harness(name: str) -> Harness:
    """Look a harness up by canonical name or alias. Raises KeyError with the known names."""
    table = _harnesses()
    if name in table:
        return table[name]
    for candidate in table.values():
        if name in candidate.identity.aliases:
            return candidate
    raise KeyError(f"unknown harness {name!r}; known: {', '.join(table)}")


def identify_caller(claimed: str, payload: dict[str, Any], env: dict[str, str]) -> Harness:
    """The harness really running a hook: the evidence wins over the name in the command line."""
    actual = plugin_manager().hook.hive_identify_caller(payload=payload, env=env)
    return harness(actual or claimed)

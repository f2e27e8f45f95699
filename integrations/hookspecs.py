"""The whole contract of a harness, as pluggy hooks.

A harness is a plugin that implements these hooks. The six built-in harnesses are plugins of
this same contract; a third party adds one by registering a module under the entry point group
``hive.harnesses``. Every hook but :func:`hive_harness` takes the canonical harness name and
returns ``None`` when it is about another harness, so one call reaches the right plugin.

Hooks, by plane (each documented below with its arguments and what it returns):

- identity: ``hive_harness()``, ``hive_identify_caller(payload, env)``
- observe and inject: ``hive_hook_points(harness)``, ``hive_tiers(harness)``,
  ``hive_reply(harness, point, text, payload)``
- presence: ``hive_presence(harness)``
- inject (the ``app_server`` push): ``hive_app_server(harness)``
- install: ``hive_native_files(harness, context)``, ``hive_setup_steps(harness, scope)``,
  ``hive_doctor_checks(harness, context)``, ``hive_doctor_project(harness, project, where, home)``
- gate: ``hive_deny(harness, point, reason)``
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

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
    from .push import AppServer  # the sidecar's errors: loaded only where a push runs

hookspec = pluggy.HookspecMarker("hive")
hookimpl = pluggy.HookimplMarker("hive")


@hookspec
def hive_harness() -> Identity:
    """Identity plane: return this plugin's :class:`Identity` (name, aliases, binaries, config
    folders, version probe, which stdin fields and environment variables carry the session id
    and working folder). Called once per plugin; the result names the harness for every other hook.
    """
    raise NotImplementedError  # a spec: pluggy calls the plugins' implementations, never this body


@hookspec(firstresult=True)
def hive_hook_points(harness: str) -> list[HookPoint] | None:
    """Observe and inject planes: for ``harness``, return every native hook event hive listens
    to, each mapped to a normalized event (see ``descriptor.EVENTS``) with the way text can reach
    the model from it. Return None for another harness.
    """


@hookspec(firstresult=True)
def hive_presence(harness: str) -> Presence | None:
    """Presence plane: for ``harness``, return which normalized events mean busy, idle or
    waiting for approval, and where its transcripts and todo lists live. None for another harness.
    """


@hookspec(firstresult=True)
def hive_tiers(harness: str) -> Tiers | None:
    """Inject plane: for ``harness``, return the delivery tiers it offers (push mechanism if any,
    turn, pull) and its default. None for another harness.
    """


@hookspec(firstresult=True)
def hive_native_files(harness: str, context: InstallContext) -> list[NativeFile] | None:
    """Install plane: for ``harness``, return the native files hive writes (MCP config, hooks
    file, plugin, skills) for ``context.scope``, each with the part hive owns. Paths are
    relative to the home folder (user scope) or project root (project scope). None for another
    harness.
    """


@hookspec(firstresult=True)
def hive_reply(harness: str, point: HookPoint, text: str, payload: dict[str, Any]) -> str | None:
    """Inject plane: return the exact stdout that puts ``text`` into the model's context at
    ``point`` of ``harness`` (``payload`` is the hook's stdin). A built-in fallback handles the
    standard shapes named by ``point.inject``; implement this only for a shape of your own.
    """


@hookspec(firstresult=True)
def hive_deny(harness: str, point: HookPoint, reason: str) -> str | None:
    """Gate plane: return the exact stdout that refuses the action at ``point`` of ``harness``
    with ``reason``, or None when the harness cannot refuse there (or it is another harness).
    hive never denies on its own failure: a failed hive call always answers ``point.no_opinion``.
    """


@hookspec(firstresult=True)
def hive_identify_caller(payload: dict[str, Any], env: dict[str, str]) -> str | None:
    """Identity plane: given a hook's stdin ``payload`` and environment ``env``, return this harness's
    name if the evidence shows it is the one really calling (Cursor, for one, also runs Claude
    Code's hooks from ``~/.claude/settings.json``), else None.
    """


@hookspec(firstresult=True)
def hive_app_server(harness: str) -> AppServer | None:
    """Inject plane: for ``harness``, when its ``Tiers.push`` is ``"app_server"``, return the
    :class:`~hive.integrations.push.AppServer` through which the sidecar itself puts mail into its
    running UI (home folder, the running UI, the transcript to prove delivery by, the delivery).
    None for another harness, or one without an app-server.
    """


@hookspec(firstresult=True)
def hive_setup_steps(harness: str, scope: Scope) -> list[str] | None:
    """Install plane: for ``harness``, return the approvals the person must give in it (trusting
    hooks, a folder, a project's MCP file) before hive's ``scope`` files take effect, each a sentence
    ``hive setup`` prints; hive never takes them itself. None for another harness or none needed.
    """


@hookspec(firstresult=True)
def hive_doctor_checks(harness: str, context: DoctorContext) -> list[DoctorCheck] | None:
    """Install plane: for ``harness``, return ``hive doctor``'s checks that only it knows how to make
    (whether it trusts hive's hooks, a folder), given what doctor found of its user-scope files
    in ``context``. They follow the generic checks, under the harness's name. Each must finish
    within seconds and write nothing in the person's folders. None for another harness.
    """


@hookspec(firstresult=True)
def hive_doctor_project(harness: str, project: Path, where: str, home: Path) -> list[DoctorCheck] | None:
    """Install plane: for ``harness``, return ``hive doctor``'s checks of the approval hive's
    committed files in ``project`` wait for (``where`` is how doctor shows that folder; ``home``
    the person's home folder). Each check's name starts with ``where``. None for another harness.
    """
